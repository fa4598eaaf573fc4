"""A tiled Cholesky factorisation of K + λI stored in Zarr, and the dual ridge solve.

The dual coefficients a = (K + λI)⁻¹ t (label ``ridge-dual-solution``) are
found here for a Gram matrix K too large for one worker. K is read from a Zarr
array in square tiles of side b (the last block row may be ragged; only tiles
(i, j) with i ≥ j are read), and the Cholesky factor L of K + λI is written,
tile by tile, to a second Zarr array with the same chunking. With sample
weights s (``weights``) the matrix factorised is S^½ K S^½ + λI of the weighted
solution (label ``ridge-weighted``): each K tile is scaled by s_i^½ s_j^½ as a
task reads it, so no weighted copy of K is ever stored. With T block rows
and the tile equations

    L_jj = chol(K_jj + λI − Σ_{p<j} L_jp L_jpᵀ)              (SYRK, then POTRF)
    L_ij = (K_ij − Σ_{p<j} L_ip L_jpᵀ) L_jj⁻ᵀ,   i > j       (GEMM, then TRSM)

every tile is one task on the cluster. A task reads its K tile and the factor
tiles it needs from Zarr one at a time and writes its own factor tile, so a
worker holds at most four tiles, whatever N is.

Scheduling. All tasks are submitted at once with their data dependencies, and
the client waits once: the scheduler starts every task whose inputs are
written, with no round trip per step. The default order is right-looking with
lookahead (``_right_looking``): each factored column's update is applied to the
trailing matrix at once, one task per tile and step, the next panel's tasks
first, so the critical path is about 3T tile operations and both workers stay
busy; the updated trailing tiles are written as new versions, never in place,
so a task that the scheduler reruns after losing a worker cannot subtract an
update twice. ``order="left"`` keeps the left-looking order, where the updates
are accumulated by the tile that receives them (one task per factor tile, each
written once from final inputs) at the cost of a critical path of about T²
tile products.

The triangular solves L z = t and Lᵀ a = z are blocked the same way: one task
per off-diagonal tile multiplies it with a solved block, one task per diagonal
tile solves its block, and the whole substitution is one submission.

Memory. A task reads a stored tile of an uncompressed Zarr array straight from
its chunk file into a buffer that the worker keeps and reuses (``read_tile``):
Zarr's own read of a 32 MiB tile costs 20–45 ms and a freshly allocated array
(Dask's nanny makes glibc return every large block to the system, so each new
one is faulted in again, up to ~25 ns per float64 on this VM), against about
2 ms for the direct read into a reused buffer; the products go into reused
buffers too.
"""

import os
import sys
import uuid

import numpy as np
import zarr
from scipy.linalg import LinAlgError, cholesky, solve_triangular

from backends.dask.blocks import block_slice, n_blocks
from backends.dask.integrity import record_chunk
from backends.dask.runtime import gather

__all__ = ["create_factor", "dual_coefficients", "tiled_cho_solve", "tiled_cholesky"]


def _tile(A, i, j, b):
    """Tile (i, j) of a Zarr array, or of a tile source: an object with
    ``shape``, ``chunks`` and ``tile(i, j)`` that computes its tiles (a kernel
    matrix evaluated on the worker, ``backends.dask.gp.tiles.KernelTiles``)."""
    if hasattr(A, "tile"):
        return np.array(A.tile(i, j), dtype=np.float64)
    n = A.shape[0]
    return np.asarray(A[block_slice(i, n, b), block_slice(j, n, b)], dtype=np.float64)


# -- tiles in reused buffers ------------------------------------------------------
#: Free buffers kept per shape by each process. A buffer is made only when none is
#: free, so the pool keeps at most what the tasks held at once: a few tiles for the
#: factorisation, T − c + 2 for the GP gradient's column c.
POOL_SIZE = 32
_free = {}


def take_buffer(shape):
    """An uninitialised float64 array of ``shape``, reused if the pool has one."""
    try:
        return _free.get(shape, []).pop()
    except IndexError:
        return np.empty(shape)


def give_buffer(*buffers):
    """Return buffers from ``take_buffer`` (or ``read_tile``; None is ignored)."""
    for buffer in buffers:
        if buffer is not None:
            free = _free.setdefault(buffer.shape, [])
            if len(free) < POOL_SIZE:
                free.append(buffer)


def leading(buffer, shape):
    """A C-contiguous array of ``shape`` over the first entries of ``buffer``."""
    return buffer.reshape(-1)[: shape[0] * shape[1]].reshape(shape)


def _chunk_path(A, i, j):
    return os.path.join(A.store.root, A.path, A.metadata.encode_chunk_key((i, j)))


