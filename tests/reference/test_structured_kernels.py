"""Kernels beyond vectors: closed forms against brute force, PSD where the
theory says so, estimators on objects equal to estimators on the Gram matrix,
and clear errors for bad input."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import expm
from scipy.optimize import approx_fprime

from kernelref import (
    GaussianProcessClassifier,
    GaussianProcessRegressor,
    KernelPCA,
    KernelRidge,
)
from kernelref.kernels import RBF, Kernel, Linear, mercer_check
from kernelref.rvm import RVC, RVR
from kernelref.structured import (
    BagOfWordsKernel,
    DensityProductKernel,
    DiffusionKernel,
    DiscreteHMM,
    FisherKernel,
    GaussianMixture,
    Graph,
    HMMFisherKernel,
    IntersectionKernel,
    MarginalisedHMMKernel,
    MeanEmbeddingKernel,
    MixtureKernel,
    MMDGaussianKernel,
    RandomWalkKernel,
    SmithWatermanScore,
    SpectrumKernel,
    SubsetKernel,
    diffusion_matrix,
    empirical_fisher,
    fisher_scores,
    hmm_fisher_scores,
    negative_laplacian,
    posterior_states,
)
from kernelref.svm import SVC, PlattCalibrated, kkt_report

HMM = DiscreteHMM(
    start=[0.6, 0.4],
    transition=[[0.7, 0.3], [0.2, 0.8]],
    emission=[[0.5, 0.4, 0.1], [0.1, 0.3, 0.6]],
)
MIXTURE = GaussianMixture(
    weights=[0.3, 0.7], means=[[-1.0, 0.0], [1.5, 0.5]], variances=[0.5, 1.2]
)


def random_graph(rng, n, p=0.5, labels="ab"):
    upper = np.triu(rng.random((n, n)) < p, 1)
    A = (upper | upper.T).astype(float)
    return Graph(
        A, [labels[i] for i in rng.integers(0, len(labels), n)], alphabet=labels
    )


# -- closed forms against brute force --------------------------------------------------
def test_set_kernels_are_inner_products_of_indicator_features():
    universe = range(5)
    subsets = [
        frozenset(s) for r in range(6) for s in itertools.combinations(universe, r)
    ]
    sets = [{0, 1, 2}, {1, 2, 4}, set(), {3}, {0, 1, 2, 3, 4}]
    phi_elements = np.array([[e in A for e in universe] for A in sets], float)
    phi_subsets = np.array([[U <= A for U in subsets] for A in sets], float)
    np.testing.assert_array_equal(
        IntersectionKernel()(sets), phi_elements @ phi_elements.T
    )
    np.testing.assert_array_equal(SubsetKernel()(sets), phi_subsets @ phi_subsets.T)


def test_mean_embedding_with_linear_base_is_inner_product_of_means():
    rng = np.random.default_rng(1)
    sets = [rng.normal(size=(m, 3)) for m in (1, 4, 2, 5)]
    means = np.array([A.mean(axis=0) for A in sets])
    np.testing.assert_allclose(
        MeanEmbeddingKernel(Linear())(sets), means @ means.T, rtol=1e-12
    )
    d2 = ((means[:, None] - means[None]) ** 2).sum(axis=2)
    np.testing.assert_allclose(
        MMDGaussianKernel(Linear(), gamma=0.7)(sets), np.exp(-0.7 * d2), rtol=1e-12
    )


def test_spectrum_kernel_equals_explicit_count_vectors():
    rng = np.random.default_rng(2)
    strings = ["".join(rng.choice(list("abc"), size=m)) for m in (1, 2, 5, 8, 8, 3)]
    for n in (1, 2, 3):
        vocabulary = ["".join(p) for p in itertools.product("abc", repeat=n)]
        Phi = np.array(
            [
                [sum(s[i : i + n] == v for i in range(len(s))) for v in vocabulary]
                for s in strings
            ],
            float,
        )
        np.testing.assert_array_equal(SpectrumKernel(n)(strings), Phi @ Phi.T)
        np.testing.assert_array_equal(
            SpectrumKernel(n)(strings[:2], strings), Phi[:2] @ Phi.T
        )


def test_bag_of_words_counts_words():
    docs = ["the cat sat", "The cat saw the dog", "dog"]
    vocabulary = ["the", "cat", "sat", "saw", "dog"]
    Phi = np.array(
        [[d.lower().split().count(w) for w in vocabulary] for d in docs], float
    )
    np.testing.assert_array_equal(BagOfWordsKernel()(docs), Phi @ Phi.T)


def brute_force_hmm_kernel(hmm, x, y):
    """Σ over every hidden path z of length max(|x|, |y|) of p(z) p(x|z) p(y|z)."""
    T, total = max(len(x), len(y)), 0.0
    for z in itertools.product(range(hmm.n_states), repeat=T):
        p = hmm.start[z[0]] * np.prod(
            [hmm.transition[z[t - 1], z[t]] for t in range(1, T)]
        )
        p *= np.prod([hmm.emission[z[t], x[t]] for t in range(len(x))])
        p *= np.prod([hmm.emission[z[t], y[t]] for t in range(len(y))])
        total += p
    return total


def test_hmm_kernel_equals_enumeration_of_hidden_paths():
    rng = np.random.default_rng(3)
    seqs = [list(rng.integers(0, 3, size=m)) for m in (1, 3, 4, 6, 6)]
    K = MarginalisedHMMKernel(HMM)(seqs)
    brute = np.array([[brute_force_hmm_kernel(HMM, x, y) for y in seqs] for x in seqs])
    np.testing.assert_allclose(K, brute, rtol=1e-12)


def test_hmm_kernel_with_itself_sums_p_of_x_squared_over_equal_length():
    """For sequences of one length T, Σ_x k(x, x′) over all x′ of length T is
    p(x): the emissions of x′ sum out."""
    k = MarginalisedHMMKernel(HMM)
    x = [0, 2, 1]
    all_y = [list(y) for y in itertools.product(range(3), repeat=3)]
    p_x = brute_force_hmm_kernel(HMM, x, [])
    assert k([x], all_y).sum() == pytest.approx(p_x, rel=1e-12)


def test_diffusion_kernel_equals_its_power_series_and_expm():
    g = random_graph(np.random.default_rng(4), 7, p=0.4)
    H, beta = negative_laplacian(g.adjacency), 0.8
    series = sum(
        np.linalg.matrix_power(beta * H, k) / math.factorial(k) for k in range(40)
    )
    K = diffusion_matrix(g.adjacency, beta)
    np.testing.assert_allclose(K, series, atol=1e-12)
    np.testing.assert_allclose(K, expm(beta * H), atol=1e-12)
    np.testing.assert_allclose(
        DiffusionKernel(g.adjacency, beta)([0, 3, 6], [1, 3]),
        K[np.ix_([0, 3, 6], [1, 3])],
        atol=0,
    )


def walks(G, length):
    """Every walk with `length` edges, as its label sequence."""
    A = G.adjacency
    paths = [(v,) for v in range(len(A))]
    for _ in range(length):
        paths = [p + (w,) for p in paths for w in np.flatnonzero(A[p[-1]])]
    return Counter(tuple(G.labels[v] for v in p) for p in paths)


def test_random_walk_kernel_equals_enumeration_of_common_walks():
    rng = np.random.default_rng(5)
    G, H = random_graph(rng, 5), random_graph(rng, 4)
    lam, L = 0.05, 9
    common = [
        sum(c * walks(H, k)[s] for s, c in walks(G, k).items()) for k in range(L + 1)
    ]
    enumerated = sum(lam**k * common[k] for k in range(L + 1))
    closed = RandomWalkKernel(lam)([G], [H])[0, 0]
    # the omitted tail Σ_{k>L} λ^k 1ᵀA×^k 1 ≤ Σ_{k>L} (λρ)^k n× for ρ the spectral
    # radius
    n_x = sum(G.labels[i] == H.labels[j] for i in range(5) for j in range(4))
    rho = max(abs(np.linalg.eigvalsh(G.adjacency))) * max(
        abs(np.linalg.eigvalsh(H.adjacency))
    )
    tail = n_x * (lam * rho) ** (L + 1) / (1 - lam * rho)
    assert 0 <= closed - enumerated <= tail
    assert tail < 1e-6 * closed


# -- positive semi-definite where the theory says so -----------------------------------
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_claimed_kernels_are_psd_on_random_inputs(seed):
    rng = np.random.default_rng(seed)
    sets = [
        set(rng.choice(8, size=rng.integers(0, 6), replace=False).tolist())
        for _ in range(10)
    ]
    strings = [
        "".join(rng.choice(list("ab"), size=rng.integers(1, 7))) for _ in range(10)
    ]
    seqs = [list(rng.integers(0, 3, size=rng.integers(1, 6))) for _ in range(10)]
    vector_sets = [rng.normal(size=(rng.integers(1, 5), 2)) for _ in range(10)]
    graphs = [random_graph(rng, rng.integers(2, 6)) for _ in range(6)]
    g = random_graph(rng, 8, p=0.3)
    X = rng.normal(size=(12, 2))
    cases = [
        (IntersectionKernel(), sets),
        (SubsetKernel(), sets),
        (SpectrumKernel(2), strings),
        (MarginalisedHMMKernel(HMM), seqs),
        (MeanEmbeddingKernel(RBF(0.5)), vector_sets),
        (MMDGaussianKernel(RBF(0.5), gamma=2.0), vector_sets),
        (RandomWalkKernel(0.05), graphs),
        (DiffusionKernel(g.adjacency, 1.3), list(range(8))),
        (MixtureKernel(MIXTURE), X),
        (DensityProductKernel(MIXTURE), X),
        (FisherKernel(MIXTURE, MIXTURE.sample(50, rng)[0], "means+variances"), X),
    ]
    for kernel, samples in cases:
        report = mercer_check(kernel, samples)
        assert report.is_psd, (kernel, report.verdict)


def test_smith_waterman_score_is_not_psd():
    sw = SmithWatermanScore(match=2, mismatch=1, gap=1)
    assert sw.pair("ab", "ba") == 2.0 and sw.pair("abab", "abab") == 8.0
    # a–a, a gap for c, then g–g and t–t: 2 − 1 + 2 + 2 beats "gt" alone (4)
    assert sw.pair("acgt", "agt") == 5.0
    report = mercer_check(sw, ["a", "b", "ab", "ba"])
    assert report.min_eigenvalue < -0.4 and not report.is_psd


# -- generative kernels ----------------------------------------------------------------
def test_mixture_and_density_product_kernels_match_formulas():
    X = MIXTURE.sample(6, np.random.default_rng(6))[0]

    def normal(x, mu, var):
        return np.exp(-np.sum((x - mu) ** 2) / (2 * var)) / (2 * np.pi * var) ** (
            len(x) / 2
        )

    comp = np.array(
        [[normal(x, m, v) for m, v in zip(MIXTURE.means, MIXTURE.variances)] for x in X]
    )
    p = comp @ MIXTURE.weights
    np.testing.assert_allclose(
        DensityProductKernel(MIXTURE)(X), np.outer(p, p), rtol=1e-12
    )
    np.testing.assert_allclose(
        MixtureKernel(MIXTURE)(X), comp @ np.diag(MIXTURE.weights) @ comp.T, rtol=1e-12
    )


@pytest.mark.parametrize(
    "parameters", ["means", "means+variances", "means+log_variances"]
)
def test_fisher_scores_are_gradients_of_the_log_density(parameters):
    x = np.array([0.3, -0.4])

    def log_p(theta):
        means = theta[:4].reshape(2, 2)
        if parameters == "means":
            variances = MIXTURE.variances
        else:
            variances = (
                theta[4:] if parameters == "means+variances" else np.exp(theta[4:])
            )
        return np.log(
            GaussianMixture(MIXTURE.weights, means, variances).density(x[None])[0]
        )

    theta = MIXTURE.means.ravel()
    if parameters != "means":
        v = MIXTURE.variances
        theta = np.concatenate(
            [theta, v if parameters == "means+variances" else np.log(v)]
        )
    numeric = approx_fprime(theta, log_p, 1e-7)
    np.testing.assert_allclose(
        fisher_scores(MIXTURE, x[None], parameters)[0], numeric, rtol=1e-5, atol=1e-7
    )


def test_fisher_kernel_is_invariant_under_reparameterisation():
    rng = np.random.default_rng(7)
    X_ref, X = MIXTURE.sample(200, rng)[0], MIXTURE.sample(8, rng)[0]
    K_var = FisherKernel(MIXTURE, X_ref, "means+variances")(X)
    K_log = FisherKernel(MIXTURE, X_ref, "means+log_variances")(X)
    np.testing.assert_allclose(K_log, K_var, rtol=1e-9)
    # means as ν = 2μ: g_ν = g_μ/2, F_ν = F_μ/4
    G, G_ref = fisher_scores(MIXTURE, X), fisher_scores(MIXTURE, X_ref)
    K_nu = (G / 2) @ np.linalg.solve(empirical_fisher(G_ref / 2), (G / 2).T)
    np.testing.assert_allclose(K_nu, FisherKernel(MIXTURE, X_ref)(X), rtol=1e-9)


def test_seed_003_fisher_kernel_typo_gives_a_rank_one_non_kernel():
    rng = np.random.default_rng(8)
    X_ref, X = MIXTURE.sample(200, rng)[0], MIXTURE.sample(8, rng)[0]
    k = FisherKernel(MIXTURE, X_ref)
    typo = np.repeat(k.diag(X)[:, None], len(X), axis=1)  # g(x)ᵀF⁻¹g(x) for every x′
    assert np.linalg.matrix_rank(typo) == 1
    assert np.max(np.abs(typo - typo.T)) > 0.1
    assert np.linalg.matrix_rank(k(X)) == 4


# -- estimators on objects equal estimators on the Gram matrix -------------------------
def sequence_data():
    rng = np.random.default_rng(9)
    a = ["".join(rng.choice(list("aab"), size=6)) for _ in range(12)]
    b = ["".join(rng.choice(list("abb"), size=6)) for _ in range(12)]
    return np.array(a + b, dtype=object), np.array([0] * 12 + [1] * 12)


class GramLookup(Kernel):
    """A kernel on sample indices (one float column) that reads a fixed Gram matrix."""

    def __init__(self, K):
        self.K = K

    def __call__(self, X, Y=None):
        i = np.asarray(X, int).ravel()
        j = i if Y is None else np.asarray(Y, int).ravel()
        return self.K[np.ix_(i, j)]

    def diag(self, X):
        i = np.asarray(X, int).ravel()
        return self.K[i, i]


def test_kernel_ridge_and_svc_on_strings_equal_precomputed():
    X, y = sequence_data()
    k = SpectrumKernel(2) + 1.0
    K, K_test = k(X), k(X[:5], X)
    ridge = KernelRidge(lam=0.5, kernel=k).fit(X, y)
    ridge_pre = KernelRidge(lam=0.5, kernel="precomputed").fit(K, y)
    np.testing.assert_allclose(ridge.dual_coef_, ridge_pre.dual_coef_, rtol=1e-12)
    np.testing.assert_allclose(
        ridge.predict(X[:5]), ridge_pre.predict(K_test), rtol=1e-12
    )
    assert not hasattr(ridge, "n_features_in_")
    svc = SVC(C=1.0, kernel=k).fit(list(X), y)
    svc_pre = SVC(C=1.0, kernel="precomputed").fit(K, y)
    np.testing.assert_array_equal(svc.support_, svc_pre.support_)
    np.testing.assert_allclose(svc.dual_coef_, svc_pre.dual_coef_, rtol=1e-12)
    np.testing.assert_allclose(
        svc.decision_function(X[:5]), svc_pre.decision_function(K_test), rtol=1e-12
    )
    assert list(svc.support_vectors_) == list(X[svc.support_])
    assert kkt_report(svc, list(X), y).max_violation < svc.tol


def test_kpca_and_rvr_on_sets_equal_precomputed():
    rng = np.random.default_rng(10)
    sets = [
        set(rng.choice(10, size=rng.integers(1, 7), replace=False).tolist())
        for _ in range(20)
    ]
    t = np.array([len(s) for s in sets], float) + 0.1 * rng.normal(size=20)
    k = SubsetKernel()
    K = k(sets)
    kpca = KernelPCA(n_components=3, kernel=k).fit(sets)
    kpca_pre = KernelPCA(n_components=3, kernel="precomputed").fit(K)
    np.testing.assert_allclose(
        kpca.transform(sets[:4]), kpca_pre.transform(K[:4]), rtol=1e-10, atol=1e-10
    )
    rvr = RVR(kernel=k).fit(sets, t)
    rvr_pre = RVR(kernel="precomputed").fit(K, t)
    np.testing.assert_array_equal(rvr.relevance_, rvr_pre.relevance_)
    np.testing.assert_allclose(
        rvr.predict(sets[:4]), rvr_pre.predict(K[:4]), rtol=1e-10
    )


def test_rvc_on_strings_equals_precomputed():
    X, y = sequence_data()
    k = SpectrumKernel(2) + 1.0
    rvc = RVC(kernel=k).fit(list(X), y)
    rvc_pre = RVC(kernel="precomputed").fit(k(X), y)
    np.testing.assert_array_equal(rvc.relevance_, rvc_pre.relevance_)
    np.testing.assert_allclose(
        rvc.predict_proba(X[:5]), rvc_pre.predict_proba(k(X[:5], X)), rtol=1e-10
    )
    assert not hasattr(rvc, "n_features_in_")


def test_calibrated_svc_on_strings_gives_probabilities():
    X, y = sequence_data()
    model = PlattCalibrated(
        SVC(C=1.0, kernel=SpectrumKernel(2) + 1.0), cv=3, random_state=0
    ).fit(list(X), y)
    P = model.predict_proba(X[:6])
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert ((P > 0) & (P < 1)).all() and not hasattr(model, "n_features_in_")


def test_gaussian_processes_on_graph_nodes_equal_a_gram_lookup():
    g = random_graph(np.random.default_rng(11), 10, p=0.35)
    k = 2.0 * DiffusionKernel(g.adjacency, beta=0.7)
    nodes = np.arange(10)
    K = k(nodes)
    y = np.sin(nodes.astype(float))
    gpr = GaussianProcessRegressor(k, noise=0.1, optimizer=None).fit(nodes[:7], y[:7])
    lookup = GaussianProcessRegressor(
        2.0 * GramLookup(K / 2.0), noise=0.1, optimizer=None
    )
    lookup.fit(nodes[:7, None].astype(float), y[:7])
    mean, std = gpr.predict(nodes[7:], return_std=True)
    mean_l, std_l = lookup.predict(nodes[7:, None].astype(float), return_std=True)
    np.testing.assert_allclose(mean, mean_l, rtol=1e-12)
    np.testing.assert_allclose(std, std_l, rtol=1e-12)
    # learning the scale by the evidence works through the gradient of Scaled
    learnt = GaussianProcessRegressor(k, noise=0.1).fit(nodes[:7], y[:7])
    assert learnt.log_marginal_likelihood_value_ >= gpr.log_marginal_likelihood_value_
    labels = (y > 0).astype(int)
    gpc = GaussianProcessClassifier(k, optimizer=None).fit(nodes, labels)
    gpc_l = GaussianProcessClassifier(2.0 * GramLookup(K / 2.0), optimizer=None)
    gpc_l.fit(nodes[:, None].astype(float), labels)
    np.testing.assert_allclose(
        gpc.predict_proba(nodes[:3]),
        gpc_l.predict_proba(nodes[:3, None].astype(float)),
        rtol=1e-12,
    )


def test_composition_keeps_takes_objects_and_refuses_mixing():
    k = 2.0 * SpectrumKernel(2) + SpectrumKernel(1) * SpectrumKernel(1) + 1.0
    assert k.takes_objects and not (2.0 * RBF(1.0) + 1.0).takes_objects
    s = ["ab", "bba", "a"]
    np.testing.assert_allclose(
        k(s), 2 * SpectrumKernel(2)(s) + SpectrumKernel(1)(s) ** 2 + 1.0, rtol=1e-12
    )
    with pytest.raises(TypeError, match="objects.*vectors"):
        SpectrumKernel(2) + RBF(1.0)


# -- bad input -------------------------------------------------------------------------
def test_bad_inputs_get_clear_errors():
    with pytest.raises(ValueError, match="X has 0 samples"):
        KernelRidge(kernel=IntersectionKernel()).fit([], [])
    with pytest.raises(ValueError, match=r"X\[1\] is an empty set"):
        MeanEmbeddingKernel(RBF(1.0))([np.ones((2, 2)), np.empty((0, 2))])
    with pytest.raises(TypeError, match=r"mixes samples of types \['str', 'tuple'\]"):
        SVC(kernel=SpectrumKernel(2)).fit(["ab", ("a", "b")], [0, 1])
    with pytest.raises(TypeError, match=r"X\[1\] must be a set or frozenset"):
        IntersectionKernel()([{1}, [1, 1]])
    with pytest.raises(TypeError, match=r"got a str\. Pass a list"):
        SpectrumKernel(2)("abc")
    A = np.array([[0, 1], [1, 0.0]])
    with pytest.raises(ValueError, match="different alphabets"):
        RandomWalkKernel(0.1)([Graph(A, "ab"), Graph(A, [0, 1])])
    with pytest.raises(ValueError, match=r"lam=1\.5 is too large.*choose lam < 1"):
        RandomWalkKernel(1.5)([Graph(A), Graph(A)])
    with pytest.raises(
        ValueError, match=r"X\[0\] must hold integer symbols in \[0, 3\)"
    ):
        MarginalisedHMMKernel(HMM)([[0, 3]])
    with pytest.raises(TypeError, match=r"X\[0\] must be a node index"):
        DiffusionKernel(A, 1.0)([2])
    with pytest.raises(ValueError, match="rows sum to 1"):
        DiscreteHMM([0.5, 0.5], [[0.9, 0.2], [0.5, 0.5]], [[1.0], [1.0]])
    with pytest.raises(ValueError, match="Fisher information.*singular"):
        FisherKernel(MIXTURE, MIXTURE.means[:1], "means")(MIXTURE.means)


def test_fisher_scores_of_unnormalised_weights_are_responsibilities_over_weights():
    x = np.array([[0.3, -0.4]])

    def log_p(weights):
        return np.log(MIXTURE.component_densities(x)[0] @ weights)

    numeric = approx_fprime(MIXTURE.weights, log_p, 1e-8)
    np.testing.assert_allclose(
        fisher_scores(MIXTURE, x, "weights+means")[0, :2], numeric, rtol=1e-6
    )
    np.testing.assert_allclose(
        fisher_scores(MIXTURE, x, "weights+means")[0, 2:],
        fisher_scores(MIXTURE, x, "means")[0],
        rtol=0,
    )


def test_diag_is_the_diagonal_of_the_gram_matrix():
    rng = np.random.default_rng(12)
    g = random_graph(rng, 6)
    cases = [
        (IntersectionKernel(), [{1, 2}, {2}, set()]),
        (SubsetKernel(), [{1, 2}, {3}]),
        (SpectrumKernel(2), ["abba", "ab", "a"]),
        (BagOfWordsKernel(), ["a b a", "b"]),
        (SmithWatermanScore(), ["acgt", "ag"]),
        (MarginalisedHMMKernel(HMM), [[0, 1], [2]]),
        (
            MeanEmbeddingKernel(RBF(1.0)),
            [rng.normal(size=(3, 2)), rng.normal(size=(1, 2))],
        ),
        (
            MMDGaussianKernel(RBF(1.0)),
            [rng.normal(size=(3, 2)), rng.normal(size=(2, 2))],
        ),
        (DiffusionKernel(g.adjacency, 0.5), [4, 0, 5]),
        (RandomWalkKernel(0.05), [g, random_graph(rng, 3)]),
        (MixtureKernel(MIXTURE), rng.normal(size=(4, 2))),
        (DensityProductKernel(MIXTURE), rng.normal(size=(4, 2))),
        (FisherKernel(MIXTURE, MIXTURE.sample(50, rng)[0]), rng.normal(size=(4, 2))),
    ]
    for kernel, samples in cases:
        np.testing.assert_allclose(
            kernel.diag(samples),
            np.diag(kernel(samples)),
            rtol=1e-12,
            err_msg=repr(kernel),
        )


def test_grid_search_tunes_a_kernel_on_strings():
    from sklearn.model_selection import GridSearchCV

    X, y = sequence_data()
    search = GridSearchCV(
        SVC(kernel=SpectrumKernel(1)), {"kernel__n": [1, 2]}, cv=3
    ).fit(X, y)
    assert search.best_estimator_.kernel.n == search.best_params_["kernel__n"]
    assert search.best_estimator_.kernel_.takes_objects
    assert len(search.cv_results_["mean_test_score"]) == 2


def test_hmm_fisher_scores_are_the_gradient_of_the_enumerated_log_likelihood():
    hmm = DiscreteHMM(
        [0.6, 0.4], [[0.7, 0.3], [0.2, 0.8]], [[0.5, 0.4, 0.1], [0.1, 0.3, 0.6]]
    )
    x = [0, 2, 1, 2, 2]

    def log_p(B):
        """log Σ_z p(x, z) by enumerating the 2^5 hidden paths, B's entries free."""
        total = 0.0
        for z in itertools.product(range(2), repeat=len(x)):
            p = hmm.start[z[0]] * B[z[0], x[0]]
            for t in range(1, len(x)):
                p *= hmm.transition[z[t - 1], z[t]] * B[z[t], x[t]]
            total += p
        return np.log(total)

    numeric = approx_fprime(
        hmm.emission.ravel(), lambda b: log_p(b.reshape(2, 3)), 1e-7
    )
    np.testing.assert_allclose(
        hmm_fisher_scores(hmm, [x])[0], numeric, rtol=1e-5, atol=1e-6
    )
    gamma, log_likelihood = posterior_states(hmm, x)
    np.testing.assert_allclose(log_likelihood, log_p(hmm.emission), rtol=1e-13)
    np.testing.assert_allclose(gamma.sum(axis=1), 1.0, rtol=1e-13)


