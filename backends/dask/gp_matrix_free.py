"""Matrix-free GP evidence and gradient: CG, stochastic Lanczos quadrature, probes.

For A = K + σ²I the evidence and its gradient (labels ``gp-lml``,
``gp-lml-grad``) need three things no N × N array is formed for here:

- α = A⁻¹t, by preconditioned conjugate gradients over streamed kernel tiles
  (``cg.ConjugateGradients``), with the pivoted-Cholesky preconditioner
  M = LLᵀ + σ²I (Woodbury), warm started from the previous α;
- log|A| = log|M| + tr log(M^(-1/2) A M^(-1/2)). log|M| = n log σ² +
  log|I + LᵀL/σ²| exactly; the trace by stochastic Lanczos quadrature with
  probes z ~ N(0, M): E[zᵀM⁻¹ᐟ² log(·) M⁻¹ᐟ² z] = tr log(·), and for one probe

      zᵀM^(-1/2) f(M^(-1/2)AM^(-1/2)) M^(-1/2)z ≈ ‖z‖²_M⁻¹ e₁ᵀ f(T) e₁
                                                    (label ``slq-quadrature``)

  with T the Lanczos tridiagonal matrix read off the probe's own CG run:
  T₀₀ = 1/α₀, Tᵢᵢ = 1/αᵢ + βᵢ₋₁/αᵢ₋₁, Tᵢ,ᵢ₊₁ = √βᵢ/αᵢ (label ``cg-lanczos``);
- tr(A⁻¹ ∂K/∂log θ) by the same probes: E[(A⁻¹z)ᵀ ∂K (M⁻¹z)] = tr(∂K A⁻¹)
  since E[zzᵀ] = M (label ``hutchinson-trace``), one more streamed round; or
  by Hutch++ (Meyer, Musco, Musco & Woodruff 2021; label ``hutchpp-trace``)
  applied to the matrix these probes sample, G = M^(1/2) A⁻¹∂K M^(-1/2) (the
  same trace; u = M^(-1/2)z is standard normal): Q an orthonormal basis of
  M^(-1/2)[∂K_p M^(-1/2)S] (S Gaussian, n_probes // 3 columns, one streamed
  round before the solve; G ≈ M^(-1/2)∂K M^(-1/2) where M ≈ A), the part
  tr(QᵀGQ) exact with A⁻¹M^(1/2)Q solved in the same CG run, plus the probe
  average over the deflated remainder (I − QQᵀ)u.

The probes, α and A⁻¹M^(1/2)Q are solved together (one product per iteration serves
every column). The solve runs on the shared runtime (``runtime.run_loop``):
a Record per CG iteration, checkpoints in the fit store, resume; tasks read
X from the store, so a worker lost mid-solve changes nothing. The
preconditioner's rank may be "auto" (``cg.auto_pivoted_cholesky``). This is
``backends.dask.GaussianProcessRegressor(solver="cg")`` (``fit_matrix_free``);
its ``fit_info_`` holds the estimates at the fitted θ with their standard
errors, and its predictive variance is ``backends.dask.gp_variance``'s.

Accuracy against the exact evidence and gradient (dense Cholesky) at N = 4000,
D = 5, 1.0 * RBF(0.2), σ² = 0.05, rank 100, CG tol 1e-6; root-mean-square
relative errors over four probe seeds (``benchmarks/bench_dask_gp_matrix_free.py
--part accuracy``, 2026-11-24, shared machine; ~80 CG iterations each):

    estimator    probes  CG columns  log p    log|A|   ∂/∂log c  ∂/∂log γ  s/eval
    hutchinson      4          5      1.5e-2   3.3e-3   3.0e-2    6.1e-2       17
    hutchinson     16         17      6.4e-3   1.4e-3   1.2e-2    1.3e-2       23
    hutchinson     64         65      5.2e-3   1.1e-3   1.4e-2    2.3e-2       66
    hutch++         4          7      1.5e-2   3.3e-3   2.9e-2    5.9e-2       95
    hutch++        16         27      6.4e-3   1.4e-3   1.1e-2    1.4e-2      148
    hutch++        64        107      5.2e-3   1.1e-3   1.6e-2    2.0e-2      301

The error is random, of the order of the standard errors that ``evaluate``
reports (``logdet_std_error``, ``gradient_std_error``), and falls as 1/√probes
up to the noise of a four-seed RMS (itself uncertain by about a third): with
64 probes log|A|'s standard error is about 8 (8e-4 relative), and the four
seeds' errors were +9.7, −18.5, −3.1 and +10.5 (a dense check, the same
probes, CG to 1e-6 and to 1e-10 alike: no bias beyond the probes' noise).
Both estimators use the same probes for log|A|, so they differ in the
gradient only; Hutch++ gains nothing here, for it deflates a spectrum the
preconditioned probes have already flattened. Exact values: log p = 1136.11,
log|A| = −10560.26, gradient (−164.47, −517.50). The seconds per evaluation
are on a loaded machine, the Hutch++ rows in a later run under about twice
the load, so compare them only within a row group.

Supported kernels: ``RBF`` and ``c * RBF`` (``Scaled``), whose derivative
tiles are elementwise maps of the kernel tile: ∂K/∂log c = K and
∂K/∂log γ = K ∘ log(K/c).
"""

