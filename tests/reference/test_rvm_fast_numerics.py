"""Rounding in the fast RVM: S_i, Q_i and the evidence in orthonormal coordinates
against 40-digit arithmetic and explicit N×N solves, the updates of the basis,
s_i and q_i of the basis functions in the model, and the β schedules."""

import mpmath
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from kernelref.kernels import RBF
from kernelref.rvm import RVR
from kernelref.rvm.coordinates import (
    add_coordinate,
    coordinate_posterior,
    drop_coordinate,
    orthonormal_coordinates,
    span_residual,
    stable_SQ,
)
from kernelref.rvm.design import design_matrix, posterior
from kernelref.rvm.fast import (
    ALIGNMENT_MAX,
    BETA_MAX_FACTOR,
    fast_marginal_likelihood,
    unit_columns,
)
from kernelref.rvm.schedules import fast_regression
from kernelref.rvm.sparsity import sparsity_quality

EPS = np.finfo(float).eps


def sinc_problem(seed, n, gamma):
    """Unit-norm columns of [1, k(·, x_n)] on Tipping's sinc data."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-10, 10, size=n)
    t = np.sinc(x / np.pi) + 0.1 * rng.normal(size=n)
    Phi = design_matrix(RBF(gamma), x[:, None], x[:, None], bias=True)
    return Phi / np.linalg.norm(Phi, axis=0), t


def fitted_state(Phi, t):
    """The model the fast algorithm ends with: active columns, α (unit scale), β.
    Two schedules, as the default was when these checks were written: on the wide
    kernels below it ends with the nearly collinear model they need (the lighter
    'auto' schedule can end with a smaller one)."""
    result = fast_regression(Phi, t, beta_schedule="both")
    return result.active, result.alpha, result.beta


def woodbury_S(Phi, active, alpha, beta):
    """S_i = β − β²φ_iᵀΦΣΦᵀφ_i on unit columns, as SparseBayes computes it."""
    post = posterior(Phi[:, active], np.zeros(len(Phi)), alpha, beta)
    B = Phi.T @ Phi[:, active]
    return beta - beta**2 * np.einsum("pm,mk,pk->p", B, post.Sigma, B)


def coordinates_S_Q(Phi, t, active, alpha, beta):
    U, Psi = orthonormal_coordinates(Phi, active)
    residual = span_residual(Psi, np.ones(Phi.shape[1]))
    return stable_SQ(Psi, active, alpha, beta, residual, Phi.T @ t, U.T @ t)


def test_S_in_coordinates_is_accurate_where_the_woodbury_form_is_not():
    # A wide kernel (length 6 on [−10, 10]): the model's columns are nearly collinear.
    Phi, t = sinc_problem(0, 60, 1 / 72)
    active, alpha, beta = fitted_state(Phi, t)
    S, _ = coordinates_S_Q(Phi, t, active, alpha, beta)

    mpmath.mp.dps = 40
    N = len(t)
    Phi_mp = mpmath.matrix(Phi.tolist())
    C = mpmath.matrix(N, N)
    for n in range(N):
        C[n, n] = 1 / mpmath.mpf(beta)
    for a, j in zip(alpha, active):
        column = Phi_mp[:, int(j)]
        C += column * column.T / mpmath.mpf(a)
    CinvPhi = mpmath.inverse(C) * Phi_mp
    exact = np.array(
        [
            float(mpmath.fsum(Phi_mp[n, p] * CinvPhi[n, p] for n in range(N)))
            for p in range(Phi.shape[1])
        ]
    )

    # |error| of S_i/β within a few hundred ε, for every column; relative for the
    # model's.
    assert np.max(np.abs(S - exact)) / beta < 200 * EPS
    assert np.max(np.abs(S[active] / exact[active] - 1)) < 1e-12
    # The Woodbury form loses at least 4 more digits on the same state (measured
    # ~3e-11·β).
    assert (
        np.max(np.abs(woodbury_S(Phi, active, alpha, beta) - exact)) / beta > 1e4 * EPS
    )


def test_woodbury_S_goes_negative_on_a_wide_kernel_but_coordinates_do_not():
    Phi, t = sinc_problem(0, 100, 1 / 72)
    active, alpha, beta = fitted_state(Phi, t)
    S, _ = coordinates_S_Q(Phi, t, active, alpha, beta)
    # C⁻¹ is positive definite, so S_i = φ_iᵀC⁻¹φ_i > 0 for every nonzero column.
    assert np.min(woodbury_S(Phi, active, alpha, beta)) < 0
    assert np.min(S) > 0


@pytest.mark.parametrize("gamma", [1 / 2, 1 / 18])
def test_S_Q_and_evidence_in_coordinates_equal_explicit_solves(gamma):
    Phi, t = sinc_problem(1, 80, gamma)
    active, alpha, beta = fitted_state(Phi, t)
    S, Q = coordinates_S_Q(Phi, t, active, alpha, beta)
    C = np.eye(len(t)) / beta + (Phi[:, active] / alpha) @ Phi[:, active].T
    np.testing.assert_allclose(
        S, np.einsum("np,np->p", Phi, np.linalg.solve(C, Phi)), rtol=1e-9
    )
    np.testing.assert_allclose(
        Q, Phi.T @ np.linalg.solve(C, t), rtol=1e-9, atol=1e-9 * beta
    )

    U, Psi = orthonormal_coordinates(Phi, active)
    tau = U.T @ t
    split = coordinate_posterior(
        Psi[:, active], tau, t @ t - tau @ tau, alpha, beta, len(t)
    )
    direct = posterior(Phi[:, active], t, alpha, beta)
    np.testing.assert_allclose(split.mu, direct.mu, rtol=1e-9)
    np.testing.assert_allclose(split.Sigma, direct.Sigma, rtol=1e-9, atol=1e-15)
    logpdf = multivariate_normal(np.zeros(len(t)), C).logpdf(t)
    assert abs(split.log_evidence - logpdf) < 1e-9 * abs(logpdf)


def test_adding_and_dropping_columns_keeps_an_orthonormal_basis_of_the_model():
    Phi, _ = sinc_problem(2, 70, 1 / 18)
    U, Psi = orthonormal_coordinates(Phi, [0])
    active = [0]
    for j in (10, 20, 30, 40):
        U, Psi = add_coordinate(Phi, U, Psi, j)
        active.append(j)
    active.remove(20)
    U, Psi = drop_coordinate(U, Psi, Psi[:, active])
    assert U.shape == (70, 4)
    np.testing.assert_allclose(U.T @ U, np.eye(4), atol=1e-14)
    np.testing.assert_allclose(Psi, U.T @ Phi, atol=1e-14)
    # Φ_M = UR: the model's columns lie in the span, to rounding.
    np.testing.assert_allclose(U @ Psi[:, active], Phi[:, active], atol=1e-14)
    assert np.all(span_residual(Psi, np.ones(Phi.shape[1]))[active] < 1e-14)


def test_in_model_s_and_q_match_explicit_leave_one_out():
    Phi, t = sinc_problem(3, 60, 1 / 18)
    active, alpha, beta = fitted_state(Phi, t)
    # At convergence every s_i > α_i; a large α_0 puts one basis function in the
    # other regime (s_i does not depend on α_i).
    alpha = alpha * np.where(np.arange(len(alpha)) == 0, 1e4, 1.0)
    S, Q = coordinates_S_Q(Phi, t, active, alpha, beta)
    alpha_all = np.full(Phi.shape[1], np.inf)
    alpha_all[active] = alpha
    post = posterior(Phi[:, active], t, alpha, beta)
    s, q = sparsity_quality(S, Q, alpha_all)
    regimes = set()
    for k, i in enumerate(active):
        rest = np.delete(active, k)
        C_rest = (
            np.eye(len(t)) / beta + (Phi[:, rest] / alpha_all[rest]) @ Phi[:, rest].T
        )
        s_i = Phi[:, i] @ np.linalg.solve(C_rest, Phi[:, i])
        q_i = Phi[:, i] @ np.linalg.solve(C_rest, t)
        np.testing.assert_allclose([s[i], q[i]], [s_i, q_i], rtol=1e-8)
        # the posterior knows them too: Σ_ii = 1/(α_i + s_i) and μ_i = q_iΣ_ii
        np.testing.assert_allclose(post.Sigma[k, k], 1 / (alpha[k] + s_i), rtol=1e-8)
        np.testing.assert_allclose(post.mu[k], q_i * post.Sigma[k, k], rtol=1e-8)
        regimes.add(bool(s_i > alpha[k]))
    assert regimes == {True, False}  # α_i − S_i small and large against α_i


def test_fast_rvr_converges_on_wide_kernels_with_positive_evidence_steps():
    # At N = 2000 and γ ≤ 1/36 the Woodbury form sent α_i − S_i ≤ 0: log of a negative.
    rng = np.random.default_rng(0)
    x = rng.uniform(-10, 10, size=2000)
    t = np.sinc(x / np.pi) + 0.1 * rng.normal(size=2000)
    for gamma in (1 / 36, 1 / 200):
        model = RVR(gamma=gamma).fit(x[:, None], t)
        assert model.converged_ and 2 <= len(model.relevance_) <= 15
        noise_sd = 1 / np.sqrt(model.beta_)
        assert 0.08 < noise_sd < 0.2  # the true noise is 0.1


def test_beta_schedules_each_reach_a_maximum_and_both_keeps_the_higher():
    Phi, t = sinc_problem(0, 200, 1 / 72)
    update = fast_regression(Phi, t, beta_schedule="update")
    hold = fast_regression(Phi, t, beta_schedule="hold")
    both = fast_regression(Phi, t, beta_schedule="both")
    # Learning β from the first iteration stalls here with ≤ 2 basis functions
    # (measured: −42.8 against 95.2 nats).
    assert len(update.active) <= 2 and hold.log_evidence > update.log_evidence + 50
    assert both.log_evidence == max(update.log_evidence, hold.log_evidence)
    assert update.converged and hold.converged
    # The held run's first stage keeps β fixed at its starting value.
    held = fast_marginal_likelihood(Phi, t, update_beta=False)
    assert held.beta == pytest.approx(1 / (0.1 * np.std(t)) ** 2)
    with pytest.raises(ValueError, match="beta_schedule"):
        RVR(beta_schedule="sometimes").fit(np.arange(5.0)[:, None], np.arange(5.0))
    for bad in (1.5, 0, float("nan"), "0.999", None):
        with pytest.raises(ValueError, match="alignment_max"):
            RVR(alignment_max=bad).fit(np.arange(5.0)[:, None], np.arange(5.0))


def test_fast_classifier_reaches_a_fixed_point_on_a_curved_boundary():
    # A wide kernel on a curved boundary. Built up from the empty model, one basis
    # function was worth adding under one Gaussian approximation and worth deleting
    # under the next, for ever. With the RVC's present starts and tolerances (the
    # empty model and re-estimation's dense one, `classification.STARTS`) the kept
    # path reaches a fixed point.
    # (Stopping a cycle after STALL_PATIENCE approximations is tested on a forced
    # cycle in test_rvm_classification.py.)
    from kernelref.rvm import RVC
    from kernelref.rvm.classification import STALL_PATIENCE

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    y = (X[:, 0] ** 2 + X[:, 1] > 0.5).astype(int)
    model = RVC(gamma=0.05).fit(X, y)
    assert model.converged_
    assert model.n_iter_ <= 2 * STALL_PATIENCE  # not max_iter = 10000
    assert model.log_evidence_ == pytest.approx(np.max(model.evidence_), abs=1e-9)
    assert model.score(X, y) > 0.99
    # Without the alignment test, or with a looser one, the same data reach a
    # fixed point too.
    assert RVC(gamma=0.05, alignment_max=1.0).fit(X, y).converged_
    assert RVC(gamma=0.05, alignment_max=1 - 1e-5).fit(X, y).converged_


def auto_runs(Phi, t, states=None):
    """The 'auto' schedule on unit columns, and each of its runs by name; with
    ``states``, each run's `FastState` after every iteration too."""
    from kernelref.rvm.schedules import fast_schedule

    runs = {}

    def drive(loop, name):
        state, trace = loop.start(), []
        while not loop.done(state):
            state = loop.step(state)
            trace.append(state)
        runs[name] = loop.result(state)
        if states is not None:
            states[name] = trace
        return runs[name]

    usable = np.ones(Phi.shape[1], dtype=bool)
    return fast_schedule(Phi, usable, t, "auto", drive=drive), runs


