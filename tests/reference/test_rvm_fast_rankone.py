"""The fast RVM's rank-one maintenance of S_i, Q_i and H⁻¹ (label ``rvm-SQ-rank-one``):
each update against a fresh factorisation, and the drift bound over a long run."""

import numpy as np
import pytest

from kernelref.kernels import RBF
from kernelref.rvm.coordinates import (
    add_coordinate,
    add_step,
    delete_step,
    inverse_H,
    measured_drift,
    orthonormal_coordinates,
    rank_one_SQ,
    reestimate_step,
    span_residual,
    stable_SQ,
)
from kernelref.rvm.design import design_matrix
from kernelref.rvm.fast import ALIGNMENT_MAX, unit_columns
from kernelref.rvm.fast_steps import (
    DRIFT_MAX,
    REFRESH_INTERVAL,
    add_basis_function,
    choose_action,
    delete_basis_function,
    initial_model,
    reestimate_basis_function,
    refresh,
)
from kernelref.rvm.sparsity import sparsity_quality


def friedman1(seed, n):
    """Friedman #1 with standardised inputs and noise at a third of the signal's
    spread."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 10))
    f = (
        10 * np.sin(np.pi * X[:, 0] * X[:, 1])
        + 20 * (X[:, 2] - 0.5) ** 2
        + 10 * X[:, 3]
        + 5 * X[:, 4]
    )
    return (X - X.mean(0)) / X.std(0), f + np.std(f) / 3 * rng.standard_normal(n)


def unit_problem(seed=0, n=80, gamma=0.1):
    X, t = friedman1(seed, n)
    Phi, scales = unit_columns(design_matrix(RBF(gamma), X, X, bias=True))
    return Phi, scales > 0, t


def fresh_model(Phi, usable, t, alpha, beta):
    """The loop's model with the columns of finite ``alpha``, factorised afresh."""
    active = np.flatnonzero(np.isfinite(alpha))
    model = initial_model(Phi, active, alpha, beta)
    return refresh(model, Phi, usable, t, Phi.T @ t, ALIGNMENT_MAX)


def explicit_SQ(Phi, t, active, alpha, beta):
    """S_i, Q_i with C = β⁻¹I + Φ_MA⁻¹Φ_Mᵀ formed and solved: the oracle."""
    C = np.eye(len(t)) / beta + (Phi[:, active] / alpha) @ Phi[:, active].T
    Ci_Phi = np.linalg.solve(C, Phi)
    return np.einsum("np,np->p", Phi, Ci_Phi), Ci_Phi.T @ t


@pytest.mark.parametrize("kind", ["add", "reestimate up", "reestimate down", "delete"])
def test_one_rank_one_update_equals_the_explicit_S_Q_and_H_inverse(kind):
    Phi, _, t = unit_problem()
    rng = np.random.default_rng(1)
    active = np.array([0, 5, 17, 40])
    alpha = rng.uniform(0.5, 5.0, size=len(active))
    beta = 3.0
    U, Psi = orthonormal_coordinates(Phi, active)
    S, Q = stable_SQ(
        Psi,
        active,
        alpha,
        beta,
        span_residual(Psi, np.ones(Psi.shape[1])),
        Phi.T @ t,
        U.T @ t,
    )
    G = inverse_H(Psi[:, active], alpha, beta)
    if kind == "add":
        j, alpha_j = 60, 2.0
        U, Psi = add_coordinate(Phi, U, Psi, j)
        v, kappa, G = add_step(Psi, G, beta, j, alpha_j, S[j])
        active, alpha = np.append(active, j), np.append(alpha, alpha_j)
    elif kind == "delete":  # U keeps the direction of φ_j: H is I along it
        k = 2
        j = active[k]
        s, _ = sparsity_quality(S[j : j + 1], Q[j : j + 1], alpha[k : k + 1])
        v, kappa, G = delete_step(Psi, G, beta, Psi[:, j], alpha[k], s[0])
        active, alpha = np.delete(active, k), np.delete(alpha, k)
    else:
        k = 2
        j = active[k]
        s, _ = sparsity_quality(S[j : j + 1], Q[j : j + 1], alpha[k : k + 1])
        alpha_j = alpha[k] * (4.0 if kind == "reestimate up" else 0.25)
        v, kappa, G = reestimate_step(Psi, G, beta, Psi[:, j], alpha[k], alpha_j, s[0])
        alpha = alpha.copy()
        alpha[k] = alpha_j
    S_new, Q_new = rank_one_SQ(S, Q, v, kappa, j)
    S_ref, Q_ref = explicit_SQ(Phi, t, active, alpha, beta)
    np.testing.assert_allclose(S_new, S_ref, rtol=1e-10)
    np.testing.assert_allclose(
        Q_new, Q_ref, rtol=1e-10, atol=1e-10 * np.max(np.abs(Q_ref))
    )
    np.testing.assert_allclose(
        G, inverse_H(Psi[:, active], alpha, beta), rtol=1e-10, atol=1e-12
    )