import pathlib
import shutil
import tempfile
import time
import weakref

import numpy as np
import scipy.sparse
from scipy.linalg import eigh_tridiagonal, qr

from backends.dask import cg as _cg
from backends.dask.blocks import kernel_block, reusable_buffer
from backends.dask.gp_variance import check_predict_args
from backends.dask.runtime import FitStore, map_chunks, run_keyed_loop
from kernelref._validation import (
    check_integer,
    check_n_features,
    check_positive,
    check_samples,
    check_targets,
    evaluate_kernel,
    record_n_features,
)

__all__ = [
    "MatrixFreeEvidence",
    "TRACE_ESTIMATORS",
    "check_matrix_free_args",
    "fit_info",
    "fit_matrix_free",
    "lanczos_tridiagonal",
    "nystrom_gp_mean",
    "predict_mean",
    "slq_log_quadrature",
]

LOG_2PI = np.log(2.0 * np.pi)
TRACE_ESTIMATORS = ("hutchinson", "hutch++")

#: Test rows per block in ``predict_mean``: k(X*, X) is formed this many rows at
#: a time, so prediction needs O(N) memory per block, not O(N·N*).
PREDICT_ROWS = 256


def rbf_parts(kernel):
    """(scale c, the RBF, names of the free hyperparameters in θ order)."""
    from kernelref.kernels.compose import Scaled
    from kernelref.kernels.vector import RBF

    if type(kernel) is RBF:
        return 1.0, kernel, [name for name, _ in kernel.hyperparameters]
    if type(kernel) is Scaled and type(kernel.kernel) is RBF:
        own = [name for name, _ in kernel._own()]
        inner = [name for name, _ in kernel.kernel.hyperparameters]
        return float(kernel.scale), kernel.kernel, own + inner
    raise ValueError(
        f"the matrix-free GP (solver='cg') supports kernel=RBF(...) or c * RBF(...); "
        f"got {kernel!r}. Use the exact path (solver='cholesky') for other kernels."
    )


def lanczos_tridiagonal(alphas, betas):
    """(diagonal, off-diagonal) of T from one column's CG coefficients
    (``cg-lanczos``)."""
    alphas = alphas[np.isfinite(alphas)]
    k = len(alphas)
    betas = betas[: k - 1]
    diagonal = 1.0 / alphas
    diagonal[1:] += betas / alphas[:-1]
    return diagonal, np.sqrt(betas) / alphas[:-1]


