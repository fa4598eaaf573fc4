"""Exact Gaussian-process classification (Laplace) on a Dask cluster.

``GaussianProcessClassifier`` is the reference estimator
(``kernelref.gp_classify``) with its N × N algebra on the workers. The mode is
found by the reference's own damped Newton loop (``kernelref.laplace``), whose
two callables are computed on the cluster: the objective
Ψ(a) = −½aᵀKa + log p(t | Ka) needs the streamed product K a, and the Newton
iterate (labels ``gpc-newton-step``, ``gpc-B-form``)

    a_new = b − W^½ B⁻¹ W^½ K b,   b = W f + ∇log p(t | f),   B = I + W^½KW^½,

needs B factored tile by tile into the fit store (its tiles W^½_i K_ij W^½_j
computed on the workers) and one blocked substitution. The evidence is
Ψ(â) − Σ log L_ii (label ``gpc-evidence``); its gradient (label
``gpc-evidence-gradient``, GPML Algorithm 5.1) contracts
M = ½(aaᵀ − R) + sym(u (t − π)ᵀ), R = W^½B⁻¹W^½, with ∂K tile by tile, after
diag((K⁻¹ + W)⁻¹) = diag(K) − ‖L⁻¹W^½K‖²_columns by forward substitution.
Predictions (label ``gpc-predictive``) use the same forward substitution.
"""

import hashlib

import numpy as np
from scipy.linalg import LinAlgError

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
from backends.dask.gp.tiles import ColumnRhs, KernelTiles
from kernelref._validation import (
    check_classification_targets,
    check_samples,
    record_n_features,
)
from kernelref.gp_classify import GaussianProcessClassifier as ReferenceClassifier
from kernelref.gp_classify import LaplaceMode
from kernelref.laplace import (
    TOL,
    damped_newton,
    likelihood_curvature,
    log_likelihood,
    log_likelihood_gradient,
    log_likelihood_third_derivative,
    sigmoid,
)

__all__ = ["GaussianProcessClassifier"]


def _factor_key(kernel, jitter, W_sr):
    digest = hashlib.sha256(np.ascontiguousarray(W_sr).tobytes()).hexdigest()
    return {"theta": kernel.theta.tolist(), "jitter": jitter, "W_sr": digest}


