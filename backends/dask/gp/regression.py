"""Exact Gaussian-process regression on a Dask cluster.

``GaussianProcessRegressor`` is the reference estimator (``kernelref.gp``) with
its linear algebra moved to the workers: the lower Cholesky factor L of
K + σ²I is computed tile by tile into a Zarr array in the fit store, the kernel
tiles evaluated on the workers from the stored inputs (``linalg.tiled_cholesky``
on ``KernelTiles``). Then

- α = (K + σ²I)⁻¹ t by blocked substitution (GPML Alg. 2.1, line 3);
- log p(t | X) = −½ tᵀα − Σ log L_ii − n/2 log 2π (label ``gp-lml``), since
  log|K + σ²I| = 2 Σ log L_ii;
- ∂ log p/∂ log θ_j = ½ tr((ααᵀ − (K + σ²I)⁻¹) ∂K/∂ log θ_j) (label
  ``gp-lml-grad``), one task per column block of the inverse;
- the predictive mean k*ᵀα and variance k** − ‖L⁻¹k*‖² (labels
  ``gp-predictive-mean``, ``gp-predictive-var``) by forward substitution.

ML-II is the reference's own (``_maximise_evidence``: L-BFGS-B with restarts);
only ``_evidence`` is replaced, and the factor is reused while θ is unchanged.
Every evaluation is recorded in the fit store, so an interrupted fit resumes.
"""

import numpy as np
from scipy.linalg import LinAlgError

from backends.dask import gp_matrix_free as matrix_free
from backends.dask import gp_variance
from backends.dask.gp.common import (
    ClusterFitMixin,
    check_backend_args,
    cross_blocks,
    cross_means,
    ensure_factor,
    forward_norms_on,
    kernel_identity,
    prediction_client,
)
from backends.dask.gp.tiles import KernelTiles
from kernelref._validation import (
    check_n_features,
    check_samples,
    check_targets,
    record_n_features,
)
from kernelref.gp import GaussianProcessRegressor as ReferenceGaussianProcessRegressor
from kernelref.gp import NotPositiveDefiniteError

# check_backend_args and kernel_identity are imported from here by other modules
__all__ = ["GaussianProcessRegressor", "check_backend_args", "kernel_identity"]

LOG_2PI = np.log(2.0 * np.pi)


def log_evidence(t, alpha, log_diagonal_sum):
    """log p(t | X) = −½ tᵀα − Σ log L_ii − n/2 log 2π per target (label ``gp-lml``)."""
    n, n_targets = len(t), 1 if t.ndim == 1 else t.shape[1]
    return float(
        -0.5 * np.sum(t * alpha)
        - n_targets * log_diagonal_sum
        - 0.5 * n_targets * n * LOG_2PI
    )


def _factor_key(kernel, noise):
    return {"theta": kernel.theta.tolist(), "noise": noise}


