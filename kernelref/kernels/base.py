"""The kernel contract: ``k(X, Y=None)``, ``k.diag(X)``, named hyperparameters
and gradients of the Gram matrix with respect to their logarithms.

A hyperparameter is a positive constructor argument that a model may learn
(``gamma`` of the Gaussian kernel, say). Models optimise its logarithm, so the
gradients returned here are ``∂K/∂log θ = θ ∂K/∂θ`` (label ``kernel-log-grad``
in the book). Each hyperparameter ``name`` has bounds ``name_bounds`` — a pair
of positive numbers or ``"fixed"`` — as in scikit-learn.
"""

import abc
import copy
import inspect
import numbers

import numpy as np
import scipy.sparse as sp

from kernelref.base import ParamsMixin

DEFAULT_BOUNDS = (1e-5, 1e5)

#: What ``check_kernel_param`` accepts for each kind of hyperparameter.
PARAM_KINDS = {
    "positive": "finite and > 0",
    "nonnegative": "finite and >= 0",
    "finite": "finite",
    "degree": "an integer >= 1",
    "kernel": "a kernelref.kernels.Kernel",
}


def check_kernel_param(kernel, name, value, kind):
    """Check hyperparameter `name` of `kernel` (a Kernel or its class name),
    of one of the `PARAM_KINDS`; scalars and arrays (ARD) alike.

    Raises ``TypeError`` for a value of the wrong type and ``ValueError`` for
    one out of range, with the kernel, the parameter and the fix named, so a
    bad value is refused where it is set rather than turning into NaN in a
    solver. Returns `value` unchanged.
    """
    owner = kernel if isinstance(kernel, str) else type(kernel).__name__
    wanted = PARAM_KINDS[kind]
    if kind == "kernel":
        if not isinstance(value, Kernel):
            raise TypeError(f"{owner}: {name} must be {wanted}; got {value!r}.")
        return value
    if kind == "degree":
        integral = isinstance(value, numbers.Integral) or (
            isinstance(value, numbers.Real) and float(value).is_integer()
        )
        if isinstance(value, bool) or not integral or value < 1:
            raise ValueError(
                f"{owner}: {name} must be {wanted}; got {_plain(value)!r}. A "
                "fractional power of a negative xᵀx′ is not real; round the degree."
            )
        return value
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or isinstance(value, (bool, str)) or array.size == 0:
        raise TypeError(f"{owner}: {name} must be a number ({wanted}); got {value!r}.")
    low_ok = {"positive": array > 0, "nonnegative": array >= 0}.get(kind, True)
    if not (np.all(np.isfinite(array)) and np.all(low_ok)):
        raise ValueError(f"{owner}: {name} must be {wanted}; got {_plain(value)!r}.")
    if array.ndim and name not in getattr(kernel, "array_params", ()):
        raise ValueError(
            f"{owner}: {name} must be a single number; got an array of shape "
            f"{array.shape}. One value per input (automatic relevance determination) "
            "is ARD(gamma=...), or Matern/RationalQuadratic with an array "
            "length_scale."
        )
    return value


def check_bounds(kernel, name, value):
    """Check the bounds `name` (``<hyperparameter>_bounds``) of `kernel`: the
    string ``"fixed"`` or one pair (low, high) with 0 < low <= high, which bounds
    every entry of the hyperparameter (all length scales of an ARD kernel); high
    may be infinite (no upper bound), low may not.

    ``Kernel.bounds`` asks, so a model refuses bad bounds before it optimises,
    with the kernel, the bounds and the fix named rather than an unpacking error.
    Returns `value` unchanged.
    """
    if isinstance(value, str):
        if value == "fixed":
            return value
        pair = None
    else:
        try:
            pair = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            pair = None
    fine = (
        pair is not None
        and pair.shape == (2,)
        and np.isfinite(pair[0])
        and 0 < pair[0] <= pair[1]
    )
    if not fine:
        raise ValueError(
            f"{type(kernel).__name__}: {name} must be 'fixed' or one pair (low, "
            f"high) with 0 < low <= high, low finite (the default is "
            f"{DEFAULT_BOUNDS}); got {_plain(value)!r}."
        )
    return value


