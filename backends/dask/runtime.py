"""The shared runtime of long backend fits: data in the store, checkpoints, progress.

Every backend estimator is a loop on the client that sends the data-sized work
to the workers (the design's "backend's shape"). This module is the part they
share:

- ``FitStore``: the fit's Zarr group. The training data is written into it once
  in row chunks (a user's Zarr array is read where it is), and every task
  reads its chunk from there with ``read_chunk``, so nothing irreplaceable is
  ``scatter``ed: a task lost with a worker is recomputed by the scheduler. The
  group records what the fit is (``identity``) and a fingerprint of the data;
  a store for other data or another fit is refused.
- ``save_state``/``load_state``: the client's state checkpointed atomically
  (arrays in a fresh ``state-*.npz`` file, then a small ``checkpoint.json``
  with the iteration and a sha256 of every array replaced in one rename).
- ``map_chunks``: one round of tasks, ``func(ref, i, *args)`` for every chunk.
- ``RoundArguments``: a round's large array arguments written once into the
  store and read by its tasks (``with_arguments``), not put into the graph.
- ``gather``, ``finished``, ``compute`` (from ``backends.dask.waiting``): the
  waits for a round, which raise ``WorkerPausedError`` when a worker paused by
  Dask's memory monitor holds the round, instead of waiting forever.
- ``run_loop``: the loop itself — resume, step, checkpoint every few seconds,
  progress; an exception saves the last complete state before it propagates.
  A fit of several loops shows them on one bar (an open ``Progress``).
- ``replace_fix``: what a refusal of a store made for another fit tells the
  user to do.
"""

import atexit
import collections
import contextlib
import hashlib
import json
import logging
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np

from backends.dask import sparse_rows
from backends.dask.estimator_args import check_progress
from backends.dask.integrity import record_chunk, verify_chunk
from backends.dask.waiting import WorkerPausedError, compute, finished, gather
from kernelref._validation import check_integer

__all__ = [
    "ChunkRef",
    "FitStore",
    "Progress",
    "Record",
    "RoundArguments",
    "StoreMismatchError",
    "WorkerPausedError",
    "compute",
    "finished",
    "gather",
    "map_chunks",
    "read_chunk",
    "run_keyed_loop",
    "run_loop",
    "verify_chunks",
    "with_arguments",
]

FORMAT = "kernelref.fit_store"
FORMAT_VERSION = 1
CHECKPOINT_FILE = "checkpoint.json"  # <name>.checkpoint.json

#: Rows of data a worker keeps in memory between tasks, in bytes. Chunks are
#: re-read from the store beyond it, so a worker's memory does not grow with N.
CHUNK_CACHE_BYTES = 256 * 2**20

logger = logging.getLogger(__name__)

#: Rows hashed at a time when fingerprinting data that is not in memory.
FINGERPRINT_ROWS = 65536


# -- data ----------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkRef:
    """Names rows of an array in a store: small, picklable, hashable.

    ``token`` changes whenever the data at ``path`` is (re)written, so a
    worker's cached chunks of earlier data are never used. ``sparse``: the
    rows are stored as CSR (``backends.dask.sparse_rows``) and read as CSR.
    ``checked``: the store recorded each chunk's checksum when it wrote it
    (``backends.dask.integrity``), and a chunk is verified before it is read;
    false for a user's Zarr X read in place and for stores written before the
    records were kept.
    """

    path: str
    chunk_size: int
    n: int
    token: str
    sparse: bool = False
    checked: bool = False

    def rows(self, i):
        return slice(i * self.chunk_size, min((i + 1) * self.chunk_size, self.n))

    @property
    def n_chunks(self):
        return -(-self.n // self.chunk_size)


class _ChunkCache:
    """A worker's least-recently-used chunks, bounded by ``CHUNK_CACHE_BYTES``."""

    def __init__(self, limit):
        self.limit, self.size = limit, 0
        self.items = collections.OrderedDict()
        self.lock = threading.Lock()
        self.arrays = {}

    def get(self, ref, i):
        key = (ref, i)
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key][0]
        if ref.sparse:
            value = sparse_rows.read_rows(ref.path, ref.rows(i))
            size = sparse_rows.nbytes(value)
        else:
            array = self._array(ref)
            verify_chunks(ref, array, [i])
            value = np.ascontiguousarray(array[ref.rows(i)], np.float64)
            value.setflags(write=False)
            size = value.nbytes
        with self.lock:
            self.items[key] = value, size
            self.size += size
            while self.size > self.limit and len(self.items) > 1:
                _, (_, old) = self.items.popitem(last=False)
                self.size -= old
        return value

    def _array(self, ref):
        import zarr

        array = self.arrays.get(ref)
        if array is None:
            array = zarr.open_array(store=ref.path, mode="r")
            self.arrays = {ref: array}
        return array


