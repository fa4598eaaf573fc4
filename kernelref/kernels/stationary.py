"""Stationary kernels of Gaussian-process practice: Matérn (ν = ½, 3/2, 5/2),
rational quadratic and periodic (exp-sine-squared).

They depend on x − x′ only, through the scaled distance

    r = ‖(x − x′)/ℓ‖ = (Σ_d (x_d − x′_d)²/ℓ_d²)^½    (label ``kernel-scaled-distance``)

with one length scale ℓ or, for automatic relevance determination, one ℓ_d per
input. The parametrisation is scikit-learn's (``length_scale``, ``nu``,
``alpha``, ``periodicity``), so the Gram matrices equal theirs; the gradients
are ∂K/∂log θ as for every kernel here (label ``kernel-log-grad``).

For ARD the gradient of ℓ_d needs the per-input squared distances
r_d² = (x_d − x′_d)²/ℓ_d²; ``gradient_dot`` contracts them with a weight matrix
in O(n²) memory instead of building an (n, n, D) array.

Reference: C. E. Rasmussen and C. K. I. Williams, *Gaussian Processes for
Machine Learning* (GPML), MIT Press 2006, §4.2.
"""

import abc

import numpy as np
from scipy.spatial.distance import cdist

from kernelref.kernels.base import DEFAULT_BOUNDS, Kernel, as_2d

__all__ = ["ExpSineSquared", "Matern", "RationalQuadratic"]

#: The orders ν of the Matérn kernel with the closed forms used here (GPML §4.2).
MATERN_NUS = (0.5, 1.5, 2.5)


class _Stationary(Kernel):
    """Shared machinery: validated length scales and scaled distances.

    ``param_constraints`` makes ``Kernel.__setattr__`` refuse a length scale
    that is not finite and positive wherever it is set; the property adds the
    shape: one number, or (where ARD makes sense) a 1-D array.
    """

    param_constraints = {"length_scale": "positive"}
    #: the length scale may be an array (ARD) where ``_ard_allowed``; the
    #: property below refuses one elsewhere, with its own message
    array_params = ("length_scale",)
    _ard_allowed = True

    @property
    def length_scale(self):
        return self._length_scale

    @length_scale.setter
    def length_scale(self, value):
        ndim = np.ndim(value)
        if ndim > 1 or (ndim == 1 and not self._ard_allowed):
            one = (
                "a single number"
                if not self._ard_allowed
                else "a number or a 1-D array"
            )
            raise ValueError(
                f"{type(self).__name__}: length_scale must be {one}; got shape "
                f"{np.shape(value)}."
            )
        self._length_scale = np.asarray(value, dtype=float) if ndim else float(value)

    @property
    def anisotropic(self):
        """True when there is one length scale per input (ARD)."""
        return np.ndim(self.length_scale) == 1

    def _scaled(self, X, name="X"):
        """X/ℓ, checking that an ARD kernel has one length scale per input."""
        X = as_2d(X, name)
        if self.anisotropic and len(self.length_scale) != X.shape[1]:
            raise ValueError(
                f"{type(self).__name__} has {len(self.length_scale)} length scales but "
                f"{name} has {X.shape[1]} features; give one length scale per feature "
                "or a single number."
            )
        return X / self.length_scale

    def distances(self, X, Y=None):
        """r of (kernel-scaled-distance) for all pairs, computed directly (not
        as √(‖x‖² + ‖y‖² − 2xᵀy), which loses half the digits near r = 0)."""
        Xs = self._scaled(X)
        return cdist(Xs, Xs if Y is None else self._scaled(Y, "Y"))

    def diag(self, X):
        return np.ones(len(as_2d(X)))

    def _free(self, name):
        return any(own == name for own, _ in self._own())


