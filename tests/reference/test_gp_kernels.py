"""The GP kernels (Matérn, rational quadratic, periodic, dot product): formulas
against scikit-learn's kernels of the same name, log-gradients against central
differences, positive semi-definiteness, diag, composition and bad input."""

import copy

import numpy as np
import pytest
from sklearn.gaussian_process import kernels as sk

from kernelref.kernels import (
    RBF,
    Constant,
    DotProduct,
    ExpSineSquared,
    Matern,
    RationalQuadratic,
    White,
)

rng = np.random.default_rng(0)
X = rng.normal(size=(25, 3))
Y = rng.normal(size=(15, 3))
ELL = np.array([0.5, 1.3, 2.2])

# (ours, scikit-learn's): the same kernel in the same parametrisation. The
# periodic kernels are compared in one dimension, where the two definitions agree
# (see test_euclidean_periodic_kernel_is_indefinite_ours_is_not).
PAIRS = [
    (Matern(0.7, nu=0.5), sk.Matern(0.7, nu=0.5)),
    (Matern(0.7, nu=1.5), sk.Matern(0.7, nu=1.5)),
    (Matern(0.7, nu=2.5), sk.Matern(0.7, nu=2.5)),
    (Matern(ELL, nu=0.5), sk.Matern(ELL, nu=0.5)),
    (Matern(ELL, nu=1.5), sk.Matern(ELL, nu=1.5)),
    (Matern(ELL, nu=2.5), sk.Matern(ELL, nu=2.5)),
    (RationalQuadratic(0.8, alpha=0.3), sk.RationalQuadratic(0.8, alpha=0.3)),
    (RationalQuadratic(1.7, alpha=4.0), sk.RationalQuadratic(1.7, alpha=4.0)),
    (ExpSineSquared(1.3, periodicity=2.1), sk.ExpSineSquared(1.3, periodicity=2.1)),
    (DotProduct(0.6), sk.DotProduct(0.6)),
    (DotProduct(0.6) ** 2, sk.Exponentiation(sk.DotProduct(0.6), 2)),
    (
        Matern(ELL, nu=2.5) ** 3 + White(0.1),
        sk.Matern(ELL, nu=2.5) ** 3 + sk.WhiteKernel(0.1),
    ),
    (White(0.3), sk.WhiteKernel(0.3)),
    (Constant(1.7), sk.ConstantKernel(1.7)),
    (
        Constant(0.8) * Matern(ELL, nu=1.5) + White(0.2),
        sk.ConstantKernel(0.8) * sk.Matern(ELL, nu=1.5) + sk.WhiteKernel(0.2),
    ),
    (
        2.0 * Matern(0.4, nu=2.5)
        + RationalQuadratic(0.8, alpha=0.3) * ExpSineSquared(),
        sk.ConstantKernel(2.0) * sk.Matern(0.4, nu=2.5)
        + sk.RationalQuadratic(0.8, alpha=0.3) * sk.ExpSineSquared(),
    ),
]


def inputs(kernel):
    """Three-dimensional samples, or their first column for a periodic kernel."""
    one_d = "ExpSineSquared" in repr(kernel)
    return (X[:, :1], Y[:, :1]) if one_d else (X, Y)


IDS = [repr(ours)[:40] for ours, _ in PAIRS]

# Every kernel we test gradients of, including an ARD rational quadratic, which
# scikit-learn does not have, and a composite in the style of the Mauna Loa kernel.
KERNELS = [ours for ours, _ in PAIRS] + [
    RationalQuadratic(ELL, alpha=0.7),
    Constant(0.5) * RBF(0.3) * ExpSineSquared(1.1, periodicity=1.7)
    + 2.0 * RationalQuadratic(1.2, alpha=0.9)
    + White(0.1),
]


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
def test_kernel_equals_scikit_learn(ours, theirs):
    X, Y = inputs(ours)
    np.testing.assert_allclose(ours(X, Y), theirs(X, Y), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ours(X), theirs(X), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ours.diag(X), theirs.diag(X), rtol=1e-12)


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=IDS)
def test_log_hyperparameters_and_gradient_equal_scikit_learn(ours, theirs):
    """Same θ (log scale) in the same order, and the same ∂K/∂log θ."""
    np.testing.assert_allclose(ours.theta, theirs.theta, rtol=1e-13)
    X, _ = inputs(ours)
    _, G = theirs(X, eval_gradient=True)
    np.testing.assert_allclose(
        ours.gradient(X), np.moveaxis(G, 2, 0), rtol=1e-10, atol=1e-12
    )


