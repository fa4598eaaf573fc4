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

The probes and α are solved together (one product per iteration serves every
column). Supported kernels: ``RBF`` and ``c * RBF`` (``Scaled``), whose
derivative tiles are elementwise maps of the kernel tile: ∂K/∂log c = K and
∂K/∂log γ = K ∘ log(K/c).
"""

import numpy as np
from scipy.linalg import cho_factor, eigh_tridiagonal

from backends.dask import cg as _cg
from backends.dask.blocks import kernel_block, reusable_buffer
from backends.dask.runtime import map_chunks

__all__ = ["MatrixFreeEvidence", "lanczos_tridiagonal", "slq_log_quadrature"]

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
    ``n_iter`` (CG iterations) and ``logdet`` hold the last results.
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
        traces = np.einsum("pnj,nj->p", dK_W[:, :, 1:], U) / self.n_probes
        return lml, 0.5 * data_fit - 0.5 * traces