class GaussianProcessRegressor(ClusterFitMixin, ReferenceGaussianProcessRegressor):
    """Exact GP regression with ML-II, the N × N algebra tiled on a Dask cluster.

    Parameters
    ----------
    kernel, noise, optimizer, n_restarts, normalize_y, random_state
        As in ``kernelref.gp.GaussianProcessRegressor``.
    store : path or None
        Directory of the fit store (inputs, targets, the factor, the record of
        evidence evaluations); None: a temporary directory.
    chunk_size : int
        Rows per chunk, and the edge of the factor's tiles.
    address : str or None
        Scheduler address; None uses the active client or an embedded cluster.
    progress : None, False or callable
        Progress of ML-II: a bar on a terminal, nothing, or a callable given a
        ``runtime.Record`` after every evaluation computed.
    resume : bool
        Continue from the store's record of evaluations.
    solver : "cholesky" or "cg"
        "cholesky" (default): the exact path above. "cg": matrix-free
        (``backends.dask.gp_matrix_free``): CG with a pivoted-Cholesky
        preconditioner, log|K + σ²I| by stochastic Lanczos quadrature, gradient
        traces by probes; RBF or c·RBF kernels, one target; the predictive
        variance by block CG (``backends.dask.gp_variance``).
    n_probes, lanczos_steps, tol, rank, max_iter, probe_seed, trace_estimator
        The matrix-free path's settings (``solver="cg"`` only): random probes
        (≥ 2), Lanczos steps of the quadrature (None: every CG step), CG relative
        residual, preconditioner rank (int or "auto"), CG iteration cap, seed of
        the probes, and "hutchinson" or "hutch++" for the gradient's traces.
    predict_tol, predict_batch
        ``solver="cg"`` only: the CG relative residual of the predictive
        variance's solve (None: ``tol``; each variance is then an upper bound
        too large by at most (predict_tol·‖k*‖)²/σ²), and the test points solved
        together (None: as many as keep the CG state near 256 MiB; return_cov
        solves all test points at once, so at most this many). The solve runs
        on the cluster if one is running, else in this process for at most
        ``gp_variance.LOCAL_ROWS`` (4096) training rows, else on the embedded
        cluster (``gp_variance.variance_client``).

    Attributes
    ----------
    kernel_, alpha_, log_marginal_likelihood_value_, X_train_, y_train_
        As in the reference. There is no ``L_``: ``factor_`` is the Zarr array of
        the lower Cholesky factor of K + σ²I (that of K/σ² + I is factor_/σ).
        scipy.sparse X (for a kernel that takes it) stays sparse with either
        solver: the fit store holds it as CSR and the tiles and streamed blocks
        come from the kernel's sparse products, unshifted.
    n_evaluations_, n_resumed_ : int
        Evidence evaluations computed in this fit, and replayed from the store.
    fit_info_ : dict (``solver="cg"`` only)
        The estimates at the fitted θ and their error bars (standard errors of
        the probe averages): ``log_marginal_likelihood`` (and ``_std_error``),
        ``log_det`` (and ``_std_error``), ``gradient`` (and ``_std_error``),
        with ``n_iter`` (CG iterations), ``n_columns`` (right-hand sides),
        ``n_probes``, ``rank`` (the preconditioner's), ``trace_estimator``,
        ``lanczos_steps`` and ``tol``.
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
        chunk_size=1024,
        address=None,
        progress=None,
        resume=True,
        solver="cholesky",
        n_probes=10,
        lanczos_steps=None,
        tol=1e-6,
        rank="auto",
        max_iter=1000,
        probe_seed=0,
        trace_estimator="hutchinson",
        predict_tol=None,
        predict_batch=None,
    ):
        super().__init__(
            kernel=kernel,
            noise=noise,
            optimizer=optimizer,
            n_restarts=n_restarts,
            normalize_y=normalize_y,
            random_state=random_state,
        )
        self._set_backend_params(store, chunk_size, address, progress, resume)
        self.solver = solver
        self.n_probes = n_probes
        self.lanczos_steps = lanczos_steps
        self.tol = tol
        self.rank = rank
        self.max_iter = max_iter
        self.probe_seed = probe_seed
        self.trace_estimator = trace_estimator
        self.predict_tol = predict_tol
        self.predict_batch = predict_batch

    _transient = ("_fit", "_matrix_free", "_record", "_fit_store")

    # -- the evidence on the cluster ---------------------------------------------------
    def _factorise(self, kernel, noise, factor=None, client=None):
        """chol(K + σ²I) at ``kernel`` into the fit's factor (or ``factor``, then
        returned as ``ensure_factor`` returns it)."""
        x_ref = self._fit.store.x_ref if factor is None else self._x_ref
        tiles = KernelTiles(kernel, x_ref)
        key = _factor_key(kernel, noise)
        try:
            if factor is None:
                self._fit.factorise(tiles, noise, key)
            else:
                return ensure_factor(factor, tiles, noise, key, client)
        except LinAlgError:
            raise NotPositiveDefiniteError(
                f"K + noise*I is not positive definite (tiled Cholesky failed) with "
                f"noise={noise:g}: increase noise or use a positive semi-definite "
                "kernel."
            ) from None

    def _evidence(self, kernel, X, t, noise, eval_gradient):
        """log p(t | X, θ) (``gp-lml``) and its gradient (``gp-lml-grad``), tiled."""
        if self.solver == "cg":
            return matrix_free._evidence(self, kernel, eval_gradient)
        fit = self._ensure_fit()
        known = fit.recorded(kernel.theta, eval_gradient)
        if known is not None:
            return known if eval_gradient else known[0]
        self._factorise(kernel, noise)
        alpha = fit.solve(t)
        lml = log_evidence(t, alpha, fit.log_diagonal_sum())
        gradient = None
        if eval_gradient:
            a = alpha.reshape(len(t), -1)
            gradient = fit.gradient(kernel, a, 0.5 * a, 0.5 * a.shape[1])
        if kernel.theta.size:
            fit.record(kernel.theta, lml, gradient)
        return (lml, gradient) if eval_gradient else lml

    # -- fitting -----------------------------------------------------------------------
    def fit(self, X, y):
        """ML-II (if ``optimizer``), then the factor and α at the learned θ."""
        if self.solver != "cholesky":
            return matrix_free.fit_matrix_free(self, X, y)  # checks solver
        kernel, noise = self._validate_params()
        check_backend_args(self)
        X = check_samples(X, kernel, "X", accept_sparse="kernel")  # CSR kept
        t = check_targets(y, X.shape[0], "y")
        if self.normalize_y:
            y_mean, std = t.mean(axis=0), t.std(axis=0)
            y_std = np.where(std > 0, std, 1.0)
        else:
            y_mean, y_std = np.zeros(t.shape[1:]), np.ones(t.shape[1:])
        t = (t - y_mean) / y_std
        identity = {
            "estimator": "backends.dask.GaussianProcessRegressor",
            "kernel": kernel_identity(kernel),
            "noise": noise,
            "optimizer": self.optimizer,
            "n_restarts": self.n_restarts,
            "normalize_y": bool(self.normalize_y),
            "random_state": repr(self.random_state),
        }
        self._fit = fit = self._open_fit(X, t, identity, "GP ML-II")
        with fit:
            if self.optimizer is not None and kernel.theta.size:
                kernel = kernel.clone_with_theta(
                    self._maximise_evidence(kernel, X, t, noise)
                )
            self._factorise(kernel, noise)
            alpha = fit.solve(t)
            lml = log_evidence(t, alpha, fit.log_diagonal_sum())
        self.kernel_, self._noise, self.alpha_ = kernel, noise, alpha
        self.factor_, self.store_ = fit.factor, str(fit.store.path)
        fit.keep_factor()
        self._x_ref = fit.store.x_ref
        self._y_mean, self._y_std = y_mean, y_std
        self.log_marginal_likelihood_value_ = lml
        self.X_train_, self.y_train_ = X, t
        self.n_evaluations_ = self._fit.n_computed
        self.n_resumed_ = self._fit.n_resumed
        self.fit_solver_ = "cholesky"
        record_n_features(self, X)
        return self

    # -- prediction --------------------------------------------------------------------
    def predict(self, X, return_std=False, return_cov=False):
        """Predictive mean (``gp-predictive-mean``) and standard deviation or
        covariance (``gp-predictive-var``), by forward substitution on the cluster
        (``prediction_client``: in this process for a small factor when no
        cluster runs). The mean alone reads no factor and needs no cluster."""
        if not hasattr(self, "kernel_"):
            return super().predict(X, return_std=return_std, return_cov=return_cov)
        if getattr(self, "fit_solver_", "cholesky") == "cg":
            return gp_variance.predict(self, X, return_std, return_cov)
        if return_std and return_cov:
            raise ValueError(
                "ask for return_std or return_cov, not both; "
                "the standard deviation is the root of the covariance's diagonal."
            )
        X = check_samples(X, self.kernel_, "X", accept_sparse="kernel")
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        alpha = self.alpha_.reshape(len(self.alpha_), -1)
        # the covariance needs all test points in one right-hand side
        b = max(X.shape[0], 1) if return_cov else self._x_ref.chunk_size
        blocks = cross_blocks(self.kernel_, self._x_ref, X, block_size=b)
        if return_std or return_cov:
            key = _factor_key(self.kernel_, self._noise)
            client = prediction_client(self.address, self.factor_, key)
            # a factor not holding the fitted matrix (cut short, say) is computed
            # again, on the cluster
            self.factor_ = self._factorise(
                self.kernel_, self._noise, self.factor_, client
            )
            parts = forward_norms_on(client, self.factor_, blocks, alpha, return_cov)
            mean = np.concatenate([m for m, _ in parts], axis=0)
        else:
            mean = np.concatenate(cross_means(blocks, alpha), axis=0)
        mean = mean[:, 0] if self.alpha_.ndim == 1 else mean
        mean = self._y_mean + self._y_std * mean
        if not (return_std or return_cov):
            return mean
        scale = self._y_std**2
        if return_cov:
            cov = self.kernel_(X) - parts[0][1]
            return mean, cov * scale if mean.ndim == 1 else cov[:, :, None] * scale
        var = self.kernel_.diag(X) - np.concatenate([v for _, v in parts])
        np.clip(var, 0.0, None, out=var)
        std = np.sqrt(var * scale if mean.ndim == 1 else var[:, None] * scale)
        return mean, std
