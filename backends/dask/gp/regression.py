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

import json

import numpy as np
from scipy.linalg import LinAlgError

from backends.dask.cluster import get_client
from backends.dask.gp.common import ExactFit, forward_norms_on
from backends.dask.gp.tiles import CrossRhs, KernelTiles
from backends.dask.linalg import tiled_cholesky
from backends.dask.runtime import FitStore
from kernelref._validation import (
    check_integer,
    check_n_features,
    check_samples,
    check_targets,
    record_n_features,
)
from kernelref.gp import GaussianProcessRegressor as ReferenceGaussianProcessRegressor
from kernelref.gp import NotPositiveDefiniteError

__all__ = ["GaussianProcessRegressor", "check_backend_args"]

LOG_2PI = np.log(2.0 * np.pi)


def check_backend_args(estimator):
    """Check ``store, chunk_size, address, progress, resume`` before any work."""
    import os

    check_integer(estimator.chunk_size, "chunk_size", meaning="It is the tile edge.")
    if estimator.store is not None and not isinstance(
        estimator.store, (str, os.PathLike)
    ):
        raise TypeError(
            f"store must be a directory path or None; got {estimator.store!r}."
        )
    if estimator.address is not None and not isinstance(estimator.address, str):
        raise TypeError(
            f"address must be a scheduler address string or None; got {estimator.address!r}."
        )
    if not isinstance(estimator.resume, bool):
        raise TypeError(f"resume must be True or False; got {estimator.resume!r}.")


def kernel_identity(kernel):
    """The kernel's spec as JSON reads it back."""
    return json.loads(
        json.dumps(kernel.spec(), default=lambda v: np.asarray(v).tolist())
    )