def test_drift_stays_below_its_bound_on_a_long_run():
    """Run the sequential algorithm with β fixed (no refactorisation for β) for
    hundreds of iterations on the loop's refresh schedule, and compare the
    maintained S, Q with a fresh factorisation after every step: the drift stays
    below `DRIFT_MAX` while most steps are rank-one updates."""
    Phi, usable, t = unit_problem(seed=3, n=120, gamma=0.1)
    PhiT_t = Phi.T @ t
    beta = 1.0 / (0.1 * np.std(t)) ** 2
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[int(np.argmax(np.abs(PhiT_t)))] = 1.0
    model = fresh_model(Phi, usable, t, alpha, beta)
    worst, n_steps = 0.0, 0
    for _ in range(800):
        j, new_alpha, gain, _ = choose_action(model, usable, 1e-6, ALIGNMENT_MAX)
        if gain[j] <= 0:
            break
        n_steps += 1
        if np.isinf(new_alpha[j]):
            model = delete_basis_function(model, j, ALIGNMENT_MAX)
        elif np.isfinite(model.alpha[j]):
            model = reestimate_basis_function(model, j, new_alpha[j])
        else:
            model = add_basis_function(
                model, Phi, t, usable, j, new_alpha[j], ALIGNMENT_MAX
            )
        fresh = refresh(model, Phi, usable, t, PhiT_t, ALIGNMENT_MAX)  # the reference
        tCt = beta * (fresh.perp + fresh.tau @ fresh.G @ fresh.tau)  # tᵀC⁻¹t
        worst = max(worst, measured_drift(model.S, model.Q, fresh.S, fresh.Q, tCt))
        if model.since_fresh >= model.interval:  # the loop's schedule
            model = refresh(model, Phi, usable, t, PhiT_t, ALIGNMENT_MAX, measure=True)
    rank_one = n_steps - model.n_fresh  # the references are not counted
    assert n_steps > 300 and rank_one > 0.8 * n_steps  # long, mostly rank-one
    assert model.interval > REFRESH_INTERVAL  # and the interval grew
    assert 0 < worst <= DRIFT_MAX
    assert model.drift <= worst  # the loop measured no more


def test_refresh_evidence_equals_the_coordinate_posterior_and_the_explicit_density():
    """The evidence of a fresh factorisation from log|H| and τᵀH⁻¹τ (rvm-evidence-split)
    against the posterior of the coordinates and an N×N density."""
    from scipy.stats import multivariate_normal

    from kernelref.rvm.coordinates import coordinate_posterior

    Phi, usable, t = unit_problem(seed=2, n=60, gamma=0.1)
    alpha = np.full(Phi.shape[1], np.inf)
    active = np.array([0, 7, 19, 33])
    alpha[active] = [0.5, 2.0, 1.0, 4.0]
    beta = 2.0
    model = refresh(
        initial_model(Phi, active, alpha, beta),
        Phi,
        usable,
        t,
        Phi.T @ t,
        ALIGNMENT_MAX,
    )
    post = coordinate_posterior(
        model.Psi[:, active], model.tau, model.perp, alpha[active], beta, len(t)
    )
    C = np.eye(len(t)) / beta + (Phi[:, active] / alpha[active]) @ Phi[:, active].T
    dense = multivariate_normal(np.zeros(len(t)), C).logpdf(t)
    assert model.log_evidence == pytest.approx(post.log_evidence, rel=1e-12)
    assert model.log_evidence == pytest.approx(dense, rel=1e-10)


