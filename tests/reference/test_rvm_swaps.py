"""The exact swap screen of the fast RVM (label ``rvm-swap-gain``): each swap's gain
against the brute-force evidence of the swapped model, the estimate of its polish
against S_j, Q_j formed afresh, the swapped model's coordinates, and the swaps the
'auto' schedule's last run takes."""

import numpy as np
import pytest

from kernelref.kernels import RBF
from kernelref.rvm.design import design_matrix, posterior
from kernelref.rvm.fast import FastLoop, unit_columns
from kernelref.rvm.schedules import fast_schedule
from kernelref.rvm.sparsity import ell, optimal_alpha, sparsity_quality
from kernelref.rvm.swaps import (
    SWAP_MIN,
    polished_swap,
    reestimation_estimates,
    swap_gains,
    swapped_coordinates,
)


def problem(seed=0, n=40, gamma=0.5):
    """A small sinc problem on unit columns (bias first)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-10, 10, size=n)
    t = np.sinc(x / np.pi) + 0.1 * rng.standard_normal(n)
    Phi, scales = unit_columns(design_matrix(RBF(gamma), x[:, None], x[:, None], True))
    return Phi, scales > 0, t


def model_at(Phi, usable, t, active, alpha_M, beta, alignment_max=1.0):
    """The loop's factorised state of the model ``active`` with α_M and β."""
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[active] = alpha_M
    loop = FastLoop(Phi, usable, t, alpha=alpha, beta=beta, alignment_max=alignment_max)
    return loop, loop.start().model


def evidence(Phi, t, alpha, beta):
    """log N(t | 0, β⁻¹I + ΦA⁻¹Φᵀ) of the columns with finite α: the oracle."""
    active = np.flatnonzero(np.isfinite(alpha))
    return posterior(Phi[:, active], t, alpha[active], beta).log_evidence


def random_model(seed=0):
    Phi, usable, t = problem(seed)
    rng = np.random.default_rng(seed + 1)
    active = np.sort(rng.choice(Phi.shape[1], size=7, replace=False))
    alpha_M = np.exp(rng.uniform(-2, 2, size=7))
    return Phi, usable, t, active, alpha_M, 30.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_swap_gain_is_the_evidence_of_the_swapped_model(seed):
    """(rvm-swap-gain): for every allowed swap, the gain equals the brute-force
    evidence of the model with i replaced by k at the α_k returned, every other α
    and β fixed, to 1e-8 relative."""
    Phi, usable, t, active, alpha_M, beta = random_model(seed)
    _, model = model_at(Phi, usable, t, active, alpha_M, beta)
    gain, new_alpha = swap_gains(model, usable, 1.0)
    L0 = evidence(Phi, t, model.alpha, beta)
    checked = 0
    for k, a in zip(*np.nonzero(np.isfinite(gain))):
        alpha = model.alpha.copy()
        alpha[active[a]] = np.inf
        alpha[k] = new_alpha[k, a]
        delta = evidence(Phi, t, alpha, beta) - L0
        assert gain[k, a] == pytest.approx(delta, rel=1e-8, abs=1e-10)
        checked += 1
    assert checked > 100  # most of the 34 × 7 swaps are allowed
    # a swap is refused exactly where k could not join the model without i
    for a in range(len(active)):
        rest = np.delete(active, a)
        alpha = np.full(Phi.shape[1], np.inf)
        alpha[rest] = alpha_M[np.arange(7) != a]
        _, without = model_at(Phi, usable, t, rest, alpha[rest], beta)
        s, q = sparsity_quality(without.S, without.Q, without.alpha, rest)
        joins = np.isfinite(optimal_alpha(s, q))
        joins[active] = False
        np.testing.assert_array_equal(np.isfinite(gain[:, a]), joins)
        # and α_k is the optimum of ℓ there (rvm-fast-alpha)
        np.testing.assert_allclose(new_alpha[joins, a], optimal_alpha(s, q)[joins])


def test_swap_gain_keeps_the_alignment_test():
    """With alignment_max < 1, k may replace i only if its largest cosine with the
    other basis functions is within the bound (its cosine with i does not count)."""
    Phi, usable, t, active, alpha_M, beta = random_model(0)
    _, model = model_at(Phi, usable, t, active, alpha_M, beta)
    gain_free, _ = swap_gains(model, usable, 1.0)
    bound = 0.9
    gain, _ = swap_gains(model, usable, bound)
    cosine = np.abs(Phi.T @ Phi[:, active])
    for a in range(len(active)):
        others = np.delete(cosine, a, axis=1).max(axis=1)
        expect = np.isfinite(gain_free[:, a]) & (others <= bound)
        np.testing.assert_array_equal(np.isfinite(gain[:, a]), expect)
    assert np.isfinite(gain_free).sum() > np.isfinite(gain).sum()