def _raw_chunks(A):
    """True if A's chunks are files of raw little-endian float64 (a Zarr v3 array
    in a local directory, unsharded, uncompressed and unfiltered)."""
    try:
        from zarr.codecs import BytesCodec
        from zarr.storage import LocalStore

        return (
            sys.byteorder == "little"
            and isinstance(A.store, LocalStore)
            and A.metadata.zarr_format == 3
            and A.shards is None
            and not A.filters
            and not A.compressors
            and isinstance(A.serializer, BytesCodec)
            and getattr(A.serializer.endian, "value", A.serializer.endian)
            in (None, "little")
            and A.dtype == np.float64
        )
    except (AttributeError, ImportError, TypeError):
        return False


def _read_into(path, out):
    """Fill the C-contiguous ``out`` from the file ``path``; False if it is short
    or missing."""
    try:
        with open(path, "rb", buffering=0) as f:
            return f.readinto(memoryview(out).cast("B")) == out.nbytes
    except FileNotFoundError:
        return False


def read_tile(A, i, j, b):
    """(tile (i, j) of A, its buffer): give the buffer back with ``give_buffer``
    once the tile is no longer needed (None: the tile is a new array).

    A stored chunk of raw float64 is read straight from its file into a reused
    (b, b) buffer (Zarr stores edge chunks whole, so the tile is the buffer's
    top-left corner); anything else is read by ``_tile``.
    """
    if not hasattr(A, "tile") and _raw_chunks(A) and tuple(A.chunks) == (b, b):
        n = A.shape[0]
        rows, cols = block_slice(i, n, b), block_slice(j, n, b)
        buffer = take_buffer((b, b))
        if _read_into(_chunk_path(A, i, j), buffer):
            return buffer[: rows.stop - rows.start, : cols.stop - cols.start], buffer
        give_buffer(buffer)
    return _tile(A, i, j, b), None


def create_factor(path, n, chunk_size, compressors=None, overwrite=True):
    """An empty (n, n) float64 Zarr array in (chunk_size, chunk_size) chunks for L.

    Tiles above the diagonal are never written and read as zeros.
    """
    return zarr.create_array(
        path,
        shape=(n, n),
        chunks=(chunk_size, chunk_size),
        dtype="float64",
        fill_value=0.0,
        compressors=compressors,
        overwrite=overwrite,
    )


def _block_roots(root, i, j, n, b):
    """(s_i^½, s_j^½) of tile (i, j), or None without weights: the few numbers a
    task needs to scale the K tile it reads (``_scale_tile``)."""
    if root is None:
        return None
    return root[block_slice(i, n, b)], root[block_slice(j, n, b)]


def _scale_tile(A, roots):
    """A ← diag(s_i^½) A diag(s_j^½) in place (``ridge-weighted``); None: as is."""
    if roots is not None:
        A *= roots[0][:, None]
        A *= roots[1][None, :]
    return A


def _diagonal_factor(A, j, b, lam):
    """chol(A) of diagonal tile j (A already holds + λI), or a clear error."""
    try:
        return cholesky(A, lower=True, check_finite=False)
    except LinAlgError:
        raise LinAlgError(
            "K + lam*I is not positive definite: the Cholesky factorisation failed "
            f"on diagonal tile {j} (rows {j * b} to {j * b + len(A) - 1}) with "
            f"lam={lam!r}. The kernel is not positive semi-definite on this data; "
            "use a larger lam, a positive semi-definite kernel, or "
            "kernelref.ridge.KernelRidge, which falls back to an LDL^T factorisation."
        ) from None


def _factor_tile(K, L, lam, i, j, b, *written, roots=None):
    """Compute and write the factor tile L_ij (the tile equations above).

    ``written`` are the results of the tasks that wrote the factor tiles this
    one reads; they carry no data and only order the tasks. ``roots`` scale the
    K tile (``_block_roots``).
    """
    A = _scale_tile(_tile(K, i, j, b), roots)
    for p in range(j):
        L_ip = _tile(L, i, p, b)
        A -= L_ip @ (L_ip if i == j else _tile(L, j, p, b)).T
    if i == j:
        A.flat[:: len(A) + 1] += lam
        tile = _diagonal_factor(A, j, b, lam)
    else:
        # L_ij L_jjᵀ = A, solved as L_jj L_ijᵀ = Aᵀ.
        tile = solve_triangular(
            _tile(L, j, j, b), A.T, lower=True, check_finite=False
        ).T
    n = L.shape[0]
    L[block_slice(i, n, b), block_slice(j, n, b)] = tile
    record_chunk(L, (i, j))  # checked before the factor is reused (integrity)


