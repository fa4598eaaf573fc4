"""Kernels between sets (book labels ``set-intersection``, ``set-subsets``,
``set-mean-embedding``, ``set-mmd-gaussian``).

|A ∩ A′| is the inner product of the indicator vectors of A and A′ over the
universe of elements; 2^|A ∩ A′| is the inner product of the indicator
vectors over *subsets*, since a subset U lies in both sets exactly when it
lies in A ∩ A′, and A ∩ A′ has 2^|A ∩ A′| subsets. Both are therefore
positive semi-definite. Between sets of vectors, the mean embedding
μ_A = (1/|A|) Σ_a φ(a) of a base kernel gives ⟨μ_A, μ_A′⟩, again an inner
product, and the squared distance between embeddings (the squared maximum mean
discrepancy) gives a Gaussian kernel.
"""

import numpy as np

from kernelref._validation import check_positive
from kernelref.kernels.base import Kernel
from kernelref.structured.base import ObjectKernel


def _as_set(x, name):
    if not isinstance(x, (set, frozenset)):
        raise TypeError(
            f"{name} must be a set or frozenset; got {type(x).__name__}. A list may "
            "repeat elements, which a set kernel cannot count: pass frozenset(x)."
        )
    return frozenset(x)


class IntersectionKernel(ObjectKernel):
    """k(A, A′) = |A ∩ A′| (label ``set-intersection``)."""

    def check_sample(self, x, name):
        return _as_set(x, name)

    def pair(self, x, y):
        return float(len(x & y))


class SubsetKernel(ObjectKernel):
    """k(A, A′) = 2^|A ∩ A′|, the number of common subsets (label ``set-subsets``)."""

    def check_sample(self, x, name):
        return _as_set(x, name)

    def pair(self, x, y):
        return 2.0 ** len(x & y)


class MeanEmbeddingKernel(ObjectKernel):
    """k(A, A′) = ⟨μ_A, μ_A′⟩ = 1/(|A||A′|) Σ_a Σ_a′ k₀(a, a′) (label
    ``set-mean-embedding``) for sets of vectors, each an (m, D) array.

    Positive semi-definite whenever the base kernel k₀ is.
    """

    def __init__(self, base_kernel):
        self.base_kernel = base_kernel

    def check_sample(self, x, name):
        if not isinstance(self.base_kernel, Kernel) or self.base_kernel.takes_objects:
            raise TypeError(
                "base_kernel must be a kernelref kernel on vectors; got "
                f"{self.base_kernel!r}."
            )
        try:
            A = np.asarray(x, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must be a set of vectors as an (m, D) float array; got "
                f"{type(x).__name__}."
            ) from None
        if A.ndim != 2:
            raise ValueError(
                f"{name} must be a set of vectors as an (m, D) array; got shape "
                f"{A.shape}."
            )
        if len(A) == 0:
            raise ValueError(
                f"{name} is an empty set; its mean embedding is undefined. "
                "Give every set at least one vector."
            )
        if not np.isfinite(A).all():
            raise ValueError(f"{name} contains NaN or infinity.")
        return A

    def pair(self, x, y):
        if x.shape[1] != y.shape[1]:
            raise ValueError(
                f"sets of vectors of different dimension ({x.shape[1]} and "
                f"{y.shape[1]}) cannot be compared; give every vector the same number "
                "of features."
            )
        return float(self.base_kernel(x, y).mean())


class MMDGaussianKernel(MeanEmbeddingKernel):
    """k(A, A′) = exp(−γ ‖μ_A − μ_A′‖²) (label ``set-mmd-gaussian``).

    ‖μ_A − μ_A′‖² = ⟨μ_A, μ_A⟩ + ⟨μ_A′, μ_A′⟩ − 2⟨μ_A, μ_A′⟩ is the squared
    distance between points of a Hilbert space, so (Schoenberg) the Gaussian
    of it is positive semi-definite for every γ > 0 when k₀ is.
    """

    def __init__(self, base_kernel, gamma=1.0):
        self.base_kernel = base_kernel
        self.gamma = gamma

    def pair(self, x, y):
        gamma = check_positive(self.gamma, "gamma")
        squared_mmd = super().pair(x, x) + super().pair(y, y) - 2.0 * super().pair(x, y)
        # rounding can leave a squared distance a few ulps below zero
        return float(np.exp(-gamma * max(squared_mmd, 0.0)))
