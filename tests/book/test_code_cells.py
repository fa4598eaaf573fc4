"""The book's code cells pass ruff's lint, as the library does.

Each chapter's code cells are written to a notebook (cell boundaries kept, so
ruff reads them as Jupyter does: a variable may come from an earlier cell) and
checked with the project's ruff settings (pyproject.toml). Two rules are
switched off for the book: E731, because a check often names a one-line
function of the equation it tests, and E741, because the equations' symbols
(I, l) are the variables' names. No build is needed.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).with_name("ruff")
BOOK_IGNORES = "E731,E741"
CODE_CELL = re.compile(
    r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL
)
# the cell's options: a YAML block between --- lines, or :key: value lines
OPTIONS = re.compile(r"\A(?:---\n.*?\n---\n|(?::[^\n]*\n)+)", re.DOTALL)


def code_cells(text):
    """The sources of a MyST notebook's code cells, without their options."""
    return [OPTIONS.sub("", m.group(1)) for m in CODE_CELL.finditer(text)]


def as_notebook(cells):
    return {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": source.splitlines(True),
            }
            for source in cells
        ],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_code_cells_drop_their_options():
    page = (
        "```{code-cell} ipython3\n:tags: [hide-input]\nx = 1\n```\n"
        "```{code-cell} ipython3\n---\ntags: [hide-input]\nmystnb:\n  figure:\n"
        "    name: f\n---\ny = 2\n```\n"
    )
    assert code_cells(page) == ["x = 1\n", "y = 2\n"]


def test_the_book_code_cells_pass_ruff_check(tmp_path):
    if not RUFF.exists():
        pytest.fail(
            f"ruff not found next to {sys.executable}: pip install -e '.[test]'"
        )
    for source in sorted((REPO / "book").glob("*.md")):
        cells = code_cells(source.read_text(encoding="utf8"))
        if cells:
            notebook = tmp_path / "book" / f"{source.stem}.ipynb"
            notebook.parent.mkdir(exist_ok=True)
            notebook.write_text(json.dumps(as_notebook(cells)), encoding="utf8")
    completed = subprocess.run(
        [
            str(RUFF),
            "check",
            "--no-cache",
            "--config",
            str(REPO / "pyproject.toml"),
            "--extend-ignore",
            BOOK_IGNORES,
            "--output-format",
            "concise",
            str(tmp_path / "book"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, (
        "ruff finds problems in the book's code cells (cell numbers count code "
        f"cells from 1):\n{completed.stdout}{completed.stderr}"
    )