def central_gradient(kernel, X, h=1e-6):
    theta = kernel.theta
    out = []
    for j in range(len(theta)):
        step = np.zeros_like(theta)
        step[j] = h
        plus = kernel.clone_with_theta(theta + step)(X)
        minus = kernel.clone_with_theta(theta - step)(X)
        out.append((plus - minus) / (2 * h))
    return np.array(out)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: repr(k)[:40])
def test_log_gradient_matches_central_differences(kernel):
    analytic = kernel.gradient(X)
    assert analytic.shape == (len(kernel.theta), len(X), len(X))
    np.testing.assert_allclose(analytic, central_gradient(kernel, X), atol=2e-8)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: repr(k)[:40])
def test_gradient_dot_contracts_the_gradient(kernel):
    W = rng.normal(size=(len(X), len(X)))
    expected = np.einsum("ab,jab->j", W, kernel.gradient(X))
    np.testing.assert_allclose(
        kernel.gradient_dot(X, W), expected, rtol=1e-10, atol=1e-10
    )
    np.testing.assert_allclose(
        kernel.gradient_dot(X, W, K=kernel(X)), expected, rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: repr(k)[:40])
def test_gram_is_positive_semidefinite_and_diag_is_its_diagonal(kernel):
    for seed in range(5):
        Z = np.random.default_rng(seed).normal(scale=2.0, size=(40, 3))
        K = kernel(Z)
        np.testing.assert_allclose(K, K.T, rtol=0, atol=1e-14)
        eigenvalues = np.linalg.eigvalsh(K)
        assert eigenvalues.min() > -1e-10 * max(1.0, eigenvalues.max())
        np.testing.assert_allclose(kernel.diag(Z), np.diag(K), rtol=1e-12, atol=1e-14)


def test_euclidean_periodic_kernel_is_indefinite_ours_is_not():
    """scikit-learn's exp(−2 sin²(π‖x − x′‖/p)/ℓ²) in three dimensions has a
    clearly negative eigenvalue on these points; the sum over inputs has none."""
    Z = np.random.default_rng(0).normal(scale=2.0, size=(40, 3))
    theirs = np.linalg.eigvalsh(sk.ExpSineSquared(1.3, periodicity=2.1)(Z)).min()
    ours = np.linalg.eigvalsh(ExpSineSquared(1.3, periodicity=2.1)(Z)).min()
    assert theirs < -1.0
    assert ours > -1e-12


def test_periodic_kernel_is_a_warped_gaussian():
    """exp(−(2/ℓ²) Σ sin²) = exp(−‖u(x) − u(x′)‖²/(2ℓ²)), u = (cos, sin)(2πx/p)."""
    p, ell = 1.7, 0.9

    def u(Z):
        return np.hstack([np.cos(2 * np.pi * Z / p), np.sin(2 * np.pi * Z / p)])

    warped = RBF(gamma=0.5 / ell**2)(u(X), u(Y))
    np.testing.assert_allclose(ExpSineSquared(ell, p)(X, Y), warped, atol=1e-12)


def test_matern_half_gradient_is_zero_at_coincident_points():
    """ν = ½: ∂k/∂log ℓ_d = e^{−r} r_d²/r → 0 as r → 0, not 0/0."""
    Z = np.vstack([X[:3], X[:3]])
    G = Matern(ELL, nu=0.5).gradient(Z)
    assert np.all(np.isfinite(G))
    np.testing.assert_array_equal(G[:, 0, 3], 0.0)


