"""The backends the command line can run on, found through entry points.

A package offers a backend by registering a module (or object) in the entry
point group ``kernelref.backends``; kernelref's own ``pyproject.toml`` does so
for the Dask backend::

    [project.entry-points."kernelref.backends"]
    dask = "backends.dask.cli_plugin"

The module gives ``estimators()`` ({name: class}), ``GramStore`` where it builds
Gram stores, and ``CLUSTER = True`` where it runs on a Dask cluster (then
``--scheduler``/``--scheduler-file`` connect to one, and Zarr input is read
lazily). The package the module belongs to (``backends.dask``) is the backend's
package: a model file may name estimator classes from it (``kernelref.io``).
kernelref names no backend package and imports one only when ``--backend NAME``
(or ``gram``) asks for it: the arrows point from the backends to kernelref,
never back.
"""

from importlib.metadata import entry_points

from kernelref.cli.models import UsageError

__all__ = ["GROUP", "REFERENCE", "load", "names", "on_cluster", "packages"]

#: the entry point group a backend registers itself in
GROUP = "kernelref.backends"

#: the backend that is kernelref itself, in this process
REFERENCE = "reference"


def _registered(name=None):
    found = entry_points(group=GROUP)
    return found if name is None else [e for e in found if e.name == name]


def names():
    """The backends on offer: ``reference`` and every registered name (the
    registered packages are not imported)."""
    return [REFERENCE, *sorted({e.name for e in _registered()})]


def packages():
    """The packages of the registered backends, read off the entry points without
    importing them: the registered module's parent (``backends.dask`` for
    ``backends.dask.cli_plugin``)."""
    return sorted({e.module.rpartition(".")[0] or e.module for e in _registered()})


def on_cluster(name):
    """Whether backend `name` runs on a Dask cluster (its module sets
    ``CLUSTER = True``); the reference never does."""
    return name != REFERENCE and bool(getattr(load(name), "CLUSTER", False))


def load(name, option="--backend"):
    """The module registered as backend `name`.

    A name nobody registered, or a backend whose dependencies are missing, is a
    ``UsageError`` naming `option` and the fix (use the reference, or install
    the package).
    """
    found = _registered(name)
    if not found:
        raise UsageError(
            f"{option} {name}: no backend of that name is installed; the backends "
            f"are {names()}. Use --backend {REFERENCE}, or install the package that "
            f"registers {name!r} in the entry point group {GROUP!r} (the Dask "
            "backend: pip install 'kernelref[dask]')."
        )
    entry = found[0]
    try:
        return entry.load()
    except ImportError as error:
        dist = getattr(entry, "dist", None)
        package = f"{dist.name}[{name}]" if dist is not None else name
        raise UsageError(
            f"{option} {name}: the backend is registered but cannot be imported "
            f"({error}); install its dependencies: pip install '{package}', or "
            f"use --backend {REFERENCE}."
        ) from None