def slq_log_quadrature(alphas, betas, norm_sq, steps=None):
    """‖z‖²_M⁻¹ e₁ᵀ log(T) e₁ for one probe (``slq-quadrature``), T truncated to
    `steps`."""
    diagonal, off = lanczos_tridiagonal(alphas, betas)
    if steps is not None:
        diagonal, off = diagonal[:steps], off[: max(steps - 1, 0)]
    theta, V = eigh_tridiagonal(diagonal, off)
    return norm_sq * np.sum(V[0] ** 2 * np.log(theta))


def derivative_rows(ref, i, W, rbf, scale, shift, names):
    """Worker task: rows i of (∂K/∂log θ_p) W for each free hyperparameter p."""
    X_i, x_norms = _cg.centred_chunk(ref, i, shift)
    outs = [np.zeros((X_i.shape[0], W.shape[1])) for _ in names]
    buffer = reusable_buffer(_cg.TILE_ROWS * _cg.TILE_COLS)
    log_buffer = np.empty(_cg.TILE_ROWS * _cg.TILE_COLS)
    tiny = np.finfo(float).tiny
    for j in range(ref.n_chunks):
        X_j, y_norms = _cg.centred_chunk(ref, j, shift)
        W_j = W[ref.rows(j)]
        for c0 in range(0, X_j.shape[0], _cg.TILE_COLS):
            cols = slice(c0, c0 + _cg.TILE_COLS)
            for r0 in range(0, X_i.shape[0], _cg.TILE_ROWS):
                rows = slice(r0, r0 + _cg.TILE_ROWS)
                E = kernel_block(
                    rbf, X_i[rows], X_j[cols], buffer, x_norms[rows], y_norms[cols]
                )
                for out, name in zip(outs, names):
                    if name == "scale":  # ∂K/∂log c = c E
                        out[rows] += scale * (E @ W_j[cols])
                    else:  # ∂K/∂log γ = c E ∘ log E
                        L = log_buffer[: E.size].reshape(E.shape)
                        np.maximum(E, tiny, out=L)
                        np.log(L, out=L)
                        L *= E
                        out[rows] += scale * (L @ W_j[cols])
    return np.stack(outs)


def hutchpp_traces(dK_Q, AQ, dK_W, U):
    """Hutch++ (``hutchpp-trace``): tr(A⁻¹∂K_p) = Σ_k (A⁻¹M^½q_k)ᵀ ∂K_p M^-½q_k
    plus the probe average of (A⁻¹M^½P⊥u)ᵀ ∂K_p M^-½P⊥u, P⊥ = I − QQᵀ; returns
    (exact part (p,), samples of the remainder (p, m)). With Q empty this is
    Hutchinson's (``hutchinson-trace``)."""
    exact = np.einsum("pnk,nk->p", dK_Q, AQ)
    return exact, np.einsum("pnj,nj->pj", dK_W, U)


class PreconditionerPower:
    """V ↦ M^a V for M = LLᵀ + σ²I, from the eigenvectors of LLᵀ: with
    LᵀL = VΣ²Vᵀ and U = LVΣ⁻¹, M^a = σ^(2a)(I − UUᵀ) + U (Σ² + σ²I)^a Uᵀ."""

    def __init__(self, L, noise):
        s2, V = np.linalg.eigh(L.T @ L)
        keep = s2 > 1e-12 * max(s2.max(initial=0.0), noise)
        self.U = L @ (V[:, keep] / np.sqrt(s2[keep]))
        self.s2, self.noise = s2[keep], noise

    def __call__(self, a, V):
        UV = self.U.T @ V
        shift = (self.s2 + self.noise) ** a
        return self.noise**a * (V - self.U @ UV) + self.U @ (shift[:, None] * UV)


