"""Serve MathJax 3 from the built site instead of a CDN.

Sphinx's default ``mathjax_path`` is a jsDelivr URL, so pages opened without
network show raw TeX. The ``django-static-mathjax`` package ships MathJax 3.2.2
as static files; this extension copies the one combined component the pages
load (``tex-chtml.js``), its fonts, and the TeX extensions MathJax fetches on
demand (``\\boldsymbol`` is one) into ``_static/mathjax/``, and points
``mathjax_path`` there. A relative ``mathjax_path`` is read relative to
``_static``.
"""

import importlib.util
import shutil
from pathlib import Path

from sphinx.errors import ExtensionError

COMPONENT = "tex-chtml.js"
# The combined component loads these lazily, relative to its own URL.
LAZY_DIRECTORIES = ("output/chtml/fonts", "input/tex/extensions")
TARGET = "mathjax"


def mathjax_source():
    """The ``es5`` directory of the installed MathJax distribution."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            "local_mathjax needs the 'django-static-mathjax' package (pip install "
            "'kernelref[book]'); without it MathJax would be loaded from a CDN."
        )
    source = (
        Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    )
    if not (source / COMPONENT).is_file():
        raise ExtensionError(
            f"local_mathjax: {source / COMPONENT} is missing; "
            "reinstall django-static-mathjax."
        )
    return source


def use_local_path(app, config):
    mathjax_source()
    config.mathjax_path = f"{TARGET}/{COMPONENT}"


def copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    target = Path(app.outdir) / "_static" / TARGET
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / COMPONENT, target / COMPONENT)
    for directory in LAZY_DIRECTORIES:
        shutil.copytree(source / directory, target / directory, dirs_exist_ok=True)


def setup(app):
    app.connect("config-inited", use_local_path)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
