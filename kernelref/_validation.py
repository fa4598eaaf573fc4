"""Input validation shared by every public entry point.

Each check raises before any work starts, with a message that names the
argument, says what was wrong with it and how to fix it.
"""

import numbers

import numpy as np
import scipy.sparse as sp

from kernelref.exceptions import (  # noqa: F401  (raised here)
    NonFiniteError,
    NotFittedError,
)
from kernelref.kernels import accepts_sparse


def plain(value):
    """A numpy scalar as the Python number it holds, so that messages print
    ``1.0`` rather than ``np.float64(1.0)``; anything else unchanged."""
    return value.item() if isinstance(value, np.generic) else value


def _refuse_complex(A, name):
    dtype = getattr(A, "dtype", None)
    if dtype is None or not isinstance(dtype, np.dtype):
        dtype = np.asarray(A).dtype
    if dtype.kind == "c":
        raise ValueError(
            f"{name} is complex (dtype {dtype}). Complex data not supported: "
            "the kernels are real; pass the real part, or the real and imaginary parts "
            "as separate columns."
        )


def check_array(X, name="X", *, min_samples=1, accept_sparse=False):
    """Return `X` as a finite 2-D float64 array of shape (n_samples, n_features).

    A ``scipy.sparse`` X is refused unless `accept_sparse`; then it is returned
    as a float64 CSR matrix, never made dense.
    """
    if sp.issparse(X):
        return _check_sparse(X, name, min_samples, accept_sparse)
    if hasattr(X, "compute") and not isinstance(X, np.ndarray):
        X = X.compute()
    _refuse_complex(X, name)
    try:
        A = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be numeric array-like of shape (n_samples, n_features); "
            f"it could not be converted to float64 ({exc}).{_text_columns(X)}"
        ) from None
    if A.ndim != 2:
        hint = (
            " Reshape your data with X.reshape(-1, 1) for one feature."
            if A.ndim == 1
            else ""
        )
        raise ValueError(
            f"{name} must be 2-D of shape (n_samples, n_features); got shape "
            f"{A.shape}.{hint}"
        )
    _check_shape(A, name, min_samples)
    _check_finite(A, name)
    return A


def _text_columns(X):
    """For a data frame, which of its columns are not numbers, or else which
    miss values (pandas' NA; a sentence to append to a message; empty for
    anything else)."""
    dtypes = getattr(X, "dtypes", None)
    if dtypes is None or not hasattr(dtypes, "items"):
        return ""
    named = [
        str(column)
        for column, dtype in dtypes.items()
        if getattr(dtype, "kind", "O") not in "biuf"  # pandas' Int64 has kind 'i'
    ]
    if not named:
        missing = [str(c) for c, gap in X.isna().any().items() if gap]
        return (
            f" The columns {missing} have missing values: remove or impute them."
            if missing
            else ""
        )
    return (
        f" The columns {named} are not numbers: encode them as numbers "
        "(e.g. one-hot) or drop them."
    )


def _check_shape(A, name, min_samples):
    if A.shape[0] < min_samples:
        raise ValueError(
            f"{name} has {A.shape[0]} samples (shape={A.shape}) while a minimum of "
            f"{min_samples} is required."
        )
    if A.shape[1] == 0:
        raise ValueError(
            f"{name} has 0 feature(s) (shape={A.shape}) while a minimum of 1 is "
            "required; give at least one column."
        )


#: kernelref's estimators whose fit takes scipy.sparse X with a kernel computed
#: from inner products (``sparse_input = True``); a test keeps this list true.
SPARSE_ESTIMATORS = "the SVMs, KernelRidge, KernelPCA and the Gaussian processes"

#: the kernels computed from inner products and norms alone, by name and as
#: Kernel objects (``accepts_sparse``); a test keeps this list true.
SPARSE_KERNELS = (
    "'linear', 'poly', 'rbf' or 'sigmoid' by name, or the Kernel objects Linear, "
    "Polynomial, RBF, Sigmoid, DotProduct, Constant, White and kernels composed of "
    "these"
)