def test_matern_orders_nest_towards_the_gaussian():
    """Matérn → exp(−r²/2) as ν grows: each order is closer than the one before."""
    gaussian = RBF(gamma=0.5 / 0.7**2)(X, Y)
    gaps = [np.abs(Matern(0.7, nu=nu)(X, Y) - gaussian).max() for nu in (0.5, 1.5, 2.5)]
    assert gaps[0] > gaps[1] > gaps[2]


def test_periodic_kernel_repeats_with_its_period():
    k = ExpSineSquared(0.9, periodicity=1.7)
    shift = 1.7 * np.array([3.0, -2.0, 1.0])
    np.testing.assert_allclose(k(X, Y + shift), k(X, Y), atol=1e-12)


def test_ard_length_scales_enter_theta_and_bounds():
    k = Matern(ELL, nu=1.5, length_scale_bounds=(1e-2, 1e2))
    assert k.hyperparameters == [("length_scale", 3)]
    np.testing.assert_allclose(k.theta, np.log(ELL))
    assert k.bounds.shape == (3, 2)
    k.theta = np.log([1.0, 2.0, 3.0])
    np.testing.assert_allclose(k.length_scale, [1.0, 2.0, 3.0])


def test_fixed_hyperparameters_leave_theta():
    k = RationalQuadratic(1.0, alpha=2.0, alpha_bounds="fixed")
    assert k.hyperparameters == [("length_scale", 1)]
    assert k.gradient(X).shape == (1, len(X), len(X))
    assert len(DotProduct(0.0).theta) == 0
    np.testing.assert_allclose(DotProduct(0.0)(X, Y), X @ Y.T)


def test_spec_and_params_round_trip():
    k = 2.0 * Matern(ELL, nu=2.5) + ExpSineSquared(1.0, periodicity=3.0)
    spec = k.spec()
    assert spec["class"] == "Sum"
    assert spec["params"]["k1"]["params"]["kernel"]["params"]["length_scale"] == list(
        ELL
    )
    twin = copy.deepcopy(k)
    assert twin == k
    twin.set_params(k2__periodicity=2.0)
    assert twin != k
    assert Matern(0.5, nu=0.5).get_params()["nu"] == 0.5


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: Matern(nu=1.0), "nu must be one of"),
        (lambda: Matern(nu=True), "nu must be one of"),
        (lambda: Matern(length_scale=0.0), "length_scale must be finite and > 0"),
        (lambda: Matern(length_scale=np.array([1.0, -1.0])), "length_scale"),
        (lambda: Matern(length_scale=np.nan), "length_scale"),
        (lambda: RationalQuadratic(alpha=-1.0), "alpha must be finite and > 0"),
        (lambda: RationalQuadratic(alpha=np.inf), "alpha"),
        (lambda: ExpSineSquared(periodicity=0), "periodicity must be finite and > 0"),
        (lambda: ExpSineSquared(length_scale=np.ones(2)), "a single number"),
        (lambda: DotProduct(sigma_0=-1.0), "sigma_0 must be finite and >= 0"),
    ],
)
def test_bad_hyperparameters_are_refused_at_construction(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_hyperparameters_of_the_wrong_type_are_refused():
    with pytest.raises(TypeError, match="sigma_0 must be a number"):
        DotProduct(sigma_0="1")
    with pytest.raises(TypeError, match="alpha must be a number"):
        RationalQuadratic(alpha="2")


@pytest.mark.parametrize("exponent", [0, -1, 0.5, 2.0, True])
def test_only_integer_powers_of_a_kernel_are_kernels(exponent):
    with pytest.raises(ValueError, match="k \\*\\* p needs an integer p >= 1"):
        DotProduct(0.6) ** exponent


def test_bad_hyperparameters_are_refused_by_setters():
    k = 1.0 * Matern(1.0)
    with pytest.raises(ValueError, match="length_scale must be finite and > 0"):
        k.set_params(kernel__length_scale=-2.0)
    with pytest.raises(ValueError, match="nu must be one of"):
        k.set_params(kernel__nu=3.5)
    with pytest.raises(ValueError, match="alpha"):
        RationalQuadratic().alpha = 0.0


def test_ard_length_scales_must_match_the_features():
    with pytest.raises(ValueError, match="one length scale per feature"):
        Matern(np.ones(2))(X)