def test_auto_final_pass_lets_near_copies_in_and_then_the_bounded_hold_runs():
    from kernelref.rvm.schedules import HOLD_SIZE_FACTOR

    # Densely sampled sinc: the pass at 1 − 1e-4 adds columns within the default
    # alignment test of ones in the model (which then leave: the centres slide)
    # and gains; having moved the model, it sets off the hold schedule with its
    # held phase bounded (`test_auto_hold_stops_within_its_budgets`).
    Phi, t = sinc_problem(2, 100, 1 / 18)
    result, runs = auto_runs(Phi, t)
    assert list(runs) == [
        "auto-held",
        "auto-released",
        "auto-final",
        "hold-held",
        "hold-released",
        "hold-final",
        "auto-swap",  # the swap pass from the best run (test_rvm_swaps.py)
    ]
    assert runs["auto-final"].log_evidence > runs["auto-released"].log_evidence + 0.1
    before, after = runs["auto-released"].active, runs["auto-final"].active
    new = np.setdiff1d(after, before)
    cosines = np.max(np.abs(Phi[:, new].T @ Phi[:, before]), axis=1)
    assert len(new) > 0 and np.all((ALIGNMENT_MAX < cosines) & (cosines <= 1 - 1e-4))
    assert len(runs["hold-held"].active) <= HOLD_SIZE_FACTOR * len(after)
    kept = [run.log_evidence for name, run in runs.items() if "held" not in name]
    assert result.log_evidence == max(kept)
    L = posterior(Phi[:, result.active], t, result.alpha, result.beta).log_evidence
    assert result.log_evidence == pytest.approx(L, abs=1e-8)
    # Where the pass changes nothing, only the swap pass runs after it.
    Phi, t = sinc_problem(0, 100, 1 / 18)
    result, runs = auto_runs(Phi, t)
    assert list(runs) == ["auto-held", "auto-released", "auto-final", "auto-swap"]
    np.testing.assert_array_equal(
        np.sort(runs["auto-final"].active), np.sort(runs["auto-released"].active)
    )


