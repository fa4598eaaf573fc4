"""The fast marginal likelihood maximisation of Tipping & Faul (2003).

Start from one basis function and, one basis function at a time, add it,
re-estimate its α_i, or delete it — whichever raises the log evidence most. The
gain of each single change is known in closed form from the sparsity s_i and
quality q_i (``kernelref.rvm.sparsity``: labels ``rvm-decomposition``,
``rvm-sq``, ``rvm-fast-alpha``). This module is the loop (`FastLoop`) and the β
schedules around it; the steps on the state it carries are
``kernelref.rvm.fast_steps``. Both are re-exported here.

Numerics and choices. Basis functions are scaled to unit norm (as SparseBayes
does); α is mapped back to the user's scale at the end: if φ̃ = φ/c then
w = w̃/c and α = α̃c². (SparseBayes divides by c² instead, returning α on the
wrong scale.)

S_i and Q_i, the posterior and the evidence are computed in orthonormal
coordinates of the model's span (`kernelref.rvm.coordinates`), not by the Woodbury
form, which cancels catastrophically on nearly collinear columns. Between fresh
factorisations (after a β update, or an adaptive interval) S_i, Q_i and H⁻¹ are
carried by rank-one updates (label ``rvm-SQ-rank-one``), as Tipping & Faul (§4)
describe: each iteration is `choose_action` and then `add_basis_function`,
`reestimate_basis_function` or `delete_basis_function`, O(Pm) each, or one of
two joint actions that `FastLoop` takes when they pay more: a Newton polish of
every α (`kernelref.rvm.polish`) and a prune of several deletions at once.
"""

import math
from collections import namedtuple

import numpy as np

from kernelref.rvm.coordinates import (
    add_coordinate,
    coordinate_posterior,
    log_evidence_at,
)
from kernelref.rvm.design import initial_beta
from kernelref.rvm.fast_steps import (  # re-exported
    BETA_UPDATE_FREQUENCY,
    DRIFT_MAX,
    POLISH_EVERY,
    POLISH_NEAR,
    POLISH_RATIO,
    REFRESH_INTERVAL,
    REFRESH_INTERVAL_MAX,
    SPAN_RESIDUAL_MIN,
    FastModel,
    add_basis_function,
    best_move,
    beta_interval,
    choose_action,
    delete_basis_function,
    expect_additions,
    initial_model,
    near_maximum,
    noise_update,
    outside_model_span,
    polish_model,
    polish_pays,
    reestimate_basis_function,
    refresh,
    refresh_interval,
    refused_additions,
)
from kernelref.rvm.reestimate import gamma_factors
from kernelref.rvm.sparsity import (  # re-exported
    ZERO_FACTOR,
    action_gains,
    ell,
    optimal_alpha,
    sparsity_quality,
)
from kernelref.rvm.swaps import polished_swap

__all__ = [
    "ALIGNMENT_MAX",
    "BETA_MAX_FACTOR",
    "BETA_SCHEDULES",
    "BETA_UPDATE_FREQUENCY",
    "BETA_UPDATE_START",
    "DELETE_GAMMA_MAX",
    "DRIFT_MAX",
    "FINAL_ALIGNMENT_FACTOR",
    "FastLoop",
    "FastModel",
    "FastResult",
    "FastState",
    "HOLD_SIZE_FACTOR",
    "HOLD_STALL",
    "HOLD_TOL",
    "INIT_ALPHA_MAX",
    "MIN_DELTA_LOG_BETA",
    "POLISH_EVERY",
    "POLISH_NEAR",
    "POLISH_RATIO",
    "REFRESH_INTERVAL",
    "REFRESH_INTERVAL_MAX",
    "RELEASE_EVERY",
    "RELEASE_TOL",
    "SPAN_RESIDUAL_MIN",
    "STALL_SIZE",
    "SWAP_ROUNDS",
    "ZERO_FACTOR",
    "action_gains",
    "add_basis_function",
    "best_move",
    "beta_interval",
    "check_beta_schedule",
    "continued",
    "choose_action",
    "delete_basis_function",
    "ell",
    "expect_additions",
    "fast_marginal_likelihood",
    "fast_on_unit_columns",
    "fast_regression",
    "fast_schedule",
    "final_pass",
    "held_then_released",
    "initial_model",
    "moved",
    "near_maximum",
    "noise_update",
    "on_user_scale",
    "optimal_alpha",
    "outside_model_span",
    "polish_model",
    "polish_pays",
    "reestimate_basis_function",
    "refresh",
    "refresh_interval",
    "refused_additions",
    "run_to_end",
    "sparsity_quality",
    "stalled",
    "unit_columns",
    "warm_alpha",
]