def test_noise_update_from_the_loop_equals_the_posterior_formula():
    """(rvm-noise-maintained): γ_i = S_i/α_i and ‖t − Φμ‖² = perp + ‖H⁻¹τ‖², from
    the maintained S and H⁻¹ after rank-one updates, against Σ and μ of the posterior
    on the model's columns."""
    from kernelref.rvm.design import posterior
    from kernelref.rvm.fast_steps import noise_update

    Phi, usable, t = unit_problem(seed=4, n=90, gamma=0.1)
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[[0, 11, 35, 60]] = [0.5, 2.0, 1.0, 4.0]
    model = fresh_model(Phi, usable, t, alpha, 3.0)
    model = add_basis_function(model, Phi, t, usable, 70, 1.5, ALIGNMENT_MAX)
    model = reestimate_basis_function(model, 11, 0.3)
    model = delete_basis_function(model, 35, ALIGNMENT_MAX)  # U keeps its direction
    a = model.active
    post = posterior(Phi[:, a], t, model.alpha[a], model.beta)
    gamma = 1 - model.alpha[a] * np.diag(post.Sigma)
    misfit = t - Phi[:, a] @ post.mu
    expected = (len(t) - gamma.sum()) / (misfit @ misfit)
    assert noise_update(model, len(t), np.inf) == pytest.approx(expected, rel=1e-10)
    assert noise_update(model, len(t), 0.5 * expected) == 0.5 * expected  # the cap


def test_span_test_is_against_the_model_span_after_a_deletion():
    """While U still spans a deleted column, `outside_model_span` gives each
    column's squared distance from the span of the model's columns."""
    from kernelref.rvm.fast_steps import outside_model_span

    Phi, usable, t = unit_problem(seed=5, n=70, gamma=0.3)
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[[3, 20, 41, 55]] = 1.0
    model = fresh_model(Phi, usable, t, alpha, 10.0)
    model = delete_basis_function(model, 20, ALIGNMENT_MAX)
    assert model.U.shape[1] == 4 and len(model.active) == 3
    index = np.arange(Phi.shape[1])
    B = Phi[:, model.active]
    coef = np.linalg.lstsq(B, Phi, rcond=None)[0]
    explicit = np.sum((Phi - B @ coef) ** 2, axis=0)
    np.testing.assert_allclose(outside_model_span(model, index), explicit, atol=1e-12)
    # The deleted column is outside the model's span though inside U's.
    assert model.residual[20] < 1e-12 and outside_model_span(model, [20])[0] > 1e-3


