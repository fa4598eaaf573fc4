"""Kernels between strings and sequences (book labels ``bag-of-words``,
``spectrum``, ``smith-waterman``).

The bag-of-words and n-gram spectrum kernels are inner products of count
vectors, φ_s(x) = number of occurrences of the word (or n-gram) s in x, so they
are positive semi-definite by construction; the Gram matrix is formed as ΦΦᵀ
over the n-grams that occur. A local alignment score (Smith–Waterman) also
measures similarity, but it is a maximum over alignments, not an inner
product, and it is not positive semi-definite in general.
"""

from collections import Counter

import numpy as np

from kernelref._validation import check_integer, check_positive
from kernelref.structured.base import ObjectKernel


def _as_sequence(x, name):
    """A string stays a string; a list or tuple of symbols becomes a tuple."""
    if isinstance(x, str):
        return x
    if isinstance(x, (list, tuple)):
        return tuple(x)
    raise TypeError(
        f"{name} must be a str or a list/tuple of symbols; got {type(x).__name__}."
    )


def ngram_counts(x, n):
    """φ(x): how often each contiguous n-gram occurs in the sequence x."""
    return Counter(x[i : i + n] for i in range(len(x) - n + 1))


def count_matrices(X, Y, features):
    """The count vectors of the samples of X and of Y over the features that
    occur in either, as two dense arrays Φ_X, Φ_Y."""
    counts_X = [features(x) for x in X]
    counts_Y = [features(y) for y in Y]
    vocabulary = {}
    for counts in counts_X + counts_Y:
        for s in counts:
            vocabulary.setdefault(s, len(vocabulary))

    def dense(all_counts):
        Phi = np.zeros((len(all_counts), len(vocabulary)))
        for row, counts in enumerate(all_counts):
            for s, c in counts.items():
                Phi[row, vocabulary[s]] = c
        return Phi

    return dense(counts_X), dense(counts_Y)


class SpectrumKernel(ObjectKernel):
    """k(x, x′) = Σ_s φ_s(x) φ_s(x′) over the n-grams s (label ``spectrum``).

    Samples are strings (n-grams are substrings) or sequences of symbols
    (n-grams are tuples); a sample shorter than n has no n-grams.
    """

    def __init__(self, n=2):
        self.n = n

    def _n(self):
        return check_integer(self.n, "n", meaning="It is the n-gram length.")

    def check_sample(self, x, name):
        self._n()
        return _as_sequence(x, name)

    def features(self, x):
        return ngram_counts(x, self._n())

    def pair(self, x, y):
        fx, fy = self.features(x), self.features(y)
        return float(sum(c * fy[s] for s, c in fx.items()))

    def _gram(self, X, Y, symmetric):
        Phi_X, Phi_Y = count_matrices(X, Y, self.features)
        return Phi_X @ Phi_Y.T


class BagOfWordsKernel(SpectrumKernel):
    """k(x, x′) = Σ_w c_w(x) c_w(x′) over the words w (label ``bag-of-words``):
    the 1-gram spectrum of the sequence of words. A string is split at white
    space; a list or tuple is taken as the words already."""

    def __init__(self, lowercase=True):
        self.lowercase = lowercase

    def check_sample(self, x, name):
        words = _as_sequence(x, name)
        if isinstance(words, str):
            words = tuple(words.split())
        if not all(isinstance(w, str) for w in words):
            raise TypeError(f"{name} must hold words as str; got {words!r}.")
        return tuple(w.lower() for w in words) if self.lowercase else words

    def features(self, x):
        return Counter(x)


class SmithWatermanScore(ObjectKernel):
    """The best local alignment score of two strings (label ``smith-waterman``):
    H_ij = max(0, H_{i−1,j−1} + s(x_i, y_j), H_{i−1,j} − g, H_{i,j−1} − g) and
    the score is max_ij H_ij, with s = ``match`` on equal symbols, ``-mismatch``
    otherwise, and gap penalty g = ``gap``.

    A similarity, not a kernel: its Gram matrices can have negative eigenvalues.
    """

    def __init__(self, match=2.0, mismatch=1.0, gap=1.0):
        self.match = match
        self.mismatch = mismatch
        self.gap = gap

    def check_sample(self, x, name):
        return _as_sequence(x, name)

    def pair(self, x, y):
        match = check_positive(self.match, "match")
        mismatch = check_positive(self.mismatch, "mismatch")
        gap = check_positive(self.gap, "gap")
        H = np.zeros((len(x) + 1, len(y) + 1))
        for i in range(1, len(x) + 1):
            for j in range(1, len(y) + 1):
                s = match if x[i - 1] == y[j - 1] else -mismatch
                H[i, j] = max(
                    0.0, H[i - 1, j - 1] + s, H[i - 1, j] - gap, H[i, j - 1] - gap
                )
        return float(H.max())
