"""A Gram matrix K = k(X, X) stored on disk as a Zarr v3 group.

Layout of the group at ``path``:

- array ``K`` of shape (n, n) in square chunks of edge ``chunk_size``; only the
  blocks (i, j) with i ≥ j are written (label ``gram-lower-blocks``), one
  chunk each. Unwritten entries read as NaN, so nobody mistakes a missing
  block for zeros;
- attributes: the format version, the kernel's ``spec()``, a fingerprint of
  the data, ``n``, ``chunk_size``, ``layout = "lower"`` and ``complete``,
  which becomes true last, after every block is written.

A chunk is written whole and atomically (zarr's local store writes a
temporary file and renames it), so the chunks present are the finished
blocks: an interrupted build resumes from them. Each chunk's CRC-32 is
recorded beside it (``backends.dask.integrity``) and checked before the
chunk is used: ``open`` and ``block`` refuse a missing or damaged chunk,
naming the store and the block, and ``build`` recomputes it.

Any zarr client reads ``K`` (``zarr.open_array(path + "/K")``).
"""

import hashlib
import json
import pathlib
import uuid
import warnings

import numpy as np

from backends.dask.blocks import (
    batches,
    block_slice,
    lower_blocks,
    n_blocks,
    write_blocks,
)
from backends.dask.integrity import (
    DamagedChunkError,
    StoreError,
    damaged_chunks,
    forget_chunk,
    verify_chunk,
)
from backends.dask.runtime import StoreMismatchError, finished
from backends.dask.sparse_rows import fingerprint as sparse_fingerprint
from backends.dask.sparse_rows import is_sparse
from kernelref._validation import check_array, check_integer
from kernelref.kernels import Kernel, accepts_sparse

FORMAT = "kernelref.gram_store"
FORMAT_VERSION = 1
COMPRESSORS = (None, "lz4")


def fingerprint(X):
    """sha256 of X's float64 bytes (C order) and its shape: the data's identity
    (for scipy.sparse X, of its canonical CSR arrays: ``sparse_rows``)."""
    if is_sparse(X):
        return sparse_fingerprint(X)
    X = np.ascontiguousarray(X, dtype=np.float64)
    digest = hashlib.sha256(repr(X.shape).encode())
    digest.update(X.tobytes())
    return {"sha256": digest.hexdigest(), "shape": list(X.shape), "dtype": "float64"}


def kernel_spec(kernel):
    """``kernel.spec()`` as it reads back from JSON, so it compares equal to a stored
    one."""
    return json.loads(json.dumps(kernel.spec(), default=_json_scalar))