def test_reestimation_estimates_from_fresh_statistics():
    """The estimate of a swap's polish is its exact gain plus the gain of
    re-estimating each other basis function alone in the swapped model; here
    those come from the swapped model factorised afresh."""
    Phi, usable, t, active, alpha_M, beta = random_model(1)
    _, model = model_at(Phi, usable, t, active, alpha_M, beta)
    gain, new_alpha = swap_gains(model, usable, 1.0)
    pairs = np.column_stack(np.nonzero(np.isfinite(gain)))[::7]
    estimate = reestimation_estimates(model, gain, new_alpha, pairs)
    for (k, a), value in zip(pairs, estimate):
        alpha = model.alpha.copy()
        alpha[active[a]] = np.inf
        alpha[k] = new_alpha[k, a]
        swapped = np.flatnonzero(np.isfinite(alpha))
        _, fresh = model_at(Phi, usable, t, swapped, alpha[swapped], beta)
        s, q = sparsity_quality(fresh.S, fresh.Q, alpha, swapped)
        others = swapped[swapped != k]
        more = ell(optimal_alpha(s[others], q[others]), s[others], q[others])
        more -= ell(alpha[others], s[others], q[others])
        expect = gain[k, a] + np.maximum(more, 0.0).sum()
        assert value == pytest.approx(expect, rel=1e-8, abs=1e-10)


def test_swapped_coordinates_give_the_swapped_evidence():
    """(R, τ, perp) of the swapped model from the loop's state: RᵀR and Rᵀτ are
    Φ_M'ᵀΦ_M' and Φ_M'ᵀt, τᵀτ + perp = tᵀt, and so the evidence is the oracle's."""
    Phi, usable, t, active, alpha_M, beta = random_model(2)
    loop, model = model_at(Phi, usable, t, active, alpha_M, beta)
    a, k = 3, int(np.flatnonzero(np.isinf(model.alpha))[5])
    R, tau, perp, swapped = swapped_coordinates(model, loop.PhiT_t, a, k)
    assert swapped[-1] == k and active[a] not in swapped
    A = Phi[:, swapped]
    np.testing.assert_allclose(R.T @ R, A.T @ A, atol=1e-12)
    np.testing.assert_allclose(R.T @ tau, A.T @ t, atol=1e-12)
    assert tau @ tau + perp == pytest.approx(t @ t, rel=1e-12)


def friedman2_scaled(seed=1, n=240):
    """Friedman #2 as ``benchmarks/bench_rvm.py`` builds it (standardised inputs
    and targets, noise at a third of the signal's spread), on unit columns with
    its c = 0.25 kernel: the benchmark's row whose fast maximum a swap improves."""
    from sklearn.datasets import make_friedman2

    X, f = make_friedman2(n_samples=n, noise=0.0, random_state=seed)
    t = f + np.random.default_rng(seed).normal(size=n) * np.std(f) / 3
    X = (X - X.mean(0)) / X.std(0)
    t = (t - t.mean()) / t.std()
    Phi, scales = unit_columns(design_matrix(RBF(0.25 / 4), X, X, True))
    return Phi, scales > 0, t


def test_auto_ends_with_a_swap_pass_that_takes_polished_swaps():
    """'auto' ends with a swap pass from its best run. At its first converged
    model `polished_swap` finds a swap whose polish beats the model by `SWAP_MIN`
    (its evidence the oracle's), the loop takes it (evidence after the swap: the
    polish's, factorised afresh), and the pass ends higher than every run before
    it, which the schedule keeps; 'update' runs no swap pass."""
    Phi, usable, t = friedman2_scaled()
    runs, screens = {}, []

    def drive(loop, name):
        state = loop.start()
        while not loop.done(state):
            if state.converged and not screens:  # the first swap screen is due
                found = polished_swap(
                    state.model,
                    usable,
                    loop.alignment_max,
                    loop.PhiT_t,
                    len(t),
                    learn_beta=True,
                    beta_max=loop.beta_max,
                    tol=loop.tol,
                )
                screens.append((state.model.log_evidence, found, state.n_iter))
            state = loop.step(state)
        runs[name] = loop.result(state)
        return runs[name]

    result = fast_schedule(Phi, usable, t, "auto", drive=drive)
    assert list(runs)[-1] == "auto-swap"
    L_before, found, n = screens[0]
    assert found is not None
    assert found.polished.log_evidence > L_before + SWAP_MIN
    kept = np.isfinite(found.polished.alpha)
    alpha = np.full(Phi.shape[1], np.inf)
    alpha[found.active[kept]] = found.polished.alpha[kept]
    assert found.polished.log_evidence == pytest.approx(
        evidence(Phi, t, alpha, found.polished.beta), rel=1e-10
    )
    swap = runs.pop("auto-swap")
    assert swap.actions[n] == ("swap", found.k)  # the pass's own records (`drive`)
    assert swap.evidence[n] == pytest.approx(found.polished.log_evidence, rel=1e-10)
    assert swap.actions[-1] == ("swap", -1) and swap.converged
    best = max(run.log_evidence for run in runs.values())
    assert swap.log_evidence > best + 0.2
    assert result.log_evidence == swap.log_evidence
    runs.clear()
    fast_schedule(Phi, usable, t, "update", drive=drive)
    assert list(runs) == ["update"]