def tiled_cholesky(K, lam, L, client, order="right", weights=None):
    """Write the lower Cholesky factor of K + λI into ``L``, tile by tile, on the
    cluster; with ``weights`` s ≥ 0 (shape (n,)) that of S^½ K S^½ + λI
    (``ridge-weighted``), each K tile scaled as it is read.

    ``K`` and ``L`` are Zarr arrays of the same shape and square chunking (``K``
    may instead be a tile source, see ``_tile``); only the tiles on and below the
    diagonal of K are read. Raises ``LinAlgError`` naming the
    failing tile if K + λI is not positive definite. ``order`` is "right"
    (right-looking with lookahead, ``_right_looking``) or "left" (one task per
    factor tile, as described in the module's docstring).
    """
    n, b = K.shape[0], K.chunks[0]
    if L.shape != K.shape or tuple(L.chunks) != tuple(K.chunks):
        raise ValueError(
            f"the factor array must have K's shape {K.shape} and chunks "
            f"{K.chunks}; got {L.shape} and {L.chunks}."
        )
    if order not in ("right", "left"):
        raise ValueError(f"order must be 'right' or 'left'; got {order!r}.")
    root = None if weights is None else np.sqrt(np.asarray(weights, dtype=float))
    if root is not None and root.shape != (n,):
        raise ValueError(f"weights must have shape ({n},); got {root.shape}.")
    if order == "right":
        return _right_looking(K, lam, L, client, root)
    T = n_blocks(n, b)
    run = uuid.uuid4().hex[:8]
    tasks = {}
    for j in range(T):
        for i in range(j, T):
            needs = {tasks[i, p] for p in range(j)} | {tasks[j, p] for p in range(j)}
            if i > j:
                needs.add(tasks[j, j])
            tasks[i, j] = client.submit(
                _factor_tile,
                K,
                L,
                lam,
                i,
                j,
                b,
                *needs,
                roots=_block_roots(root, i, j, n, b),
                key=f"cholesky-tile-{i}-{j}-{run}",
            )
    _wait_all(client, list(tasks.values()))
    return L


def write_tile(L, i, j, b, tile):
    """L's tile (i, j) = ``tile``, and its checksum recorded (``integrity``).

    A raw float64 chunk is written as Zarr would write it (edge chunks whole,
    padded with zeros), to a temporary name and renamed, so a chunk file is
    never seen half written; any other array is written by Zarr.
    """
    n = L.shape[0]
    if _raw_chunks(L) and tuple(L.chunks) == (b, b):
        whole, padded = tile, None
        if tile.shape != (b, b) or not tile.flags.c_contiguous:
            padded = whole = take_buffer((b, b))
            whole.fill(0.0)
            whole[: tile.shape[0], : tile.shape[1]] = tile
        path = _chunk_path(L, i, j)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{uuid.uuid4().hex}.partial"
        with open(temporary, "wb") as f:
            f.write(memoryview(whole).cast("B"))
        os.replace(temporary, path)
        give_buffer(padded)
    else:
        L[block_slice(i, n, b), block_slice(j, n, b)] = tile
    record_chunk(L, (i, j))  # checked before the factor is reused (integrity)


# -- right-looking, with lookahead -------------------------------------------------
# The left-looking order's critical path is long: the diagonal tile of column j
# accumulates j products, and column j + 1 cannot start before it, so about T²
# tile products lie on the path of T³/6 and the two workers often wait. The
# right-looking order applies each column's update to the trailing matrix as
# soon as that column is factored,
#
#     A⁽ᵏ⁺¹⁾_ij = A⁽ᵏ⁾_ij − L_ik L_jkᵀ,   i ≥ j > k
#     L_kk = chol(A⁽ᵏ⁾_kk + λI),   L_ik = A⁽ᵏ⁾_ik L_kk⁻ᵀ   (A⁽⁰⁾ = K)
#
# so its critical path is about 3T tile operations. The update of step j − 1 to
# a tile of column j is one task, as it lies on the critical path; the earlier
# steps are applied ``UPDATE_BATCH`` at a time, one task and one write each. Priorities
# give lookahead: the tasks that produce column k + 1 (its updates, POTRF and TRSMs)
# outrank the rest of step k's updates, so the next panel is ready while the workers are
# still busy with the trailing matrix. An update cannot be applied in place and
# stay safe to rerun (a rerun would subtract twice), so A⁽ᵏ⁺¹⁾_ij is a new file
# ``<i>-<j>.<k+1>.npy`` in a work directory beside L, written atomically; the
# task that finds a later version already written does nothing, and the version
# it read is then deleted, so one version per trailing tile is kept on disk.
#: Steps applied by one update task to a trailing tile away from the critical path.
UPDATE_BATCH = 3