def _json_scalar(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store {value!r} in the Gram store's attributes")


class GramStore:
    """A Gram store on disk; make one with ``build`` or open one with ``open``.

    The constructor opens whatever store is at `path`, complete or not, with
    no checks (``mode="r+"`` to write); ``open`` is the checked way in.
    """

    def __init__(self, path, mode="r"):
        import zarr

        self.path = pathlib.Path(path).resolve()
        try:
            self.group = zarr.open_group(store=str(self.path), mode=mode)
            attrs = self.group.attrs
            self.n = int(attrs["n"])
            self.chunk_size = int(attrs["chunk_size"])
            self.array = self.group["K"]
        except Exception as exc:
            raise StoreError(
                f"the Gram store at {str(self.path)!r} cannot be read: its metadata is "
                f"damaged ({type(exc).__name__}: {exc}). Rebuild it with "
                "GramStore.build(path, X, kernel, overwrite=True)."
            ) from exc
        self.n_blocks = n_blocks(self.n, self.chunk_size)

    @property
    def attrs(self):
        """The group's attributes as a plain dict."""
        return dict(self.group.attrs)

    @property
    def is_complete(self):
        """True only once every block is written and the marker set after them."""
        return self.group.attrs.get("complete") is True

    def block_slice(self, i):
        """The rows of block i."""
        self._check_block_index(i, "i")
        return block_slice(i, self.n, self.chunk_size)

    def block(self, i, j):
        """Block (i, j) of K; for i < j the transpose of the stored block (j, i)."""
        self._check_block_index(i, "i")
        self._check_block_index(j, "j")
        if i < j:
            return np.ascontiguousarray(self.block(j, i).T)
        verify_chunk(self.array, (i, j), _REBUILD)
        return self.array[self.block_slice(i), self.block_slice(j)]

    def damaged_blocks(self):
        """The lower-triangle blocks whose chunk is missing or fails its checksum,
        as ``((i, j), what is wrong)``. Reads every chunk once."""
        return damaged_chunks(self.array, lower_blocks(self.n_blocks))

    def _check_block_index(self, index, name):
        if not (isinstance(index, (int, np.integer)) and 0 <= index < self.n_blocks):
            raise IndexError(
                f"{name} must be a block index in 0..{self.n_blocks - 1}; got "
                f"{index!r}."
            )

    def __repr__(self):
        state = "complete" if self.is_complete else "incomplete"
        return (
            f"GramStore({str(self.path)!r}, n={self.n}, chunk_size={self.chunk_size}, "
            f"{state})"
        )

    # -- opening ---------------------------------------------------------------
    @classmethod
    def open(cls, path, X=None, kernel=None):
        """Open a complete store; with `X` or `kernel`, check they are the ones it
        holds.

        Raises ValueError if `path` holds no Gram store, an incomplete one, or
        one built for other data or another kernel.
        """
        path = pathlib.Path(path).resolve()
        if not _is_gram_store(path):
            raise ValueError(
                f"path {str(path)!r} holds no Gram store; make one with "
                "GramStore.build(path, X, kernel)."
            )
        incomplete = ValueError(
            f"the Gram store at {str(path)!r} is incomplete (its build was "
            "interrupted); GramStore.build(path, X, kernel) with the same X and kernel "
            "resumes it."
        )
        if not _has_gram_array(path):
            raise incomplete
        store = cls(path)
        if not store.is_complete:
            raise incomplete
        damaged = store.damaged_blocks()
        if damaged:
            (block, problem), more = damaged[0], len(damaged) - 1
            raise DamagedChunkError(
                f"block {block} of the Gram store at {str(path)!r} {problem}"
                + (f", and {more} more block(s) are damaged" if more else "")
                + f"; the store is not used. {_REBUILD}",
                str(path),
                block,
            )
        fix = "rebuild it with GramStore.build(path, X, kernel, overwrite=True)"
        if X is not None:
            X = check_array(X, "X", accept_sparse=True)
            mismatch = _data_mismatch(path, store.attrs, fingerprint(X))
            if mismatch:
                raise ValueError(f"{mismatch}; pass the X it was built from, or {fix}.")
        if kernel is not None:
            mismatch = _kernel_mismatch(
                path, store.attrs, kernel_spec(_check_kernel(kernel))
            )
            if mismatch:
                raise ValueError(
                    f"{mismatch}; pass the kernel it was built with, or {fix}."
                )
        return store

    # -- building --------------------------------------------------------------
    @classmethod
    def build(
        cls,
        path,
        X,
        kernel,
        chunk_size=1024,
        compressor=None,
        client=None,
        overwrite=False,
        progress=None,
    ):
        """Compute the blocks (i, j), i ≥ j, of k(X, X) on the cluster and write them.

        Implements (gram-lower-blocks). X is scattered to the workers once
        (``scipy.sparse`` X as CSR, never densified, for the kernels that take
        it: the blocks come from the kernel's sparse products);
        each worker writes its blocks straight to `path`, which must be on a
        file system the workers see. ``compressor`` is None (uncompressed:
        kernel values hardly compress) or ``"lz4"`` (Blosc-lz4).
        ``progress(n_done, n_total)`` is called as blocks finish, n_total
        being the number of blocks this call computes.

        If `path` holds a complete store for the same X, kernel and chunk size,
        it is opened instead of recomputed; an incomplete one is resumed (only
        its missing blocks are computed). A store for other data, another
        kernel or another chunk size is refused unless ``overwrite=True``,
        which rebuilds it from scratch.

        A worker that Dask's memory monitor pauses while blocks wait on it
        fails the build with ``runtime.WorkerPausedError`` (after
        ``waiting.PAUSE_GRACE_SECONDS``) instead of hanging it; the blocks
        written so far stay, and a build with more memory resumes from them.
        """
        kernel = _check_kernel(kernel)
        X = check_array(X, "X", accept_sparse=accepts_sparse(kernel))
        chunk_size = _check_chunk_size(chunk_size)
        if compressor not in COMPRESSORS:
            raise ValueError(
                f"compressor must be None (uncompressed) or 'lz4'; got {compressor!r}."
            )
        if progress is not None and not callable(progress):
            raise TypeError(
                "progress must be a callable (n_done, n_total) or None; got "
                f"{progress!r}."
            )
        path = pathlib.Path(path).resolve()
        wanted = {
            "data": fingerprint(X),
            "kernel": kernel_spec(kernel),
            "chunk_size": chunk_size,
        }

        if not overwrite and _has_gram_array(path):
            store = cls(path, mode="r+")
            mismatch = (
                _data_mismatch(path, store.attrs, wanted["data"])
                or _kernel_mismatch(path, store.attrs, wanted["kernel"])
                or _chunk_mismatch(path, store.attrs, chunk_size)
            )
            if mismatch:
                raise StoreMismatchError(path, mismatch, "GramStore.build")
            if store.is_complete and store._discard_damaged():
                return store
        else:
            _check_replaceable(path)
            store = cls._create(path, X, wanted, compressor)
        store._compute_missing(X, kernel, client, progress)
        return store

    @classmethod
    def _create(cls, path, X, wanted, compressor):
        import zarr
        from zarr.codecs import BloscCodec

        n = X.shape[0]
        # The attributes come with the group, so a creation cut short still
        # reads as an (incomplete) Gram store that a later build may replace.
        group = zarr.open_group(
            store=str(path),
            mode="w",
            attributes={
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "kernel": wanted["kernel"],
                "data": wanted["data"],
                "n": n,
                "chunk_size": wanted["chunk_size"],
                "layout": "lower",
                "compressor": compressor,
                "complete": False,
            },
        )
        compressors = (
            None
            if compressor is None
            else BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=8)
        )
        group.create_array(
            "K",
            shape=(n, n),
            chunks=(wanted["chunk_size"],) * 2,
            dtype="float64",
            compressors=compressors,
            fill_value=np.nan,
        )
        return cls(path, mode="r+")

    def _discard_damaged(self):
        """Remove the damaged chunks of a complete store (with a warning naming
        them) so that a build recomputes them; True if there were none."""
        damaged = self.damaged_blocks()
        if not damaged:
            return True
        warnings.warn(
            f"the Gram store at {str(self.path)!r} has {len(damaged)} damaged block(s) "
            f"{[block for block, _ in damaged][:10]} (first: {damaged[0][1]}); "
            "recomputing them.",
            RuntimeWarning,
            stacklevel=3,
        )
        self.group.attrs["complete"] = False
        for block, _ in damaged:
            forget_chunk(self.array, block)
        return False

    def missing_blocks(self):
        """The lower-triangle blocks (i, j) whose chunk is not yet on disk."""
        chunk_file = self.array.metadata.encode_chunk_key
        return [
            (i, j)
            for i, j in lower_blocks(self.n_blocks)
            if not (self.path / "K" / chunk_file((i, j))).is_file()
        ]

    def _compute_missing(self, X, kernel, client, progress):
        from backends.dask.cluster import get_client

        todo = self.missing_blocks()
        client = get_client() if client is None else client
        n_threads = sum(client.nthreads().values()) or 1
        # Fresh keys per build (hash=False, a token): a build must never meet
        # the keys of an earlier one that the scheduler is still releasing.
        X_future = client.scatter(X, broadcast=True, hash=False)
        token = uuid.uuid4().hex
        sizes = {}
        for batch in batches(todo, self.chunk_size, n_threads):
            future = client.submit(
                write_blocks,
                str(self.path),
                token,
                X_future,
                kernel,
                batch,
                self.chunk_size,
                key=f"gram-blocks-{batch[0][0]}-{batch[0][1]}-{token}",
            )
            sizes[future] = len(batch)
        futures = list(sizes)
        n_done = 0
        try:
            for future in finished(client, futures):
                # A finished future is not fetched: its result is only a count.
                if future.status != "finished":
                    future.result()
                n_done += sizes[future]
                if progress is not None:
                    progress(n_done, len(todo))
        except BaseException:
            client.cancel(futures)
            raise
        if self.missing_blocks():
            raise RuntimeError(
                f"blocks of the Gram store at {str(self.path)!r} are still missing "
                "after the build; check that the workers share this file system, then "
                "build again to resume it."
            )
        self.group.attrs["complete"] = True


