"""Explicit feature maps whose inner products are kernels.

The polynomial kernel (γ xᵀz + c)^d expands by the multinomial theorem into
Σ over exponent vectors (j₀, j₁, …, j_D) with Σ j = d of
d!/(j₀! … j_D!) · c^{j₀} Π_i (γ^{1/2} x_i)^{j_i} (γ^{1/2} z_i)^{j_i}, so
φ(x) has one coordinate per exponent vector (label ``poly-feature-map``);
for D = 2, d = 2, c = 0 it is (x₁², √2 x₁x₂, x₂²).
"""

from itertools import combinations_with_replacement
from math import factorial

import numpy as np

from kernelref.kernels.base import as_2d


def polynomial_feature_map(X, degree=2, gamma=1.0, coef0=0.0):
    """φ(X) with φ(x)ᵀφ(z) = (γ xᵀz + c)^d; shape (n, C(D + d, d)) or fewer if c = 0."""
    X = as_2d(X)
    n, D = X.shape
    # column 0 stands for the constant √c, columns 1..D for √γ x_i
    Z = np.hstack([np.full((n, 1), np.sqrt(coef0)), np.sqrt(gamma) * X])
    columns = []
    for combo in combinations_with_replacement(range(D + 1), degree):
        if coef0 == 0 and 0 in combo:
            continue
        counts = np.bincount(combo, minlength=D + 1)
        multinomial = factorial(degree) / np.prod([factorial(c) for c in counts])
        columns.append(np.sqrt(multinomial) * np.prod(Z[:, list(combo)], axis=1))
    return np.column_stack(columns)