class GaussianProcessClassifier(ClusterFitMixin, ReferenceClassifier):
    """Laplace GP classification with ML-II, the N × N algebra tiled on a Dask cluster.

    Parameters
    ----------
    kernel, optimizer, n_restarts, max_iter_predict, jitter, random_state, multi_class
        As in ``kernelref.gp_classify.GaussianProcessClassifier``.
    store, chunk_size, address, progress, resume
        As in ``backends.dask.GaussianProcessRegressor``; with more than two
        classes each binary problem has its own store, ``store/class-k``.

    Attributes
    ----------
    As in the reference, except that ``L_`` is the Zarr array of the factor of
    B at the mode (in the fit store), not an array in memory. scipy.sparse X
    (for a kernel that takes it) stays sparse: the fit store holds it as CSR
    and the tiles come from the kernel's sparse products.
    """

    def __init__(
        self,
        kernel=None,
        optimizer="L-BFGS-B",
        n_restarts=0,
        max_iter_predict=100,
        jitter=0.0,
        random_state=None,
        multi_class="one_vs_rest",
        store=None,
        chunk_size=1024,
        address=None,
        progress=None,
        resume=True,
    ):
        super().__init__(
            kernel=kernel,
            optimizer=optimizer,
            n_restarts=n_restarts,
            max_iter_predict=max_iter_predict,
            jitter=jitter,
            random_state=random_state,
            multi_class=multi_class,
        )
        self._set_backend_params(store, chunk_size, address, progress, resume)

    _transient = ("_fit", "_products")

    # -- the cluster's pieces of Algorithm 3.1 -----------------------------------------
    def _tiles(self, kernel, W_sr=None):
        return KernelTiles(kernel, self._fit.store.x_ref, float(self.jitter), W_sr)

    def _times(self, kernel, v):
        """K v (K with the jitter on its diagonal), the last few products remembered."""
        key = (kernel.theta.tobytes(), np.ascontiguousarray(v).tobytes())
        cache = self.__dict__.setdefault("_products", {})
        if key not in cache:
            if len(cache) >= 4:
                cache.pop(next(iter(cache)))
            cache[key] = self._fit.kernel_times(self._tiles(kernel), v)
        return cache[key]

    def _factorise_B(self, kernel, W_sr, factor=None, client=None):
        """chol(B) at ``kernel`` and W^½ into the fit's factor (or ``factor``, then
        returned as ``ensure_factor`` returns it)."""
        if factor is None:
            tiles = self._tiles(kernel, W_sr)
        else:  # after the fit: its data and jitter
            tiles = KernelTiles(kernel, self._x_ref, self.jitter_, W_sr)
        key = _factor_key(kernel, tiles.jitter, W_sr)
        try:
            if factor is None:
                self._fit.factorise(tiles, 1.0, key)
            else:
                return ensure_factor(factor, tiles, 1.0, key, client)
        except LinAlgError:
            raise ValueError(
                "I + W^½KW^½ is not positive definite, so the kernel matrix K is not "
                "positive semi-definite on these inputs; use a positive semi-definite "
                "kernel or add a small jitter to K's diagonal."
            ) from None

    def _laplace_mode(self, kernel, t):
        """GPML Algorithm 3.1 with the reference's damped Newton loop."""

        def objective(a):
            f = self._times(kernel, a)
            return -0.5 * a @ f + log_likelihood(f, t)

        def newton_step(a):
            f = self._times(kernel, a)
            W = likelihood_curvature(f)
            W_sr = np.sqrt(W)
            self._factorise_B(kernel, W_sr)
            b = W * f + log_likelihood_gradient(f, t)
            return b - W_sr * self._fit.solve(W_sr * self._times(kernel, b))

        result = damped_newton(
            objective,
            newton_step,
            np.zeros(len(t)),
            tol=TOL,
            max_iter=self.max_iter_predict,
        )
        a = result.x
        f = self._times(kernel, a)
        W_sr = np.sqrt(likelihood_curvature(f))
        self._factorise_B(kernel, W_sr)
        log_q = result.value - self._fit.log_diagonal_sum()
        return LaplaceMode(
            f=f,
            a=a,
            pi=sigmoid(f),
            W_sr=W_sr,
            L=self._fit.factor,
            log_evidence=float(log_q),
            n_iter=result.n_iter,
        )

    def _evidence_gradient(self, kernel, t, mode):
        """GPML Algorithm 5.1 (label ``gpc-evidence-gradient``), tile by tile."""
        W_sr, X = mode.W_sr, self.X_fit_
        T = self._fit.store.n_chunks
        tiles = self._tiles(kernel, W_sr)
        norms = self._fit.forward_norms(
            [ColumnRhs(tiles, c) for c in range(T)], None, False
        )
        diag_K = kernel.diag(X) + float(self.jitter)
        posterior_variance = diag_K - np.concatenate([v for _, v in norms])
        s2 = 0.5 * posterior_variance * log_likelihood_third_derivative(mode.f)
        u = s2 - W_sr * self._fit.solve(W_sr * self._times(kernel, s2))
        F = np.column_stack([mode.a, u])
        G = np.column_stack([0.5 * mode.a, t - mode.pi])
        return self._fit.gradient(kernel, F, G, 0.5, W_sr)

    def _evidence(self, kernel, X, t, eval_gradient):
        self._ensure_fit()
        if eval_gradient:
            known = self._fit.recorded(kernel.theta, True)
            if known is not None:
                return known
        mode = self._laplace_mode(kernel, t)
        if not eval_gradient:
            return mode.log_evidence, mode
        gradient = self._evidence_gradient(kernel, t, mode)
        self._fit.record(kernel.theta, mode.log_evidence, gradient)
        return mode.log_evidence, gradient

    # -- fitting -----------------------------------------------------------------------
    def _fit_binary(self, kernel, X, t):
        self.__dict__.pop("_products", None)  # K v of earlier data must not be reused
        identity = {
            "estimator": "backends.dask.GaussianProcessClassifier",
            "kernel": kernel_identity(kernel),
            "optimizer": repr(self.optimizer),
            "n_restarts": self.n_restarts,
            "max_iter_predict": self.max_iter_predict,
            "jitter": float(self.jitter),
            "random_state": repr(self.random_state),
        }
        self._fit = fit = self._open_fit(X, t, identity, "GPC ML-II")
        with fit:
            super()._fit_binary(kernel, X, t)
        fit.keep_factor()
        self._x_ref, self.store_ = fit.store.x_ref, str(fit.store.path)
        self.n_evaluations_, self.n_resumed_ = fit.n_computed, fit.n_resumed

    def fit(self, X, y):
        """The reference's fit, with one cluster fit per binary problem."""
        check_backend_args(self)
        kernel = self._validate_params()
        X = check_samples(X, kernel, "X", accept_sparse="kernel")  # CSR kept
        self._forget_fit()
        self.classes_, y_index = check_classification_targets(y, X.shape[0], "y")
        self.X_fit_ = X = X.copy()  # the model owns its data
        record_n_features(self, X)
        self.jitter_ = float(self.jitter)
        if len(self.classes_) == 2:
            self._fit_binary(kernel, X, y_index.astype(float))
            return self
        self.estimators_ = []
        for k in range(len(self.classes_)):
            params = self.get_params(deep=False)
            if self.store is not None:
                params["store"] = f"{self.store}/class-{k}"
            binary = GaussianProcessClassifier(**params)
            binary.classes_ = np.array([0, 1])
            binary.X_fit_, binary.jitter_ = X, self.jitter_
            record_n_features(binary, X)
            binary._fit_binary(kernel, X, (y_index == k).astype(float))
            self.estimators_.append(binary)
        self.kernel_ = [e.kernel_ for e in self.estimators_]
        self.f_hat_ = np.column_stack([e.f_hat_ for e in self.estimators_])
        self.log_marginal_likelihood_value_ = float(
            np.mean([e.log_marginal_likelihood_value_ for e in self.estimators_])
        )
        return self

    # -- prediction (Algorithm 3.2, label gpc-predictive) ------------------------------
    def decision_function(self, X):
        """The latent predictive mean E[f* | t] (Algorithm 3.2, line 4), one column
        per class with more than two classes: it reads no factor, so it needs no
        cluster (nor does ``predict`` with two classes, its sign)."""
        X = self._latent(X)
        if self._is_multiclass():
            return np.column_stack([e._latent_mean(X) for e in self.estimators_])
        return self._latent_mean(X)

    def _latent_mean(self, X):
        blocks = cross_blocks(self.kernel_, self._x_ref, X, self.W_sr_)
        v = (self._t - self._mode.pi)[:, None]
        return np.concatenate([m[:, 0] for m in cross_means(blocks, v)])

    def _binary_latent(self, X):
        factor = self._mode.L
        key = _factor_key(self.kernel_, self.jitter_, self.W_sr_)
        client = prediction_client(self.address, factor, key)
        # a factor not holding the fitted matrix (cut short, say) is computed again,
        # on the cluster
        factor = self._factorise_B(self.kernel_, self.W_sr_, factor, client)
        self._mode.L = factor
        blocks = cross_blocks(self.kernel_, self._x_ref, X, self.W_sr_)
        v = (self._t - self._mode.pi)[:, None]
        parts = forward_norms_on(client, factor, blocks, v, False)
        mean = np.concatenate([m[:, 0] for m, _ in parts])
        k_star_star = self.kernel_.diag(X) + self.jitter_
        variance = k_star_star - np.concatenate([s for _, s in parts])
        return mean, np.maximum(variance, 0.0)