def test_span_test_skipped_only_for_columns_whose_refusal_cannot_matter():
    """`refused_additions` given ``wanted`` answers as without it on every wanted
    column (it may skip the span test, a QR, when no wanted column needs it), so
    `choose_action`, which passes the columns with q² − s above ZERO_FACTOR, gets
    the gains of the full test."""
    from kernelref.rvm.fast_steps import refused_additions
    from kernelref.rvm.sparsity import ZERO_FACTOR, action_gains

    Phi, usable, t = unit_problem(seed=2, n=30, gamma=0.05)
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[1:] = 1.0  # every kernel column: U spans all 30 dimensions
    model = fresh_model(Phi, usable, t, alpha, 10.0)
    model = delete_basis_function(model, 7, ALIGNMENT_MAX)
    full = refused_additions(model, usable, ALIGNMENT_MAX)
    assert model.U.shape[1] > len(model.active) and full[0] != (
        model.residual[0] < 1e-10
    )  # the bias column: inside U's span, outside the model's
    rng = np.random.default_rng(0)
    P = Phi.shape[1]
    for wanted in (np.zeros(P, bool), np.ones(P, bool), rng.random(P) < 0.5):
        refused = refused_additions(model, usable, ALIGNMENT_MAX, wanted)
        np.testing.assert_array_equal(refused[wanted], full[wanted])
    s, q = sparsity_quality(model.S, model.Q, model.alpha, model.active)
    wanted = q * q - s > ZERO_FACTOR
    given = action_gains(
        model.alpha,
        model.active,
        s,
        q,
        refused_additions(model, usable, ALIGNMENT_MAX, wanted),
    )
    expected = action_gains(model.alpha, model.active, s, q, full)
    for a, b in zip(given, expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", [(80, 1), (80, 7), (118, 40), (240, 129)])
def test_orthonormal_basis_equals_numpy_qr(shape):
    """`orthonormal_basis` (LAPACK's dgeqrf and dorgqr called directly) gives
    ``np.linalg.qr``'s Q, row-major like it, also for nearly collinear columns."""
    from kernelref.rvm.coordinates import orthonormal_basis

    rng = np.random.default_rng(shape[1])
    A = rng.standard_normal(shape)
    for B in (A, A[:, :1] + 1e-4 * A):
        Q = orthonormal_basis(B)
        assert Q.flags.c_contiguous
        np.testing.assert_allclose(Q, np.linalg.qr(B)[0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(Q.T @ Q, np.eye(shape[1]), atol=1e-12)


@pytest.mark.parametrize("sign", [1, -1])
def test_cholesky_rank_one_equals_a_fresh_factorisation(sign):
    """(rvm-cholesky-rank-one): L' = LT and Z' = T⁻¹Z, z' = T⁻¹z against the
    Cholesky factor of H + sign·xxᵀ and solves with it."""
    from kernelref.rvm.coordinates import cholesky_factor_update, cholesky_rank_one

    rng = np.random.default_rng(7)
    m, P = 12, 30
    A = rng.normal(size=(m, m))
    H = np.eye(m) + A @ A.T
    L = np.linalg.cholesky(H)
    Psi, tau = rng.normal(size=(m, P)), rng.normal(size=m)
    Z, z = np.linalg.solve(L, Psi), np.linalg.solve(L, tau)
    x = L @ Z[:, 4] * (0.8 if sign > 0 else 0.9 / np.linalg.norm(Z[:, 4]))
    p = np.linalg.solve(L, x)
    H_new = H + sign * np.outer(x, x)
    L_ref = np.linalg.cholesky(H_new)
    Z_new, z_new = cholesky_rank_one(Z, z, p, sign, 1 + sign * p @ p)
    L_new = cholesky_factor_update(L, p, sign, 1 + sign * p @ p)
    np.testing.assert_allclose(L_new, L_ref, atol=1e-12 * np.abs(L_ref).max())
    np.testing.assert_allclose(Z_new, np.linalg.solve(L_ref, Psi), atol=1e-12)
    np.testing.assert_allclose(z_new, np.linalg.solve(L_ref, tau), atol=1e-12)


def test_held_phase_released_when_the_noise_estimate_levels_off():
    """FastLoop(release=...) ends a held phase once the β (rvm-noise) gives has
    changed by less than e^release over `RELEASE_EVERY` iterations; the run
    without it goes on adding basis functions at the held β."""
    from kernelref.rvm.fast import RELEASE_EVERY, FastLoop
    from kernelref.rvm.schedules import HOLD_TOL, RELEASE_TOL

    Phi, usable, t = unit_problem(seed=0, n=200, gamma=0.1)
    runs = {}
    for release in (None, RELEASE_TOL):
        loop = FastLoop(
            Phi, usable, t, update_beta=False, tol=HOLD_TOL, release=release
        )
        state = loop.start()
        estimates = []
        while not loop.done(state):
            state = loop.step(state)
            if release is not None and state.n_iter % RELEASE_EVERY == 0:
                estimates.append(state.model.noise_estimate)
        runs[release] = state
    released, full = runs[RELEASE_TOL], runs[None]
    assert released.converged and full.converged
    assert released.n_iter < full.n_iter
    assert released.n_iter % RELEASE_EVERY == 0
    assert abs(np.log(estimates[-1] / estimates[-2])) < RELEASE_TOL
    assert all(
        abs(np.log(b / a)) >= RELEASE_TOL for a, b in zip(estimates, estimates[1:-1])
    )


def test_prune_deletes_together_what_pays_when_that_beats_one_deletion():
    # The 'auto' schedule on Friedman #1: once β is learnt after the held phase,
    # many basis functions turn irrelevant together. A prune deletes exactly those
    # whose deletion pays, and only when that beats the best single deletion: both
    # checked against the log evidence from the explicit N×N covariance.
    from scipy.stats import multivariate_normal

    from kernelref.rvm.fast import FastLoop, run_to_end
    from kernelref.rvm.schedules import HOLD_TOL, RELEASE_TOL

    Phi, usable, t = unit_problem(seed=3, n=150, gamma=0.025)

    def direct(active, alpha, beta):
        C = np.eye(len(t)) / beta + (Phi[:, active] / alpha) @ Phi[:, active].T
        return multivariate_normal(np.zeros(len(t)), C).logpdf(t)

    held = run_to_end(
        FastLoop(Phi, usable, t, update_beta=False, release=RELEASE_TOL, tol=HOLD_TOL)
    )
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[held.active] = held.alpha
    loop = FastLoop(Phi, usable, t, alpha=alpha, beta=held.beta)
    state, prunes = loop.start(), 0
    while not loop.done(state):
        before = state.model
        j, new_alpha, gain, _ = choose_action(before, usable, 1e-3, ALIGNMENT_MAX)
        state = loop.step(state)
        kind, n_deleted = state.actions[-1]
        if kind != "prune":
            continue
        prunes += 1
        a = before.active
        paying = a[np.isinf(new_alpha[a]) & (gain[a] > 0)]
        rest = np.setdiff1d(a, paying)
        assert n_deleted == len(paying) >= 2
        assert np.all(np.isin(rest, state.model.active))
        assert not np.any(np.isin(paying, state.model.active))
        L_before = direct(a, before.alpha[a], before.beta)
        assert gain[j] > 0 and np.isinf(new_alpha[j])  # a deletion was the best
        pruned = direct(rest, before.alpha[rest], before.beta)
        assert pruned > L_before + gain[j]
    assert prunes >= 2 and state.converged
    assert np.all(np.diff(state.evidence) >= -1e-9 * np.abs(state.evidence[1:]))


def test_prune_keeps_one_basis_function_when_every_deletion_pays():
    from kernelref.rvm.fast import FastLoop
    from kernelref.rvm.joint_steps import pruned_model

    Phi, usable, t = unit_problem(seed=3, n=150, gamma=0.025)
    loop = FastLoop(Phi, usable, t)
    state = loop.start()
    while len(state.model.active) < 4:
        state = loop.step(state)
    model = state.model
    a = model.active
    new_alpha = model.alpha.copy()
    new_alpha[a] = np.inf  # as if every deletion paid
    gain = np.zeros(len(new_alpha))
    gain[a] = np.arange(1.0, len(a) + 1)  # a[0] gains least
    tried = []

    def refactorise(m):  # the loop's fresh factorisation, each trial recorded
        tried.append(m)
        return loop._refresh(m)

    n_deleted, pruned = pruned_model(model, new_alpha, gain, a[-1], refactorise)
    (trial,) = tried
    np.testing.assert_array_equal(trial.active, a[:1])  # the one gaining least stays
    assert np.isfinite(trial.alpha[a[0]]) and np.all(np.isinf(trial.alpha[a[1:]]))
    # A one-function model is far below the best single deletion: not taken, but
    # its fresh factorisation is counted.
    assert n_deleted == 0
    np.testing.assert_array_equal(pruned.active, a)
    assert pruned.n_fresh == model.n_fresh + 1


def test_additions_keep_the_coordinate_norms_of_a_fresh_sum():
    """An addition adds only its new row's squares to ‖ψ_i‖² (`coordinate_norms`):
    bit for bit the sum over every row of Ψ, so the span residuals are those of
    `span_residual` on the extended Ψ, as the loop computed them before."""
    from kernelref.rvm.coordinates import coordinate_norms

    Phi, usable, t = unit_problem(seed=6, n=90, gamma=0.2)
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[[2, 30]] = 1.0
    model = fresh_model(Phi, usable, t, alpha, 5.0)
    unit = usable.astype(float)
    for j in (5, 61, 44, 80, 17, 72):
        model = add_basis_function(model, Phi, t, usable, j, 2.0, ALIGNMENT_MAX)
        np.testing.assert_array_equal(model.norms, coordinate_norms(model.Psi))
        np.testing.assert_array_equal(model.residual, span_residual(model.Psi, unit))
    assert model.Psi.shape[0] == 8
