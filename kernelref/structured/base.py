"""Kernels whose samples are objects: sets, strings, sequences, graphs.

Such a kernel sets ``takes_objects = True``; the estimators then hand it the
samples as a 1-D object array (``kernelref._validation.check_samples``)
instead of a float matrix. Each kernel says in ``check_sample`` what one
sample must be, and computes k(x, x′) for one pair in ``pair``; the Gram
matrix is filled pair by pair, using its symmetry when ``Y`` is ``None``.
Kernels with a faster whole-matrix form (count vectors, say) override ``_gram``.
"""

import abc

import numpy as np

from kernelref._validation import check_same_kind, check_samples
from kernelref.kernels.base import Kernel


class ObjectKernel(Kernel):
    """Base of the kernels on objects."""

    takes_objects = True

    @abc.abstractmethod
    def check_sample(self, x, name):
        """Return `x` in the form ``pair`` computes with, or raise naming `name`."""

    @abc.abstractmethod
    def pair(self, x, y):
        """k(x, y) for two checked samples."""

    def samples(self, X, name="X"):
        """`X` as a checked 1-D object array of samples."""
        return check_samples(X, self, name)

    def __call__(self, X, Y=None):
        X = self.samples(X, "X")
        Y = X if Y is None else self.samples(Y, "Y")
        check_same_kind(Y, X, self)
        return self._gram(X, Y, symmetric=Y is X)

    def diag(self, X):
        return np.array([self.pair(x, x) for x in self.samples(X, "X")], dtype=float)

    def _gram(self, X, Y, symmetric):
        K = np.empty((len(X), len(Y)))
        for n, x in enumerate(X):
            for m in range(n if symmetric else 0, len(Y)):
                K[n, m] = self.pair(x, Y[m])
                if symmetric:
                    K[m, n] = K[n, m]
        return K