def _check_sparse(X, name, min_samples, accept_sparse):
    if not accept_sparse:
        raise TypeError(
            f"{name} is a scipy.sparse matrix, but this path needs dense input. "
            f"Pass a dense array ({name}.toarray()). The estimators that take sparse "
            f"X are {SPARSE_ESTIMATORS}, with a kernel computed from inner products: "
            f"{SPARSE_KERNELS}."
        )
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D of shape (n_samples, n_features); got shape {X.shape}."
        )
    _refuse_complex(X, name)  # astype(float64) would drop the imaginary parts
    try:
        A = X.tocsr().astype(np.float64, copy=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} could not be converted to float64 ({exc}).") from None
    if not A.has_canonical_format:
        A = A.copy()  # sum_duplicates works in place: not on the user's X
        A.sum_duplicates()
    if A.shape[0] < min_samples:
        raise ValueError(
            f"{name} has {A.shape[0]} samples; at least {min_samples} are needed."
        )
    if A.shape[1] == 0:
        raise ValueError(f"{name} has 0 features; give at least one column.")
    bad = ~np.isfinite(A.data)
    if bad.any():
        row = int(np.searchsorted(A.indptr, np.flatnonzero(bad)[0], side="right") - 1)
        raise ValueError(
            f"{name} contains NaN or infinity (first at row {row}); "
            "remove or impute those entries (no estimator takes missing values)."
        )
    return A


def takes_objects(kernel):
    """True when `kernel` compares arbitrary objects (sets, strings, graphs)
    rather than rows of a float matrix; kernel names such as ``"rbf"`` do not."""
    return bool(getattr(kernel, "takes_objects", False))


def check_samples(X, kernel, name="X", *, min_samples=1, accept_sparse=False):
    """The samples as `kernel` takes them.

    For a kernel on vectors this is `check_array`: a finite 2-D float matrix.
    `accept_sparse` says when a ``scipy.sparse`` X is taken (as CSR): ``True``,
    ``False`` (the path needs dense X), or ``"kernel"``: when `kernel` is computed
    from inner products (``kernelref.kernels.accepts_sparse``), else refused with
    a message that names the kernel.
    For a kernel on objects (``kernel.takes_objects``) it is a 1-D object array
    with one sample per entry, each passed through ``kernel.check_sample``,
    which returns the sample in the form the kernel computes with or raises.
    All samples must then have one type: a kernel on strings does not compare
    a string with a tuple, so a mixture is refused rather than scored zero.
    """
    if sp.issparse(X):
        accept_sparse = _sparse_taken(kernel, name, accept_sparse)
    if not takes_objects(kernel):
        return check_array(
            X, name, min_samples=min_samples, accept_sparse=accept_sparse
        )
    if hasattr(X, "compute") and not isinstance(X, np.ndarray):
        X = X.compute()
    if isinstance(X, (str, bytes, set, frozenset, dict)) or not hasattr(X, "__len__"):
        raise TypeError(
            f"{name} must be a list (or 1-D array) of samples for the kernel "
            f"{type(kernel).__name__}; got a {type(X).__name__}. Pass a list, "
            "e.g. [x] for a single sample."
        )
    if len(X) < min_samples:
        raise ValueError(
            f"{name} has {len(X)} samples; at least {min_samples} are needed."
        )
    samples = np.empty(len(X), dtype=object)
    for i, x in enumerate(X):
        samples[i] = kernel.check_sample(x, f"{name}[{i}]")
    kinds = sorted({type(x).__name__ for x in samples})
    if len(kinds) > 1:
        raise TypeError(
            f"{name} mixes samples of types {kinds}; the kernel "
            f"{type(kernel).__name__} compares samples of one type. Convert them "
            "all to one of these types."
        )
    return samples


