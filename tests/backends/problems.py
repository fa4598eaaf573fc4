"""Small classification problems shared by the backend SVM tests."""

import numpy as np


def classification(n, n_classes=2, seed=0):
    """n points in four inputs, labelled by the quantiles of a noisy nonlinear
    score into `n_classes` classes (0 and 1 for two)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    score = X[:, 0] * X[:, 1] + 0.5 * np.sin(2 * X[:, 2]) + 0.3 * rng.normal(size=n)
    if n_classes == 2:
        return X, np.where(score > 0, 1, 0)
    edges = np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1])
    return X, np.digitize(score, edges)