_cache = _ChunkCache(CHUNK_CACHE_BYTES)

#: What a damaged chunk of a fit store's data asks of the user.
_FIX = "Fit again with a new store= (or remove this one) to rewrite the data."


def _block(array, i):
    """The block index of row chunk i of a stored array (whole rows per chunk)."""
    return (i,) + (0,) * (array.ndim - 1)


def verify_chunks(ref, array, chunks):
    """Raise ``DamagedChunkError`` (naming the store, the block and the fix) unless
    each row chunk in `chunks` of `array`, the Zarr array `ref` names, matches the
    checksum the store recorded; nothing to verify where it recorded none."""
    if ref.checked:
        for i in chunks:
            verify_chunk(array, _block(array, int(i)), _FIX)


def read_chunk(ref, i):
    """On a worker: the rows of chunk `i` of the array `ref` names, as float64
    (CSR when the store holds X sparse).

    Read once from the store and kept (read-only) while the cache has room.
    """
    return _cache.get(ref, i)


def _sha256_rows(array, n):
    """sha256 of an array's float64 bytes in row order, and of its shape."""
    digest = hashlib.sha256(repr(tuple(array.shape)).encode())
    for start in range(0, n, FINGERPRINT_ROWS):
        block = np.asarray(array[start : start + FINGERPRINT_ROWS], dtype=np.float64)
        digest.update(np.ascontiguousarray(block).tobytes())
    return digest.hexdigest()


def fingerprint(X):
    """The data's identity: shape and sha256 (numpy, Zarr, scipy.sparse) or
    dask's token."""
    if sparse_rows.is_sparse(X):
        return sparse_rows.fingerprint(X)
    if _is_dask(X):
        from dask.base import tokenize

        return {"shape": list(X.shape), "dask_token": tokenize(X)}
    return {"shape": list(X.shape), "sha256": _sha256_rows(X, X.shape[0])}


def _is_dask(X):
    return type(X).__module__.startswith("dask.array")


def _is_zarr(X):
    return type(X).__module__.startswith("zarr")