def test_a_run_started_from_where_another_ended_equals_one_refactorised():
    """A `FastLoop` given ``model=`` (the `FastModel` where the last run ended,
    ``FastResult.model``, as the β schedules chain their runs) takes the path of
    one given that model's α and β, which factorises Φ's columns afresh: the same
    actions and basis functions, the evidence to rounding. The hand-off skips the
    QR and, where the last run ended on a fresh factorisation at this β, S and Q."""
    from kernelref.rvm.fast import FastLoop, run_to_end, warm_alpha

    Phi, t = sinc_problem(1, 120, 0.25)
    usable = np.ones(Phi.shape[1], dtype=bool)
    held = run_to_end(FastLoop(Phi, usable, t, update_beta=False, tol=10.0))
    assert held.model.since_fresh > 0  # the released run refactorises it once
    for previous in (held, run_to_end(FastLoop(Phi, usable, t))):
        runs = [
            run_to_end(FastLoop(Phi, usable, t, beta=previous.beta, **start))
            for start in (
                dict(model=previous.model),
                dict(alpha=warm_alpha(previous, Phi.shape[1])),
            )
        ]
        handed, fresh = runs
        assert handed.actions == fresh.actions
        np.testing.assert_array_equal(handed.active, fresh.active)
        assert handed.log_evidence == pytest.approx(fresh.log_evidence, abs=1e-9)
        np.testing.assert_allclose(handed.alpha, fresh.alpha, rtol=1e-6)
        # the factorisation of a fresh start saved where the last run ended fresh
        assert handed.n_fresh == fresh.n_fresh - (previous is not held)
    # From a converged run's end (fresh at its own β) nothing is refactorised
    # before the first step.
    loop = FastLoop(Phi, usable, t, model=previous.model, beta=previous.beta)
    assert loop.start().model.n_fresh == 0