class MatrixFreeEvidence:
    """log p(t | X, θ) and its gradient for a GP on a fit store, matrix-free.

    ``n_probes`` probes, ``lanczos_steps`` (None: every CG step of the probe's
    run) for the quadrature, CG to relative residual ``tol``; the preconditioner
    has rank ``rank`` (an int, or "auto": ``cg.auto_pivoted_cholesky``). The
    probes' random numbers are fixed by ``random_state`` and reused at every θ
    (a smooth estimate along an optimisation), and α is warm started from the
    previous evaluation. ``trace_estimator`` is "hutchinson" (the probes of the
    log-determinant, ``hutchinson-trace``) or "hutch++" (those probes, whitened
    to u = M^(-1/2)z, deflated by an orthonormal basis Q of the ranges of
    M^(-1/2)∂K_p M^(-1/2)S, S with n_probes // 3 columns, whose part of the
    trace is exact, ``hutchpp-trace``).

    The CG solve of each evaluation runs under ``runtime.run_loop`` in the
    store (checkpoint ``"cg"``, keyed by θ): ``progress`` gets a Record per CG
    iteration (measure: the largest relative residual), and an interrupted
    solve resumes from its checkpoint if ``resume``. After ``evaluate``,
    ``alpha``, ``n_iter`` (CG iterations), ``rank_`` (the preconditioner's),
    ``n_columns`` (right-hand sides of the solve), ``logdet`` and the
    standard errors of the probe averages (``logdet_std_error``;
    ``gradient_std_error`` per component, of the gradient) hold the last
    results: log p's error bar is half the log-determinant's; ``seconds``
    the time of each part (preconditioner, Hutch++ sketch, CG, gradient round).
    """

    def __init__(
        self,
        client,
        store,
        X,
        t,
        noise,
        n_probes=10,
        lanczos_steps=None,
        tol=1e-6,
        rank=100,
        max_iter=_cg.DEFAULT_MAX_ITER,
        random_state=0,
        trace_estimator="hutchinson",
        progress=False,
        resume=True,
        checkpoint_seconds=5.0,
    ):
        if np.ndim(t) != 1:
            raise ValueError(
                "the matrix-free GP takes one target column; got t of "
                f"shape {np.shape(t)}. Fit one model per column."
            )
        if trace_estimator not in TRACE_ESTIMATORS:
            raise ValueError(
                f"trace_estimator must be one of {TRACE_ESTIMATORS}; "
                f"got {trace_estimator!r}."
            )
        self.client, self.store, self.X, self.t = client, store, X, np.asarray(t, float)
        self.noise, self.n_probes, self.lanczos_steps = noise, n_probes, lanczos_steps
        self.tol, self.rank, self.max_iter = tol, _cg.check_rank(rank), max_iter
        self.trace_estimator, self.progress, self.resume = (
            trace_estimator,
            progress,
            resume,
        )
        self.checkpoint_seconds = checkpoint_seconds
        rng = np.random.default_rng(random_state)
        n = X.shape[0]
        most = _cg.auto_rank_cap(n) if rank == "auto" else rank
        self.G1 = rng.standard_normal((most, n_probes))
        self.G2 = rng.standard_normal((n, n_probes))
        # the sketch of Hutch++ from its own stream: the probes are the same
        # for both estimators
        sketch = np.random.default_rng([int(random_state), 1])
        self.S = sketch.standard_normal((n, max(1, n_probes // 3)))
        self.alpha = None
        # RBF and c·RBF are shift invariant; sparse X is never shifted (CSR)
        self.shift = None if scipy.sparse.issparse(X) else X.mean(axis=0)

    def _derivative_times(self, W, rbf, scale, names):
        """(∂K/∂log θ_p) W for every p, streamed: an array (p, n, k)."""
        parts = map_chunks(
            self.client,
            derivative_rows,
            self.store.x_ref,
            np.ascontiguousarray(W),
            rbf,
            scale,
            self.shift,
            names,
        )
        return np.concatenate(parts, axis=1)

    def _solve(self, kernel, T, M_inv, X0):
        """A⁻¹T by preconditioned CG on the runtime; returns (solver, state)."""
        noise = self.noise
        K_times = _cg.StreamedGram(self.store, kernel, self.client, shift=self.shift)
        solver = _cg.ConjugateGradients(
            lambda V: K_times(V) + noise * V, T, M_inv, self.tol, self.max_iter, X0=X0
        )
        # the checkpoint belongs to one θ and one set of right-hand sides
        key = np.concatenate([kernel.theta, [noise, T.shape[1]]])
        state, _ = run_keyed_loop(
            solver,
            self.store,
            key,
            progress=self.progress,
            resume=self.resume,
            checkpoint_seconds=self.checkpoint_seconds,
            max_iter=None,
            description="GP cg",
            name="cg",
        )
        return solver, state

    def evaluate(self, kernel, eval_gradient=True):
        """(log p, ∂ log p/∂θ) at `kernel`'s θ (the gradient only if asked)."""
        scale, rbf, names = rbf_parts(kernel)
        noise, t, n = self.noise, self.t, len(self.t)
        clock = time.perf_counter()
        L = _cg.preconditioner_factor(kernel, self.X, self.rank, noise)
        M_inv = _cg.WoodburyPreconditioner(L, noise)
        r = self.rank_ = L.shape[1]
        Z = L @ self.G1[:r] + np.sqrt(noise) * self.G2  # z ~ N(0, M)
        # log|M| = n log σ² + log|I + LᵀL/σ²| = (n − r) log σ² + log|LᵀL + σ²I|
        C_diagonal = np.diag(M_inv.C[0])
        logdet_M = (n - r) * np.log(noise) + 2 * np.log(C_diagonal).sum()
        plus = eval_gradient and self.trace_estimator == "hutch++"
        self.seconds = {"preconditioner": time.perf_counter() - clock}
        clock = time.perf_counter()
        if plus:  # Q: an orthonormal basis of the ranges of M^(-1/2) ∂K_p M^(-1/2) S
            M_power = PreconditionerPower(L, noise)
            sketch = self._derivative_times(M_power(-0.5, self.S), rbf, scale, names)
            Y = M_power(-0.5, np.concatenate(list(sketch), axis=1))
            Q = qr(Y, mode="economic")[0]
            Q_right, Q_left = M_power(0.5, Q), M_power(-0.5, Q)
        else:
            Q_right = Q_left = np.zeros((n, 0))
        self.seconds["sketch"] = time.perf_counter() - clock
        clock = time.perf_counter()
        T = np.column_stack([t, Z, Q_right])
        X0 = None  # no product to start with unless α is warm started
        if self.alpha is not None:
            X0 = np.zeros_like(T)
            X0[:, 0] = self.alpha
        solver, state = self._solve(kernel, T, M_inv, X0)
        result = solver.result(state, T.shape, stacklevel=3)
        self.seconds["cg"] = time.perf_counter() - clock
        clock = time.perf_counter()
        self.n_iter, self.n_columns = result.n_iter, T.shape[1]
        # iterations of the mean's column alone (its first run): what warm starts cut
        self.alpha_iterations = int(np.isfinite(state["alphas"][:, 0]).sum())
        m = self.n_probes
        alpha, U, AQ = result.a[:, 0], result.a[:, 1 : 1 + m], result.a[:, 1 + m :]
        quadratures = [
            slq_log_quadrature(
                state["alphas"][:, 1 + j],
                state["betas"][:, 1 + j],
                state["rz0"][1 + j],
                self.lanczos_steps,
            )
            for j in range(m)
        ]
        self.logdet = logdet_M + float(np.mean(quadratures))
        # standard errors of the probe averages: the estimates' own error bars
        self.logdet_std_error = float(np.std(quadratures, ddof=1) / np.sqrt(m))
        self.alpha = alpha
        lml = -0.5 * t @ alpha - 0.5 * self.logdet - 0.5 * n * LOG_2PI
        if not eval_gradient:
            return lml
        W = M_inv(Z)
        if plus:  # deflate u = M^(-1/2)z by Q: M^(±1/2)(I − QQᵀ)u from the columns
            Qu = Q.T @ M_power(-0.5, Z)
            W = W - Q_left @ Qu
            U = U - AQ @ Qu
        dK_W = self._derivative_times(
            np.column_stack([alpha, W, Q_left]), rbf, scale, names
        )
        data_fit = dK_W[:, :, 0] @ alpha
        exact, samples = hutchpp_traces(
            dK_W[:, :, 1 + m :], AQ, dK_W[:, :, 1 : 1 + m], U
        )
        self.gradient_std_error = 0.5 * np.std(samples, axis=1, ddof=1) / np.sqrt(m)
        self.seconds["gradient"] = time.perf_counter() - clock
        return lml, 0.5 * data_fit - 0.5 * (exact + samples.mean(axis=1))


# -- the public estimator's solver="cg" ----------------------------------------------
def check_matrix_free_args(est):
    """The matrix-free arguments of ``GaussianProcessRegressor``, before any work."""
    if est.solver not in ("cholesky", "cg"):
        raise ValueError(
            f"solver must be 'cholesky' (exact, tiled Cholesky) or 'cg' (matrix-free: "
            f"CG, stochastic Lanczos, probes); got {est.solver!r}."
        )
    check_integer(
        est.n_probes,
        "n_probes",
        low=2,
        meaning="It is the number of random probes (at least 2, for an error bar).",
    )
    check_integer(est.max_iter, "max_iter", meaning="It caps the CG iterations.")
    check_integer(
        est.probe_seed, "probe_seed", low=0, meaning="It seeds the probes' generator."
    )
    _cg.check_rank(est.rank)
    if est.lanczos_steps is not None:
        check_integer(
            est.lanczos_steps,
            "lanczos_steps",
            meaning="It truncates the Lanczos quadrature (None: all steps).",
        )
    tol = check_positive(est.tol, "tol", meaning="It is the CG relative residual.")
    if tol >= 1:
        raise ValueError(f"tol must be < 1 (a relative residual); got {tol!r}.")
    if est.trace_estimator not in TRACE_ESTIMATORS:
        raise ValueError(
            f"trace_estimator must be 'hutchinson' or 'hutch++'; "
            f"got {est.trace_estimator!r}."
        )
    predict_tol = est.tol if est.predict_tol is None else est.predict_tol
    check_predict_args(predict_tol, est.predict_batch)


class EvaluationRecord:
    """Every evidence evaluation of one ML-II fit, checkpointed as it is made.

    L-BFGS-B is deterministic, so a resumed fit replays the optimiser and
    answers the evaluations already made from the record; α of the last one
    computed is kept for the warm start.
    """

    def __init__(self, store, resume):
        self.store = store
        loaded = store.load_state() if resume else None
        if not resume:
            store.discard_state()
            store.discard_state("cg")
        self.r = loaded[0] if loaded is not None else None
        self.n_resumed = 0 if self.r is None else len(self.r["value"])

    def recorded(self, theta, gradient):
        if self.r is None:
            return None
        for k in range(len(self.r["value"])):
            if np.array_equal(self.r["theta"][k], theta):
                g = self.r["gradient"][k]
                if not (gradient and np.isnan(g).any()):
                    return k
        return None

    def add(self, theta, value, gradient, evidence):
        p = len(theta)
        g = np.full(p, np.nan) if gradient is None else np.asarray(gradient, float)
        g_error = (
            np.full(p, np.nan) if gradient is None else evidence.gradient_std_error
        )
        row = {
            "theta": theta,
            "value": value,
            "gradient": g,
            "logdet": evidence.logdet,
            "logdet_std_error": evidence.logdet_std_error,
            "gradient_std_error": g_error,
            "n_iter": evidence.n_iter,
            "n_columns": evidence.n_columns,
            "rank": evidence.rank_,
        }
        if self.r is None:
            self.r = {k: np.zeros((0,) + np.shape(v)) for k, v in row.items()}
        for k, v in row.items():
            self.r[k] = np.concatenate([self.r[k], np.asarray(v, float)[None]])
        self.r["alpha"], self.r["alpha_theta"] = evidence.alpha, np.asarray(theta)
        self.store.save_state(self.r, len(self.r["value"]))


def _reopen(est):
    """The evidence and record of a fitted model loaded from a file or
    unpickled, which carry neither: its fit store reopened, its settings."""
    from backends.dask.cluster import get_client

    store = FitStore.open(est.store_)
    client = get_client(est.address)
    _attach(est, client, store, est.X_train_, est.y_train_, est._noise, False, True)


def _attach(est, client, store, X, t, noise, progress, resume):
    """The estimator's evidence on the fit store (its settings) and the record
    of the evaluations made."""
    est._matrix_free = MatrixFreeEvidence(
        client,
        store,
        X,
        t,
        noise,
        n_probes=est.n_probes,
        lanczos_steps=est.lanczos_steps,
        tol=est.tol,
        rank=est.rank,
        max_iter=est.max_iter,
        random_state=est.probe_seed,
        trace_estimator=est.trace_estimator,
        progress=progress,
        resume=resume,
    )
    est._record = EvaluationRecord(store, resume)


def _evidence(est, kernel, eval_gradient):
    """One evaluation, answered from the record when it was made before."""
    if "_record" not in est.__dict__:
        _reopen(est)
    record, evidence = est._record, est._matrix_free
    theta = kernel.theta
    k = record.recorded(theta, eval_gradient)
    if k is not None:
        value, gradient = record.r["value"][k], record.r["gradient"][k].copy()
        return (value, gradient) if eval_gradient else value
    if evidence.alpha is None and record.r is not None:
        evidence.alpha = record.r["alpha"]  # warm start as the interrupted fit did
    out = evidence.evaluate(kernel, eval_gradient)
    value, gradient = out if eval_gradient else (out, None)
    est.n_evaluations_ += 1
    record.add(theta, float(value), gradient, evidence)
    return out


def _final_evaluation(est, kernel):
    """Index in the record of the evidence and gradient at the fitted θ, with
    α there: evaluated now unless the record holds both (an optimised or
    resumed fit). The gradient costs one streamed round beside the solve."""
    record, theta = est._record, kernel.theta
    k = record.recorded(theta, True)
    if k is not None and np.array_equal(record.r["alpha_theta"], theta):
        return k
    evidence = est._matrix_free
    if evidence.alpha is None and record.r is not None:
        evidence.alpha = record.r["alpha"]  # warm start as the interrupted fit did
    value, gradient = evidence.evaluate(kernel, True)
    est.n_evaluations_ += 1
    record.add(theta, float(value), gradient, evidence)
    return len(record.r["value"]) - 1


def fit_info(est, r, k):
    """``fit_info_``: the estimates at the fitted θ with their error bars
    (standard errors of the probe averages), and what they cost."""
    return {
        "log_marginal_likelihood": float(r["value"][k]),
        "log_marginal_likelihood_std_error": 0.5 * float(r["logdet_std_error"][k]),
        "log_det": float(r["logdet"][k]),
        "log_det_std_error": float(r["logdet_std_error"][k]),
        "gradient": r["gradient"][k].copy(),
        "gradient_std_error": r["gradient_std_error"][k].copy(),
        "n_iter": int(r["n_iter"][k]),
        "n_columns": int(r["n_columns"][k]),
        "n_probes": int(est.n_probes),
        "rank": int(r["rank"][k]),
        "trace_estimator": est.trace_estimator,
        "lanczos_steps": est.lanczos_steps,
        "tol": float(est.tol),
    }


def _store_path(est):
    if est.store is not None:
        return pathlib.Path(est.store)
    directory = tempfile.mkdtemp(prefix="kernelref-gp-cg-")
    weakref.finalize(est, shutil.rmtree, directory, True)
    return pathlib.Path(directory) / "fit.zarr"


def fit_matrix_free(est, X, y):
    """``GaussianProcessRegressor.fit`` with ``solver="cg"``: ML-II on the
    matrix-free evidence, then α at the chosen θ by CG."""
    from backends.dask.cluster import get_client
    from backends.dask.gp.regression import check_backend_args, kernel_identity

    check_matrix_free_args(est)
    kernel, noise = est._validate_params()
    check_backend_args(est)
    rbf_parts(kernel)
    X = check_samples(X, kernel, "X", accept_sparse="kernel")  # CSR kept
    t = check_targets(y, X.shape[0], "y")
    if t.ndim != 1:
        raise ValueError(
            f"y must be 1-D for solver='cg'; got shape {t.shape}. Fit one model "
            "per target column, or use solver='cholesky'."
        )
    y_mean, y_std = (t.mean(), t.std() or 1.0) if est.normalize_y else (0.0, 1.0)
    t = (t - y_mean) / y_std
    client = get_client(est.address)
    identity = {
        "estimator": "backends.dask.GaussianProcessRegressor",
        "solver": "cg",
        "kernel": kernel_identity(kernel),
        "noise": noise,
        "optimizer": est.optimizer,
        "n_restarts": est.n_restarts,
        "normalize_y": bool(est.normalize_y),
        "random_state": repr(est.random_state),
        "n_probes": est.n_probes,
        "lanczos_steps": est.lanczos_steps,
        "tol": float(est.tol),
        "rank": est.rank,
        "max_iter": est.max_iter,
        "probe_seed": est.probe_seed,
        "trace_estimator": est.trace_estimator,
    }
    store = FitStore.prepare(
        _store_path(est),
        X,
        arrays={"t": t},
        identity=identity,
        chunk_size=est.chunk_size,
        client=client,
    )
    _attach(est, client, store, X, t, noise, est.progress, est.resume)
    est.n_evaluations_ = 0
    if est.optimizer is not None and kernel.theta.size:
        kernel = kernel.clone_with_theta(est._maximise_evidence(kernel, X, t, noise))
    k = _final_evaluation(est, kernel)
    r = est._record.r
    est.kernel_, est._noise, est.alpha_ = kernel, noise, r["alpha"]
    est._y_mean, est._y_std = y_mean, y_std
    est.fit_info_ = fit_info(est, r, k)
    est.log_marginal_likelihood_value_ = est.fit_info_["log_marginal_likelihood"]
    est.log_det_, est.n_iter_ = est.fit_info_["log_det"], est.fit_info_["n_iter"]
    est.n_resumed_ = est._record.n_resumed
    est.store_, est.fit_solver_ = str(store.path), "cg"
    est._fit_store = store  # for the predictive variance (``gp_variance``)
    est.X_train_, est.y_train_ = X.copy(), t
    record_n_features(est, X)
    return est


def predict_mean(est, X):
    """The predictive mean k*ᵀα (``gp-predictive-mean``) of a ``solver="cg"`` fit,
    k(X*, X) formed ``PREDICT_ROWS`` test rows at a time. The variance is
    ``gp_variance.predict``'s."""
    X = check_samples(X, est.kernel_, "X", accept_sparse="kernel")
    check_n_features(X, est.n_features_in_)
    mean = np.concatenate(
        [
            evaluate_kernel(est.kernel_, X[s : s + PREDICT_ROWS], est.X_train_)
            @ est.alpha_
            for s in range(0, X.shape[0], PREDICT_ROWS)
        ]
    )
    return est._y_mean + est._y_std * mean


def nystrom_gp_mean(X, y, kernel, noise, n_centres, **options):
    """The GP posterior mean on M Nyström centres (subset of regressors).

    k(x, C)(K_MN K_NM + σ²K_MM)⁻¹K_MN t is Nyström kernel ridge with λ = σ²
    (``nystrom-normal``), so this fits ``backends.dask.KernelRidge(solver=
    "nystrom")`` with the GP's kernel and noise; ``options`` are its other
    arguments (``centres``, ``chunk_size``, ``tol``, ``store``, ...). With M = N
    the mean is the exact GP mean k*ᵀ(K + σ²I)⁻¹t. Returns the fitted estimator;
    its ``predict`` is the mean.
    """
    from backends.dask.ridge import KernelRidge

    return KernelRidge(
        lam=noise, kernel=kernel, solver="nystrom", n_centres=n_centres, **options
    ).fit(X, y)
