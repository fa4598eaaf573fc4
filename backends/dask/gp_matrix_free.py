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
  since E[zzᵀ] = M (label ``hutchinson-trace``), one more streamed round.

Accuracy, measured against the exact evidence (dense Cholesky) at N = 4000,
D = 5, 1.0 * RBF(0.2), σ² = 0.05, rank 100, CG tol 1e-6, one probe seed per
row (``benchmarks/bench_dask_cg.py --part accuracy``; ~80 CG iterations):

    probes   rel. error log p   rel. error log|A|   max rel. error of the gradient
       4         1.0e-2              2.2e-3                 2.9e-2
      16         6.3e-3              1.4e-3                 7.6e-3
      64         4.3e-3              9.2e-4                 2.9e-2

The error is random, of the order of the standard errors that ``evaluate``
reports (``logdet_std_error``, ``gradient_std_error``); with one seed per row
the gradient's column is noisy. Hutch++ is not implemented.

The probes and α are solved together (one product per iteration serves every
column). Supported kernels: ``RBF`` and ``c * RBF`` (``Scaled``), whose
derivative tiles are elementwise maps of the kernel tile: ∂K/∂log c = K and
∂K/∂log γ = K ∘ log(K/c).
"""

import pathlib
import shutil
import tempfile
import weakref

import numpy as np
from scipy.linalg import cho_factor, eigh_tridiagonal

from backends.dask import cg as _cg
from backends.dask.blocks import kernel_block, reusable_buffer
from backends.dask.runtime import FitStore, map_chunks
from kernelref._validation import (
    check_integer,
    check_positive,
    check_samples,
    check_targets,
    record_n_features,
)
from kernelref.gp import GaussianProcessRegressor as ReferenceGaussianProcessRegressor

__all__ = [
    "MatrixFreeEvidence",
    "MatrixFreeGaussianProcessRegressor",
    "lanczos_tridiagonal",
    "slq_log_quadrature",
    "nystrom_gp_mean",
]

LOG_2PI = np.log(2.0 * np.pi)


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
    """(diagonal, off-diagonal) of T from one column's CG coefficients (``cg-lanczos``)."""
    alphas = alphas[np.isfinite(alphas)]
    k = len(alphas)
    betas = betas[: k - 1]
    diagonal = 1.0 / alphas
    diagonal[1:] += betas / alphas[:-1]
    return diagonal, np.sqrt(betas) / alphas[:-1]


def slq_log_quadrature(alphas, betas, norm_sq, steps=None):
    """‖z‖²_M⁻¹ e₁ᵀ log(T) e₁ for one probe (``slq-quadrature``), T truncated to `steps`."""
    diagonal, off = lanczos_tridiagonal(alphas, betas)
    if steps is not None:
        diagonal, off = diagonal[:steps], off[: max(steps - 1, 0)]
    theta, V = eigh_tridiagonal(diagonal, off)
    return norm_sq * np.sum(V[0] ** 2 * np.log(theta))


def derivative_rows(ref, i, W, rbf, scale, shift, names):
    """Worker task: rows i of (∂K/∂log θ_p) W for each free hyperparameter p."""
    X_i, x_norms = _cg.centred_chunk(ref, i, shift)
    outs = [np.zeros((len(X_i), W.shape[1])) for _ in names]
    buffer = reusable_buffer(_cg.TILE_ROWS * _cg.TILE_COLS)
    log_buffer = np.empty(_cg.TILE_ROWS * _cg.TILE_COLS)
    tiny = np.finfo(float).tiny
    for j in range(ref.n_chunks):
        X_j, y_norms = _cg.centred_chunk(ref, j, shift)
        W_j = W[ref.rows(j)]
        for c0 in range(0, len(X_j), _cg.TILE_COLS):
            cols = slice(c0, c0 + _cg.TILE_COLS)
            for r0 in range(0, len(X_i), _cg.TILE_ROWS):
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