# Defaults of SparseBayes 2.0 (SB2_ControlSettings, SB2_Initialisation).
#: Terminate only if a β update changes log β by less than this.
MIN_DELTA_LOG_BETA = 1e-6
#: Update β at every one of the first iterations, to reach the right noise level
#: early; afterwards every `BETA_UPDATE_FREQUENCY` iterations at least.
BETA_UPDATE_START = 10
#: The noise variance is kept above var(t)/BETA_MAX_FACTOR, for the arithmetic, not
#: the evidence: a model whose columns span all N targets fits them exactly and
#: sends β to infinity, but its evidence stays bounded (t ~ N(0, ΦA⁻¹Φᵀ) in the
#: limit). As β grows, α_j/(α_j + s_j) of well-determined basis functions falls
#: like 1/β, and α_j − S_j = α_j²/(α_j + s_j) in (rvm-sq) loses the digits of that
#: ratio. Measured on Friedman #1 (N = 240) at c = 4, where the fast path reaches
#: the cap: min α_j/(α_j + s_j) = 2–3e-7 at this cap (s_j to about 1e-9 relative),
#: 3e-9 at 1e8, 3e-11 at 1e10 (and 10–300% more fresh factorisations there); with β
#: started at re-estimation's 1e15–1e16 × 1/var(t), S_j rounds to α_j and the loop
#: divided by zero (so a β given above the cap starts at it). The cap costs
#: 0.2 nats at such a limit (c = 1 seed 1: −509.365 at this cap, −509.144 at
#: 1e9 and beyond), 0.03–1.1 nats on the four c = 4 rows at 1e8.
BETA_MAX_FACTOR = 1e6
#: A candidate whose unit-norm column has inner product above this with a column
#: in the model is (nearly) a copy of it and is not added (SparseBayes's basis
#: alignment test; ``alignment_max`` of the estimators). Measured: on densely
#: sampled data it keeps relevance vectors off the centres the evidence prefers
#: (sinc, N = 2000, γ = 0.25: 'auto' ended 1.89 nats below re-estimation; 1.79 below
#: at 1 − 1e-5 throughout; the 'auto' schedule's `final_pass` now gets there),
#: but the looser test lets nearly collinear models in whose rank-one updates,
#: through the explicit H⁻¹, drift by up to 0.15 (a trend with γ = 1/72 in the
#: fast-algorithm chapter's schedule check): not the default until S, Q are
#: updated through a Cholesky factor of H.
ALIGNMENT_MAX = 1 - 1e-3
#: The 'auto' schedule's `final_pass` runs the alignment test at this fraction of
#: ``alignment_max``'s distance from 1. Measured on sinc, N = 2000, γ = 0.25: after
#: the full hold it reaches +0.02 nats over re-estimation (1 − 1e-5: +0.06), where
#: the hold alone ends 0.14 below and 'auto' 1.89 below.
FINAL_ALIGNMENT_FACTOR = 10
#: The starting α of the first basis function when q² ≤ s for it.
INIT_ALPHA_MAX = 1e3

# Not in SparseBayes.
#: A deletion is refactorised at once when the basis function's γ_j = S_j/α_j is
#: above this: the downdate of H⁻¹ then multiplies its rounding by 1/(1 − γ_j).
DELETE_GAMMA_MAX = 0.99


