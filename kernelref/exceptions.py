"""The warnings and errors of kernelref, defined once so that callers can
catch or filter them by class whichever model raised them."""


class ConvergenceWarning(UserWarning):
    """An iterative fit (SMO, Newton, evidence maximisation, conjugate
    gradients) stopped at its iteration limit before meeting its tolerance."""


class NotFittedError(ValueError, AttributeError):
    """An estimator was used before ``fit``."""


class NonFiniteError(ValueError, ArithmeticError):
    """A kernel value, gradient or objective became NaN or infinite during a
    fit: an iterative solver stops at once with this error (naming the cause)
    instead of looping on NaN or returning it."""