# -- the store -----------------------------------------------------------------
class FitStore:
    """The Zarr group of one fit: its data, its identity and its checkpoints.

    Make one with ``prepare``. ``path`` is the group's directory; ``x_ref`` and
    ``array_ref(name)`` name the data for the tasks.
    """

    def __init__(self, path, attrs, refs):
        self.path = pathlib.Path(path)
        self.attrs = attrs
        self._refs = refs
        self.n = int(attrs["n"])
        self.chunk_size = int(attrs["chunk_size"])

    @property
    def n_chunks(self):
        return -(-self.n // self.chunk_size)

    def rows(self, i):
        """The rows of chunk i: ``[i·c, min((i+1)·c, n))``."""
        return slice(i * self.chunk_size, min((i + 1) * self.chunk_size, self.n))

    @property
    def x_ref(self):
        return self._refs["X"]

    @property
    def is_temporary(self):
        """True for a store made in a temporary directory (``path=None``)."""
        return str(self.path.parent) in _temporaries

    def remove_if_temporary(self):
        """Delete a temporary store (a fit without ``store=`` cannot be resumed)."""
        if self.is_temporary:
            shutil.rmtree(self.path.parent, ignore_errors=True)
            _temporaries.discard(str(self.path.parent))

    def array_ref(self, name):
        return self._refs[name]

    def read(self, name):
        """A data array of the store, whole, on the client (targets, weights),
        each chunk verified against its checksum where the store recorded them."""
        import zarr

        ref = self._refs[name]
        array = zarr.open_array(store=ref.path, mode="r")
        verify_chunks(ref, array, range(ref.n_chunks))
        return array[...]

    # -- making ------------------------------------------------------------------
    @classmethod
    def prepare(
        cls, path, X, *, identity, chunk_size, client, arrays=None, overwrite=False
    ):
        """Open the fit store at `path` for `X` and `identity`, writing the data once.

        `path` None makes a temporary directory, removed at exit. `X` is a
        numpy array, a ``zarr.Array`` (read in place), a dask array (written
        by the cluster) or ``scipy.sparse`` (written as CSR, never densified:
        ``backends.dask.sparse_rows``); `arrays` maps names to numpy arrays of
        N rows.
        `identity` is a JSON-able description of the fit (estimator,
        formulation, hyperparameters, kernel). A store at `path` made for
        other data, another identity, another chunk size or by another format
        version is refused with a ValueError naming the fixes (`replace_fix`:
        another store, removing this one, or ``overwrite=True``); this
        ``overwrite=True`` replaces it (its data and checkpoints) instead, as
        ``GramStore.build``'s does. A store for this very fit is opened as it
        is, checkpoints and all, with either value (a fit that should not
        resume discards its checkpoint: ``run_loop(resume=False)``), and a
        directory that is not a fit store is never cleared, even with
        ``overwrite=True`` (one whose ``zarr.json`` is unreadable is replaced if
        it still has its array X or a checkpoint, as a ``GramStore`` with its K).
        """
        chunk_size = check_integer(
            chunk_size, "chunk_size", meaning="It is the number of rows per chunk."
        )
        arrays = {} if arrays is None else dict(arrays)
        identity = json.loads(json.dumps(identity, default=_json_default))
        path = _temporary_path() if path is None else pathlib.Path(path).resolve()
        data = {"X": fingerprint(X)}
        data.update({name: fingerprint(np.asarray(a)) for name, a in arrays.items()})
        wanted = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "identity": identity,
            "data": data,
            "n": int(X.shape[0]),
            "chunk_size": chunk_size,
        }
        if overwrite and _is_damaged_fit_store(path):
            shutil.rmtree(path)
        existing = _read_attrs(path)
        if existing is not None and existing.get("data_complete"):
            mismatch = _mismatch(path, existing, wanted)
            if not mismatch:
                return cls(path, existing, _refs(path, existing))
            if not overwrite:
                raise StoreMismatchError(path, mismatch, "FitStore.prepare")
            shutil.rmtree(path)  # a fit store (_read_attrs checked its format)
        elif existing is None:
            _check_empty(path)
        return cls._write(path, X, arrays, wanted, client)

    @classmethod
    def open(cls, path):
        """The complete fit store at `path` as its fit left it, for the fitted
        model that names it (a model loaded from a file, or unpickled)."""
        path = pathlib.Path(path)
        attrs = _read_attrs(path)
        if attrs is None or not attrs.get("data_complete"):
            raise ValueError(
                f"the fit store {str(path)!r} of this model is gone or incomplete "
                "(a temporary store is removed when its process exits); fit again."
            )
        return cls(path, attrs, _refs(path, attrs))

    @classmethod
    def _write(cls, path, X, arrays, attrs, client):
        import zarr

        token = uuid.uuid4().hex
        # chunk_checksums: every array this store writes has a checksum per chunk
        attrs = dict(attrs, token=token, data_complete=False, chunk_checksums=True)
        group = zarr.open_group(store=str(path), mode="w", attributes=attrs)
        chunk_size = attrs["chunk_size"]
        if _is_zarr(X):
            attrs["x_path"] = str(pathlib.Path(str(X.store.root)) / X.path)
        elif sparse_rows.is_sparse(X):
            sparse_rows.write(group, "X", X, chunk_size)  # CSR, never densified
        else:
            _write_array(group, "X", X, chunk_size, client)
        for name, a in arrays.items():
            _write_array(group, name, np.asarray(a, dtype=np.float64), chunk_size, None)
        attrs["data_complete"] = True
        group.attrs.update(attrs)
        return cls(path, attrs, _refs(path, attrs))

    # -- checkpoints -------------------------------------------------------------
    def save_state(self, state, iteration, name="state"):
        """Checkpoint `state` (numpy arrays and JSON-able scalars) atomically.

        `name` keeps several checkpoints apart (one per binary machine, say).
        The arrays go into one fresh ``<name>-*.npz`` file, then the pointer
        ``<name>.checkpoint.json`` (iteration, scalars, a sha256 per array)
        replaces the last one in one rename, and older files go. One file, not a
        Zarr group of one directory per array: the RVM backend saves two
        checkpoints per Gaussian approximation, and a group of its ~25 arrays
        took ~80 ms to write and remove (measured: half the client's time of a
        Dask RVC fit at N = 2000).
        """
        prefix, name = name, f"{name}-{uuid.uuid4().hex}.npz"
        arrays, scalars, checksums = {}, {}, {}
        for key, value in state.items():
            if isinstance(value, np.ndarray):
                arrays[key] = np.ascontiguousarray(value)
                checksums[key] = hashlib.sha256(arrays[key].tobytes()).hexdigest()
            else:
                scalars[key] = value
        with open(self.path / name, "wb") as file:
            # prefixed: a key must not meet savez's own arguments (file, ...)
            np.savez(file, **{f"array_{k}": a for k, a in arrays.items()})
        record = {
            "file": name,
            "iteration": int(iteration),
            "arrays": {k: [list(a.shape), a.dtype.str] for k, a in arrays.items()},
            "scalars": json.loads(json.dumps(scalars, default=_json_default)),
            "sha256": checksums,
        }
        temporary = self.path / f"{prefix}.{uuid.uuid4().hex}.tmp"
        temporary.write_text(json.dumps(record))
        os.replace(temporary, self.path / f"{prefix}.{CHECKPOINT_FILE}")
        _remove_checkpoints(self.path, prefix, keep=name)

    def load_state(self, name="state"):
        """(state, iteration) of the last checkpoint `name`, or None if there is
        none (a store's checkpoint of an earlier version, a Zarr group, too)."""
        pointer = self.path / f"{name}.{CHECKPOINT_FILE}"
        if not pointer.is_file():
            return None
        fix = "refit with resume=False to start afresh"
        try:
            record = json.loads(pointer.read_text())
            stored = _checkpoint_arrays(self.path, record)
            state = dict(record["scalars"])
            for key, (shape, dtype) in record["arrays"].items():
                value = np.zeros(shape, dtype) if 0 in shape else stored(key)
                value = np.asarray(value, dtype=dtype).reshape(shape)
                if hashlib.sha256(value.tobytes()).hexdigest() != record["sha256"][key]:
                    raise ValueError(f"array {key!r} does not match its checksum")
                state[key] = value
        except Exception as error:
            raise ValueError(
                f"the checkpoint in the fit store {str(self.path)!r} is damaged "
                f"({error}); {fix}, or give another store."
            ) from error
        return state, int(record["iteration"])

    def discard_state(self, name="state"):
        """Remove the checkpoint `name`, so the next fit starts from the beginning."""
        (self.path / f"{name}.{CHECKPOINT_FILE}").unlink(missing_ok=True)
        _remove_checkpoints(self.path, name)