def restart_bounds(kernel, n_restarts):
    """``kernel.bounds`` (log-bounds, shape (len(theta), 2)) for an optimiser that
    draws `n_restarts` starts uniformly inside them: refused unless finite when
    ``n_restarts > 0`` (an infinite bound has no uniform draw)."""
    bounds = kernel.bounds  # raises, naming the bounds, if malformed
    if n_restarts > 0 and not np.isfinite(bounds).all():
        raise ValueError(
            "n_restarts > 0 draws starts inside the kernel's bounds, which "
            f"must then be finite; got log-bounds {bounds.tolist()}."
        )
    return bounds


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


class Kernel(ParamsMixin, abc.ABC):
    """Base class. Subclasses set ``hyperparameter_names`` and implement
    ``__call__``, ``diag`` and ``_gradient_terms``."""

    #: names of the positive, learnable constructor arguments
    hyperparameter_names = ()

    #: parameter name → kind of ``check_kernel_param``: checked whenever the
    #: attribute is set (construction, ``set_params``, ``theta``, assignment)
    param_constraints = {}

    #: the parameters that may be arrays (ARD scales, a matrix); all others
    #: must be single numbers
    array_params = ()

    def __setattr__(self, name, value):
        kind = type(self).param_constraints.get(name)
        if kind is not None:
            check_kernel_param(self, name, value, kind)
        super().__setattr__(name, value)

    #: True for kernels computed from sparse products, which take ``scipy.sparse`` X
    accepts_sparse = False

    @property
    def takes_objects(self):
        """True for a kernel on objects (sets, strings, graphs): estimators then
        pass the samples as a 1-D object array instead of a float matrix. Leaf
        kernels on objects set it to True; a composite takes objects when a
        part does."""
        return any(child.takes_objects for _, child in self._children())

    def check_sample(self, x, name):
        """One sample as this kernel computes with it, or an error naming
        `name`. Only kernels on objects are asked; a composite asks its parts."""
        for _, child in self._children():
            x = child.check_sample(x, name)
        return x

    @abc.abstractmethod
    def __call__(self, X, Y=None):
        """The Gram matrix K_nm = k(x_n, y_m); ``Y=None`` means ``Y = X``."""

    @abc.abstractmethod
    def diag(self, X):
        """The diagonal k(x_n, x_n) of the Gram matrix, without forming it."""

    # -- hyperparameters on the log scale -----------------------------------------
    def _children(self):
        """Sub-kernels of a composite, as ``(parameter name, kernel)``."""
        return []

    def _bounds_of(self, name):
        return getattr(self, f"{name}_bounds", DEFAULT_BOUNDS)

    def _own(self):
        return [
            (name, int(np.size(getattr(self, name))))
            for name in self.hyperparameter_names
            if not (
                isinstance(self._bounds_of(name), str)
                and self._bounds_of(name) == "fixed"
            )
        ]

    @property
    def hyperparameters(self):
        """Free hyperparameters as ``(name, size)``; nested names joined by ``__``."""
        out = list(self._own())
        for prefix, child in self._children():
            out += [(f"{prefix}__{name}", size) for name, size in child.hyperparameters]
        return out

    @property
    def theta(self):
        """Logarithms of the free hyperparameters, flattened (own first, then
        children)."""
        parts = [
            np.log(np.ravel(getattr(self, name)).astype(float))
            for name, _ in self._own()
        ]
        parts += [child.theta for _, child in self._children()]
        return np.concatenate(parts) if parts else np.empty(0)

    @theta.setter
    def theta(self, theta):
        theta = np.asarray(theta, dtype=float)
        if theta.shape != (len(self.theta),):
            raise ValueError(
                f"theta must have shape ({len(self.theta)},); got {theta.shape}."
            )
        start = 0
        for name, size in self._own():
            with np.errstate(over="ignore"):  # an overflow is refused by name below
                value = np.exp(theta[start : start + size])
            setattr(
                self, name, value if np.ndim(getattr(self, name)) else float(value[0])
            )
            start += size
        for _, child in self._children():
            size = len(child.theta)
            child.theta = theta[start : start + size]
            start += size

    @property
    def bounds(self):
        """Log-bounds of the free hyperparameters, shape (len(theta), 2)."""
        rows = []
        for name, size in self._own():
            low, high = check_bounds(self, f"{name}_bounds", self._bounds_of(name))
            rows += [(np.log(low), np.log(high))] * size
        parts = [np.array(rows).reshape(-1, 2)] + [
            c.bounds for _, c in self._children()
        ]
        return np.concatenate(parts)

    def clone_with_theta(self, theta):
        """A deep copy of this kernel with hyperparameters ``exp(theta)``."""
        new = copy.deepcopy(self)
        new.theta = theta
        return new

    # -- gradients ----------------------------------------------------------------
    def _gradient_terms(self, X):
        """Yield ∂K/∂log θ_j, one (n, n) matrix per entry of ``theta``."""
        return iter(())

    def gradient(self, X):
        """All log-hyperparameter gradients, shape (len(theta), n, n)."""
        X = X if self.takes_objects or sp.issparse(X) else np.asarray(X, dtype=float)
        terms = list(self._gradient_terms(X))
        return np.array(terms) if terms else np.empty((0, len(X), len(X)))

    def gradient_dot(self, X, W, K=None):
        """The contractions Σ_ab W_ab ∂K_ab/∂log θ_j for every j.

        Models need only these (the GP evidence gradient is ½ tr(W ∂K)), so
        subclasses may override with an O(n²)-memory form; this default makes
        one gradient matrix at a time. `K`, this kernel's Gram matrix at X when
        the caller already has it, spares kernels whose gradient is a multiple
        of K (the Gaussian family, scaled kernels) from computing it again.
        """
        X = X if self.takes_objects or sp.issparse(X) else np.asarray(X, dtype=float)
        return np.array([np.vdot(W, G) for G in self._gradient_terms(X)])

    # -- composition (book: kernel construction rules) ------------------------------
    def __add__(self, other):
        from kernelref.kernels.compose import Constant, Sum

        if isinstance(other, numbers.Real):
            other = Constant(other)
        _check_same_domain(self, other, "+")
        return Sum(self, other)

    __radd__ = __add__

    def __mul__(self, other):
        from kernelref.kernels.compose import Product, Scaled

        if isinstance(other, numbers.Real):
            return Scaled(other, self)
        _check_same_domain(self, other, "*")
        return Product(self, other)

    __rmul__ = __mul__

    def __pow__(self, exponent):
        """k ** p = k^p elementwise for an integer p >= 1: ``PolynomialOf`` with the
        single coefficient 1 of the p-th power (label ``rule-polynomial``; a power
        of a kernel is a product of kernels). scikit-learn's ``Exponentiation``."""
        from kernelref.kernels.compose import PolynomialOf

        integral = isinstance(exponent, numbers.Integral) and not isinstance(
            exponent, bool
        )
        if not integral or exponent < 1:
            raise ValueError(
                f"k ** p needs an integer p >= 1; got {exponent!r}. A fractional "
                "power of a kernel need not be positive semi-definite (a negative "
                "k(x, x') has no real root); use an integer power, or scale the "
                "kernel's own hyperparameters (RBF(gamma) ** 1/2 is RBF(gamma/2))."
            )
        return PolynomialOf(self, [0.0] * exponent + [1.0])

    def __eq__(self, other):
        return type(self) is type(other) and _params_equal(
            self.get_params(deep=False), other.get_params(deep=False)
        )

    def __hash__(self):
        return hash(repr(self))

    def spec(self):
        """A JSON-serialisable description: class name and parameters, nested."""
        params = {}
        for name, value in self.get_params(deep=False).items():
            if isinstance(value, Kernel):
                params[name] = value.spec()
            elif callable(value):
                params[name] = (
                    f"{value.__module__}.{getattr(value, '__qualname__', repr(value))}"
                )
            elif isinstance(value, (np.ndarray, list, tuple)):
                params[name] = np.asarray(value).tolist()
            else:
                params[name] = value
        return {"class": type(self).__name__, "params": params}

    @classmethod
    def from_spec(cls, spec):
        """The kernel a ``spec()`` describes, e.g. one read back from JSON.

        The class is looked up by name among kernelref's kernels only (a
        registry of ``Kernel`` subclasses), so a spec can name no other code.
        """
        if not (isinstance(spec, dict) and set(spec) == {"class", "params"}):
            raise ValueError(
                "a kernel spec is {'class': NAME, 'params': {...}}, as Kernel.spec() "
                f"returns; got {spec!r}."
            )
        registry = _kernel_registry()
        if spec["class"] not in registry:
            raise ValueError(
                f"unknown kernel {spec['class']!r}; kernels are {sorted(registry)}."
            )
        kernel_class = registry[spec["class"]]
        valid = kernel_class._param_names()
        unknown = sorted(set(spec["params"]) - set(valid))
        if unknown and not _takes_any(kernel_class):
            raise ValueError(
                f"{spec['class']} has no parameter {unknown[0]!r}; its parameters "
                f"are {valid}."
            )
        params = {
            name: cls.from_spec(value) if isinstance(value, dict) else value
            for name, value in spec["params"].items()
        }
        return kernel_class(**params)


