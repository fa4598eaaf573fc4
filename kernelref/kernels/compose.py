"""Building new kernels from old ones: the construction rules of the book
(labels ``rule-sum``, ``rule-product``, ``rule-scale``, ``rule-warp``,
``rule-exp``, ``rule-polynomial``, ``rule-map``), plus the constant kernel.

``k1 + k2``, ``k1 * k2`` and ``c * k`` build the first three.
"""

import numpy as np
import scipy.sparse as sp

from kernelref.kernels.base import DEFAULT_BOUNDS, Kernel, as_2d


def _n_samples(X, name):
    """How many samples: the rows of a numeric array, or the length of a list
    of objects (the constant kernel never looks at them, so it joins kernels on
    objects as well as on vectors)."""
    if isinstance(X, np.ndarray) and X.dtype != object:
        return len(as_2d(X, name))
    return X.shape[0] if sp.issparse(X) else len(X)


class Constant(Kernel):
    """k(x, x′) = c, c > 0: the bias θ₂ of the GP kernel."""

    hyperparameter_names = ("value",)
    param_constraints = {"value": "positive"}
    accepts_sparse = True

    def __init__(self, value=1.0, value_bounds=DEFAULT_BOUNDS):
        self.value = value
        self.value_bounds = value_bounds

    def __call__(self, X, Y=None):
        n = _n_samples(X, "X")
        m = n if Y is None else _n_samples(Y, "Y")
        return np.full((n, m), float(self.value))

    def diag(self, X):
        return np.full(_n_samples(X, "X"), float(self.value))

    def _gradient_terms(self, X):
        if self._own():
            yield self(X)


class Sum(Kernel):
    """k = k1 + k2 (label ``rule-sum``)."""

    param_constraints = {"k1": "kernel", "k2": "kernel"}

    def __init__(self, k1, k2):
        self.k1 = k1
        self.k2 = k2

    def _children(self):
        return [("k1", self.k1), ("k2", self.k2)]

    @property
    def accepts_sparse(self):
        return all(child.accepts_sparse for _, child in self._children())

    def __call__(self, X, Y=None):
        return self.k1(X, Y) + self.k2(X, Y)

    def diag(self, X):
        return self.k1.diag(X) + self.k2.diag(X)

    def _gradient_terms(self, X):
        yield from self.k1._gradient_terms(X)
        yield from self.k2._gradient_terms(X)

    def gradient_dot(self, X, W, K=None):
        return np.concatenate([self.k1.gradient_dot(X, W), self.k2.gradient_dot(X, W)])


class Product(Kernel):
    """k = k1 · k2, elementwise (label ``rule-product``)."""

    param_constraints = {"k1": "kernel", "k2": "kernel"}

    def __init__(self, k1, k2):
        self.k1 = k1
        self.k2 = k2

    def _children(self):
        return [("k1", self.k1), ("k2", self.k2)]

    @property
    def accepts_sparse(self):
        return all(child.accepts_sparse for _, child in self._children())

    def __call__(self, X, Y=None):
        return self.k1(X, Y) * self.k2(X, Y)

    def diag(self, X):
        return self.k1.diag(X) * self.k2.diag(X)

    def _gradient_terms(self, X):
        K1, K2 = self.k1(X), self.k2(X)
        for G in self.k1._gradient_terms(X):
            yield G * K2
        for G in self.k2._gradient_terms(X):
            yield K1 * G

    def gradient_dot(self, X, W, K=None):
        # chain rule: Σ W ∘ (∂K1 ∘ K2) = Σ (W ∘ K2) ∘ ∂K1
        K1, K2 = self.k1(X), self.k2(X)
        return np.concatenate(
            [
                self.k1.gradient_dot(X, W * K2, K=K1),
                self.k2.gradient_dot(X, W * K1, K=K2),
            ]
        )


class Scaled(Kernel):
    """k = c · k1 with c > 0 (label ``rule-scale``); ``c * k`` builds it."""

    hyperparameter_names = ("scale",)
    param_constraints = {"scale": "positive", "kernel": "kernel"}

    def __init__(self, scale, kernel, scale_bounds=DEFAULT_BOUNDS):
        self.scale = scale
        self.kernel = kernel
        self.scale_bounds = scale_bounds

    def _children(self):
        return [("kernel", self.kernel)]

    @property
    def accepts_sparse(self):
        return all(child.accepts_sparse for _, child in self._children())

    def __call__(self, X, Y=None):
        return self.scale * self.kernel(X, Y)

    def diag(self, X):
        return self.scale * self.kernel.diag(X)

    def _gradient_terms(self, X):
        if self._own():
            yield self(X)
        for G in self.kernel._gradient_terms(X):
            yield self.scale * G

    def gradient_dot(self, X, W, K=None):
        K1 = self.kernel(X) if K is None else K / self.scale
        own = [self.scale * np.vdot(W, K1)] if self._own() else []
        return np.concatenate([own, self.scale * self.kernel.gradient_dot(X, W, K=K1)])