#: How β is learnt alongside α (see `fast_regression`).
BETA_SCHEDULES = ("auto", "both", "update", "hold")
#: The 'auto' schedule's held phase stops once every α is within this of its optimum
#: in log α (and no addition or deletion pays); the phase with β learnt then
#: settles them to ``tol``.
HOLD_TOL = 10.0
#: A run that ends with at most this many basis functions has `stalled`.
STALL_SIZE = 4
#: When the 'auto' schedule's `final_pass` `moved` the model, 'auto' runs the hold
#: schedule too, its held phase given two budgets (`HOLD_STALL` first, this one the
#: safety net): it ends once the model holds this many times the basis functions of
#: the final pass's model (``max_size`` of `FastLoop`). Measured (2026-11-24), the
#: bounded hold with its own final pass against 'auto' without it, this budget alone:
#: sinc N = 2000, γ = 0.25 (``benchmarks/bench_rvm.py``; 8 functions, the unbounded held
#: phase peaks at 20): factor 2 +0.05 nats, 2.5 −0.09, 3 and more +1.87 (re-estimation's
#: maximum, +0.02 over its evidence), the hold's CPU 1.3× the run's. sinc20 of
#: ``benchmarks/bench_dask_rvm.py`` at N = 5000 (39 functions; unbounded, the held phase
#: adds a function at nearly every iteration, 842 in 3000, 180 s against 1 s): factor 2
#: +2.9 nats at 1.4× the run's CPU, 3 +3.3 at 2.4–2.7×, 4 −6.0 at 2.8×; the whole fit
#: 3.0× the CPU without the hold (3.43 s against 1.13), the Dask RVR 3.4× (131 streamed
#: passes against 47). Other budgets measured: held-phase iterations relative to the
#: run's (the held phase re-estimates a small model for 146 iterations on sinc
#: γ = 0.25 but adds at every one on sinc20: no ratio serves both); the hold's held
#: phase continued from the run's own (cheaper, but sinc γ = 0.25 −0.03 instead of
#: +1.87).
HOLD_SIZE_FACTOR = 3
#: The same held phase ends, too, once the evidence at the β (rvm-noise) gives
#: (`log_evidence_at`, computed every `RELEASE_EVERY` iterations) has not risen for this
#: many iterations (``stall`` of `FastLoop`; its record, ``FastState.peak``, is part of
#: the state a checkpoint carries): β is held far above its final value, and a model
#: that has stopped gaining at the noise level the data imply only grows on with
#: functions the phase with β learnt deletes again. Measured (2026-11-24, with the
#: size budget as well, against it alone): the same kept evidence on every problem of
#: the fast-algorithm chapter, ``benchmarks/bench_rvm.py``'s 41 rows and its sinc
#: N = 2000 (γ = 0.25: +1.87 nats over 'auto' without the hold, on both); on sinc20
#: (N = 500–6000, eight data sets where the hold runs) +15.7 nats over 'auto' without
#: the hold in all against +14.9 (single sets differ by up to 2.7 nats either way:
#: N = 500, the test's, 0 against +0.88), the held phase stopping at 62–89 functions
#: instead of 81–126, the hold's CPU about 20% lower; at N = 5000 (seed 0): +3.10
#: nats (size budget alone +3.34) at 2.7× the CPU without the hold (3.3×), the Dask
#: RVR 98 streamed passes (131; 47 without the hold). Where the held phase ends by
#: itself (plain sinc at N = 5000 and 10 000, where the hold gains nothing) neither
#: budget changes anything. A window of 30 iterations, checked at
#: every iteration: 2.3 nats lower on one of the chapter's problems (trend,
#: γ = 1/18); 30 checked every 10: +0.8 instead of +8.5 on sinc20 N = 4000 seed 1; 50
#: checked at every iteration: −1.0 on sinc20 N = 5000. Where the held phase stops
#: decides which maximum the phase with β learnt reaches, so each budget moves
#: individual data sets by a few nats either way.
HOLD_STALL = 50
#: The 'auto' schedule's held phase also ends once the β that (rvm-noise) would give
#: has changed by less than a factor e^RELEASE_TOL over the last `RELEASE_EVERY`
#: iterations: the model then explains what it will of the targets, and what the
#: held phase adds after that, at a noise level far below the data's, the phase
#: with β learnt deletes again (measured on the benchmark's Friedman problems: the
#: estimate levels off within 30–60 iterations while the held phase ran to 120–210).
RELEASE_TOL = 0.05
RELEASE_EVERY = 10
#: The 'auto' schedule ends with a swap pass (`fast_schedule`): from its best run,
#: at most this many swaps of a basis function for a column outside the model
#: (``swaps`` of `FastLoop`), each screened exactly, polished and taken only if the
#: polished evidence is higher (``kernelref.rvm.swaps``). Measured (2026-11-24,
#: shared machine, CPU time, min of 5 fits) on ``benchmarks/bench_rvm.py``: the two
#: rows that ended at other local maxima, F2 c=0.25 scaled s1 and F2 c=1 raw s1, from
#: 0.86 and 0.96 nats below re-estimation to 0.07 and 0.05 below (one and two
#: swaps), at 7.4 → 10.2 and 7.3 → 11.9 ms; 11 other rows and both sinc N = 2000
#: rows gain, up to 1.13 nats, none loses; where no swap pays the pass costs a warm
#: start and one screen (a few per cent of the fit), where swaps pay 20-60%; the 41
#: rows' CPU +14% in all. 4 swaps: the same ends but +0.06 nats on one row, at up
#: to 1.6× the CPU where swaps pay; 1 swap: F2 c=1 raw s1 stays 0.59 below
#: re-estimation.
#: The fast-algorithm chapter's 24 problems: 'auto' above the better full schedule
#: on 16 (13 without the pass), more than 0.5 nats below it on 2 (3), 15 gain and
#: none loses; the pass takes 1.5% of the iterations of all 'auto''s runs.
SWAP_ROUNDS = 2

#: ``active`` indexes the columns of Φ in the model; ``alpha``, ``mu``, ``Sigma``
#: belong to them, on the scale of the columns the function was given;
#: ``evidence`` is the log evidence after each iteration; ``actions`` records
#: ("add" | "reestimate" | "delete" | "none", column) per iteration, or
#: ("polish" | "prune", the number of basis functions it deleted: `polish_model`,
#: `FastLoop._prune`); ``n_fresh`` counts the fresh factorisations
#: (rvm-SQ-stable) and ``drift`` is the largest drift of the rank-one updates
#: measured against them.
FastResult = namedtuple(
    "FastResult",
    "active alpha beta mu Sigma gamma log_evidence evidence actions n_iter converged "
    "n_fresh drift",
)


def unit_columns(Phi, overwrite=False):
    """Φ with every nonzero column divided by its norm c_i, and the norms c
    (0 for a zero column): the scaling SparseBayes works in. With ``overwrite``,
    Φ itself is divided (the same quotients): where Φ is the caller's scratch, the
    N × P array a new quotient would take is not allocated (measured at N = 2000:
    65 ms of a 130 ms fit, most of it the first touch of the new pages)."""
    scales = np.sqrt(np.einsum("np,np->p", Phi, Phi))
    divisor = np.where(scales > 0, scales, 1.0)
    if overwrite:
        Phi /= divisor
        return Phi, scales
    return Phi / divisor, scales


def on_user_scale(result, scales):
    """A result on unit columns φ/c mapped back to the columns φ (label
    ``rvm-alpha-scale``): α = α̃c², μ = μ̃/c, Σ_ij = Σ̃_ij/(c_ic_j)."""
    c = scales[result.active]
    return result._replace(
        alpha=result.alpha * c**2, mu=result.mu / c, Sigma=result.Sigma / np.outer(c, c)
    )


