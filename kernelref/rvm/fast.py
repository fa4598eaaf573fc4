"""The fast marginal likelihood maximisation of Tipping & Faul (2003).

Start from one basis function and, one basis function at a time, add it,
re-estimate its α_i, or delete it — whichever raises the log evidence most. The
gain of each single change is known in closed form from the sparsity s_i and
quality q_i (``kernelref.rvm.sparsity``: labels ``rvm-decomposition``,
``rvm-sq``, ``rvm-fast-alpha``). This module is the loop (`FastLoop`), its
results and its entry on the user's columns; the steps on the state it carries
are ``kernelref.rvm.fast_steps``. The β schedules that run the loop
(``kernelref.rvm.schedules``: `fast_regression`) import it.

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
every α (`kernelref.rvm.polish`) and a prune of several deletions at once
(``kernelref.rvm.joint_steps``). Asked to, a converged loop also screens swaps
of a basis function for a column outside the model (``kernelref.rvm.swaps``).
"""

import math
from collections import namedtuple

import numpy as np

from kernelref.rvm.coordinates import coordinate_posterior, log_evidence_at
from kernelref.rvm.design import initial_beta
from kernelref.rvm.fast_steps import (
    REFRESH_INTERVAL,
    SPAN_RESIDUAL_MIN,
    add_basis_function,
    beta_interval,
    choose_action,
    delete_basis_function,
    expect_additions,
    initial_model,
    noise_update,
    polish_model,
    reestimate_basis_function,
    refresh,
)
from kernelref.rvm.joint_steps import (
    polish_due,
    polished_model,
    pruned_model,
    swap_due,
    swapped_model,
)
from kernelref.rvm.reestimate import gamma_factors
from kernelref.rvm.swaps import polished_swap