def _takes_any(cls):
    """Whether ``cls.__init__`` takes ``**kwargs`` (any parameter name)."""
    return any(
        p.kind is p.VAR_KEYWORD
        for p in inspect.signature(cls.__init__).parameters.values()
    )


def _kernel_registry():
    """Every concrete kernel class of kernelref, by class name."""
    import kernelref.kernels  # noqa: F401  (the modules that define kernels)
    import kernelref.structured  # noqa: F401

    registry, todo = {}, [Kernel]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("kernelref.") and not inspect.isabstract(cls):
            registry[cls.__name__] = cls
    return registry


def _check_same_domain(k1, k2, op):
    """Refuse to combine a kernel on objects with one on vectors: they cannot
    be evaluated on the same samples. The constant kernel ignores its inputs and
    goes with either."""
    from kernelref.kernels.compose import Constant

    if isinstance(k1, Constant) or isinstance(k2, Constant):
        return
    if isinstance(k2, Kernel) and k1.takes_objects != k2.takes_objects:
        on = {True: "objects", False: "vectors"}
        raise TypeError(
            f"cannot form {type(k1).__name__} {op} {type(k2).__name__}: the first "
            f"takes {on[k1.takes_objects]}, the second {on[k2.takes_objects]}. Combine "
            "kernels on the same kind of sample."
        )