def _sparse_taken(kernel, name, accept_sparse):
    """Whether a scipy.sparse `name` is taken with `kernel` under the rule
    `accept_sparse` of ``check_samples``; raises where the kernel is the reason
    it is not."""
    if isinstance(kernel, str) and kernel == "precomputed":
        _refuse_sparse_gram(name)
    if takes_objects(kernel):
        raise TypeError(
            f"{name} is a scipy.sparse matrix, but the kernel "
            f"{type(kernel).__name__} compares objects, not rows of a matrix. Pass "
            "a list of samples, one per entry."
        )
    if accept_sparse != "kernel":
        return bool(accept_sparse)
    if not accepts_sparse(kernel):
        raise TypeError(
            f"{name} is a scipy.sparse matrix, but the kernel {kernel!r} is not "
            f"computed from inner products and needs dense input. Pass a dense "
            f"array ({name}.toarray()), or use a kernel that takes sparse X: "
            f"{SPARSE_KERNELS}."
        )
    return True


def _refuse_sparse_gram(name):
    raise TypeError(
        f"{name} is a scipy.sparse matrix, but with kernel='precomputed' it is a "
        f"Gram matrix, which is taken dense. Pass {name}.toarray()."
    )


def record_n_features(estimator, X):
    """Set ``n_features_in_`` for a float matrix. Samples that are objects have
    no feature count, so any value left by an earlier fit is removed."""
    if X.ndim == 2:
        estimator.n_features_in_ = X.shape[1]
    elif hasattr(estimator, "n_features_in_"):
        del estimator.n_features_in_


def check_targets(y, n_samples, name="y"):
    """Return `y` as a finite float64 array with one row per sample (1-D or 2-D)."""
    _require_targets(y, name)
    if hasattr(y, "compute") and not isinstance(y, np.ndarray):
        y = y.compute()
    _refuse_complex(y, name)
    try:
        t = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be numeric; it could not be converted ({exc})."
        ) from None
    if t.ndim not in (1, 2):
        raise ValueError(
            f"{name} must be 1-D (n_samples,) or 2-D (n_samples, n_targets); got shape "
            f"{t.shape}."
        )
    if t.shape[0] != n_samples:
        what = {"y": "target", "sample_weight": "weight"}.get(name, "row")
        raise ValueError(
            f"{name} has {t.shape[0]} rows but X has {n_samples} samples; "
            f"give one {what} per row of X."
        )
    _check_finite(t, name)
    return t


def check_sample_weight(sample_weight, n_samples, meaning):
    """Return `sample_weight` as float64 weights, one ≥ 0 per sample and not all
    zero. A single number (not a bool) is the weight of every sample, as
    scikit-learn's ``_check_sample_weight`` takes it; `meaning` says what a
    weight does in this estimator, for the message."""
    single = isinstance(sample_weight, numbers.Real) and not isinstance(
        sample_weight, bool
    )
    if single:
        given = float(sample_weight)
        sample_weight = np.full(n_samples, given)
    w = check_targets(sample_weight, n_samples, "sample_weight")
    if w.ndim != 1 or np.any(w < 0) or not np.any(w > 0):
        # a single number is no 1-D array: say what it must be
        one = "A single number is every sample's weight: give one > 0, not"
        raise ValueError(
            "sample_weight must be 1-D with one weight ≥ 0 per sample, not all zero; "
            + meaning
            + (f" {one} {given!r}." if single else "")
        )
    return w


def _require_targets(y, name):
    if y is None:
        raise ValueError(
            f"{name} is None: this estimator requires y to be passed, but the target y "
            "is None; give one target per row of X."
        )


def _check_finite(A, name):
    bad = ~np.isfinite(A)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"{name} contains NaN or infinity (first at row {row}); "
            "remove or impute those entries (no estimator takes missing values)."
        )


def check_positive(value, name, *, meaning=""):
    """Return `value` as a float after checking it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number; got {plain(value)!r}.")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        extra = f" {meaning}" if meaning else ""
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}.{extra}")
    return value


def check_integer(value, name, *, low=1, meaning=""):
    """Return `value` as an int after checking it is an integer ≥ `low` (not a bool)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < low
    ):
        wanted = "a positive integer" if low == 1 else f"an integer ≥ {low}"
        extra = f" {meaning}" if meaning else ""
        raise ValueError(f"{name} must be {wanted}; got {plain(value)!r}.{extra}")
    return int(value)