def fast_marginal_likelihood(Phi, t, *, alpha=None, **settings):
    """Maximise the evidence by Tipping & Faul's sequential algorithm: scale the
    columns to unit norm, run `fast_on_unit_columns`, and report α, μ and Σ on
    the scale of the columns given.

    ``alpha`` (one per column of Φ, on its scale, ``np.inf`` outside the model)
    is a warm start; ``settings`` go to `fast_on_unit_columns`.
    """
    Phi_unit, scales = unit_columns(Phi)
    if alpha is not None:
        # A unit-norm column φ/c carries the weight c·w, so its α is α/c².
        alpha = np.asarray(alpha, dtype=float) / np.where(scales > 0, scales, 1.0) ** 2
    result = fast_on_unit_columns(Phi_unit, scales > 0, t, alpha=alpha, **settings)
    return on_user_scale(result, scales)


def fast_on_unit_columns(Phi, usable, t, **settings):
    """Tipping & Faul's sequential algorithm on columns of unit norm (or zero,
    where ``usable`` is false), run to its end: `FastLoop` driven by
    `run_to_end`. α, μ and Σ are on the scale of these columns."""
    return run_to_end(FastLoop(Phi, usable, t, **settings))


def run_to_end(loop, name=None):
    """Drive a `FastLoop` until it is done and return its `FastResult`. The Dask
    backend passes its own driver, with checkpoints and progress, in this place;
    ``name`` tells the runs of a β schedule apart."""
    state = loop.start()
    while not loop.done(state):
        state = loop.step(state)
    return loop.result(state)


#: Where a `FastLoop` stands: the ``model`` (`FastModel`), the iterations so far,
#: the iterations since the last β update, whether it has converged, the log
#: evidence and action (as in `FastResult`) of every iteration, and ``peak``: with
#: ``stall`` (a held phase), the highest log evidence at the β (rvm-noise) gives seen
#: so far and the iteration it was seen at, (L, n), or None.
FastState = namedtuple(
    "FastState", "model n_iter since_beta converged evidence actions peak"
)