_REBUILD = (
    "GramStore.build(path, X, kernel) with the data and kernel it was built "
    "for recomputes the damaged blocks."
)


def _check_kernel(kernel):
    if not isinstance(kernel, Kernel):
        raise TypeError(
            "kernel must be a kernelref.kernels.Kernel object such as RBF(gamma=0.5); "
            f"got {kernel!r}."
        )
    return kernel


def _check_chunk_size(chunk_size):
    return check_integer(
        chunk_size, "chunk_size", meaning="It is the edge of the square blocks."
    )


def _is_gram_store(path):
    meta = path / "zarr.json"
    if not meta.is_file():
        return False
    try:
        return (
            json.loads(meta.read_text()).get("attributes", {}).get("format") == FORMAT
        )
    except (ValueError, AttributeError) as exc:
        raise StoreError(
            f"the store metadata {str(meta)!r} is not valid JSON ({exc}): it is "
            "truncated or damaged. Rebuild the store with GramStore.build(path, X, "
            "kernel, overwrite=True), or remove the directory."
        ) from exc


def _has_gram_array(path):
    return _is_gram_store(path) and (path / "K" / "zarr.json").is_file()


def _check_replaceable(path):
    """Refuse to clear a directory that is neither empty nor a Gram store (one
    whose metadata is damaged may be replaced: it still has its array ``K``)."""
    try:
        is_store = _is_gram_store(path)
    except StoreError:
        is_store = (path / "K").is_dir()
    if path.exists() and not is_store and (not path.is_dir() or any(path.iterdir())):
        raise ValueError(
            f"path {str(path)!r} exists and is not a Gram store; give a new or empty "
            "directory (it is not cleared, even with overwrite=True)."
        )


def _data_mismatch(path, attrs, data):
    stored = attrs["data"]
    if stored == data:
        return ""
    return (
        f"the Gram store at {str(path)!r} was built for other data (shape "
        f"{stored['shape']}, sha256 {stored['sha256'][:12]}…) than X (shape "
        f"{data['shape']}, sha256 {data['sha256'][:12]}…)"
    )


def _kernel_mismatch(path, attrs, spec):
    stored = attrs["kernel"]
    if stored == spec:
        return ""
    return f"the Gram store at {str(path)!r} was built with kernel {stored}, not {spec}"


def _chunk_mismatch(path, attrs, chunk_size):
    if attrs["chunk_size"] == chunk_size:
        return ""
    return (
        f"the Gram store at {str(path)!r} has chunk_size={attrs['chunk_size']}, "
        f"not {chunk_size}"
    )
