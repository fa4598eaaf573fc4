"""Input validation shared by every public entry point.

Each check raises before any work starts, with a message that names the
argument, says what was wrong with it and how to fix it.
"""

import numbers

import numpy as np


class NotFittedError(ValueError, AttributeError):
    """An estimator was used before ``fit``."""


def check_array(X, name="X", *, min_samples=1):
    """Return `X` as a finite 2-D float64 array of shape (n_samples, n_features)."""
    if hasattr(X, "compute") and not isinstance(X, np.ndarray):
        X = X.compute()
    try:
        A = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be numeric array-like of shape (n_samples, n_features); "
            f"it could not be converted to float64 ({exc})."
        ) from None
    if A.ndim != 2:
        hint = " Reshape one feature with X.reshape(-1, 1)." if A.ndim == 1 else ""
        raise ValueError(
            f"{name} must be 2-D of shape (n_samples, n_features); got shape {A.shape}.{hint}"
        )
    if A.shape[0] < min_samples:
        raise ValueError(
            f"{name} has {A.shape[0]} samples; at least {min_samples} are needed."
        )
    if A.shape[1] == 0:
        raise ValueError(f"{name} has 0 features; give at least one column.")
    _check_finite(A, name)
    return A


def check_targets(y, n_samples, name="y"):
    """Return `y` as a finite float64 array with one row per sample (1-D or 2-D)."""
    if hasattr(y, "compute") and not isinstance(y, np.ndarray):
        y = y.compute()
    try:
        t = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric; it could not be converted ({exc}).") from None
    if t.ndim not in (1, 2):
        raise ValueError(
            f"{name} must be 1-D (n_samples,) or 2-D (n_samples, n_targets); got shape {t.shape}."
        )
    if t.shape[0] != n_samples:
        raise ValueError(
            f"{name} has {t.shape[0]} rows but X has {n_samples} samples; "
            "give one target per row of X."
        )
    _check_finite(t, name)
    return t


def _check_finite(A, name):
    bad = ~np.isfinite(A)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"{name} contains NaN or infinity (first at row {row}); "
            "remove or impute those entries before fitting."
        )


def check_positive(value, name, *, meaning=""):
    """Return `value` as a float after checking it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number; got {value!r}.")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        extra = f" {meaning}" if meaning else ""
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}.{extra}")
    return value


def check_n_features(X, n_features, name="X"):
    """Check that `X` has the number of columns the model was fitted with."""
    if X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features, but the model was fitted with "
            f"{n_features}; pass data with the same columns as in fit."
        )


def check_is_fitted(estimator, attribute):
    """Raise `NotFittedError` unless `estimator` has the fitted `attribute`."""
    if not hasattr(estimator, attribute):
        raise NotFittedError(
            f"This {type(estimator).__name__} is not fitted yet; call fit(X, y) first."
        )


def check_square_gram(K, name="K"):
    """Check a precomputed training Gram matrix: 2-D, square and finite."""
    K = check_array(K, name)
    if K.shape[0] != K.shape[1]:
        raise ValueError(
            f"with kernel='precomputed', {name} must be the square training Gram matrix "
            f"of shape (n_samples, n_samples); got shape {K.shape}."
        )
    return K


def check_classification_targets(y, n_samples, name="y"):
    """Return ``(classes, y_index)``: the sorted distinct labels of the 1-D `y`
    and each sample's index into them. At least two classes are required."""
    labels = np.asarray(y)
    if labels.ndim == 2 and labels.shape[1] == 1:
        raise ValueError(
            f"{name} must be 1-D of shape (n_samples,); got shape {labels.shape}. "
            "Pass y.ravel().")
    if labels.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n_samples,); got shape {labels.shape}.")
    if labels.shape[0] != n_samples:
        raise ValueError(
            f"{name} has {labels.shape[0]} labels but X has {n_samples} samples; "
            "give one label per row of X.")
    if labels.dtype.kind in "fc":
        _check_finite(labels, name)
    classes, y_index = np.unique(labels, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"{name} has a single class ({classes[0]!r}); a classifier needs samples "
            "of at least two classes.")
    return classes, y_index


def check_binary_labels(t, name="t"):
    """Return `t` as float64 after checking every entry is 0 or 1."""
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n_samples,); got shape {t.shape}.")
    _check_finite(t, name)
    if not np.all((t == 0) | (t == 1)):
        values = np.unique(t)[:5]
        raise ValueError(
            f"{name} must hold binary labels 0 and 1; got values {values.tolist()}. "
            "Map the positive class to 1 and the other to 0, e.g. t = (y == positive)."
        )
    return t
