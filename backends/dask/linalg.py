"""A tiled Cholesky factorisation of K + λI stored in Zarr, and the dual ridge solve.

The dual coefficients a = (K + λI)⁻¹ t (label ``ridge-dual-solution``) are
found here for a Gram matrix K too large for one worker. K is read from a Zarr
array in square tiles of side b (the last block row may be ragged; only tiles
(i, j) with i ≥ j are read), and the Cholesky factor L of K + λI is written,
tile by tile, to a second Zarr array with the same chunking. With T block rows
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
"""

import uuid

import numpy as np
import zarr
from scipy.linalg import LinAlgError, cholesky, solve_triangular

from backends.dask.blocks import block_slice, n_blocks
from backends.dask.integrity import record_chunk

__all__ = ["create_factor", "dual_coefficients", "tiled_cho_solve", "tiled_cholesky"]


def _tile(A, i, j, b):
    """Tile (i, j) of a Zarr array, or of a tile source: an object with
    ``shape``, ``chunks`` and ``tile(i, j)`` that computes its tiles (a kernel
    matrix evaluated on the worker, ``backends.dask.gp.tiles.KernelTiles``)."""
    if hasattr(A, "tile"):
        return np.array(A.tile(i, j), dtype=np.float64)
    n = A.shape[0]
    return np.asarray(A[block_slice(i, n, b), block_slice(j, n, b)], dtype=np.float64)


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


def _factor_tile(K, L, lam, i, j, b, *written):
    """Compute and write the factor tile L_ij (the tile equations above).

    ``written`` are the results of the tasks that wrote the factor tiles this
    one reads; they carry no data and only order the tasks.
    """
    A = _tile(K, i, j, b)
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


def tiled_cholesky(K, lam, L, client, order="right"):
    """Write the lower Cholesky factor of K + λI into ``L``, tile by tile, on the cluster.

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
    if order == "right":
        return _right_looking(K, lam, L, client)
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
                key=f"cholesky-tile-{i}-{j}-{run}",
            )
    _wait_all(client, list(tasks.values()))
    return L


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
# steps are applied ``UPDATE_BATCH`` at a time, one task and one write each. Priorities give lookahead:
# the tasks that produce column k + 1 (its updates, POTRF and TRSMs) outrank the
# rest of step k's updates, so the next panel is ready while the workers are
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


def _trailing_tile(K, work, i, j, k, b):
    """A⁽ᵏ⁾_ij: K's tile for k = 0, else the version written by the k-th update."""
    if k == 0:
        return _tile(K, i, j, b)
    return np.load(_version_path(work, i, j, k))


def _save_version(work, i, j, k, A):
    import os

    path = _version_path(work, i, j, k)
    temporary = work / f".{i}-{j}.{k}.{uuid.uuid4().hex}.npy"
    np.save(temporary, A)
    os.replace(temporary, path)


def _update_task(K, L, work, i, j, k, b, *written, last=None):
    """A⁽ᵐ⁺¹⁾_ij = A⁽ᵏ⁾_ij − Σ_{p=k..m} L_ip L_jpᵀ for m = ``last`` (default k): the
    updates of steps k to m at once, unless a version after m exists (a rerun)."""
    last = k if last is None else last
    if _latest_version(work, i, j) > last:
        return
    A = _trailing_tile(K, work, i, j, k, b)
    for p in range(k, last + 1):
        L_ip = _tile(L, i, p, b)
        A -= L_ip @ (L_ip if i == j else _tile(L, j, p, b)).T
    _save_version(work, i, j, last + 1, A)
    if k > 0:
        _version_path(work, i, j, k).unlink(missing_ok=True)


def _step_batches(j, size):
    """Steps 0..j−1 of tile column j's updates in batches: the last step alone (it is on
    the critical path, just before panel j), the others ``size`` at a time."""
    starts = list(range(0, j - 1, size))
    batches = [(k, min(k + size, j - 1) - 1) for k in starts]
    return batches + [(j - 1, j - 1)] if j > 0 else []


def _panel_task(K, L, lam, work, i, k, b, *written):
    """L_kk = chol(A⁽ᵏ⁾_kk + λI) (i = k) or L_ik = A⁽ᵏ⁾_ik L_kk⁻ᵀ (i > k)."""
    A = _trailing_tile(K, work, i, k, k, b)
    if i == k:
        A.flat[:: len(A) + 1] += lam
        tile = _diagonal_factor(A, k, b, lam)
    else:
        tile = solve_triangular(
            _tile(L, k, k, b), A.T, lower=True, check_finite=False
        ).T
    n = L.shape[0]
    L[block_slice(i, n, b), block_slice(k, n, b)] = tile
    record_chunk(L, (i, k))  # checked before the factor is reused (integrity)


def _right_looking(K, lam, L, client):
    """Right-looking tiled Cholesky with lookahead (see the comment above)."""
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
                            key=f"cholesky-update-{i}-{j}-{last}-{run}",
                            priority=3 * (T - j),
                        )
        _wait_all(client, list(panel.values()) + list(update.values()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return L


def _tile_times(L, i, j, b, x, transpose):
    """L_ij x, or L_ijᵀ x when ``transpose``: one term of a block substitution."""
    tile = _tile(L, i, j, b)
    return (tile.T if transpose else tile) @ x


def _diagonal_solve(L, i, b, rhs, transpose, *terms):
    """Solve L_ii z_i = rhs − Σ terms (or L_iiᵀ z_i = ... when ``transpose``)."""
    rhs = rhs - sum(terms) if terms else rhs
    return solve_triangular(
        _tile(L, i, i, b),
        rhs,
        lower=True,
        trans=1 if transpose else 0,
        check_finite=False,
    )


def tiled_cho_solve(L, t, client):
    """x = (LLᵀ)⁻¹ t by blocked forward and back substitution on the cluster.

    Forward: z_i = L_ii⁻¹ (t_i − Σ_{j<i} L_ij z_j); back: x_i = L_ii⁻ᵀ (z_i − Σ_{j>i} L_jiᵀ x_j).
    ``t`` is (n,) or (n, k); the result has the same shape.
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
    """a = (K + λI)⁻¹ t through the tiled Cholesky factor (label ``ridge-dual-solution``).

    The factor is written to the Zarr array ``L`` and can be reused for other t.
    """
    tiled_cholesky(K, lam, L, client)
    return tiled_cho_solve(L, t, client)


def _wait_all(client, futures):
    """Gather ``futures``; on the first error cancel the rest so no work is left running."""
    try:
        return client.gather(futures)
    except BaseException:
        client.cancel(futures)
        raise
