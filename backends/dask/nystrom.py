"""Nyström kernel ridge with the FALKON preconditioner, over streamed K_NM blocks.

With M centres C (rows of X) the estimator f(x) = k(x, C) β minimises
‖t − K_NM β‖² + λ βᵀ K_MM β, so β solves the normal equations

    H β = K_NMᵀ t,   H = K_NMᵀ K_NM + λ K_MM          (label ``nystrom-normal``)

(Rudi, Carratino & Rosasco, "FALKON", NeurIPS 2017, with their λn written λ as
in ``ridge-dual-solution``). With every point a centre, K_NM = K and β is the
exact ridge solution (K + λI)⁻¹ t.

With sample weights s ≥ 0 (S = diag(s)) the weighted ridge problem of
``ridge-weighted``, ½ Σ_n s_n (wᵀφ(x_n) − t_n)² + λ/2 ‖w‖², restricted to
w = Σ_m β_m φ(c_m) (so wᵀφ(x_n) = K_nM β and ‖w‖² = βᵀK_MMβ), is minimised by

    H_s β = K_NMᵀ S t,   H_s = K_NMᵀ S K_NM + λ K_MM      (label ``nystrom-weighted``)

With every point a centre and K invertible this is K (SK + λI) β = K S t, so
β = (SK + λI)⁻¹ S t = S^½ (S^½ K S^½ + λI)⁻¹ S^½ t, the weighted ridge solution.
Each task weights its rows' K_iM (``nystrom_rows``), and the sketched
preconditioner estimates H_s with the sketch rows' weights.

FALKON's preconditioner replaces K_NMᵀ K_NM by its value (N/M) K_MM² under
uniform sampling: with K_MM = TᵀT and (N/M) T Tᵀ + λI = AᵀA (Cholesky factors,
upper), P = (N/M) K_MM² + λ K_MM = Tᵀ Aᵀ A T, and B = T⁻¹ A⁻¹ gives

    Bᵀ H B γ = Bᵀ K_NMᵀ t,   β = B γ                  (label ``falkon-system``)

whose matrix is I when K_NMᵀ K_NM = (N/M) K_MM², and well conditioned near it.
Conjugate gradients solve it; each iteration is one round of tasks computing
K_iMᵀ (K_iM u) for every row chunk i from the fit store, in tiles of a reused
buffer. Only M × M matrices (K_MM, T, A) live on the client.

FALKON estimates K_NMᵀK_NM on the centres' own rows, where it is biased: a
combination of kernel columns is small at its own centres exactly when K_MM
barely spans it, yet need not be small at the other points (and one peaked on
a centre is overweighted there). When λ/N is far below what M centres resolve
(the mean of k(x, x) − k_xMᵀK_MM⁻¹k_Mx over the data), these directions set
the condition number. ``SketchedPreconditioner`` (``KernelRidge``'s) estimates
it instead on S = ``SKETCH_ROWS_PER_CENTRE``·M rows that are not centres,
P = (N/S) K_SMᵀK_SM + λK_MM, an unbiased estimate of H, factored as FALKON's.
Measured with dense M × M algebra (``benchmarks/bench_dask_cg.py --part
falkon``; N = 100 000, D = 20, RBF γ = 0.05, uniform centres, 2026-11-24,
shared machine):

    M     λ/N    cond(BᵀHB) FALKON / sketched   CG iterations to 1e-6
    1000  1e-6       216 / 9.1                       67 / 20
    2000  1e-6       289 / 8.5                       75 / 20
    2000  1e-5        84 / 5.3                       48 / 15
    2000  1e-4        10 / 2.6                       20 / 10

and the same test error (0.2096 at M = 2000, λ/N = 1e-6; it is reached at
CG tol 1e-3 already). In a side run of the same algebra (M = 1000–2000)
S = M rows gave too noisy an estimate (cond 345), 2M about 30, 8M 4.4.
Forming Φ = K_SM T⁻¹ (S·M² flops) and ΦᵀΦ (2S·M²) costs 12M³ flops on the
client: at M = 10 000 about three minutes at one core's ~70 GFLOP/s
(estimated, not measured), three CG iterations at N = 10⁶ (64 s each),
against the ~50 it saved at N = 10⁵. When fewer than S rows
are not centres, S is every row: P = H, and CG takes one step.
"""

import numpy as np
import scipy.sparse
from scipy.linalg import solve_triangular

