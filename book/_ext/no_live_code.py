"""Switch off sphinx-thebe, which Jupyter Book loads unconditionally.

Thebe runs a page's code cells on a remote Binder kernel; its set-up writes a
jsDelivr/unpkg URL and a Binder configuration into every page even when no
launch button is shown. The book's pages are static and need no network, so
this extension removes thebe's event handlers before the build starts.
"""

THEBE_MODULE = "sphinx_thebe"


def thebe_listener_ids(app):
    """Ids of the event handlers that the sphinx_thebe extension connected."""
    return [
        listener.id
        for listeners in app.events.listeners.values()
        for listener in listeners
        if getattr(listener.handler, "__module__", "") == THEBE_MODULE
    ]


def disconnect_thebe(app, config):
    for listener_id in thebe_listener_ids(app):
        app.disconnect(listener_id)


def setup(app):
    app.connect("config-inited", disconnect_thebe)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