def _version_path(work, i, j, k):
    return work / f"{i}-{j}.{k}.npy"


def _latest_version(work, i, j):
    versions = [int(p.name.split(".")[1]) for p in work.glob(f"{i}-{j}.*.npy")]
    return max(versions, default=0)


def _trailing_tile(K, work, i, j, k, b, roots=None):
    """(A⁽ᵏ⁾_ij, its buffer): K's tile for k = 0 (scaled by ``roots``, see
    ``_block_roots``), else the version written by the k-th update (raw float64,
    read into a reused buffer)."""
    if k == 0:
        A, buffer = read_tile(K, i, j, b)
        return _scale_tile(A, roots), buffer
    n = K.shape[0]
    shape = (block_slice(i, n, b).stop - i * b, block_slice(j, n, b).stop - j * b)
    buffer = take_buffer((b, b))
    A = leading(buffer, shape)
    if not _read_into(_version_path(work, i, j, k), A):
        raise FileNotFoundError(f"version {k} of trailing tile ({i}, {j}) in {work}")
    return A, buffer


def _save_version(work, i, j, k, A):
    """Write A⁽ᵏ⁾_ij as raw float64 under a temporary name, then rename."""
    path = _version_path(work, i, j, k)
    temporary = work / f".{i}-{j}.{k}.{uuid.uuid4().hex}"
    with open(temporary, "wb") as f:
        f.write(memoryview(np.ascontiguousarray(A)).cast("B"))
    os.replace(temporary, path)


def _subtract_products(A, L, i, j, steps, b):
    """A −= Σ_{p ∈ steps} L_ip L_jpᵀ, the products in a reused buffer."""
    product = take_buffer((b, b))
    P = leading(product, A.shape)
    for p in steps:
        L_ip, B_ip = read_tile(L, i, p, b)
        if i == j:
            np.matmul(L_ip, L_ip.T, out=P)  # numpy takes SYRK for X Xᵀ
            B_jp = None
        else:
            L_jp, B_jp = read_tile(L, j, p, b)
            np.matmul(L_ip, L_jp.T, out=P)
        A -= P
        give_buffer(B_ip, B_jp)
    give_buffer(product)


def _update_task(K, L, work, i, j, k, b, *written, last=None, roots=None):
    """A⁽ᵐ⁺¹⁾_ij = A⁽ᵏ⁾_ij − Σ_{p=k..m} L_ip L_jpᵀ for m = ``last`` (default k): the
    updates of steps k to m at once, unless a version after m exists (a rerun)."""
    last = k if last is None else last
    if _latest_version(work, i, j) > last:
        return
    A, buffer = _trailing_tile(K, work, i, j, k, b, roots)
    _subtract_products(A, L, i, j, range(k, last + 1), b)
    _save_version(work, i, j, last + 1, A)
    give_buffer(buffer)
    if k > 0:
        _version_path(work, i, j, k).unlink(missing_ok=True)


def _step_batches(j, size):
    """Steps 0..j−1 of tile column j's updates in batches: the last step alone (it is on
    the critical path, just before panel j), the others ``size`` at a time."""
    starts = list(range(0, j - 1, size))
    batches = [(k, min(k + size, j - 1) - 1) for k in starts]
    return batches + [(j - 1, j - 1)] if j > 0 else []


def _panel_task(K, L, lam, work, i, k, b, *written, roots=None):
    """L_kk = chol(A⁽ᵏ⁾_kk + λI) (i = k) or L_ik = A⁽ᵏ⁾_ik L_kk⁻ᵀ (i > k)."""
    A, buffer = _trailing_tile(K, work, i, k, k, b, roots)
    if i == k:
        A[np.diag_indices(len(A))] += lam
        tile = _diagonal_factor(A, k, b, lam)
    else:
        L_kk, B_kk = read_tile(L, k, k, b)
        # L_ik L_kkᵀ = A, i.e. L_kk L_ikᵀ = Aᵀ, solved in A's own memory
        tile = solve_triangular(
            L_kk, A.T, lower=True, check_finite=False, overwrite_b=True
        ).T
        give_buffer(B_kk)
    write_tile(L, i, k, b, tile)
    give_buffer(buffer)