from backends.dask import sparse_rows
from backends.dask.blocks import _sparse_norms, kernel_block, reusable_buffer
from backends.dask.cg import TILE_COLS, TILE_ROWS, centred_chunk
from backends.dask.runtime import map_chunks, read_chunk, verify_chunks

__all__ = [
    "FalkonPreconditioner",
    "SketchedPreconditioner",
    "leverage_scores",
    "nystrom_rows",
    "check_n_centres",
    "distinct_draw",
    "row_labels",
    "select_centres",
    "sketch_rows",
]

#: Jitter added to K_MM's diagonal before its Cholesky, relative to its largest
#: diagonal entry (FALKON's ε): it guards T against repeated or near-repeated
#: centres and changes only the preconditioner, never β.
JITTER = 1e-10


def _centred(C, shift):
    """C − shift and its rows' squared norms; sparse C (CSR, never shifted)
    with the norms of its stored entries."""
    if scipy.sparse.issparse(C):
        C = C.tocsr()
        return C, _sparse_norms(C)
    C = np.asarray(C, dtype=np.float64)
    C = C - shift if shift is not None else C
    return C, np.einsum("ij,ij->i", C, C)


def nystrom_rows(ref, i, C, kernel, shift, U, t_ref, s_ref=None):
    """Worker task: K_iMᵀ (K_iM U) for row chunk i (or K_iMᵀ t_i if U is None);
    with the weights ``s_ref`` names, K_iMᵀ S_i (K_iM U) or K_iMᵀ S_i t_i
    (``nystrom-weighted``).

    K_iM is formed a few rows at a time (``TILE_ROWS`` × ``TILE_COLS`` entries)
    in a reused buffer, and used twice while it is in cache. Sparse X (CSR
    chunks) and centres (CSR rows of X) stay sparse: each tile is the kernel's
    own sparse product, dense only as a tile.
    """
    X_i, x_norms = centred_chunk(ref, i, shift)
    C, c_norms = _centred(C, shift)
    left = read_chunk(t_ref, i).reshape(X_i.shape[0], -1) if U is None else None
    s_i = None if s_ref is None else read_chunk(s_ref, i).reshape(X_i.shape[0], 1)
    k = left.shape[1] if U is None else U.shape[1]
    out = np.zeros((C.shape[0], k))
    rows_per_tile = max(1, TILE_ROWS * TILE_COLS // C.shape[0])
    buffer = reusable_buffer(rows_per_tile * C.shape[0])
    for r0 in range(0, X_i.shape[0], rows_per_tile):
        rows = slice(r0, r0 + rows_per_tile)
        K_rM = kernel_block(kernel, X_i[rows], C, buffer, x_norms[rows], c_norms)
        right = left[rows] if U is None else K_rM @ U
        out += K_rM.T @ (right if s_i is None else s_i[rows] * right)
    return out


def leverage_rows(ref, i, S, kernel, shift, R):
    """Worker task: λ·ℓ̃ for row chunk i: k_ii − ‖R⁻ᵀ k_iS‖² (see
    ``leverage_scores``)."""
    X_i, x_norms = centred_chunk(ref, i, shift)
    S, s_norms = _centred(S, shift)
    K_iS = kernel_block(kernel, X_i, S, None, x_norms, s_norms)
    Z = solve_triangular(R, K_iS.T, trans="T", lower=False, check_finite=False)
    return np.asarray(kernel.diag(read_chunk(ref, i))) - np.einsum("ij,ij->j", Z, Z)


def leverage_scores(client, store, kernel, shift, lam, m, rng):
    """Approximate ridge leverage scores ℓ_i = [K(K + λI)⁻¹]_ii of every point.

    From m uniform landmarks S (one pass over the data):
    ℓ̃_i = (k_ii − k_iSᵀ (K_SS + λ(m/N) I)⁻¹ k_iS)/λ, exact when S is every point
    (then (1/λ)[K − K(K + λI)⁻¹K]_ii = [K(K + λI)⁻¹]_ii).
    """
    n = store.n
    S = np.sort(rng.choice(n, size=min(m, n), replace=False))
    X_S = _read_rows(store, S)
    K_SS = kernel(X_S)
    K_SS.flat[:: len(S) + 1] += lam * len(S) / n
    R = np.linalg.cholesky(K_SS).T
    parts = map_chunks(client, leverage_rows, store.x_ref, X_S, kernel, shift, R)
    return np.maximum(np.concatenate(parts), 0.0) / lam


def row_labels(X):
    """(labels, count): one label per row of X, equal for equal rows (-0.0 is
    0.0), and the number of distinct rows (``sparse_row_labels`` for sparse X).
    One sort of the rows as bytes: 0.11 s at N = 10⁵ and 1.4 s at N = 10⁶
    (D = 20, measured 2026-11-24 on a shared machine), against the 64 s of one
    CG round at N = 10⁶."""
    if scipy.sparse.issparse(X):
        return sparse_row_labels(X)
    Z = np.add(np.asarray(X, dtype=np.float64), 0.0, order="C")
    rows = Z.view(np.dtype((np.void, Z.itemsize * Z.shape[1]))).ravel()
    distinct, labels = np.unique(rows, return_inverse=True)
    return labels.ravel(), len(distinct)


def sparse_row_labels(X):
    """``row_labels`` of sparse X without densifying it: rows are equal when
    their stored nonzero entries are (canonical CSR: sorted, summed, zeros
    dropped, so -0.0 and 0.0 alike are absent), keyed by those entries' bytes.
    O(stored entries) and one dictionary entry per distinct row."""
    X = X.tocsr().astype(np.float64, copy=True)
    X.sum_duplicates()
    X.eliminate_zeros()
    labels = np.empty(X.shape[0], np.int64)
    seen = {}
    for n in range(X.shape[0]):
        start, stop = X.indptr[n], X.indptr[n + 1]
        key = X.indices[start:stop].tobytes() + X.data[start:stop].tobytes()
        labels[n] = seen.setdefault(key, len(seen))
    return labels, len(seen)


def check_n_centres(n_centres, n, n_distinct):
    """M for ``n_centres`` on N rows of which ``n_distinct`` differ: every distinct
    row when ``n_centres`` ≥ N (exact kernel ridge; repeated rows add nothing to
    the span of the centres), else ``n_centres``, refused if the data have fewer
    distinct rows (a centre repeated makes K_MM, and H of ``nystrom-normal``,
    singular)."""
    if n_centres >= n:
        return n_distinct
    if n_centres > n_distinct:
        raise ValueError(
            f"n_centres={n_centres} asks for more Nyström centres than X has "
            f"distinct rows ({n_distinct} of {n}), and a repeated centre makes K_MM "
            f"singular; give n_centres <= {n_distinct} (with all of them the fit is "
            f"exact kernel ridge), or n_centres >= {n} for exact kernel ridge."
        )
    return n_centres


def select_centres(
    client, store, kernel, shift, lam, m, sampling, random_state, labels=None
):
    """Indices of M centres, rows of distinct values: uniform without replacement,
    or by leverage scores.

    ``labels`` (of ``row_labels``; None: every row distinct) name equal rows. The
    M rows are drawn as without them; when some drawn rows are equal, the first
    drawn of each is kept and the rest are the first rows of new values in a
    continued draw of the other rows (``distinct_draw``): equal rows are one
    value, drawn with their probabilities together, never twice. On data without
    equal drawn rows the centres are those drawn, as before. M ≥ the number of
    distinct rows gives the first row of each value (``check_n_centres``).
    """
    rng = np.random.default_rng(random_state)
    n = store.n
    firsts = np.arange(n) if labels is None else np.unique(labels, return_index=True)[1]
    if m >= len(firsts):
        return np.sort(firsts)
    p = None
    if sampling != "uniform":
        scores = leverage_scores(client, store, kernel, shift, lam, m, rng)
        p = scores + 1e-12 * scores.max()
        p = p / p.sum()
    index = rng.choice(n, size=m, replace=False, p=p)
    if labels is not None:
        index = distinct_draw(index, labels, rng, p)
    return np.sort(index)


def distinct_draw(index, labels, rng, p=None):
    """`index` (rows drawn without replacement, in draw order, with probabilities
    p or uniformly) with its repeated values replaced: the first drawn row of each
    value kept, then the other rows in the order a continued draw takes them
    (sorted by e/p, e ~ Exp(1): Efraimidis & Spirakis, 2006), the first of each
    value not yet taken, until there are ``len(index)`` values. `index` itself if
    its rows' values differ."""
    _, first = np.unique(labels[index], return_index=True)
    if len(first) == len(index):
        return index
    kept = index[np.sort(first)]
    rest = np.setdiff1d(np.arange(len(labels)), index)
    keys = rng.standard_exponential(len(rest))
    order = rest[np.argsort(keys if p is None else keys / p[rest], kind="stable")]
    _, first = np.unique(labels[order], return_index=True)
    new = order[np.sort(first)]
    new = new[~np.isin(labels[new], labels[kept])]
    return np.concatenate([kept, new[: len(index) - len(kept)]])


def _read_rows(store, index):
    """Rows `index` of the store's X, on the client (CSR for sparse X, read
    chunk by chunk, each verified)."""
    import zarr

    if store.x_ref.sparse:
        index = np.asarray(index)
        parts = []
        for c in np.unique(index // store.chunk_size):
            rows = sparse_rows.read_rows(store.x_ref.path, store.x_ref.rows(int(c)))
            parts.append(rows[index[index // store.chunk_size == c] % store.chunk_size])
        return scipy.sparse.vstack(parts, format="csr")

    X = zarr.open_array(store=store.x_ref.path, mode="r")
    verify_chunks(store.x_ref, X, np.unique(np.asarray(index) // store.chunk_size))
    return np.asarray(
        X.get_orthogonal_selection((index, slice(None))), dtype=np.float64
    )


class FalkonPreconditioner:
    """B = T⁻¹A⁻¹ of ``falkon-system``: K_MM + εI = TᵀT, (N/M)TTᵀ + λI = AᵀA."""

    def __init__(self, K_MM, n, lam):
        m = len(K_MM)
        K = K_MM.copy()
        K.flat[:: m + 1] += JITTER * max(np.max(np.diag(K_MM)), 1.0)
        self.T = np.linalg.cholesky(K).T
        inner = (n / m) * (self.T @ self.T.T)
        inner.flat[:: m + 1] += lam
        self.A = np.linalg.cholesky(inner).T

    def B(self, V):
        """B V = T⁻¹ (A⁻¹ V)."""
        V = solve_triangular(self.A, V, lower=False, check_finite=False)
        return solve_triangular(self.T, V, lower=False, check_finite=False)

    def B_T(self, V):
        """Bᵀ V = A⁻ᵀ (T⁻ᵀ V)."""
        V = solve_triangular(self.T, V, trans="T", lower=False, check_finite=False)
        return solve_triangular(self.A, V, trans="T", lower=False, check_finite=False)

    def condition_numbers(self, H):
        """cond(H) and cond(BᵀHB) (dense, for small M: the book's measurement)."""
        BHB = self.B_T(self.B_T(H).T)
        return np.linalg.cond(H), np.linalg.cond(BHB)


#: Rows per centre of the independent sample on which ``SketchedPreconditioner``
#: estimates K_NMᵀK_NM: 4 brought cond(BᵀHB) from 216–289 (FALKON's) to about 9
#: at N = 100 000, λ/N = 1e-6 (1: 345, too noisy; 2: about 30; 8: 4.4).
SKETCH_ROWS_PER_CENTRE = 4

#: Rows of K_SM formed at once on the client (SKETCH_BLOCK × M floats).
SKETCH_BLOCK = 4096


def sketch_rows(n, centres, random_state):
    """Indices of the rows S of ``SketchedPreconditioner``: ``SKETCH_ROWS_PER_CENTRE``
    times M uniform rows that are not centres, or every row if there are too few."""
    m = len(centres)
    others = np.setdiff1d(np.arange(n), centres)
    if len(others) < SKETCH_ROWS_PER_CENTRE * m:
        return np.arange(n)
    rng = np.random.default_rng([int(random_state), 2])  # not the centres' stream
    return np.sort(rng.choice(others, size=SKETCH_ROWS_PER_CENTRE * m, replace=False))


class SketchedPreconditioner(FalkonPreconditioner):
    """FALKON's B = T⁻¹A⁻¹ with (N/M)TTᵀ, the centres' whitened features, replaced
    by those of S rows X_S that are not centres: K_MM + εI = TᵀT, Φ = K_SM T⁻¹,
    (N/S)ΦᵀΦ + λI = AᵀA, so that BᵀB = P⁻¹ for P = (N/S)K_SMᵀK_SM + λ(K_MM + εI),
    an unbiased estimate of H (``nystrom-normal``) where FALKON's (N/M)K_MM² is
    biased (module docstring). Factored as FALKON's, so the directions K_MM
    does not span are damped alike. With X_S every row, BᵀHB = I up to ε.
    With the sketch rows' weights ``s_S``, Φ = S_S^½ K_SM T⁻¹ and P estimates
    H_s of ``nystrom-weighted`` alike."""

    def __init__(self, kernel, X_S, C, K_MM, n, lam, s_S=None):
        m = len(K_MM)
        K = K_MM.copy()
        K.flat[:: m + 1] += JITTER * max(np.max(np.diag(K_MM)), 1.0)
        self.T = np.linalg.cholesky(K).T
        inner = np.zeros((m, m))
        for s in range(0, X_S.shape[0], SKETCH_BLOCK):
            K_SM = kernel(X_S[s : s + SKETCH_BLOCK], C)
            Phi_T = solve_triangular(  # (K_SM T⁻¹)ᵀ = T⁻ᵀ K_SMᵀ
                self.T, K_SM.T, trans="T", lower=False, check_finite=False
            )
            if s_S is not None:
                Phi_T *= np.sqrt(s_S[s : s + SKETCH_BLOCK])[None, :]
            inner += Phi_T @ Phi_T.T
        inner *= n / X_S.shape[0]
        inner.flat[:: m + 1] += lam
        self.A = np.linalg.cholesky(inner).T


class FalkonFit:
    """Conjugate gradients on ``falkon-system`` as a ``run_loop`` fit, with the
    ``preconditioner``'s B and Bᵀ (default: FALKON's); with ``s_ref`` naming the
    store's weights, on H_s of ``nystrom-weighted`` (give a preconditioner that
    estimates H_s: FALKON's ignores the weights).

    The right-hand side Bᵀ K_NMᵀ t costs one round of tasks; it is computed in
    ``start`` and kept in the state, so a resumed fit does not repeat it.
    """

    measure_name = "residual"
    size_name = "iterations"

    def __init__(
        self,
        client,
        store,
        kernel,
        shift,
        C,
        K_MM,
        lam,
        t_shape,
        tol,
        max_iter,
        preconditioner=None,
        s_ref=None,
    ):
        from backends.dask.cg import ConjugateGradients

        self._CG = ConjugateGradients
        self.client, self.store, self.kernel, self.shift = client, store, kernel, shift
        self.C, self.K_MM, self.lam, self.t_shape = C, K_MM, lam, t_shape
        self.tol, self.max_iter = tol, max_iter
        self.s_ref = s_ref
        self.P = preconditioner or FalkonPreconditioner(K_MM, store.n, lam)
        self.cg = None

    def normal_times(self, U):
        """K_NMᵀ K_NM U (K_NMᵀ S K_NM U with weights), one round of tasks."""
        parts = map_chunks(
            self.client,
            nystrom_rows,
            self.store.x_ref,
            self.C,
            self.kernel,
            self.shift,
            U,
            None,
            self.s_ref,
        )
        return np.sum(parts, axis=0)

    def apply(self, V):
        """Bᵀ H B V with H of ``nystrom-normal`` (H_s of ``nystrom-weighted``)."""
        U = self.P.B(V)
        return self.P.B_T(self.normal_times(U) + self.lam * (self.K_MM @ U))

    def _solver(self, rhs):
        if self.cg is None:
            self.cg = self._CG(
                self.apply, rhs, None, self.tol, self.max_iter, breakdown="stop"
            )
        return self.cg

    def start(self):
        parts = map_chunks(
            self.client,
            nystrom_rows,
            self.store.x_ref,
            self.C,
            self.kernel,
            self.shift,
            None,
            self.store.array_ref("t"),
            self.s_ref,
        )
        rhs = self.P.B_T(np.sum(parts, axis=0))
        state = self._solver(rhs).start()
        state["rhs"] = rhs
        return state

    def step(self, state):
        state = self._solver(state["rhs"]).step(state)
        return state

    def done(self, state):
        return self._solver(state["rhs"]).done(state)

    def measure(self, state):
        return self._solver(state["rhs"]).measure(state)

    def condition_estimate(self, state):
        """cond(BᵀHB) from the CG run's own Lanczos tridiagonal (``cg-lanczos``):
        the ratio of its extreme Ritz values, which approach BᵀHB's extreme
        eigenvalues from inside, so it is at most the true condition number."""
        from scipy.linalg import eigvalsh_tridiagonal

        from backends.dask.gp_matrix_free import lanczos_tridiagonal

        estimates = [1.0]
        for j in range(state["alphas"].shape[1]):
            diagonal, off = lanczos_tridiagonal(
                state["alphas"][:, j], state["betas"][:, j]
            )
            if len(diagonal):
                ritz = eigvalsh_tridiagonal(diagonal, off)
                estimates.append(ritz[-1] / ritz[0])
        return float(max(estimates))

    def beta(self, state):
        """β = B γ, shaped as t's columns."""
        result = self._solver(state["rhs"]).result(state, state["rhs"].shape, 4)
        beta = self.P.B(result.a)
        return beta.reshape((len(beta),) + tuple(self.t_shape[1:])), result.n_iter