class _Radial(_Stationary):
    """Kernels k(r) of the scaled distance alone (Matérn, rational quadratic):
    their length-scale gradients follow from the radial slope g(r)."""

    @abc.abstractmethod
    def _radial_slope(self, r):
        """g(r) with ∂k/∂log ℓ_d = g(r) r_d² (and Σ_d r_d² = r² isotropically)."""

    def _length_scale_terms(self, X, r):
        if not self._free("length_scale"):
            return
        g = self._radial_slope(r)
        if not self.anisotropic:
            yield g * r**2
            return
        Xs = self._scaled(X)
        for d in range(Xs.shape[1]):
            yield g * (Xs[:, d : d + 1] - Xs[:, d][None, :]) ** 2

    def _length_scale_dot(self, X, W, r):
        """Σ_ab W_ab ∂K_ab/∂log ℓ_d for every d in O(n²) memory: with
        M = W ∘ g(r), Σ_ab M_ab (x̃_ad − x̃_bd)² = x̃_d²ᵀ(M1 + Mᵀ1) − 2x̃_dᵀMx̃_d,
        x̃ = X/ℓ (as ``ARD.gradient_dot``)."""
        if not self._free("length_scale"):
            return np.empty(0)
        M = W * self._radial_slope(r)
        if not self.anisotropic:
            return np.array([np.vdot(M, r**2)])
        Xs = self._scaled(X)
        X2 = Xs**2
        return (
            X2.T @ M.sum(axis=1)
            + X2.T @ M.sum(axis=0)
            - 2.0 * np.einsum("ad,ad->d", M @ Xs, Xs)
        )


class Matern(_Radial):
    """Matérn kernel of order ν ∈ {½, 3/2, 5/2} (label ``kernel-matern``), with
    r of (kernel-scaled-distance):

        ν = ½:  k = exp(−r)
        ν = 3/2: k = (1 + √3 r) exp(−√3 r)
        ν = 5/2: k = (1 + √5 r + 5r²/3) exp(−√5 r)

    ν = ½ is the exponential kernel (Ornstein–Uhlenbeck in one dimension), whose
    samples are continuous but nowhere differentiable; the GP is ⌈ν⌉ − 1 times
    mean-square differentiable. ``length_scale`` may be an array (ARD).
    """

    hyperparameter_names = ("length_scale",)

    def __init__(self, length_scale=1.0, nu=1.5, length_scale_bounds=DEFAULT_BOUNDS):
        self.length_scale = length_scale
        self.nu = nu
        self.length_scale_bounds = length_scale_bounds

    @property
    def nu(self):
        return self._nu

    @nu.setter
    def nu(self, value):
        if isinstance(value, (bool, np.bool_)) or value not in MATERN_NUS:
            raise ValueError(
                f"Matern: nu must be one of {MATERN_NUS} (the orders with a closed "
                f"form); got {value!r}. For nu = inf use "
                "RBF(gamma=1/(2 length_scale²))."
            )
        self._nu = float(value)

    def _of_r(self, r):
        if self.nu == 0.5:
            return np.exp(-r)
        if self.nu == 1.5:
            a = np.sqrt(3.0) * r
            return (1.0 + a) * np.exp(-a)
        a = np.sqrt(5.0) * r
        return (1.0 + a + a**2 / 3.0) * np.exp(-a)

    def _radial_slope(self, r):
        # ∂k/∂log ℓ_d = −k′(r) r_d²/r, and k′(r)/r has no singularity for ν > ½:
        # ν = 3/2: k′ = −3r e^{−√3r};  ν = 5/2: k′ = −(5/3) r (1 + √5r) e^{−√5r}.
        if self.nu == 0.5:
            return np.divide(np.exp(-r), r, out=np.zeros_like(r), where=r > 0)
        if self.nu == 1.5:
            return 3.0 * np.exp(-np.sqrt(3.0) * r)
        a = np.sqrt(5.0) * r
        return 5.0 / 3.0 * (1.0 + a) * np.exp(-a)

    def __call__(self, X, Y=None):
        return self._of_r(self.distances(X, Y))

    def _gradient_terms(self, X):
        yield from self._length_scale_terms(X, self.distances(X))

    def gradient_dot(self, X, W, K=None):
        return self._length_scale_dot(X, W, self.distances(X))