def _params_equal(a, b):
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, Kernel) or isinstance(y, Kernel):
            if x != y:
                return False
        elif isinstance(x, str) or isinstance(y, str):
            if x != y:
                return False
        elif callable(x) or callable(y):
            if x is not y:
                return False
        elif not np.array_equal(np.asarray(x), np.asarray(y)):
            return False
    return True


def as_2d(X, name="X"):
    """X as a float64 2-D array; kernels accept a 1-D array as one feature."""
    A = np.asarray(X, dtype=np.float64)
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features); got shape {A.shape}."
        )
    return A


def squared_distances(X, Y=None):
    """‖x_n − y_m‖² for all pairs, as ‖x‖² + ‖y‖² − 2xᵀy clipped at zero, after
    centring both sets on the mean of `X`.

    The expansion loses to cancellation about 1e-16·(‖x‖² + ‖y‖²) absolute; on
    inputs far from the origin (years such as 1958–2001) that is ~1e-9, which is
    more than the squared distance of close pairs. Centring first makes it
    relative to the spread of the data instead, so shifting X and Y by a
    constant changes the result only by the rounding of that subtraction.
    Writes in place to keep one (n, m) temporary; the diagonal is exactly zero
    when ``Y`` is ``None``.
    """
    X = as_2d(X)
    same = Y is None
    centre = X.mean(axis=0) if len(X) else np.zeros(X.shape[1])
    X = X - centre
    Y = X if same else as_2d(Y, "Y") - centre
    D = X @ Y.T
    # With Y = X the norms are the product's own diagonal: a duplicated row then
    # gives G_ii + G_jj − 2G_ij = 0 exactly, as all three are the same sum.
    x_norms = np.diag(D).copy() if same else np.einsum("ij,ij->i", X, X)
    y_norms = x_norms if same else np.einsum("ij,ij->i", Y, Y)
    D *= -2.0
    D += x_norms[:, None]
    D += y_norms[None, :]
    np.maximum(D, 0.0, out=D)
    if same:
        np.fill_diagonal(D, 0.0)
    return D