class GaussianProcessRegressor(ReferenceGaussianProcessRegressor):
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

    Attributes
    ----------
    kernel_, alpha_, log_marginal_likelihood_value_, X_train_, y_train_
        As in the reference. There is no ``L_``: ``factor_`` is the Zarr array of
        the lower Cholesky factor of K + σ²I (that of K/σ² + I is factor_/σ).
    n_evaluations_, n_resumed_ : int
        Evidence evaluations computed in this fit, and replayed from the store.
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
        self.progress = progress
        self.resume = resume

    # -- the evidence on the cluster ------------------------------------------------------
    def _factorise(self, kernel, noise):
        tiles = KernelTiles(kernel, self._fit.store.x_ref)
        key = {"theta": kernel.theta.tolist(), "noise": noise}
        try:
            self._fit.factorise(tiles, noise, key)
        except LinAlgError:
            raise NotPositiveDefiniteError(
                f"K + noise*I is not positive definite (tiled Cholesky failed) with "
                f"noise={noise:g}: increase noise or use a positive semi-definite kernel."
            ) from None

    def _evidence(self, kernel, X, t, noise, eval_gradient):
        """log p(t | X, θ) (``gp-lml``) and its gradient (``gp-lml-grad``), tiled."""
        fit = self._fit
        known = fit.recorded(kernel.theta, eval_gradient)
        if known is not None:
            return known if eval_gradient else known[0]
        self._factorise(kernel, noise)
        alpha = fit.solve(t)
        n, n_targets = len(t), 1 if t.ndim == 1 else t.shape[1]
        lml = float(
            -0.5 * np.sum(t * alpha)
            - n_targets * fit.log_diagonal_sum()
            - 0.5 * n_targets * n * LOG_2PI
        )
        gradient = None
        if eval_gradient:
            a = alpha.reshape(n, -1)
            gradient = fit.gradient(kernel, a, 0.5 * a, 0.5 * n_targets)
        if kernel.theta.size:
            fit.record(kernel.theta, lml, gradient)
        return (lml, gradient) if eval_gradient else lml

    # -- fitting ------------------------------------------------------------------------
    def fit(self, X, y):
        """ML-II (if ``optimizer``), then the factor and α at the learned θ."""
        kernel, noise = self._validate_params()
        check_backend_args(self)
        X = check_samples(X, kernel, "X")
        t = check_targets(y, X.shape[0], "y")
        if self.normalize_y:
            y_mean, std = t.mean(axis=0), t.std(axis=0)
            y_std = np.where(std > 0, std, 1.0)
        else:
            y_mean, y_std = np.zeros(t.shape[1:]), np.ones(t.shape[1:])
        t = (t - y_mean) / y_std
        client = get_client(self.address)
        identity = {
            "estimator": "backends.dask.GaussianProcessRegressor",
            "kernel": kernel_identity(kernel),
            "noise": noise,
            "optimizer": self.optimizer,
            "n_restarts": self.n_restarts,
            "normalize_y": bool(self.normalize_y),
            "random_state": repr(self.random_state),
        }
        store = FitStore.prepare(
            self.store,
            X,
            arrays={"t": t},
            identity=identity,
            chunk_size=self.chunk_size,
            client=client,
        )
        self._fit = ExactFit(store, client, self.progress, self.resume, "GP ML-II")
        try:
            if self.optimizer is not None and kernel.theta.size:
                kernel = kernel.clone_with_theta(
                    self._maximise_evidence(kernel, X, t, noise)
                )
            self._factorise(kernel, noise)
            alpha = self._fit.solve(t)
            n_targets = 1 if t.ndim == 1 else t.shape[1]
            lml = float(
                -0.5 * np.sum(t * alpha)
                - n_targets * self._fit.log_diagonal_sum()
                - 0.5 * n_targets * len(t) * LOG_2PI
            )
        finally:
            self._fit.close()
        self.kernel_, self._noise, self.alpha_ = kernel, noise, alpha
        self.factor_, self.store_ = self._fit.factor, str(store.path)
        self._x_ref = store.x_ref
        self._y_mean, self._y_std = y_mean, y_std
        self.log_marginal_likelihood_value_ = lml
        self.X_train_, self.y_train_ = X, t
        self.n_evaluations_ = self._fit.n_computed
        self.n_resumed_ = self._fit.n_resumed
        record_n_features(self, X)
        return self

    # -- prediction ---------------------------------------------------------------------
    def predict(self, X, return_std=False, return_cov=False):
        """Predictive mean (``gp-predictive-mean``) and standard deviation or
        covariance (``gp-predictive-var``), by forward substitution on the cluster."""
        if not hasattr(self, "kernel_"):
            return super().predict(X, return_std=return_std, return_cov=return_cov)
        if return_std and return_cov:
            raise ValueError(
                "ask for return_std or return_cov, not both; "
                "the standard deviation is the root of the covariance's diagonal."
            )
        X = check_samples(X, self.kernel_, "X")
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        alpha = self.alpha_.reshape(len(self.alpha_), -1)
        b = self._x_ref.chunk_size
        blocks = [
            CrossRhs(self.kernel_, self._x_ref, X[s : s + b])
            for s in range(0, len(X), b)
        ]
        if return_cov:
            blocks = [CrossRhs(self.kernel_, self._x_ref, X)]
        client = get_client(self.address)
        self._refactorise(client)
        parts = forward_norms_on(client, self.factor_, blocks, alpha, return_cov)
        mean = np.concatenate([m for m, _ in parts], axis=0)
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

    def _refactorise(self, client):
        """Factor K + σ²I at ``kernel_`` again if the store's factor was overwritten
        since the fit (by ``log_marginal_likelihood`` at another θ)."""
        key = {"theta": self.kernel_.theta.tolist(), "noise": self._noise}
        attrs = self.factor_.attrs
        if attrs.get("complete") is True and attrs.get("key") == key:
            return
        attrs.update({"complete": False, "key": None})
        tiled_cholesky(
            KernelTiles(self.kernel_, self._x_ref), self._noise, self.factor_, client
        )
        attrs.update({"complete": True, "key": key})

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_fit", None)
        return state