class RationalQuadratic(_Radial):
    """k = (1 + r²/(2α))^(−α), α > 0 (label ``kernel-rq``): a scale mixture of
    Gaussian kernels with Gamma-distributed inverse squared length scales; the
    Gaussian kernel exp(−r²/2) as α → ∞. ``length_scale`` may be an array (ARD;
    scikit-learn's ``RationalQuadratic`` is isotropic only).
    """

    #: scikit-learn's order (alphabetical), so that ``theta`` means the same in both
    hyperparameter_names = ("alpha", "length_scale")
    param_constraints = {"length_scale": "positive", "alpha": "positive"}

    def __init__(
        self,
        length_scale=1.0,
        alpha=1.0,
        length_scale_bounds=DEFAULT_BOUNDS,
        alpha_bounds=DEFAULT_BOUNDS,
    ):
        self.length_scale = length_scale
        self.alpha = alpha
        self.length_scale_bounds = length_scale_bounds
        self.alpha_bounds = alpha_bounds

    def _base(self, r):
        """1 + r²/(2α)."""
        return 1.0 + r**2 / (2.0 * self.alpha)

    def __call__(self, X, Y=None):
        return self._base(self.distances(X, Y)) ** -self.alpha

    def _radial_slope(self, r):
        # ∂k/∂log ℓ_d = (1 + r²/2α)^(−α−1) r_d²
        return self._base(r) ** (-self.alpha - 1.0)

    def _alpha_term(self, r):
        # ∂k/∂log α = α k [z/(1 + z) − log(1 + z)], z = r²/(2α)
        z = r**2 / (2.0 * self.alpha)
        return self.alpha * (1.0 + z) ** -self.alpha * (z / (1.0 + z) - np.log1p(z))

    def _gradient_terms(self, X):
        r = self.distances(X)
        if self._free("alpha"):
            yield self._alpha_term(r)
        yield from self._length_scale_terms(X, r)

    def gradient_dot(self, X, W, K=None):
        r = self.distances(X)
        alpha = [np.vdot(W, self._alpha_term(r))] if self._free("alpha") else []
        return np.concatenate([alpha, self._length_scale_dot(X, W, r)])


class ExpSineSquared(_Stationary):
    """Periodic kernel k = exp(−(2/ℓ²) Σ_d sin²(π(x_d − x′_d)/p)) (label
    ``kernel-periodic``): MacKay's warping of the Gaussian kernel through
    u(x) = (cos 2πx_d/p, sin 2πx_d/p)_d, since ‖u(x) − u(x′)‖² = 4 Σ_d sin²(·).
    Functions drawn from it repeat with period p along every input; ℓ sets how
    wiggly one period is.

    In one dimension this is scikit-learn's ``ExpSineSquared`` (and GPML's
    ``covPeriodic``). For D > 1 they put the Euclidean distance inside the sine,
    exp(−2 sin²(π‖x − x′‖/p)/ℓ²), which is not the warping of anything and not
    positive semi-definite (its Gram matrices can have negative eigenvalues; see
    the tests); the sum over inputs is.
    """

    hyperparameter_names = ("length_scale", "periodicity")
    param_constraints = {"length_scale": "positive", "periodicity": "positive"}
    _ard_allowed = False

    def __init__(
        self,
        length_scale=1.0,
        periodicity=1.0,
        length_scale_bounds=DEFAULT_BOUNDS,
        periodicity_bounds=DEFAULT_BOUNDS,
    ):
        self.length_scale = length_scale
        self.periodicity = periodicity
        self.length_scale_bounds = length_scale_bounds
        self.periodicity_bounds = periodicity_bounds

    def _phases(self, X, Y=None):
        """u_d = π(x_d − x′_d)/p for all pairs, one (n, m) array per input d."""
        X = as_2d(X)
        Y = X if Y is None else as_2d(Y, "Y")
        for d in range(X.shape[1]):
            yield np.pi / self.periodicity * (X[:, d : d + 1] - Y[:, d][None, :])

    def _sums(self, X, Y=None, with_phase=False):
        """S = Σ_d sin² u_d and, if asked, T = Σ_d u_d sin u_d cos u_d."""
        S = T = 0.0
        for u in self._phases(X, Y):
            S = S + np.sin(u) ** 2
            if with_phase:
                T = T + 0.5 * u * np.sin(2.0 * u)
        return S, T

    def __call__(self, X, Y=None):
        S, _ = self._sums(X, Y)
        return np.exp(-2.0 / self.length_scale**2 * S)

    def _terms(self, X):
        free = [name for name, _ in self._own()]
        S, T = self._sums(X, with_phase="periodicity" in free)
        K = np.exp(-2.0 / self.length_scale**2 * S)
        terms = {
            "length_scale": lambda: 4.0 / self.length_scale**2 * S * K,  # ∂k/∂log ℓ
            # ∂k/∂log p, since ∂u_d/∂log p = −u_d
            "periodicity": lambda: 4.0 / self.length_scale**2 * T * K,
        }
        return [terms[name] for name in free]

    def _gradient_terms(self, X):
        for term in self._terms(X):
            yield term()

    def gradient_dot(self, X, W, K=None):
        return np.array([np.vdot(W, term()) for term in self._terms(X)])