class FastLoop:
    """Tipping & Faul's sequential algorithm as a loop the caller drives: `start`,
    then `step` until `done`, then `result`.

    Implements (rvm-sq), (rvm-decomposition), (rvm-fast-alpha) and the noise
    update (rvm-noise) on the schedule of SparseBayes. Starts, as SparseBayes
    does, from the column most aligned with t. Converged when no addition or
    deletion raises the evidence, every re-estimation changes log α_i by less
    than `tol` (SparseBayes's MinDeltaLogAlpha, 1e-3, looks only at the chosen
    one), and a final β update changes log β by less than `MIN_DELTA_LOG_BETA`.
    Columns of Φ that are zero, that have cosine above ``alignment_max`` with one
    in the model, or that lie within `SPAN_RESIDUAL_MIN` of the model's span are
    never added.

    Each iteration is `choose_action` on the current S, Q and then one of
    `add_basis_function`, `reestimate_basis_function` or `delete_basis_function`
    — or one of two joint actions: a Newton polish of every α (and β) of the
    model (`polish_model`, on the rules of `near_maximum` and `polish_pays`) and, with
    β learnt, when several deletions pay at once, all of them together if that
    beats the best single deletion (`_prune`).
    S, Q and H⁻¹ are carried from one iteration to the next by rank-one updates
    (rvm-SQ-rank-one, O(Pm) on an addition or re-estimation) and factorised afresh
    (rvm-SQ-stable, O(Pm² + m³)) after a β update, and every `REFRESH_INTERVAL`
    rank-one updates, an interval adapted to the drift measured at each of them
    (`refresh`) to keep it below `DRIFT_MAX`.

    ``max_size`` and ``stall`` are budgets: the run ends (as converged: its rule met,
    like the release of a held phase) once the model holds ``max_size`` basis
    functions, or once the log evidence at the β (rvm-noise) would give
    (`log_evidence_at`, every `RELEASE_EVERY` iterations) has not risen for ``stall``
    iterations (meant for β held; its record is the state's ``peak``).

    With ``swaps``, the loop does not stop at convergence: it screens every swap of
    a basis function for a column outside the model (`polished_swap`,
    ``kernelref.rvm.swaps``), takes one that raises the evidence after a polish
    and runs on from there, at most ``swaps`` times; a screen that finds none
    ends the run (recorded ("swap", −1)). ``at_maximum`` says that the warm start
    is where a converged run ended: the loop starts converged (a screen first) and
    updates β on its regular interval from the first iteration.

    ``beta`` replaces the starting β (with ``update_beta=False``, the fixed β;
    with β learnt, at most the cap ``BETA_MAX_FACTOR``/var(t)),
    and ``alpha`` (one per column, ``np.inf`` outside the model) replaces the
    starting model: a warm start, which the relevance vector classifier uses on
    each new Gaussian approximation of its likelihood.

    Φ is used only through ``Phi.shape``, its columns ``Phi[:, j]`` and
    ``Phi[:, index]``, and left products ``v @ Phi`` and ``V @ Phi``: an object
    offering these (the Dask backend's streamed design, whose columns are never
    all in one place) runs the same algorithm.
    """

    def __init__(
        self,
        Phi,
        usable,
        t,
        *,
        max_iter=10000,
        tol=1e-3,
        update_beta=True,
        beta=None,
        alpha=None,
        alignment_max=ALIGNMENT_MAX,
        polish=True,
        release=None,
        max_size=None,
        stall=None,
        swaps=0,
        at_maximum=False,
    ):
        self.Phi, self.usable, self.t = Phi, usable, t
        self.swaps, self.at_maximum = swaps, at_maximum
        self.polish, self.release, self.max_size = polish, release, max_size
        self.stall = stall
        self.max_iter, self.tol, self.update_beta = max_iter, tol, update_beta
        self.alignment_max = alignment_max
        self.PhiT_t = t @ Phi
        self.beta_cap = BETA_MAX_FACTOR / np.var(t)
        self.beta_max = self.beta_cap if update_beta else np.inf
        # A β learnt starts within its cap too: above it S_j rounds to α_j.
        beta0 = initial_beta(t) if beta is None else float(beta)
        self.beta0 = min(beta0, self.beta_max)
        self.alpha0 = None if alpha is None else np.array(alpha, dtype=float)

    def start(self):
        """The first model, factorised: the warm start ``alpha``, or the column
        most aligned with t with its optimal α."""
        P = self.Phi.shape[1]
        if self.alpha0 is None:
            first = int(np.argmax(np.abs(self.PhiT_t)))
            active = [first]
            # S, Q of a unit column when C = β⁻¹I
            s1, q1 = self.beta0, self.beta0 * self.PhiT_t[first]
            alpha = np.full(P, np.inf)
            alpha[first] = s1**2 / (q1**2 - s1) if q1**2 > s1 else INIT_ALPHA_MAX
        else:
            alpha = self.alpha0.copy()
            active = np.flatnonzero(np.isfinite(alpha))
        model = self._refresh(initial_model(self.Phi, active, alpha, self.beta0))
        return FastState(model, 0, 0, self.at_maximum, [], [], None)

    def _refresh(self, model, measure=False):
        """`refresh` of ``model`` on this loop's data."""
        return refresh(
            model,
            self.Phi,
            self.usable,
            self.t,
            self.PhiT_t,
            self.alignment_max,
            measure=measure,
        )

    def done(self, state):
        """Converged (and no swap screen due), or out of iterations."""
        if state.n_iter >= self.max_iter:
            return True
        return state.converged and not self._swap_due(state)

    def _swap_due(self, state):
        """With ``swaps``: the loop has converged since its last swap screen, and
        fewer than ``swaps`` swaps were taken."""
        if not self.swaps or not state.converged:
            return False
        if state.actions and state.actions[-1] == ("swap", -1):
            return False  # screened at this maximum: no swap paid
        taken = sum(1 for kind, k in state.actions if kind == "swap" and k >= 0)
        return taken < self.swaps

    def step(self, state):
        """One iteration: the best action, then β on its schedule, then a fresh
        factorisation when one is due; or, once converged, a swap screen."""
        if state.converged:  # `done` says a swap screen is due
            return self._swap(state)
        model, n_iter = state.model, state.n_iter + 1
        j, new_alpha, gain, settled = choose_action(
            model, self.usable, self.tol, self.alignment_max
        )
        if (
            self.polish
            and not settled
            and gain[j] > 0
            # the best action a re-estimation (else no rule below holds)
            and math.isfinite(model.alpha[j])
            and math.isfinite(new_alpha[j])
            and self._polish_due(model, new_alpha, gain, state.actions)
        ):
            polished = polish_model(
                model, len(self.t), self.update_beta, self.beta_max, self.tol
            )
            if polished.n_steps > 0:
                return self._after_polish(state, polished, n_iter)
        pruned = False
        if self.update_beta and gain[j] > 0 and math.isinf(new_alpha[j]):
            pruned, model = self._prune(model, new_alpha, gain, j)
        if pruned:
            action, j = "prune", pruned  # the record: how many were deleted
        elif gain[j] <= 0:
            # No single α change raises the evidence: only β may still move.
            action = "none"
        elif math.isinf(new_alpha[j]):
            action = "delete"
            gamma_j = model.S[j] / model.alpha[j]  # γ_j = 1 − α_jΣ_jj
            model = delete_basis_function(model, j, self.alignment_max)
        elif not math.isfinite(model.alpha[j]):
            action = "add"
            expect_additions(self.Phi, model, gain)
            if model.residual[j] < SPAN_RESIDUAL_MIN and not model.dead[j]:
                # Outside the model's span but (nearly) inside U's, which also
                # spans deleted columns: drop those directions before adding j's.
                model = self._refresh(model, measure=True)
            model = add_basis_function(
                model,
                self.Phi,
                self.t,
                self.usable,
                j,
                new_alpha[j],
                self.alignment_max,
            )
        else:
            action = "reestimate"
            model = reestimate_basis_function(model, j, new_alpha[j])
        if not pruned and gain[j] > 0:
            model = model._replace(log_evidence=model.log_evidence + gain[j])

        since_beta = state.since_beta + 1
        early = n_iter <= BETA_UPDATE_START and not self.at_maximum
        beta_due = early or since_beta >= beta_interval(len(model.active))
        beta_change, fresh = 0.0, False
        if self.update_beta and (beta_due or settled):
            new_beta = noise_update(model, len(self.t), self.beta_max)
            beta_change = abs(np.log(new_beta / model.beta))
            model, fresh, since_beta = model._replace(beta=new_beta), True, 0
        # A deletion of a basis function whose α_j ≪ s_j downdates H by a term
        # larger than what remains, and the rank-one H⁻¹ loses the digits of the
        # ratio: those are refactorised at once (not measured: the maintained S, Q
        # are then replaced, as after a new β, whatever their drift).
        fresh = fresh or (action == "delete" and gamma_j > DELETE_GAMMA_MAX)
        if fresh or model.since_fresh >= model.interval:
            model = self._refresh(model, measure=not fresh)
        state.evidence.append(model.log_evidence)  # the logs grow in place
        state.actions.append((action, j))
        converged = bool(settled and beta_change < MIN_DELTA_LOG_BETA)
        if self.release is not None and n_iter % RELEASE_EVERY == 0:
            model, released = self._noise_settled(model)
            converged = converged or released
        if self.max_size is not None and len(model.active) >= self.max_size:
            converged = True  # the size budget spent: the run ends here
        peak = state.peak
        if self.stall is not None and n_iter % RELEASE_EVERY == 0:
            peak = self._peak(model, peak, n_iter)
            converged = converged or n_iter - peak[1] >= self.stall
        return FastState(
            model, n_iter, since_beta, converged, state.evidence, state.actions, peak
        )

    def _polish_due(self, model, new_alpha, gain, actions):
        """Whether to polish now: `near_maximum` the maximum or, with β learnt, when it
        `polish_pays`; both from the best addition or deletion's gain. With β held
        (the RVC, a held phase) only near the maximum: an early polish there sent
        the RVC elsewhere (measured, 25 nats lower)."""
        best = best_move(model, new_alpha, gain)
        return near_maximum(model, new_alpha, best) or (
            self.update_beta and polish_pays(model, gain, best, actions)
        )

    def _prune(self, model, new_alpha, gain, j):
        """Every deletion that pays at once, when more than one does and their
        joint result, factorised afresh, beats the best single deletion j (whose
        gain is exact): (the number deleted, the pruned model), else (0, model).
        After a β update lowers β many basis functions turn irrelevant together
        (at the end of the 'auto' schedule's held phase, a third to a half of the
        model), and one by one each deletion waits for re-estimations in between."""
        a = model.active
        out = a[np.isinf(new_alpha[a]) & (gain[a] > 0)]
        if len(out) == len(a):  # one basis function stays: the one gaining least
            out = out[np.argsort(gain[out], kind="stable")[1:]]
        if len(out) < 2:
            return 0, model
        alpha = model.alpha.copy()
        alpha[out] = np.inf
        trial = self._refresh(
            model._replace(alpha=alpha, active=a[np.isfinite(alpha[a])], align=None)
        )
        if trial.log_evidence > model.log_evidence + gain[j]:
            return len(out), trial
        return 0, model._replace(n_fresh=trial.n_fresh)  # the trial counts

    def _noise_settled(self, model):
        """With β held: the β (rvm-noise) would give now, recorded in the model, and
        whether it is within a factor e^``release`` of the one recorded last."""
        estimate = self._implied_beta(model)
        last = model.noise_estimate
        settled = last is not None and abs(np.log(estimate / last)) < self.release
        return model._replace(noise_estimate=estimate), settled

    def _peak(self, model, peak, n_iter):
        """``peak`` (`FastState`) after iteration ``n_iter``: the log evidence of the
        model at the β (rvm-noise) would give now, (L, n_iter) if it is the highest
        seen."""
        beta, active = self._implied_beta(model), model.active
        R, alpha = model.Psi[:, active], model.alpha[active]
        L = log_evidence_at(R, model.tau, model.perp, alpha, beta, len(self.t))
        return (L, n_iter) if peak is None or L > peak[0] else peak

    def _implied_beta(self, model):
        """The β (rvm-noise) would give at the model's α, within the cap."""
        return noise_update(model, len(self.t), self.beta_cap)

    def _swap(self, state):
        """The swap screen at a converged model (`polished_swap`): the best swap
        that pays after a polish, taken with the polish's α and β and factorised
        afresh, the loop then going on from there (recorded ("swap", k)); or no
        change, recorded ("swap", −1), and the loop stays converged."""
        model, n_iter = state.model, state.n_iter + 1
        found = polished_swap(
            model,
            self.usable,
            self.alignment_max,
            self.PhiT_t,
            len(self.t),
            learn_beta=self.update_beta,
            beta_max=self.beta_max,
            tol=self.tol,
        )
        converged, k = found is None, -1
        if found is not None:
            k, polished = found.k, found.polished
            U, Psi = add_coordinate(self.Phi, model.U, model.Psi, k)
            alpha = np.full(len(model.alpha), np.inf)
            alpha[found.active] = polished.alpha
            model = self._refresh(
                model._replace(
                    U=U,
                    Psi=Psi,
                    alpha=alpha,
                    beta=polished.beta,
                    active=np.flatnonzero(np.isfinite(alpha)),
                    residual=None,
                    align=None,
                )
            )
        state.evidence.append(model.log_evidence)
        state.actions.append(("swap", k))
        return FastState(
            model, n_iter, 0, converged, state.evidence, state.actions, state.peak
        )

    def _after_polish(self, state, polished, n_iter):
        """The state after a `polish_model` step: α of the model and β set, every
        statistic factorised afresh."""
        model = state.model
        alpha = model.alpha.copy()
        alpha[model.active] = polished.alpha
        active = model.active[np.isfinite(polished.alpha)]
        if len(active) < len(model.active):  # deletions: alignments and U change
            model = model._replace(active=active, align=None)
        model = self._refresh(model._replace(alpha=alpha, beta=polished.beta))
        state.evidence.append(model.log_evidence)
        # The record of a polish is the number of basis functions it deleted.
        state.actions.append(("polish", int(np.sum(np.isinf(polished.alpha)))))
        since_beta = 0 if self.update_beta else state.since_beta + 1
        return FastState(
            model, n_iter, since_beta, False, state.evidence, state.actions, state.peak
        )

    def result(self, state):
        """The `FastResult` of the model where the loop stands."""
        model, N = state.model, len(self.t)
        active = model.active
        post = coordinate_posterior(
            model.Psi[:, active],
            model.tau,
            model.perp,
            model.alpha[active],
            model.beta,
            N,
        )
        gamma = gamma_factors(model.alpha[active], post.Sigma.diagonal())
        return FastResult(
            active,
            model.alpha[active],
            model.beta,
            post.mu,
            post.Sigma,
            gamma,
            post.log_evidence,
            np.array(state.evidence),
            state.actions,
            state.n_iter,
            state.converged,
            model.n_fresh,
            model.drift,
        )