def _checkpoint_arrays(path, record):
    """A reader of the arrays of a checkpoint ``record``: its ``.npz`` file, or
    the Zarr group an earlier version wrote."""
    if "file" in record:
        with np.load(path / record["file"], allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}
        return lambda key: arrays[f"array_{key}"]
    import zarr

    group = zarr.open_group(store=str(path / record["group"]), mode="r")
    return lambda key: group[key][...]


def _remove_checkpoints(path, prefix, keep=None):
    """Remove the checkpoint files (or earlier versions' groups) ``<prefix>-*``
    but ``keep``."""
    for old in path.glob(f"{prefix}-*"):
        if old.name == keep:
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def _write_array(group, name, A, chunk_size, client):
    """`A` as array ``name`` of `group` in row chunks (a dask array by the cluster)."""
    shape = tuple(A.shape)
    chunks = (chunk_size,) + shape[1:]
    # Every chunk is written, zeros too, so that each has a file to check.
    array = group.create_array(
        name,
        shape=shape,
        chunks=chunks,
        dtype="float64",
        config={"write_empty_chunks": True},
    )
    if _is_dask(A):
        import dask.array as da

        # Dask chunks equal to the store's, so every task writes whole chunks.
        A = A.astype(np.float64).rechunk(chunks)
        stored = da.store(A, array, lock=False, compute=False)
        gather(client, [client.compute(stored)])
    else:
        for start in range(0, shape[0], chunk_size):
            array[start : start + chunk_size] = A[start : start + chunk_size]
    for i in range(-(-shape[0] // chunk_size)):  # after the data, as GramStore
        record_chunk(array, _block(array, i))


def _refs(path, attrs):
    n, c, token = attrs["n"], attrs["chunk_size"], attrs["token"]
    names = ["X"] + [k for k in attrs["data"] if k != "X"]
    checked = bool(attrs.get("chunk_checksums"))  # stores written with the records
    refs = {
        name: ChunkRef(str(path / name), c, n, token, checked=checked) for name in names
    }
    if attrs["data"]["X"].get("layout") == "csr":
        refs["X"] = ChunkRef(str(path / "X"), c, n, token, sparse=True)
    if attrs.get("x_path"):
        refs["X"] = ChunkRef(attrs["x_path"], c, n, token)
    return refs


def _read_attrs(path):
    meta = path / "zarr.json"
    if not meta.is_file():
        return None
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except (OSError, ValueError) as error:
        raise ValueError(
            f"the fit store {str(path)!r} has an unreadable zarr.json ({error}); "
            "remove the directory or give another store."
        ) from error
    if attrs.get("format") != FORMAT:
        raise ValueError(
            f"store {str(path)!r} is a Zarr group but not a kernelref fit store; give "
            "a new or empty directory as store=."
        )
    return attrs


class StoreMismatchError(ValueError):
    """A store made for another fit, given to this one: ``mismatch`` says how
    they differ and ``path`` where the store is; the message adds what to do
    (`replace_fix`). The command line words its own fix from ``mismatch``."""

    def __init__(self, path, mismatch, maker):
        self.path, self.mismatch = str(path), mismatch
        super().__init__(f"{mismatch}; {replace_fix(path, maker)}")


def replace_fix(path, maker):
    """What a user can do about a store at `path` made for another fit: what
    works for an estimator's ``store=`` (the estimators take no ``overwrite``:
    as a constructor argument it would outlive the one fit it is meant for, in
    clones and saved models, and delete the stores of other fits), then the
    ``overwrite=True`` of `maker` (``FitStore.prepare``, ``GramStore.build``)
    for a caller of it; the command line adds its ``--overwrite``."""
    return (
        f"give the estimator another store= directory, or remove {str(path)!r} "
        "(shutil.rmtree) to fit afresh there, if no fitted model still needs it "
        "(a Gaussian process keeps its factors in its store). (Calling "
        f"{maker} yourself, overwrite=True replaces the store.)"
    )


def _is_damaged_fit_store(path):
    """True for a fit store whose zarr.json cannot be read (its write cut short)
    that still has its array X or a checkpoint."""
    try:
        json.loads((path / "zarr.json").read_text())
        return False
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return (path / "X" / "zarr.json").is_file() or any(
            path.glob(f"*.{CHECKPOINT_FILE}")
        )


#: The identity's entries that say what kind of fit a store holds.
KIND_KEYS = ("estimator", "purpose")


def _mismatch(path, existing, wanted):
    """How the complete store `existing` differs from the fit `wanted`, or "":
    another kind of fit (its estimator), other data (naming the arrays that
    differ and how), or other parameters (each one, stored and given)."""
    where = f"the fit store {str(path)!r}"
    if existing.get("format_version") != wanted["format_version"]:
        return (
            f"{where} has format version {existing.get('format_version')}, this "
            f"library writes {wanted['format_version']}"
        )
    old, new = existing["identity"], wanted["identity"]
    kinds = [k for k in KIND_KEYS if old.get(k) != new.get(k)]
    if kinds:
        return (
            f"{where} holds a fit of another kind: it was made by "
            f"{_kind(old)}, this fit is {_kind(new)} (a store serves the fits of "
            "one estimator)"
        )
    names = sorted(set(existing["data"]) | set(wanted["data"]))
    differ = [k for k in names if existing["data"].get(k) != wanted["data"].get(k)]
    if existing["chunk_size"] != wanted["chunk_size"]:
        differ.append("chunk_size")
    if differ:
        return (
            f"{where} holds other data than this fit (it differs in {differ}): "
            + "; ".join(_data_change(k, existing, wanted) for k in differ)
        )
    changes = _changes(old, new)
    if changes:
        keys = [key for key, _, _ in changes]
        return f"{where} holds another fit: it differs in {keys}: " + "; ".join(
            _change(*change) for change in changes
        )
    return ""


def _kind(identity):
    named = [str(identity[k]) for k in KIND_KEYS if k in identity]
    return " ".join(named) if named else "an unnamed fit"


def _changes(old, new, prefix=""):
    """[(name, stored, given)] of every entry that differs between two
    identities, nested ones by a dotted name (an estimator's ``params`` by the
    parameter's own name)."""
    found = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key, "(none)"), new.get(key, "(none)")
        if a == b:
            continue
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            inner = "" if name == "params" else f"{name}."
            found += _changes(a, b, inner)
        else:
            found.append((name, a, b))
    return found


#: What the long entries of an identity stand for.
_MEANING = {"problems": " (the targets, sample weights or per-point C of its problems)"}


def _change(name, stored, given, limit=40):
    """One entry of an identity, stored and given; a long one (the digests of an
    SVM's problems, which follow from its parameters) by its name alone."""
    a, b = (v if isinstance(v, str) else json.dumps(v) for v in (stored, given))
    if max(len(a), len(b)) > limit:
        return f"{name} differs{_MEANING.get(name, '')}"
    return f"{name} stored {a}, given {b}"


def _data_change(name, existing, wanted):
    """How the data array `name` (or the chunk size) of a store and a fit differ."""
    if name == "chunk_size":
        stored, given = existing["chunk_size"], wanted["chunk_size"]
        return f"chunk_size stored {stored}, given {given}"
    return (
        f"{name} stored {_array_summary(existing['data'].get(name))}, given "
        f"{_array_summary(wanted['data'].get(name))}"
    )


def _array_summary(record):
    """An array's fingerprint (``fingerprint``) as its shape and digest."""
    if record is None:
        return "(none)"
    digest = record.get("sha256", record.get("dask_token", ""))[:12]
    return f"shape {tuple(record['shape'])}, sha256 {digest}…"


def _check_empty(path):
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ValueError(
            f"store {str(path)!r} exists and is not a kernelref fit store; give a new "
            "or empty directory (it is never cleared)."
        )


_temporaries = set()


def _temporary_path():
    directory = tempfile.mkdtemp(prefix="kernelref-fit-")
    _temporaries.add(directory)
    return pathlib.Path(directory) / "fit.zarr"


@atexit.register
def _remove_temporaries():
    for directory in list(_temporaries):
        shutil.rmtree(directory, ignore_errors=True)
        _temporaries.discard(directory)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot store {value!r} in a fit store's attributes")


# -- one round of tasks ----------------------------------------------------------
def map_chunks(client, func, ref, *args):
    """``func(ref, i, *args)`` on the workers for every chunk i; results in order.

    Each argument enters the graph once, as the value of one task, and every
    chunk's task depends on it: a worker's loss loses nothing the scheduler
    cannot recompute, and the argument crosses the network once per worker.
    """
    values = [client.submit(_value, a, pure=False) for a in args]
    futures = client.map(
        func,
        [ref] * ref.n_chunks,
        range(ref.n_chunks),
        *[[v] * ref.n_chunks for v in values],
        pure=False,
    )
    try:
        return gather(client, futures, inputs=values)
    finally:
        client.cancel(futures + values)


def _value(a):
    return a


#: A round's array argument of more bytes than this reaches the tasks through
#: the fit store (``RoundArguments``), not in the task graph: distributed warns
#: of a graph above 10 MB ("Sending large graph"), and an (r, N) argument of a
#: streamed pass is r·N·8 bytes (12 MiB at r = 30, N = 50 000). Smaller ones
#: stay in the graph: stored from 64 kB on, bench_dask_rvm's N = 5000 RVR (68
#: passes, 40 kB rows) took 3.3/3.6 s in its passes (one worker; 3.1/2.6 s
#: without the files), on a shared machine.
GRAPH_ARRAY_BYTES = 2**20


@dataclass(frozen=True)
class StoredArgument:
    """An argument of a round's tasks, kept as an ``.npy`` file in the fit store
    (a task reads it with ``with_arguments``). Named by its content's sha256,
    so a task run again reads what it read the first time."""

    path: str


class RoundArguments:
    """The arguments of one round of tasks, array arguments above
    ``GRAPH_ARRAY_BYTES`` written into ``store``'s ``round-arguments``
    directory (a file system every worker reads, as the store's data) and
    named by a ``StoredArgument``: the array enters no graph, and the files are
    durable, so a task lost with a worker is recomputed from them (nothing
    irreplaceable is ``scatter``ed). A context manager: the files are removed
    when the round is over, and the directory with the last round of this
    process that uses it (``_leave``). ``values`` are the arguments to give the
    tasks."""

    #: Rounds of this process open on each directory: one is removed only when
    #: none is, so a round never writes into a directory another has removed
    #: (the workers only read it).
    _open = collections.Counter()
    _lock = threading.Lock()

    def __init__(self, store, args):
        self.directory = pathlib.Path(store.path) / "round-arguments"
        self.paths = []
        with self._lock:
            self._open[self.directory] += 1
        try:
            self.values = [self._keep(a) for a in args]
        except BaseException:
            self.__exit__()
            raise

    def _keep(self, a):
        if not isinstance(a, np.ndarray) or a.nbytes <= GRAPH_ARRAY_BYTES:
            return a
        layout = (a.dtype.str, a.shape, a.flags.f_contiguous and a.ndim > 1)
        digest = hashlib.sha256(repr(layout).encode())
        digest.update(np.ascontiguousarray(a).data)
        path = self.directory / f"{digest.hexdigest()}.npy"
        if not path.exists():
            self.directory.mkdir(exist_ok=True)
            partial = path.with_name(f".{uuid.uuid4().hex}.npy")
            np.save(partial, a, allow_pickle=False)  # keeps C or Fortran order
            os.replace(partial, path)
        self.paths.append(path)
        return StoredArgument(str(path))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for path in self.paths:
            with contextlib.suppress(OSError):
                path.unlink()
        self._leave()

    def _leave(self):
        """This round is over: the directory goes if no other round of this
        process has it open. ``rmdir`` removes only an empty directory, so the
        files of a round cut short by a killed process are left, as are
        another process's."""
        with self._lock:
            self._open[self.directory] -= 1
            if self._open[self.directory] == 0:
                del self._open[self.directory]
                with contextlib.suppress(OSError):
                    self.directory.rmdir()


def with_arguments(func, *args):
    """On a worker: ``func(*args)`` with every ``StoredArgument`` read from its
    file (``RoundArguments``)."""
    return func(
        *(
            np.load(a.path, allow_pickle=False) if isinstance(a, StoredArgument) else a
            for a in args
        )
    )


# -- progress ------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """What a fit reports after each outer iteration. ``resumed_from``: the
    iteration of the store's checkpoint this run resumed from, None for a run
    from its start (``iteration`` counts on from it). ``label``: which of a
    wrapper's fits this is, as its bar says ("SVC pair 0-2 fold 3/5" of a
    ``PlattCalibrated``); None for a fit of its own."""

    iteration: int
    measure: float
    model_size: int
    elapsed: float
    resumed_from: int | None = None
    label: str | None = None


class Progress:
    """The callback and, on a terminal, a progress bar (tqdm) on stderr.

    `progress` is None (a bar on a terminal, nothing in a pipe), False
    (nothing), or a callable receiving a ``Record`` after every iteration.

    A fit made of several loops (an RVM's β phases or Gaussian approximations)
    shows them on one bar: it opens one ``Progress`` and gives it to each
    ``run_loop``, which starts a new `run` on it. The bar then counts the
    iterations of all runs and names the current one; the callback's records
    count each run's iterations from 1, as a run of its own would. ``label``
    goes into every record (``Record.label``).
    """

    def __init__(
        self,
        progress,
        description,
        measure_name="measure",
        size_name="size",
        label=None,
    ):
        check_progress(progress)
        self.record_label = label
        self.callback = (
            progress if callable(progress) and progress is not True else None
        )
        self.names = measure_name, size_name
        self.start = time.perf_counter()
        self.bar = None
        self.label, self.done, self.iteration = description, 0, 0
        self.resumed_from = None
        stream = sys.stderr
        if progress is not False and getattr(stream, "isatty", lambda: False)():
            from tqdm.auto import tqdm

            self.bar = tqdm(
                desc=description, unit="it", file=stream, dynamic_ncols=True
            )

    def run(self, description):
        """Start a new run on this bar, described as ``<label>: <description>``;
        the iterations of the runs before it stay counted."""
        self.done += self.iteration
        self.iteration, self.resumed_from = 0, None
        self.start = time.perf_counter()
        if self.bar is not None:
            self.bar.set_description_str(f"{self.label}: {description}", refresh=False)

    def resume(self, iteration):
        """This run resumed from a checkpoint at `iteration`: the records say so,
        and the bar's description ends with ``(resumed at iteration k)``."""
        self.resumed_from = self.iteration = int(iteration)
        if self.bar is not None:
            self.bar.set_description_str(
                f"{self.bar.desc} (resumed at iteration {iteration})", refresh=False
            )

    def update(self, iteration, measure, model_size):
        record = Record(
            int(iteration),
            float(measure),
            int(model_size),
            time.perf_counter() - self.start,
            self.resumed_from,
            self.record_label,
        )
        self.iteration = record.iteration
        if self.bar is not None:
            self.bar.update(self.done + record.iteration - self.bar.n)
            measure_name, size_name = self.names
            self.bar.set_postfix(
                {measure_name: f"{record.measure:.3g}", size_name: record.model_size},
                refresh=True,
            )
        if self.callback is not None:
            self.callback(record)

    def close(self):
        if self.bar is not None:
            self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- the loop ------------------------------------------------------------------
def run_loop(
    fit,
    store,
    *,
    progress=None,
    resume=True,
    checkpoint_seconds=5.0,
    max_iter=None,
    description="fit",
    name="state",
    label=None,
):
    """Run `fit` to convergence from its last checkpoint (or its start).

    `fit` has ``start() -> state``, ``step(state) -> state`` (one outer
    iteration, returning a new state: the old one stays intact until the step
    has finished), ``done(state) -> bool`` and ``measure(state) -> (measure,
    model_size)``; it may name them for the bar with ``measure_name`` and
    ``size_name``. `progress` may also be an open `Progress` shared by the
    runs of one fit (a new `Progress.run` on it, described by `description`,
    and left open). The state is checkpointed after the start, every
    `checkpoint_seconds` and at the end; an exception (an interrupt, a lost
    scheduler, a callback's own exception) checkpoints the last complete state
    before it propagates. `name` names the checkpoint. A run that resumes says
    so, quietly: its records' ``resumed_from``, the bar's description and an
    INFO record of the logger ``backends.dask.runtime`` (no warning: resuming
    is what a store is for). `label` is the records' ``Record.label`` (a new
    `Progress` only).
    Returns (state, iterations).
    """
    loaded = store.load_state(name) if resume else None
    if not resume:
        store.discard_state(name)
    if isinstance(progress, Progress):  # one bar for several runs: left open
        progress.run(description)
        shown = contextlib.nullcontext(progress)
    else:
        shown = Progress(
            progress,
            description,
            getattr(fit, "measure_name", "measure"),
            getattr(fit, "size_name", "size"),
            label,
        )
    with shown as bar:
        if loaded is None:
            state, iteration = fit.start(), 0
            store.save_state(state, iteration, name)
        else:
            state, iteration = loaded
            bar.resume(iteration)
            logger.info(
                "%s: resumed from its checkpoint %r at iteration %d",
                description,
                name,
                iteration,
            )
        saved_at, saved_iteration = time.monotonic(), iteration
        try:
            while not fit.done(state) and (max_iter is None or iteration < max_iter):
                state = fit.step(state)
                iteration += 1
                if time.monotonic() - saved_at >= checkpoint_seconds:
                    store.save_state(state, iteration, name)
                    saved_at, saved_iteration = time.monotonic(), iteration
                bar.update(iteration, *fit.measure(state))
        except BaseException:
            if iteration != saved_iteration:
                store.save_state(state, iteration, name)
            raise
    if iteration != saved_iteration:
        store.save_state(state, iteration, name)
    return state, iteration


def run_keyed_loop(fit, store, key, *, name, resume=True, **options):
    """`run_loop` for a `fit` whose checkpoint belongs to one `key` (the θ, the
    right-hand sides, the tolerance...): a checkpoint `name` saved under another
    key is discarded, and the key is saved with every new state."""
    loaded = store.load_state(name) if resume else None
    if loaded is not None and not np.array_equal(loaded[0].get("key"), key):
        store.discard_state(name)
    start = fit.start
    fit.start = lambda: dict(start(), key=key)
    return run_loop(fit, store, resume=resume, name=name, **options)