class Warped(Kernel):
    """k(x, x′) = f(x) k1(x, x′) f(x′) for any real function f (label ``rule-warp``).

    ``f`` maps an (n, D) array to n values.
    """

    param_constraints = {"kernel": "kernel"}

    def __init__(self, kernel, f):
        self.kernel = kernel
        self.f = f

    def _children(self):
        return [("kernel", self.kernel)]

    def _f(self, X):
        return np.asarray(self.f(as_2d(X)), dtype=float).reshape(-1)

    def __call__(self, X, Y=None):
        fY = self._f(X if Y is None else Y)
        return self._f(X)[:, None] * self.kernel(X, Y) * fY[None, :]

    def diag(self, X):
        return self._f(X) ** 2 * self.kernel.diag(X)

    def _gradient_terms(self, X):
        fX = self._f(X)
        outer = fX[:, None] * fX[None, :]
        for G in self.kernel._gradient_terms(X):
            yield outer * G

    def gradient_dot(self, X, W, K=None):
        fX = self._f(X)
        return self.kernel.gradient_dot(X, W * fX[:, None] * fX[None, :])


class Exp(Kernel):
    """k = exp(k1), elementwise (label ``rule-exp``)."""

    param_constraints = {"kernel": "kernel"}

    def __init__(self, kernel):
        self.kernel = kernel

    def _children(self):
        return [("kernel", self.kernel)]

    @property
    def accepts_sparse(self):
        return self.kernel.accepts_sparse

    def __call__(self, X, Y=None):
        return np.exp(self.kernel(X, Y))

    def diag(self, X):
        return np.exp(self.kernel.diag(X))

    def _gradient_terms(self, X):
        E = self(X)
        for G in self.kernel._gradient_terms(X):
            yield E * G

    def gradient_dot(self, X, W, K=None):
        K1 = self.kernel(X)
        return self.kernel.gradient_dot(X, W * np.exp(K1), K=K1)


class PolynomialOf(Kernel):
    """k = q(k1) = Σ_i c_i k1^i with every c_i ≥ 0 (label ``rule-polynomial``).

    ``coef[i]`` multiplies the i-th power; a negative coefficient can break
    positive semi-definiteness, so it is refused.
    """

    param_constraints = {"kernel": "kernel"}

    def __init__(self, kernel, coef):
        self.kernel = kernel
        self.coef = coef

    def _children(self):
        return [("kernel", self.kernel)]

    @property
    def accepts_sparse(self):
        return self.kernel.accepts_sparse

    def _coef(self):
        c = np.asarray(self.coef, dtype=float).reshape(-1)
        if c.size == 0 or (c < 0).any() or not np.isfinite(c).all():
            raise ValueError(
                "coef must be finite non-negative polynomial coefficients; got "
                f"{self.coef!r}. A negative coefficient can make the result indefinite."
            )
        return c

    def _q(self, K, derivative=False):
        c = self._coef()
        if derivative:
            c = c[1:] * np.arange(1, len(c))
        out = np.zeros_like(K)
        for ci in c[::-1]:  # Horner
            out *= K
            out += ci
        return out

    def __call__(self, X, Y=None):
        return self._q(self.kernel(X, Y))

    def diag(self, X):
        return self._q(self.kernel.diag(X))

    def _gradient_terms(self, X):
        slope = self._q(self.kernel(X), derivative=True)
        for G in self.kernel._gradient_terms(X):
            yield slope * G

    def gradient_dot(self, X, W, K=None):
        K1 = self.kernel(X)
        return self.kernel.gradient_dot(X, W * self._q(K1, derivative=True), K=K1)


class Mapped(Kernel):
    """k(x, x′) = k3(φ(x), φ(x′)) for a fixed map φ (label ``rule-map``).

    With φ selecting columns, sums and products of mapped kernels give the
    rules on subsets of the variables, k_a(x_a, x′_a) + k_b(x_b, x′_b).
    """

    param_constraints = {"kernel": "kernel"}

    def __init__(self, kernel, feature_map):
        self.kernel = kernel
        self.feature_map = feature_map

    def _children(self):
        return [("kernel", self.kernel)]

    def __call__(self, X, Y=None):
        phi_Y = None if Y is None else self.feature_map(as_2d(Y, "Y"))
        return self.kernel(self.feature_map(as_2d(X)), phi_Y)

    def diag(self, X):
        return self.kernel.diag(self.feature_map(as_2d(X)))

    def _gradient_terms(self, X):
        return self.kernel._gradient_terms(self.feature_map(as_2d(X)))

    def gradient_dot(self, X, W, K=None):
        # k(φ(x), φ(x′)) at X is the inner kernel's Gram at φ(X): K passes through.
        return self.kernel.gradient_dot(self.feature_map(as_2d(X)), W, K=K)