def _right_looking(K, lam, L, client, root=None):
    """Right-looking tiled Cholesky with lookahead (see the comment above); the
    tasks that read K (step 0) scale its tiles by ``root`` = s^½ if given."""
    import pathlib
    import shutil

    n, b = K.shape[0], K.chunks[0]
    T = n_blocks(n, b)
    run = uuid.uuid4().hex[:8]
    work = pathlib.Path(L.store.root) / L.path / f"work-{run}"
    work.mkdir(parents=True)
    panel, update = {}, {}
    # each trailing tile's updates, batched (a version written per batch, not per step)
    batches = {j: _step_batches(j, UPDATE_BATCH) for j in range(T)}
    done_after = {}  # (i, j, k): the update task after which A_ij has had steps ≤ k
    try:
        for k in range(T):
            # priority: the column a task produces, earliest first; panels first
            for i in range(k, T):
                needs = [panel[k, k]] if i > k else []
                if k > 0:
                    needs.append(done_after[i, k, k - 1])
                panel[i, k] = client.submit(
                    _panel_task,
                    K,
                    L,
                    lam,
                    work,
                    i,
                    k,
                    b,
                    *needs,
                    roots=_block_roots(root, i, k, n, b) if k == 0 else None,
                    key=f"cholesky-panel-{i}-{k}-{run}",
                    priority=3 * (T - k) + 2,
                )
            for j in range(k + 1, T):
                for first, last in batches[j]:
                    if last != k:
                        continue
                    for i in range(j, T):
                        needs = [panel[i, p] for p in range(first, last + 1)]
                        needs += [panel[j, p] for p in range(first, last + 1)]
                        if first > 0:
                            needs.append(done_after[i, j, first - 1])
                        done_after[i, j, last] = update[i, j, last] = client.submit(
                            _update_task,
                            K,
                            L,
                            work,
                            i,
                            j,
                            first,
                            b,
                            *needs,
                            last=last,
                            roots=_block_roots(root, i, j, n, b)
                            if first == 0
                            else None,
                            key=f"cholesky-update-{i}-{j}-{last}-{run}",
                            priority=3 * (T - j),
                        )
        _wait_all(client, list(panel.values()) + list(update.values()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return L


def _tile_times(L, i, j, b, x, transpose):
    """L_ij x, or L_ijᵀ x when ``transpose``: one term of a block substitution."""
    tile, buffer = read_tile(L, i, j, b)
    product = (tile.T if transpose else tile) @ x
    give_buffer(buffer)
    return product


def _diagonal_solve(L, i, b, rhs, transpose, *terms):
    """Solve L_ii z_i = rhs − Σ terms (or L_iiᵀ z_i = ... when ``transpose``)."""
    rhs = rhs - sum(terms) if terms else rhs
    tile, buffer = read_tile(L, i, i, b)
    z = solve_triangular(
        tile, rhs, lower=True, trans=1 if transpose else 0, check_finite=False
    )
    give_buffer(buffer)
    return z


def tiled_cho_solve(L, t, client):
    """x = (LLᵀ)⁻¹ t by blocked forward and back substitution on the cluster.

    Forward: z_i = L_ii⁻¹ (t_i − Σ_{j<i} L_ij z_j); back: x_i = L_ii⁻ᵀ (z_i − Σ_{j>i}
    L_jiᵀ x_j). ``t`` is (n,) or (n, k); the result has the same shape.
    """
    n, b = L.shape[0], L.chunks[0]
    t = np.asarray(t, dtype=np.float64)
    if t.shape[0] != n:
        raise ValueError(f"t has {t.shape[0]} rows but the factor is {n} x {n}.")
    T = n_blocks(n, b)
    z = [None] * T
    for i in range(T):
        terms = [
            client.submit(_tile_times, L, i, j, b, z[j], False, pure=False)
            for j in range(i)
        ]
        z[i] = client.submit(
            _diagonal_solve, L, i, b, t[block_slice(i, n, b)], False, *terms, pure=False
        )
    x = [None] * T
    for i in reversed(range(T)):
        terms = [
            client.submit(_tile_times, L, j, i, b, x[j], True, pure=False)
            for j in range(i + 1, T)
        ]
        x[i] = client.submit(_diagonal_solve, L, i, b, z[i], True, *terms, pure=False)
    return np.concatenate(_wait_all(client, x), axis=0)


def dual_coefficients(K, t, lam, L, client):
    """a = (K + λI)⁻¹ t through the tiled Cholesky factor (label
    ``ridge-dual-solution``).

    The factor is written to the Zarr array ``L`` and can be reused for other t.
    """
    tiled_cholesky(K, lam, L, client)
    return tiled_cho_solve(L, t, client)


def _wait_all(client, futures):
    """Gather ``futures``; on the first error cancel the rest so no work is left
    running (``runtime.gather``: a worker paused by Dask's memory monitor that
    holds them fails the wait with ``WorkerPausedError``)."""
    return gather(client, futures)
