"""Arrows one way: backends import kernelref, kernelref never imports a backend.

The command line finds backends through the entry point group
``kernelref.backends`` (``kernelref.cli.plugins``), not by name.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def imported_names(tree):
    """Every module named by an import statement or by a literal passed to
    ``importlib.import_module`` / ``__import__``, with its line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, node.lineno
        elif isinstance(node, ast.Call) and node.args:
            function = node.func
            name = getattr(function, "attr", getattr(function, "id", None))
            first = node.args[0]
            if (
                name in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                yield first.value, node.lineno


def test_kernelref_imports_no_backend():
    wrong = []
    for path in sorted((ROOT / "kernelref").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, line in imported_names(tree):
            if name == "backends" or name.startswith("backends."):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not wrong, wrong


def test_the_check_sees_both_kinds_of_import():
    tree = ast.parse(
        "import backends.dask\n"
        "from backends.dask.gram_store import GramStore\n"
        "importlib.import_module('backends.dask')\n"
    )
    found = sorted(n for n, _ in imported_names(tree))
    assert found == ["backends.dask", "backends.dask", "backends.dask.gram_store"]