def test_a_warm_start_above_the_beta_cap_starts_at_the_cap():
    """β given above BETA_MAX_FACTOR/var(t) (with β learnt) starts at the cap: at
    β·var(t) = 1e18 S_j of the well-determined basis functions rounds to α_j and
    s_j = α_jS_j/(α_j − S_j) divided by zero. From the cold run's α it ends at the
    cold run's maximum."""
    Phi, t = sinc_problem(0, 40, 0.25)
    cold = fast_regression(Phi, t)
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[cold.active] = cold.alpha
    warm = fast_marginal_likelihood(Phi, t, alpha=alpha, beta=1e18 / np.var(t))
    assert warm.beta <= BETA_MAX_FACTOR / np.var(t)
    assert np.array_equal(warm.active, cold.active)
    assert warm.log_evidence == pytest.approx(cold.log_evidence, rel=1e-9, abs=1e-9)
    direct = posterior(Phi[:, warm.active], t, warm.alpha, warm.beta).log_evidence
    assert warm.log_evidence == pytest.approx(direct, rel=1e-9)


def test_auto_hold_stops_within_its_budgets():
    from kernelref.rvm.fast import RELEASE_EVERY, FastLoop, run_to_end
    from kernelref.rvm.schedules import HOLD_SIZE_FACTOR, HOLD_STALL

    # sinc20 of benchmarks/bench_dask_rvm.py at N = 500: sinc seen through 20
    # noisy inputs, where the model grows with the data. The final pass moves the
    # model, so 'auto' runs the hold; unbounded, its held phase (β fixed, tol
    # 1e-3) keeps adding (measured: 286 functions in 4618 iterations here, 842 in
    # 3000 at N = 5000). It gets two budgets: it stops once the evidence at the β
    # (rvm-noise) gives has not risen for HOLD_STALL iterations, and at the latest
    # once the model holds HOLD_SIZE_FACTOR times the final pass's functions.
    rng = np.random.default_rng(0)
    z = rng.uniform(-10, 10, size=500)
    direction = rng.normal(size=20)
    X = np.outer(z, direction / np.linalg.norm(direction))
    X += 0.3 * rng.normal(size=(500, 20))
    t = np.sinc(z / np.pi) + rng.normal(0, 0.1, size=500)
    Phi = design_matrix(RBF(1 / 18), X, X, bias=True)
    Phi /= np.linalg.norm(Phi, axis=0)
    N, usable = len(t), np.ones(Phi.shape[1], dtype=bool)
    states = {}
    result, runs = auto_runs(Phi, t, states)
    assert list(runs)[3:] == ["hold-held", "hold-released", "hold-final", "auto-swap"]
    bound = HOLD_SIZE_FACTOR * len(runs["auto-final"].active)
    held = states["hold-held"]
    # The evidence at the β (rvm-noise) gives, every RELEASE_EVERY iterations,
    # from an explicit posterior at the held β and one at that β.
    checks = {}
    for state in held[RELEASE_EVERY - 1 :: RELEASE_EVERY]:
        model, active = state.model, state.model.active
        post = posterior(Phi[:, active], t, model.alpha[active], model.beta)
        gamma = 1 - model.alpha[active] * np.diag(post.Sigma)
        misfit = t - Phi[:, active] @ post.mu
        beta = (N - gamma.sum()) / (misfit @ misfit)
        L = posterior(Phi[:, active], t, model.alpha[active], beta).log_evidence
        checks[state.n_iter] = L
        best = max(checks, key=checks.get)  # the record: the highest so far
        assert state.peak[1] == best
        assert state.peak[0] == pytest.approx(checks[best], rel=1e-9)
    # Here the stall ends the held phase, exactly HOLD_STALL iterations after the
    # highest check and before the size budget, and is reported as its end (the
    # released phase then learns β from there).
    sizes = [len(state.model.active) for state in held]
    assert len(held) == best + HOLD_STALL
    assert max(sizes) < bound
    assert runs["hold-held"].converged and result.converged
    # The size budget alone (no stall) stops the same held phase at the bound.
    loop = FastLoop(Phi, usable, t, update_beta=False, max_size=bound)
    sized = run_to_end(loop)
    assert len(sized.active) == bound and sized.n_iter > len(held)
    # Without either, it grows on, past twice the bound.
    loop = FastLoop(Phi, usable, t, update_beta=False)
    state = loop.start()
    while not loop.done(state) and len(state.model.active) <= 2 * bound:
        state = loop.step(state)
    assert len(state.model.active) > 2 * bound
    kept = [run.log_evidence for name, run in runs.items() if "held" not in name]
    assert result.log_evidence == max(kept)
    L = posterior(Phi[:, result.active], t, result.alpha, result.beta).log_evidence
    assert result.log_evidence == pytest.approx(L, abs=1e-8)


def test_fast_regression_scales_in_place_only_when_told():
    """copy=False scales the caller's Φ in place (unit_columns(overwrite=True)),
    with the same result bit for bit; the default leaves Φ as it was."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-10, 10, 80)
    t = np.sinc(x / np.pi) + 0.1 * rng.normal(size=80)
    Phi = design_matrix(RBF(1 / 18), x[:, None], x[:, None], True)
    kept = Phi.copy()
    copied = fast_regression(Phi, t)
    np.testing.assert_array_equal(Phi, kept)
    in_place = fast_regression(Phi, t, copy=False)
    np.testing.assert_array_equal(Phi, unit_columns(kept)[0])
    assert in_place.log_evidence == copied.log_evidence
    np.testing.assert_array_equal(in_place.alpha, copied.alpha)
    np.testing.assert_array_equal(in_place.mu, copied.mu)
