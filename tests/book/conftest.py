"""The whole book, built once per test session and shared by the book tests."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
BUILD_TIMEOUT = 1800


@pytest.fixture(scope="session")
def book_build(tmp_path_factory):
    """Build the whole book once: the finished process and the HTML directory."""
    if not JUPYTER_BOOK.exists():
        pytest.fail(
            f"jupyter-book not found next to {sys.executable}; "
            "install the book extra: pip install -e '.[book]'."
        )
    output = tmp_path_factory.mktemp("book")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    command = [str(JUPYTER_BOOK), "build", str(REPO), "-W", "-n", "--keep-going"]
    completed = subprocess.run(
        [*command, "--path-output", str(output)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=BUILD_TIMEOUT,
    )
    return completed, output / "_build" / "html"


@pytest.fixture(scope="session")
def book_html(request):
    """The built HTML directory: KERNELREF_BOOK_HTML, or the session's build."""
    given = os.environ.get("KERNELREF_BOOK_HTML")
    if given:
        return Path(given)
    completed, html = request.getfixturevalue("book_build")
    if completed.returncode != 0:
        pytest.fail("the book did not build; see test_book_builds_without_warnings")
    return html