class MatrixFreeEvidence:
    """log p(t | X, θ) and its gradient for a GP on a fit store, matrix-free.

    ``n_probes`` probes, ``lanczos_steps`` (None: every CG step of the probe's
    run) for the quadrature, CG to relative residual ``tol``; the preconditioner
    has rank ``rank``. The probes' random numbers are fixed by ``random_state``
    and reused at every θ (a smooth estimate along an optimisation), and α is
    warm started from the previous evaluation. After ``evaluate``, ``alpha``,
    ``n_iter`` (CG iterations), ``logdet`` and the standard errors of the probe
    averages (``logdet_std_error``; ``gradient_std_error`` per component, of
    the gradient) hold the last results: log p's error bar is half the
    log-determinant's.
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
    ):
        if np.ndim(t) != 1:
            raise ValueError(
                "the matrix-free GP takes one target column; got t of "
                f"shape {np.shape(t)}. Fit one model per column."
            )
        self.client, self.store, self.X, self.t = client, store, X, np.asarray(t, float)
        self.noise, self.n_probes, self.lanczos_steps = noise, n_probes, lanczos_steps
        self.tol, self.rank, self.max_iter = tol, rank, max_iter
        rng = np.random.default_rng(random_state)
        self.G1 = rng.standard_normal((rank, n_probes))
        self.G2 = rng.standard_normal((len(X), n_probes))
        self.alpha = None
        self.shift = X.mean(axis=0)

    def evaluate(self, kernel, eval_gradient=True):
        """(log p, ∂ log p/∂θ) at `kernel`'s θ (the gradient only if asked)."""
        scale, rbf, names = rbf_parts(kernel)
        noise, t, n = self.noise, self.t, len(self.t)
        L = _cg.pivoted_cholesky(kernel, self.X, self.rank)
        M_inv = _cg.WoodburyPreconditioner(L, noise)
        r = L.shape[1]
        Z = L @ self.G1[:r] + np.sqrt(noise) * self.G2  # z ~ N(0, M)
        C = L.T @ L / noise
        C.flat[:: r + 1] += 1.0
        logdet_M = (
            n * np.log(noise) + 2 * np.log(np.diag(cho_factor(C, lower=True)[0])).sum()
        )
        K_times = _cg.StreamedGram(self.store, kernel, self.client, shift=self.shift)
        T = np.column_stack([t, Z])
        X0 = np.zeros_like(T)
        if self.alpha is not None:
            X0[:, 0] = self.alpha
        solver = _cg.ConjugateGradients(
            lambda V: K_times(V) + noise * V, T, M_inv, self.tol, self.max_iter, X0=X0
        )
        state = solver.start()
        while not solver.done(state):
            state = solver.step(state)
        result = solver.result(state, T.shape, stacklevel=3)
        self.n_iter = result.n_iter
        # iterations of the mean's column alone (its first run): what warm starts cut
        self.alpha_iterations = int(np.isfinite(state["alphas"][:, 0]).sum())
        A_inv = result.a
        alpha, U = A_inv[:, 0], A_inv[:, 1:]
        quadratures = [
            slq_log_quadrature(
                state["alphas"][:, 1 + j],
                state["betas"][:, 1 + j],
                state["rz0"][1 + j],
                self.lanczos_steps,
            )
            for j in range(self.n_probes)
        ]
        self.logdet = logdet_M + float(np.mean(quadratures))
        # standard errors of the probe averages: the estimates' own error bars
        m = self.n_probes
        self.logdet_std_error = float(np.std(quadratures, ddof=1) / np.sqrt(m))
        self.alpha = alpha
        lml = -0.5 * t @ alpha - 0.5 * self.logdet - 0.5 * n * LOG_2PI
        if not eval_gradient:
            return lml
        W = np.column_stack([alpha, M_inv(Z)])
        parts = map_chunks(
            self.client,
            derivative_rows,
            self.store.x_ref,
            W,
            rbf,
            scale,
            self.shift,
            names,
        )
        dK_W = np.concatenate(parts, axis=1)  # (p, n, 1 + m)
        data_fit = dK_W[:, :, 0] @ alpha
        samples = np.einsum("pnj,nj->pj", dK_W[:, :, 1:], U)
        self.gradient_std_error = 0.5 * np.std(samples, axis=1, ddof=1) / np.sqrt(m)
        return lml, 0.5 * data_fit - 0.5 * samples.mean(axis=1)


