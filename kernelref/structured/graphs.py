"""Kernels on graphs: the diffusion kernel between the nodes of one graph and
the random-walk kernel between labelled graphs (book labels
``graph-laplacian``, ``diffusion-kernel``, ``product-graph``, ``random-walk-kernel``).

Diffusion: with H = A − D the negative Laplacian of an undirected graph
(adjacency A, degrees D), K = e^{βH} = Σ_k β^k H^k / k!. H is symmetric, so
K = U e^{βΛ} Uᵀ has positive eigenvalues: a kernel for every β > 0.

Random walks: the direct product graph G× has a node for each pair (v, v′) of
equally labelled nodes and an edge where both v–w and v′–w′ are edges, so a
walk in G× is a pair of walks in G and G′ with the same label sequence. With
A× its adjacency, k(G, G′) = Σ_k λ^k 1ᵀ A×^k 1 = 1ᵀ (I − λA×)⁻¹ 1, which
converges exactly when λ ρ(A×) < 1 (ρ the spectral radius).
"""

from dataclasses import dataclass

import numpy as np
from scipy.linalg import eigh, solve

from kernelref._validation import check_positive
from kernelref.structured.base import ObjectKernel


def check_adjacency(A, name="adjacency"):
    """A symmetric, non-negative, finite square matrix with a zero diagonal."""
    A = np.asarray(A, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] == 0:
        raise ValueError(
            f"{name} must be a non-empty square matrix; got shape {A.shape}."
        )
    if not np.isfinite(A).all() or (A < 0).any() or not np.array_equal(A, A.T):
        raise ValueError(
            f"{name} must be symmetric with finite entries ≥ 0 (an undirected "
            "graph); symmetrise it with (A + A.T) / 2."
        )
    if np.diag(A).any():
        raise ValueError(f"{name} must have a zero diagonal (no self-loops).")
    return A


def negative_laplacian(A):
    """H = A − D, D the diagonal of degrees (label ``graph-laplacian``)."""
    A = check_adjacency(A)
    return A - np.diag(A.sum(axis=1))


def diffusion_matrix(A, beta):
    """K = e^{βH} = U e^{βΛ} Uᵀ (label ``diffusion-kernel``)."""
    beta = check_positive(beta, "beta")
    lam, U = eigh(negative_laplacian(A))
    return (U * np.exp(beta * lam)) @ U.T


class DiffusionKernel(ObjectKernel):
    """k(v, v′) = [e^{βH}]_{vv′} for nodes v, v′ of the graph with adjacency
    ``adjacency``; a sample is a node index 0, …, n_nodes − 1."""

    def __init__(self, adjacency, beta=1.0):
        self.adjacency = adjacency
        self.beta = beta

    def check_sample(self, x, name):
        n = len(check_adjacency(self.adjacency))
        if (
            isinstance(x, (bool, np.bool_))
            or not isinstance(x, (int, np.integer))
            or not 0 <= x < n
        ):
            raise TypeError(
                f"{name} must be a node index, an integer in [0, {n}); got {x!r}."
            )
        return int(x)

    def pair(self, x, y):
        return float(diffusion_matrix(self.adjacency, self.beta)[x, y])

    def _gram(self, X, Y, symmetric):
        K = diffusion_matrix(self.adjacency, self.beta)
        return K[np.ix_(X.astype(int), Y.astype(int))]

    def diag(self, X):
        # one eigendecomposition for all nodes, not one per node
        return np.diag(diffusion_matrix(self.adjacency, self.beta))[
            self.samples(X, "X").astype(int)
        ]


@dataclass(frozen=True, eq=False)
class Graph:
    """An undirected graph with one label per node, drawn from ``alphabet``
    (by default the labels that occur). Unlabelled graphs give every node 0."""

    adjacency: np.ndarray
    labels: tuple = None
    alphabet: frozenset = None

    def __post_init__(self):
        A = check_adjacency(self.adjacency)
        labels = (0,) * len(A) if self.labels is None else tuple(self.labels)
        if len(labels) != len(A):
            raise ValueError(
                f"labels must give one label per node ({len(A)}); got {len(labels)}."
            )
        alphabet = (
            frozenset(labels) if self.alphabet is None else frozenset(self.alphabet)
        )
        if not set(labels) <= alphabet:
            raise ValueError(
                f"labels {sorted(set(labels) - alphabet, key=repr)} are not in "
                f"the alphabet {sorted(alphabet, key=repr)}."
            )
        object.__setattr__(self, "adjacency", A)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "alphabet", alphabet)


def product_graph(G, H):
    """A× of the direct product graph (label ``product-graph``): nodes are the
    pairs (v, v′) with equal labels, and (v, v′)–(w, w′) is an edge of weight
    A_vw A′_v′w′."""
    same = np.equal.outer(
        np.array(G.labels, dtype=object), np.array(H.labels, dtype=object)
    )
    keep = np.flatnonzero(same.ravel())
    return np.kron(G.adjacency, H.adjacency)[np.ix_(keep, keep)]


def spectral_radius(A):
    """ρ(A), the largest |eigenvalue| of the symmetric matrix A."""
    return float(np.max(np.abs(eigh(A, eigvals_only=True)))) if len(A) else 0.0


class RandomWalkKernel(ObjectKernel):
    """k(G, G′) = Σ_k λ^k 1ᵀ A×^k 1 = 1ᵀ (I − λA×)⁻¹ 1 (label
    ``random-walk-kernel``)."""

    def __init__(self, lam=0.1):
        self.lam = lam

    def check_sample(self, x, name):
        if not isinstance(x, Graph):
            raise TypeError(
                f"{name} must be a kernelref.structured.Graph; got {type(x).__name__}."
            )
        return x

    def _product_graphs(self, X, Y, symmetric):
        """Every A× the Gram matrix needs, after checking the alphabets and λ
        for all pairs, so that bad input fails before any solve."""
        lam = check_positive(self.lam, "lam")
        alphabets = {x.alphabet for x in X} | {y.alphabet for y in Y}
        if len(alphabets) > 1:
            shown = [sorted(a, key=repr) for a in alphabets]
            raise ValueError(
                f"the graphs label their nodes from different alphabets {shown}; the "
                "walks of two graphs can only be matched label for label over one "
                "alphabet. Pass the same alphabet= to every Graph."
            )
        products, worst = {}, (0.0, None)
        for n, x in enumerate(X):
            for m in range(n if symmetric else 0, len(Y)):
                products[n, m] = product_graph(x, Y[m])
                worst = max(
                    worst,
                    (spectral_radius(products[n, m]), (n, m)),
                    key=lambda pair: pair[0],
                )
        if lam * worst[0] >= 1:
            raise ValueError(
                f"lam={lam!r} is too large: the walk series Σ λ^k A×^k diverges for "
                f"the pair {worst[1]}, whose product graph has spectral radius "
                f"{worst[0]:.4g}; choose lam < {1 / worst[0]:.4g}."
            )
        return lam, products

    def _gram(self, X, Y, symmetric):
        lam, products = self._product_graphs(X, Y, symmetric)
        K = np.empty((len(X), len(Y)))
        for (n, m), A_x in products.items():
            ones = np.ones(len(A_x))
            K[n, m] = ones @ solve(np.eye(len(A_x)) - lam * A_x, ones, assume_a="sym")
            if symmetric:
                K[m, n] = K[n, m]
        return K

    def pair(self, x, y):
        return float(self._gram([x], [y], symmetric=False)[0, 0])

    def diag(self, X):
        X = self.samples(X, "X")
        return np.array([self._gram([x], [x], symmetric=False)[0, 0] for x in X])