def check_beta_schedule(beta_schedule):
    """Refuse a β schedule that is not one of `BETA_SCHEDULES`."""
    if beta_schedule not in BETA_SCHEDULES:
        raise ValueError(
            f"beta_schedule must be one of {BETA_SCHEDULES}; got {beta_schedule!r}."
        )


def held_then_released(
    Phi_unit,
    usable,
    t,
    hold_tol,
    *,
    release=None,
    max_size=None,
    stall=None,
    drive=run_to_end,
    name="hold",
    **settings,
):
    """The 'hold' schedule: the sequential algorithm at the starting β, to the
    tolerance ``hold_tol`` on log α (or, with ``release``, until the noise it
    implies settles; with ``max_size`` and ``stall``, within those budgets:
    `FastLoop`), then from that model with β learnt. Each run is a `FastLoop` given
    to ``drive`` (`run_to_end`) with a name."""
    held = drive(
        FastLoop(
            Phi_unit,
            usable,
            t,
            update_beta=False,
            release=release,
            max_size=max_size,
            stall=stall,
            **{**settings, "tol": hold_tol},
        ),
        f"{name}-held",
    )
    alpha = warm_alpha(held, Phi_unit.shape[1])
    released = drive(
        FastLoop(Phi_unit, usable, t, alpha=alpha, beta=held.beta, **settings),
        f"{name}-released",
    )
    return continued(held, released)


