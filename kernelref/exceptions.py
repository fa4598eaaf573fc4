"""The warnings and errors of kernelref, defined once so that callers can
catch or filter them by class whichever model raised them."""


class ConvergenceWarning(UserWarning):
    """An iterative fit (SMO, Newton, evidence maximisation, conjugate
    gradients) stopped at its iteration limit before meeting its tolerance."""


class NotFittedError(ValueError, AttributeError):
    """An estimator was used before ``fit``."""
