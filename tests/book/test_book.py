"""The book builds strictly, checks every labelled equation, and needs no network.

The build test runs ``jupyter-book build <repo> -W -n --keep-going`` into a
temporary directory, which executes every chapter (and so every check in it).
The structural test reads the MyST sources and needs no build.
"""

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BOOK = REPO / "book"
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
# the build itself is the session fixture `book_build` of conftest.py
BUILD_TIMEOUT = 1800
LOG_TAIL_LINES = 80

# `$$ (label)` closes a labelled MyST display equation.
LABELLED_EQUATION = re.compile(r"^\$\$[ \t]*\(([A-Za-z0-9_:-]+)\)[ \t]*$", re.MULTILINE)
CODE_CELL = re.compile(
    r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL
)
ASSERTION = re.compile(r"^(?!\s*#).*(\bassert\b|np\.testing\.assert_)", re.MULTILINE)
# Hosts that serve JavaScript or fonts; a page that loads from them needs network.
CDN = re.compile(
    r"cdn\.jsdelivr|cdnjs\.|unpkg\.com|googleapis|mathjax\.org|https?://cdn\."
)
REMOTE_RESOURCE = re.compile(
    r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]+\""
)
MATHJAX_SCRIPT = re.compile(
    r"<script[^>]*\bsrc=\"([^\"]*tex-(?:mml-)?chtml\.js)[^\"]*\""
)


def chapter_sources():
    return sorted(BOOK.glob("*.md"))


def equations_without_checks(text):
    """Labels of displayed equations not followed, before the next labelled
    equation, by a code cell that asserts something."""
    labels = list(LABELLED_EQUATION.finditer(text))
    cells = [(m.start(), m.group(1)) for m in CODE_CELL.finditer(text)]
    missing = []
    for i, label in enumerate(labels):
        end = labels[i + 1].start() if i + 1 < len(labels) else len(text)
        checked = any(
            label.end() < start < end and ASSERTION.search(body)
            for start, body in cells
        )
        if not checked:
            missing.append(label.group(1))
    return missing


def test_structural_check_detects_a_missing_check():
    page = (
        "$$\na = b\n$$ (first)\n\n```{code-cell} ipython3\nx = 1\n```\n\n"
        "$$\nc = d\n$$ (second)\n\n```{code-cell} ipython3\nassert 1 == 1\n```\n"
        "$$\ne = f\n$$ (third)\n\n```{code-cell} ipython3\n# assert nothing\n```\n"
    )
    assert equations_without_checks(page) == ["first", "third"]


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.name)
def test_every_labelled_equation_is_followed_by_a_check(source):
    missing = equations_without_checks(source.read_text(encoding="utf8"))
    assert not missing, (
        f"{source.name}: no asserting code cell after the equations {missing}; "
        "add a cell that checks each one before the next labelled equation."
    )


def equations_without_a_stated_number(text):
    """Labels of displayed equations whose prose, up to the next labelled equation,
    quotes no glued number: the check ran, but the reader is not told what it found."""
    labels = list(LABELLED_EQUATION.finditer(text))
    missing = []
    for i, label in enumerate(labels):
        end = labels[i + 1].start() if i + 1 < len(labels) else len(text)
        prose = CODE_CELL.sub("", text[label.end() : end])
        if "{glue:" not in prose:
            missing.append(label.group(1))
    return missing


def test_stated_number_check_sees_a_missing_number():
    page = (
        "$$\na = b\n$$ (first)\n\n```{code-cell} ipython3\nglue('x', 1)\n```\n"
        "Agree to {glue:text}`x`.\n$$\nc = d\n$$ (second)\n\n"
        "```{code-cell} ipython3\nassert 1 == 1 # {glue:text}`y`\n```\nThey agree.\n"
    )
    assert equations_without_a_stated_number(page) == ["second"]


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.name)
def test_every_check_states_its_measured_number(source):
    missing = equations_without_a_stated_number(source.read_text(encoding="utf8"))
    assert not missing, (
        f"{source.name}: the prose after the equations {missing} quotes no measured "
        "number; glue what the check measured and cite it with {glue:text}."
    )


# `({eq}`label`)` prints as ((3.2)): the reference brings its own parentheses.
PARENTHESISED_REFERENCE = re.compile(
    r"\(\s*\{eq\}`[^`]+`(?:\s*(?:,|and|to|or|–)\s*\{eq\}`[^`]+`)*\s*\)"
)


def test_the_parenthesised_reference_check_sees_one():
    assert PARENTHESISED_REFERENCE.search("as in ({eq}`a` to {eq}`b`), so")
    assert not PARENTHESISED_REFERENCE.search("(the dual {eq}`a`) and {eq}`b`")


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.name)
def test_no_equation_reference_in_parentheses_of_its_own(source):
    found = PARENTHESISED_REFERENCE.findall(source.read_text(encoding="utf8"))
    assert not found, f"{source.name}: {found} would print doubled parentheses"


# A control character in a source (a "\a" written through a Python string became
# BEL in rvm_fast's γ_j = S_j/α_j) renders as nothing and breaks the formula.
CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def test_the_control_character_check_sees_one():
    assert CONTROL_CHARACTER.search("S_j/\x07lpha_j")
    assert not CONTROL_CHARACTER.search("S_j/\\alpha_j\n\tx")


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.name)
def test_no_control_characters(source):
    lines = [
        n
        for n, line in enumerate(source.read_text(encoding="utf8").splitlines(), 1)
        if CONTROL_CHARACTER.search(line)
    ]
    assert not lines, f"{source.name}: control characters on lines {lines}"


def log_tail(completed):
    return "\n".join(
        (completed.stdout + completed.stderr).splitlines()[-LOG_TAIL_LINES:]
    )


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT + 60)
def test_book_builds_without_warnings(book_build):
    completed, html = book_build
    assert completed.returncode == 0, (
        "the book build failed (exit code "
        f"{completed.returncode}):\n{log_tail(completed)}"
    )
    # Sphinx says "build succeeded, N warnings." when there were any
    assert "build succeeded." in completed.stdout
    assert (html / "index.html").exists()
    assert {"intro.html", "kernels.html", "ridge.html", "nadaraya_watson.html"} <= {
        p.name for p in html.rglob("*.html")
    }


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT + 60)
def test_book_build_loads_mathjax_locally_and_nothing_from_a_cdn(book_build):
    completed, built_book = book_build
    if completed.returncode != 0:
        pytest.fail("the book did not build; see test_book_builds_without_warnings")
    pages = [p for p in built_book.rglob("*.html") if "_static" not in p.parts]
    assert pages
    with_math = 0
    for page in pages:
        html = page.read_text(encoding="utf8")
        assert not CDN.search(html), (
            f"{page.name} references a CDN: {CDN.search(html).group(0)}"
        )
        assert not REMOTE_RESOURCE.search(html), (
            f"{page.name} loads a remote resource: "
            f"{REMOTE_RESOURCE.search(html).group(0)}"
        )
        for src in MATHJAX_SCRIPT.findall(html):
            with_math += 1
            assert (page.parent / src).resolve().is_file(), (
                f"{page.name}: {src} does not exist"
            )
    assert with_math > 0, "no page loads MathJax"
    fonts = (
        built_book / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    )
    assert any(fonts.glob("*.woff")), "the MathJax fonts were not copied"