def test_hmm_fisher_kernel_is_psd_and_invariant_to_log_parameters():
    hmm = DiscreteHMM(
        [0.6, 0.4], [[0.7, 0.3], [0.2, 0.8]], [[0.5, 0.4, 0.1], [0.1, 0.3, 0.6]]
    )
    rng = np.random.default_rng(0)
    reference = [list(rng.integers(0, 3, size=rng.integers(3, 8))) for _ in range(60)]
    k = HMMFisherKernel(hmm, reference)
    sequences = reference[:12]
    assert mercer_check(k, sequences).is_psd
    # in log B the scores are B ∘ g and F becomes D F D with D = diag(B): k is unchanged
    G, G_ref = hmm_fisher_scores(hmm, sequences), hmm_fisher_scores(hmm, reference)
    D = hmm.emission.ravel()
    log_scores, log_ref = G * D, G_ref * D
    K_log = log_scores @ np.linalg.solve(
        log_ref.T @ log_ref / len(log_ref), log_scores.T
    )
    np.testing.assert_allclose(k(sequences), K_log, rtol=1e-9, atol=1e-9)


def test_hmm_fisher_kernel_refuses_a_singular_information_matrix():
    hmm = DiscreteHMM(
        [0.6, 0.4], [[0.7, 0.3], [0.2, 0.8]], [[0.5, 0.4, 0.1], [0.1, 0.3, 0.6]]
    )
    with pytest.raises(ValueError, match="singular"):
        HMMFisherKernel(hmm, [[0, 1], [1, 0]])([[0, 1, 2]])
