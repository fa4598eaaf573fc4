"""The code base is formatted and linted by ruff, as configured in pyproject.toml.

The book shows library code with ``literalinclude``; the formatter's line length
(88) is what fits the book's column, and the layout test measures the result.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PATHS = ["kernelref", "backends", "tests", "benchmarks", "book/_ext"]


def ruff():
    found = Path(sys.executable).with_name("ruff")
    if found.exists():
        return str(found)
    on_path = shutil.which("ruff")
    if on_path is None:
        pytest.fail("ruff not found: install the test extra, pip install -e '.[test]'.")
    return on_path


def run(*args):
    return subprocess.run(
        [ruff(), *args, *PATHS], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_code_is_formatted_by_ruff():
    result = run("format", "--check")
    assert result.returncode == 0, (
        "run `ruff format` on these files:\n" + result.stdout + result.stderr
    )


def test_code_passes_ruff_check():
    result = run("check")
    assert result.returncode == 0, result.stdout + result.stderr