def warm_alpha(run, P):
    """The α of every one of P columns where ``run`` ended (∞ outside its
    model): a warm start for the next `FastLoop`."""
    alpha = np.full(P, np.inf)
    alpha[run.active] = run.alpha
    return alpha


def continued(previous, run):
    """The `FastResult` of ``run``, which started where ``previous`` ended, with
    the records of both: evidence, actions, iterations, fresh factorisations,
    the larger drift, and converged only if both did."""
    return run._replace(
        evidence=np.concatenate([previous.evidence, run.evidence]),
        actions=previous.actions + run.actions,
        n_iter=previous.n_iter + run.n_iter,
        n_fresh=previous.n_fresh + run.n_fresh,
        drift=max(previous.drift, run.drift),
        converged=previous.converged and run.converged,
    )


def stalled(result):
    """Whether a run stalled: it ended with at most `STALL_SIZE` basis functions.
    On kernels much wider than the data the early β updates of 'update', or a held
    phase stopped early, can leave the model at such a poor maximum (the
    fast-algorithm chapter measures it)."""
    return len(result.active) <= STALL_SIZE


def final_pass(
    Phi_unit, usable, t, previous, *, drive=run_to_end, name="final", **settings
):
    """The sequential algorithm once more from the end of the run ``previous``, with
    β learnt and the alignment test loosened to a `FINAL_ALIGNMENT_FACTOR`-th of
    its distance from 1 (1 − 1e-4 by default): the few near copies the evidence
    wants join, from a model already at a maximum, so the rank-one updates have
    few steps to drift over. Its result carries ``previous``'s records; ``settings``
    go to `FastLoop` (the swap pass's ``swaps`` and ``at_maximum`` among them)."""
    alignment_max = settings.pop("alignment_max", ALIGNMENT_MAX)
    loop = FastLoop(
        Phi_unit,
        usable,
        t,
        alpha=warm_alpha(previous, Phi_unit.shape[1]),
        beta=previous.beta,
        alignment_max=1 - (1 - alignment_max) / FINAL_ALIGNMENT_FACTOR,
        **settings,
    )
    return continued(previous, drive(loop, name))