def check_n_features(X, n_features, name="X"):
    """Check that `X` has the number of columns the model was fitted with."""
    if X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features, but it is expecting {n_features} "
            f"features as input: the model was fitted with {n_features}; pass data "
            "with the same columns as in fit."
        )


def check_is_fitted(estimator, attribute):
    """Raise `NotFittedError` unless `estimator` has the fitted `attribute`."""
    if not hasattr(estimator, attribute):
        raise NotFittedError(
            f"This {type(estimator).__name__} is not fitted yet; call fit(X, y) first."
        )


def check_training_samples(X, kernel, name="X", *, accept_sparse=False):
    """The training samples as an estimator's `kernel` takes them (``check_samples``),
    or, for ``kernel="precomputed"``, the square training Gram matrix."""
    if isinstance(kernel, str) and kernel == "precomputed":
        return check_square_gram(X, name)
    return check_samples(X, kernel, name, accept_sparse=accept_sparse)


def check_square_gram(K, name="K"):
    """Check a precomputed training Gram matrix: 2-D, square, finite and symmetric."""
    if sp.issparse(K):
        _refuse_sparse_gram(name)
    K = check_array(K, name)
    if K.shape[0] != K.shape[1]:
        raise ValueError(
            f"with kernel='precomputed', {name} must be the square training Gram "
            f"matrix of shape (n_samples, n_samples); got shape {K.shape}."
        )
    check_symmetric(K, name, "with kernel='precomputed'")
    return K


#: A Gram matrix is symmetric when every |K_nm − K_mn| is at most this fraction
#: of max |K|; a kernel evaluated in floating point is symmetric to ~1e-16.
SYMMETRY_RTOL = 1e-10


def check_symmetric(K, name, context):
    """Refuse a Gram matrix with K_nm ≠ K_mn beyond rounding, naming the worst pair.

    SMO's steps decrease the dual objective only for a symmetric Q; with a
    non-symmetric one it can cycle for ever.
    """
    asymmetry = np.abs(K - K.T)
    worst = float(asymmetry.max(initial=0.0))
    if worst > SYMMETRY_RTOL * max(float(np.abs(K).max(initial=0.0)), 1e-300):
        n, m = np.unravel_index(int(asymmetry.argmax()), K.shape)
        raise ValueError(
            f"{context}, {name} must be a symmetric Gram matrix, but {name}[{n}, {m}] "
            f"= {K[n, m]:.6g} and {name}[{m}, {n}] = {K[m, n]:.6g}; a kernel is "
            "symmetric, k(x, x') = k(x', x). Pass (K + K.T) / 2 if the difference is "
            "rounding."
        )


def check_gram(K, kernel, shape, name="the kernel matrix"):
    """Check what a kernel object returned: an array of `shape`, every entry finite.

    A user kernel returning the wrong shape, or a kernel whose values overflow
    (1e300 in X, a huge gamma), is stopped here, before a solver meets it, with
    the kernel, its parameters and the first bad row in the message. Returns
    `K` as float64.
    """
    K = np.asarray(K)
    if K.shape != tuple(shape):
        raise ValueError(
            f"the kernel {kernel!r} returned {name} of shape {K.shape}; expected "
            f"{tuple(shape)} (a row per sample of the first argument, a column per "
            "sample of the second). Fix the kernel's __call__."
        )
    K = np.asarray(K, dtype=np.float64)
    bad = ~np.isfinite(K)
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise NonFiniteError(
            f"the kernel {kernel!r} gave a non-finite value ({K[row, column]}) in "
            f"{name}, first at row {row}, column {column}: it overflows on these "
            "inputs. Scale X (e.g. standardise its columns) or change the kernel's "
            "parameters."
        )
    return K


