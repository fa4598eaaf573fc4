"""Reader tools of the built book: every chapter downloads as its executed notebook."""

import json
import re

import pytest

pytestmark = pytest.mark.slow

DOWNLOAD = re.compile(r'href="([^"]*_sources/book/([a-z0-9_]+)\.ipynb)"')


def test_every_chapter_offers_its_executed_notebook(book_html):
    pages = sorted((book_html / "book").glob("*.html"))
    chapters = [
        p
        for p in pages
        if "code-cell" in p.read_text(encoding="utf8")
        or "cell_input" in p.read_text(encoding="utf8")
    ]
    assert chapters, "no chapter with code cells was built"
    for page in chapters:
        links = DOWNLOAD.findall(page.read_text(encoding="utf8"))
        assert links, f"{page.name} has no .ipynb download"
        href, name = links[0]
        assert name == page.stem, f"{page.name} links the notebook of {name}"
        notebook = json.loads((page.parent / href).read_text(encoding="utf8"))
        code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        assert code, f"{href} has no code cells"
        # the notebook the build executed: every code cell ran, in order
        # (glued numbers are kept apart by MyST-NB, so a cell may show no output)
        counts = [c.get("execution_count") for c in code]
        assert counts == list(range(1, len(code) + 1)), f"{href} was not executed"
