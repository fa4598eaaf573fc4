"""The marginalised kernel of a discrete hidden Markov model (book label
``hmm-marginalised``).

k(x, x′) = Σ_z p(x | z) p(x′ | z) p(z): both sequences are emitted by one
shared hidden path z. It is a sum over z of p(z) f_z(x) f_z(x′), a positive
combination of rank-one kernels, hence positive semi-definite. The sum over
the K^T paths is done by a forward recursion over the joint path
(label ``hmm-joint-forward``),

    α_1(j) = π_j e_1(j),   α_t(j) = [Σ_i α_{t−1}(i) A_ij] e_t(j),   k = Σ_j α_T(j),

with e_t(j) = B_j(x_t) B_j(x′_t). When one sequence is longer, the shared path
runs to the longer length T and e_t keeps only the factor of the sequence that
is still emitting: marginalising the shorter sequence's missing steps
multiplies by one.
"""

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_solve

from kernelref.structured.base import ObjectKernel
from kernelref.structured.generative import fisher_factor

#: How far a row of a stochastic matrix may sum from 1 and still be accepted.
STOCHASTIC_ATOL = 1e-10


def _stochastic(M, name, shape):
    M = np.asarray(M, dtype=float)
    if M.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got {M.shape}.")
    if (
        not np.isfinite(M).all()
        or (M < 0).any()
        or not np.allclose(M.sum(axis=-1), 1.0, rtol=0, atol=STOCHASTIC_ATOL)
    ):
        raise ValueError(
            f"{name} must hold probabilities ≥ 0 whose rows sum to 1; got {M}."
        )
    return M


@dataclass(frozen=True, eq=False)
class DiscreteHMM:
    """π (K,) the initial state probabilities, A (K, K) the transitions
    A_ij = p(z_t = j | z_{t−1} = i), B (K, S) the emissions
    B_j(s) = p(x_t = s | z_t = j)."""

    start: np.ndarray
    transition: np.ndarray
    emission: np.ndarray

    def __post_init__(self):
        start = np.asarray(self.start, dtype=float)
        K = start.shape[0] if start.ndim == 1 else 0
        object.__setattr__(self, "start", _stochastic(start, "start", (K,)))
        object.__setattr__(
            self, "transition", _stochastic(self.transition, "transition", (K, K))
        )
        emission = np.asarray(self.emission, dtype=float)
        S = emission.shape[-1] if emission.ndim == 2 else 0
        object.__setattr__(self, "emission", _stochastic(emission, "emission", (K, S)))

    @property
    def n_states(self):
        return len(self.start)

    @property
    def n_symbols(self):
        return self.emission.shape[1]


def emission_factors(hmm, x, T):
    """e_t(j) = B_j(x_t) for t < len(x) and 1 afterwards, shape (T, K)."""
    e = np.ones((T, hmm.n_states))
    e[: len(x)] = hmm.emission[:, list(x)].T
    return e


def joint_forward(hmm, x, y):
    """Σ_z p(x | z) p(y | z) p(z) by the forward recursion (label
    ``hmm-joint-forward``)."""
    T = max(len(x), len(y))
    e = emission_factors(hmm, x, T) * emission_factors(hmm, y, T)
    alpha = hmm.start * e[0]
    for t in range(1, T):
        alpha = (alpha @ hmm.transition) * e[t]
    return float(alpha.sum())


class MarginalisedHMMKernel(ObjectKernel):
    """k(x, x′) = Σ_z p(x | z) p(x′ | z) p(z) (label ``hmm-marginalised``) for
    sequences of symbols 0, …, S − 1 (a list, tuple or 1-D integer array)."""

    def __init__(self, hmm):
        self.hmm = hmm

    def check_sample(self, x, name):
        if not isinstance(self.hmm, DiscreteHMM):
            raise TypeError(
                f"hmm must be a DiscreteHMM; got {type(self.hmm).__name__}."
            )
        if isinstance(x, str) or not isinstance(x, (list, tuple, np.ndarray)):
            raise TypeError(
                f"{name} must be a sequence of integer symbols (list, tuple or 1-D "
                f"array); got {type(x).__name__}."
            )
        seq = np.asarray(x)
        if seq.ndim != 1 or len(seq) == 0:
            raise ValueError(
                f"{name} must be a non-empty 1-D sequence; got shape {seq.shape}."
            )
        if (
            seq.dtype.kind not in "iu"
            or (seq < 0).any()
            or (seq >= self.hmm.n_symbols).any()
        ):
            raise ValueError(
                f"{name} must hold integer symbols in [0, {self.hmm.n_symbols}); got "
                f"{x!r}."
            )
        return tuple(int(s) for s in seq)

    def pair(self, x, y):
        return joint_forward(self.hmm, x, y)


def posterior_states(hmm, x):
    """γ_t(j) = p(z_t = j | x) by the scaled forward–backward recursions, shape (T, K),
    and log p(x) (label ``hmm-forward-backward``)."""
    T, K = len(x), hmm.n_states
    e = hmm.emission[:, list(x)].T  # e_t(j) = B_j(x_t)
    alpha, c = np.empty((T, K)), np.empty(T)
    a = hmm.start * e[0]
    for t in range(T):
        if t:
            a = (alpha[t - 1] @ hmm.transition) * e[t]
        c[t] = a.sum()
        alpha[t] = a / c[t]  # α̂_t = p(z_t | x_1..t)
    beta = np.ones((T, K))
    for t in range(T - 2, -1, -1):
        beta[t] = hmm.transition @ (e[t + 1] * beta[t + 1]) / c[t + 1]
    return alpha * beta, float(np.log(c).sum())


def hmm_fisher_scores(hmm, sequences):
    """g(x) = ∂ log p(x)/∂B_js = Σ_t γ_t(j) [x_t = s] / B_js for every emission
    probability, shape (n, K·S) (label ``hmm-fisher-score``).

    p(x) is a polynomial in the entries of B, one factor B_j(x_t) per step of a
    path, so differentiating it entry by entry (each B_js a free parameter, as
    Jaakkola and Haussler do) counts the expected uses of the entry, divided by it.
    """
    G = np.zeros((len(sequences), hmm.n_states, hmm.n_symbols))
    for n, x in enumerate(sequences):
        gamma, _ = posterior_states(hmm, x)
        np.add.at(G[n].T, list(x), gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        G = np.where(hmm.emission > 0, G / hmm.emission, 0.0)
    return G.reshape(len(sequences), -1)


class HMMFisherKernel(MarginalisedHMMKernel):
    """k(x, x′) = g(x)ᵀ F⁻¹ g(x′) with the HMM's emission scores (label
    ``fisher-kernel``), F the empirical Fisher information of the reference
    sequences."""

    def __init__(self, hmm, reference):
        self.hmm = hmm
        self.reference = reference

    def _factor(self):
        G = hmm_fisher_scores(self.hmm, self.samples(self.reference, "reference"))
        return fisher_factor(G, "sequences")

    def _gram(self, X, Y, symmetric):
        G = hmm_fisher_scores(self.hmm, X)
        H = G if symmetric else hmm_fisher_scores(self.hmm, Y)
        return G @ cho_solve(self._factor(), H.T)

    def diag(self, X):
        # One factorisation of F for all samples, not one per pair.
        G = hmm_fisher_scores(self.hmm, self.samples(X, "X"))
        return np.einsum("np,pn->n", G, cho_solve(self._factor(), G.T))

    def pair(self, x, y):
        return float(self._gram([x], [y], symmetric=False)[0, 0])