def moved(previous, final):
    """Whether a `final_pass` changed which basis functions are in the model."""
    return not np.array_equal(np.sort(previous.active), np.sort(final.active))


def fast_regression(Phi, t, *, beta_schedule="auto", copy=True, **settings):
    """The fast algorithm with the noise precision β learnt on one of the schedules
    (`fast_schedule`), on Φ's columns scaled to unit norm once for all runs; the
    result is on the scale of Φ's columns. With ``copy=False`` the columns are
    scaled in place (Φ is the caller's scratch: `unit_columns`)."""
    check_beta_schedule(beta_schedule)
    Phi_unit, scales = unit_columns(Phi, overwrite=not copy)  # once, for every run
    result = fast_schedule(Phi_unit, scales > 0, t, beta_schedule, **settings)
    return on_user_scale(result, scales)


def fast_schedule(Phi_unit, usable, t, beta_schedule, *, drive=run_to_end, **settings):
    """The runs of one β schedule on unit columns, the highest evidence kept.

    'update' is SparseBayes's: β re-estimated at each of the first iterations.
    With a one-function model that makes most of the targets look like noise, and
    the run can stall at a poor maximum with one or two basis functions. 'hold'
    keeps β at its starting value (noise at a tenth of the targets' spread) until
    the α settle, then continues from there with β learnt. Each reaches a local
    maximum of L(α, β) and neither is always the higher; 'both' runs the two and
    keeps the higher evidence. 'auto' (the default) holds β only until no addition
    or deletion pays and every α is within a factor e^`HOLD_TOL` of its optimum — the
    held phase only has to find the basis functions, not settle their α — and ends
    with a `final_pass` at a looser alignment test. When that run `stalled` it runs
    'hold' in full as well (with its own final pass); when the final pass `moved`
    the model (the alignment test held back basis functions the evidence wants, on
    densely sampled data) it runs 'hold' with its held phase bounded: it ends once
    the evidence at the β (rvm-noise) gives has not risen for `HOLD_STALL`
    iterations, or at the latest once the model holds `HOLD_SIZE_FACTOR` times the
    final pass's basis functions. Unbounded, where the model grows with the data,
    that phase adds hundreds of functions (measured: sinc20 of
    ``benchmarks/bench_dask_rvm.py`` at N = 5000, 842 functions in 3000
    iterations, 180 s against 1 s). Last, 'auto' runs a swap pass from the best of
    its runs (a `final_pass` with ``swaps``): at a maximum no single addition,
    deletion or re-estimation pays, but replacing a basis function by a near
    neighbour and settling the α and β again may. The pass screens every such swap
    by its exact gain with the other α and β fixed (label ``rvm-swap-gain``,
    ``kernelref.rvm.swaps``, O(Pm²) from what the loop keeps), estimates what a
    polish would add to the best of them, polishes the most promising and takes
    one whose polished evidence is higher, then runs on; at most `SWAP_ROUNDS`
    swaps. (The fast-algorithm chapter measures all of them.) Every run is a
    `FastLoop` given to ``drive``; ``settings`` go to `FastLoop`.
    """
    tol = settings.get("tol", 1e-3)
    runs = []
    if beta_schedule == "auto":
        first = held_then_released(
            Phi_unit,
            usable,
            t,
            HOLD_TOL,
            release=RELEASE_TOL,
            drive=drive,
            name="auto",
            **settings,
        )
        final = final_pass(
            Phi_unit, usable, t, first, drive=drive, name="auto-final", **settings
        )
        runs += [first, final]
        if stalled(first) or moved(first, final):  # hold β until the α settle
            # a stalled run's hold unbounded; after a move, two budgets
            bound = None if stalled(first) else HOLD_SIZE_FACTOR * len(final.active)
            stall = None if stalled(first) else HOLD_STALL
            hold = held_then_released(
                Phi_unit,
                usable,
                t,
                tol,
                max_size=bound,
                stall=stall,
                drive=drive,
                name="hold",
                **settings,
            )
            runs += [
                hold,
                final_pass(
                    Phi_unit,
                    usable,
                    t,
                    hold,
                    drive=drive,
                    name="hold-final",
                    **settings,
                ),
            ]
        best = max(runs, key=lambda run: run.log_evidence)
        runs.append(
            final_pass(
                Phi_unit,
                usable,
                t,
                best,
                swaps=SWAP_ROUNDS,
                at_maximum=best.converged,
                drive=drive,
                name="auto-swap",
                **settings,
            )
        )
    if beta_schedule in ("update", "both"):
        runs.append(drive(FastLoop(Phi_unit, usable, t, **settings), "update"))
    if beta_schedule in ("hold", "both"):
        runs.append(
            held_then_released(
                Phi_unit, usable, t, tol, drive=drive, name="hold", **settings
            )
        )
    return max(runs, key=lambda run: run.log_evidence)
