"""Add the book's own style sheet (``static/kernelref.css``) to every page.

It sets the code font so that 88-character lines fit the text column, wraps
printed output, and lays display equations out for phones.
"""

from pathlib import Path

STATIC = Path(__file__).parent / "static"
STYLESHEET = "kernelref.css"


def add_static_path(app):
    app.config.html_static_path.append(str(STATIC))


def setup(app):
    app.connect("builder-inited", add_static_path)
    app.add_css_file(STYLESHEET)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
