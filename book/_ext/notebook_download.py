"""Offer every chapter as a Jupyter notebook in the page's download menu.

sphinx-book-theme shows a ".ipynb" entry only when a launch service (Binder,
JupyterHub, Colab) is configured, which this offline book does not do. MyST-NB
writes each executed chapter to ``_build/jupyter_execute/<page>.ipynb``; this
extension copies it next to the page's source in ``_sources`` and sets the
``ipynb_source`` the theme's download menu looks for. The notebook carries the
outputs of the build, and runs again with the installed ``kernelref`` (see the
page "Running a chapter yourself").
"""

from pathlib import Path
from shutil import copy2

# before the theme's header buttons (priority 501), which read ipynb_source
PRIORITY = 500


def add_notebook_download(app, pagename, templatename, context, doctree):
    if app.builder.format != "html":
        return
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    copy2(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app):
    app.connect("html-page-context", add_notebook_download, priority=PRIORITY)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