__all__ = [
    "ALIGNMENT_MAX",
    "BETA_MAX_FACTOR",
    "BETA_UPDATE_START",
    "DELETE_GAMMA_MAX",
    "FastLoop",
    "FastResult",
    "FastState",
    "INIT_ALPHA_MAX",
    "MIN_DELTA_LOG_BETA",
    "RELEASE_EVERY",
    "fast_marginal_likelihood",
    "fast_on_unit_columns",
    "on_user_scale",
    "run_to_end",
    "unit_columns",
    "warm_alpha",
    "with_posterior",
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
#: The starting α of the first basis function when q² ≤ s for it.
INIT_ALPHA_MAX = 1e3

# Not in SparseBayes.
#: A deletion is refactorised at once when the basis function's γ_j = S_j/α_j is
#: above this: the downdate of H⁻¹ then multiplies its rounding by 1/(1 − γ_j).
DELETE_GAMMA_MAX = 0.99
#: The held phase's rules (``release`` and ``stall`` of `FastLoop`) look every this
#: many iterations (the β schedules' ``RELEASE_TOL`` and ``HOLD_STALL``,
#: ``kernelref.rvm.schedules``).
RELEASE_EVERY = 10


#: ``active`` indexes the columns of Φ in the model; ``alpha``, ``mu``, ``Sigma``
#: belong to them, on the scale of the columns the function was given;
#: ``evidence`` is the log evidence after each iteration; ``actions`` records
#: ("add" | "reestimate" | "delete" | "none", column) per iteration, or
#: ("polish" | "prune", the number of basis functions it deleted: `polish_model`,
#: `pruned_model`); ``n_fresh`` counts the fresh factorisations
#: (rvm-SQ-stable) and ``drift`` is the largest drift of the rank-one updates
#: measured against them; ``model`` is the `FastModel` where the loop ended, on
#: the unit columns it ran on (the next run of a β schedule starts from it).
FastResult = namedtuple(
    "FastResult",
    "active alpha beta mu Sigma gamma log_evidence evidence actions n_iter converged "
    "n_fresh drift model",
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
    beats the best single deletion (`pruned_model`; the joint steps are
    ``kernelref.rvm.joint_steps``).
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
    each new Gaussian approximation of its likelihood. ``model``, the `FastModel`
    where another run on the same columns ended (``FastResult.model``), is such a
    warm start too, taken with its coordinates where Φ is an array: the run does
    not factorise Φ's columns again (a QR and UᵀΦ), and where that run ended on a
    fresh factorisation at this β, not S, Q either (the β schedules chain their
    runs so). Without ``posterior`` the result leaves out μ, Σ and γ (`with_posterior`
    adds them): the β schedules need them only for the run they keep.

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
        model=None,
        posterior=True,
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
        self.model0, self.posterior = model, posterior

    def start(self):
        """The first model, factorised: the warm start ``model`` or ``alpha``, or
        the column most aligned with t with its optimal α."""
        if self.model0 is not None:
            model = self._continued(self.model0)
            return FastState(model, 0, 0, self.at_maximum, [], [], None)
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

    def _continued(self, model):
        """``model`` (where another run ended) as this run's first model: its
        counters and held-phase record reset as for a new factorisation, at this
        run's β, and factorised afresh unless it already is (no rank-one update or
        deleted direction since its last factorisation, the same β).

        On a design that is not an array (the Dask backend's streamed design, whose
        coordinate rows come from kept rows of ΦᵀΦ and round worse than a product
        with Φ: `new_coordinate_row`) only the model's α are taken, and its
        coordinates are formed afresh, as from ``alpha``: carried from run to run,
        its rounding moved β by 1.3e-8 from the reference's on a test problem."""
        if not isinstance(self.Phi, np.ndarray):
            start = initial_model(self.Phi, model.active, model.alpha, self.beta0)
            return self._refresh(start)
        fresh = model.since_fresh == 0 and model.beta == self.beta0
        fresh = fresh and model.U.shape[1] == len(model.active)
        model = model._replace(
            beta=self.beta0,
            interval=REFRESH_INTERVAL,
            drift=0.0,
            n_fresh=0,
            noise_estimate=None,
        )
        return model if fresh else self._refresh(model)

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
        return state.converged and not swap_due(state, self.swaps)

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
            and polish_due(model, new_alpha, gain, state.actions, self.update_beta)
        ):
            polished = polish_model(
                model, len(self.t), self.update_beta, self.beta_max, self.tol
            )
            if polished.n_steps > 0:
                return self._after_polish(state, polished, n_iter)
        pruned = False
        if self.update_beta and gain[j] > 0 and math.isinf(new_alpha[j]):
            pruned, model = pruned_model(model, new_alpha, gain, j, self._refresh)
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
            k, model = found.k, swapped_model(model, found, self.Phi, self._refresh)
        state.evidence.append(model.log_evidence)
        state.actions.append(("swap", k))
        return FastState(
            model, n_iter, 0, converged, state.evidence, state.actions, state.peak
        )

    def _after_polish(self, state, polished, n_iter):
        """The state after a `polish_model` step (`polished_model`)."""
        model = polished_model(state.model, polished, self._refresh)
        state.evidence.append(model.log_evidence)
        # The record of a polish is the number of basis functions it deleted.
        state.actions.append(("polish", int(np.sum(np.isinf(polished.alpha)))))
        since_beta = 0 if self.update_beta else state.since_beta + 1
        return FastState(
            model, n_iter, since_beta, False, state.evidence, state.actions, state.peak
        )

    def result(self, state):
        """The `FastResult` of the model where the loop stands; without
        ``posterior``, μ, Σ and γ are None (`with_posterior` adds them)."""
        model, N = state.model, len(self.t)
        active = model.active
        if self.posterior:
            post, gamma = model_posterior(model, N)
            mu, Sigma, log_evidence = post.mu, post.Sigma, post.log_evidence
        else:
            mu = Sigma = gamma = None
            log_evidence = model.log_evidence  # exact when just factorised
            if model.since_fresh > 0:  # else a sum of gains since then
                R, alpha = model.Psi[:, active], model.alpha[active]
                log_evidence = log_evidence_at(
                    R, model.tau, model.perp, alpha, model.beta, N
                )
        return FastResult(
            active,
            model.alpha[active],
            model.beta,
            mu,
            Sigma,
            gamma,
            log_evidence,
            np.array(state.evidence),
            state.actions,
            state.n_iter,
            state.converged,
            model.n_fresh,
            model.drift,
            model,
        )


def with_posterior(result, N):
    """``result`` (a `FastResult` of N targets) with the μ, Σ and γ of its model
    (label ``rvm-evidence-split``) where its loop left them out (``posterior=False``:
    the β schedules compute them once, for the run they keep)."""
    if result.mu is not None:
        return result
    post, gamma = model_posterior(result.model, N)
    return result._replace(mu=post.mu, Sigma=post.Sigma, gamma=gamma)


def model_posterior(model, N):
    """The posterior (μ, Σ, log evidence; label ``rvm-evidence-split``) of the
    `FastModel`'s active functions from its coordinates, and their γ."""
    active = model.active
    post = coordinate_posterior(
        model.Psi[:, active],
        model.tau,
        model.perp,
        model.alpha[active],
        model.beta,
        N,
    )
    return post, gamma_factors(model.alpha[active], post.Sigma.diagonal())


def warm_alpha(run, P):
    """The α of every one of P columns where ``run`` ended (∞ outside its
    model): a warm start for the next `FastLoop`."""
    alpha = np.full(P, np.inf)
    alpha[run.active] = run.alpha
    return alpha