def check_classification_targets(y, n_samples, name="y"):
    """Return ``(classes, y_index)``: the sorted distinct labels of the 1-D `y`
    and each sample's index into them. At least two classes are required;
    continuous (non-integral float) values are refused as not being labels."""
    _require_targets(y, name)
    labels = np.asarray(y)
    if labels.ndim == 2 and labels.shape[1] == 1:
        raise ValueError(
            f"{name} must be 1-D of shape (n_samples,); got shape {labels.shape}. "
            "Pass y.ravel()."
        )
    if labels.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D of shape (n_samples,); got shape {labels.shape}."
        )
    if labels.shape[0] != n_samples:
        raise ValueError(
            f"{name} has {labels.shape[0]} labels but X has {n_samples} samples; "
            "give one label per row of X."
        )
    _refuse_complex(labels, name)
    if labels.dtype.kind == "f":
        _check_finite(labels, name)
        fractional = labels != np.round(labels)
        if fractional.any():
            raise ValueError(
                f"{name} holds continuous values such as "
                f"{plain(labels[fractional][0])!r}, not class labels (Unknown label "
                "type: continuous); a classifier needs discrete labels. Use a "
                "regressor, or convert y to labels (integers or strings)."
            )
    classes, y_index = np.unique(labels, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"{name} has a single class ({plain(classes[0])!r}): there is no other "
            "class to tell it from (one class only); a classifier needs samples of at "
            "least two classes."
        )
    return classes, y_index


def check_binary_labels(t, name="t"):
    """Return `t` as float64 after checking every entry is 0 or 1."""
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D of shape (n_samples,); got shape {t.shape}."
        )
    _check_finite(t, name)
    if not np.all((t == 0) | (t == 1)):
        values = np.unique(t)[:5]
        raise ValueError(
            f"{name} must hold binary labels 0 and 1; got values {values.tolist()}. "
            "Map the positive class to 1 and the other to 0, e.g. t = (y == positive)."
        )
    return t


def evaluate_kernel(kernel, X, Y=None):
    """``kernel(X, Y)``, checked by ``check_gram``: shape (len X, len Y) and finite.

    The estimators compute their Gram matrices through this, so that a user
    kernel of the wrong shape, or values that overflow, are refused where they
    arise instead of failing far away or returning NaN.
    """
    n = X.shape[0] if hasattr(X, "shape") else len(X)
    m = n if Y is None else (Y.shape[0] if hasattr(Y, "shape") else len(Y))
    name = "K(X, X)" if Y is None else "K(X, Y)"
    # Overflow is not warned about: a non-finite entry is refused by check_gram.
    with np.errstate(over="ignore", invalid="ignore"):
        K = kernel(X, Y)
    return check_gram(K, kernel, (n, m), name)


def check_same_kind(X, Y, kernel):
    """Refuse samples `Y` of another type than the samples `X` they are compared
    with (strings against tuples, say): a kernel on objects would score every
    such pair as unrelated, and a model fitted on one type would predict
    nonsense for the other without a word."""
    kinds_X = sorted({type(x).__name__ for x in X})
    kinds_Y = sorted({type(y).__name__ for y in Y})
    if len(X) and len(Y) and kinds_X != kinds_Y:
        raise TypeError(
            f"the kernel {type(kernel).__name__} is asked to compare samples of type "
            f"{kinds_Y} with samples of type {kinds_X} (e.g. those it was fitted on); "
            "convert them to the same type."
        )


def check_finite_values(where, iteration, **values):
    """Stop an iterative fit at once when one of the named `values` (arrays or
    numbers: an objective, a gradient, a noise level) is NaN or infinite.

    A NaN compares false with every tolerance, so a loop that tests convergence
    by ``change < tol`` would otherwise run to its cap and return NaN. Raises
    ``NonFiniteError`` naming the fit, the iteration and the quantity.
    """
    for name, value in values.items():
        if not np.all(np.isfinite(value)):
            raise NonFiniteError(
                f"{where} stopped at iteration {iteration}: {name} is not finite "
                f"({np.ravel(value)[~np.isfinite(np.ravel(value))][0]}). The kernel "
                "matrix or the targets overflow; scale X and y or change the kernel's "
                "parameters."
            )