class MatrixFreeGaussianProcessRegressor(ReferenceGaussianProcessRegressor):
    """GP regression with ML-II, matrix-free (the ``solver="cg"`` path).

    The reference estimator (``kernelref.gp``) with ``_evidence`` replaced by
    ``MatrixFreeEvidence``: the inputs go into a fit store once, every
    evaluation streams kernel tiles, α is warm started from the previous θ and
    the probes are the same at every θ. ``predict`` returns the mean k*ᵀα
    (``gp-predictive-mean``); variances need the exact path.

    Parameters beyond the reference's: ``n_probes``, ``lanczos_steps``, ``tol``
    (CG), ``rank`` (pivoted-Cholesky preconditioner), ``max_iter``, ``store``,
    ``chunk_size``, ``address``.

    Attributes beyond the reference's: ``n_evaluations_``, ``n_iter_`` (CG
    iterations of the last evaluation), ``log_det_`` (its estimate of
    log|K + σ²I|).
    """

    def __init__(
        self,
        kernel=None,
        noise=1e-10,
        optimizer="L-BFGS-B",
        n_restarts=0,
        normalize_y=False,
        random_state=None,
        store=None,
        chunk_size=4096,
        address=None,
        n_probes=10,
        lanczos_steps=None,
        tol=1e-6,
        rank=100,
        max_iter=_cg.DEFAULT_MAX_ITER,
    ):
        super().__init__(
            kernel=kernel,
            noise=noise,
            optimizer=optimizer,
            n_restarts=n_restarts,
            normalize_y=normalize_y,
            random_state=random_state,
        )
        self.store = store
        self.chunk_size = chunk_size
        self.address = address
        self.n_probes = n_probes
        self.lanczos_steps = lanczos_steps
        self.tol = tol
        self.rank = rank
        self.max_iter = max_iter

    def _check_matrix_free_args(self):
        for name in ("n_probes", "rank", "max_iter", "chunk_size"):
            check_integer(
                getattr(self, name), name, meaning="It must be a positive count."
            )
        if self.lanczos_steps is not None:
            check_integer(
                self.lanczos_steps,
                "lanczos_steps",
                meaning="It truncates the Lanczos quadrature (None: all steps).",
            )
        tol = check_positive(self.tol, "tol", meaning="It is the CG relative residual.")
        if tol >= 1:
            raise ValueError(f"tol must be < 1 (a relative residual); got {tol!r}.")

    def _evidence(self, kernel, X, t, noise, eval_gradient):
        self.n_evaluations_ += 1
        return self._matrix_free.evaluate(kernel, eval_gradient)

    def fit(self, X, y):
        """ML-II on the matrix-free evidence, then α at the chosen θ."""
        from backends.dask.cluster import get_client

        self._check_matrix_free_args()
        kernel, noise = self._validate_params()
        rbf_parts(kernel)
        X = check_samples(X, kernel, "X")
        t = check_targets(y, X.shape[0], "y")
        if t.ndim != 1:
            raise ValueError(
                f"y must be 1-D for the matrix-free GP; got shape {t.shape}."
            )
        y_mean, y_std = (t.mean(), t.std() or 1.0) if self.normalize_y else (0.0, 1.0)
        t = (t - y_mean) / y_std
        client = get_client(self.address)
        path = None if self.store is None else pathlib.Path(self.store)
        if path is None:
            directory = tempfile.mkdtemp(prefix="kernelref-gp-cg-")
            weakref.finalize(self, shutil.rmtree, directory, True)
            path = pathlib.Path(directory) / "fit.zarr"
        store = FitStore.prepare(
            path,
            X,
            identity={"estimator": "gp_matrix_free"},
            chunk_size=self.chunk_size,
            client=client,
        )
        seed = 0 if self.random_state is None else self.random_state
        self._matrix_free = MatrixFreeEvidence(
            client,
            store,
            X,
            t,
            noise,
            self.n_probes,
            self.lanczos_steps,
            self.tol,
            self.rank,
            self.max_iter,
            seed,
        )
        self.n_evaluations_ = 0
        if self.optimizer is not None and kernel.theta.size:
            kernel = kernel.clone_with_theta(
                self._maximise_evidence(kernel, X, t, noise)
            )
        lml = self._evidence(kernel, X, t, noise, False)
        self.kernel_, self._noise, self.alpha_ = kernel, noise, self._matrix_free.alpha
        self._y_mean, self._y_std = y_mean, y_std
        self.log_marginal_likelihood_value_ = lml
        self.log_det_, self.n_iter_ = self._matrix_free.logdet, self._matrix_free.n_iter
        self.X_train_, self.y_train_ = X.copy(), t
        record_n_features(self, X)
        return self

    def predict(self, X, return_std=False, return_cov=False):
        if return_std or return_cov:
            raise NotImplementedError(
                "the matrix-free GP predicts the mean only; for return_std or return_cov "
                "use backends.dask.gp.GaussianProcessRegressor (the exact path)."
            )
        return super().predict(X)

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_matrix_free", None)
        return state


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
