"""The fast marginal likelihood maximisation of Tipping & Faul (2003).

Start from one basis function and, one basis function at a time, add it,
re-estimate its α_i, or delete it — whichever raises the log evidence most.
The evidence splits around any one basis function i (label ``rvm-decomposition``):

    L(α) = L(α₋ᵢ) + ℓ(α_i),   ℓ(α_i) = ½[log α_i − log(α_i + s_i) + q_i²/(α_i + s_i)],

where, with C₋ᵢ the covariance C of the evidence without basis function i,
s_i = φ_iᵀC₋ᵢ⁻¹φ_i (sparsity) and q_i = φ_iᵀC₋ᵢ⁻¹t (quality). ℓ has its single
maximum at α_i = s_i²/(q_i² − s_i) when q_i² > s_i and rises towards α_i = ∞
(basis function out of the model) otherwise (label ``rvm-fast-alpha``). s_i and
q_i come from S_i = φ_iᵀC⁻¹φ_i and Q_i = φ_iᵀC⁻¹t of the current model
(label ``rvm-sq``).

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

from collections import namedtuple

import numpy as np

from kernelref.rvm.coordinates import (
    add_coordinate,
    add_in_span_step,
    add_step,
    coordinate_posterior,
    delete_step,
    drop_coordinate,
    fresh_statistics,
    measured_drift,
    orthonormal_coordinates,
    rank_one_SQ,
    reestimate_step,
    span_residual,
    split_log_evidence,
)
from kernelref.rvm.design import initial_beta
from kernelref.rvm.polish import newton_polish
from kernelref.rvm.reestimate import gamma_factors

__all__ = [
    "ALIGNMENT_MAX",
    "BETA_MAX_FACTOR",
    "BETA_SCHEDULES",
    "HOLD_TOL",
    "STALL_SIZE",
    "RELEASE_EVERY",
    "RELEASE_TOL",
    "BETA_UPDATE_FREQUENCY",
    "BETA_UPDATE_START",
    "DELETE_GAMMA_MAX",
    "DRIFT_MAX",
    "FastLoop",
    "FastModel",
    "FastResult",
    "FastState",
    "INIT_ALPHA_MAX",
    "MIN_DELTA_LOG_BETA",
    "POLISH_EVERY",
    "POLISH_NEAR",
    "POLISH_RATIO",
    "REFRESH_INTERVAL",
    "REFRESH_INTERVAL_MAX",
    "SPAN_RESIDUAL_MIN",
    "ZERO_FACTOR",
    "add_basis_function",
    "check_beta_schedule",
    "choose_action",
    "delete_basis_function",
    "ell",
    "fast_marginal_likelihood",
    "fast_on_unit_columns",
    "fast_regression",
    "fast_schedule",
    "held_then_released",
    "initial_model",
    "stalled",
    "beta_interval",
    "noise_update",
    "on_user_scale",
    "outside_model_span",
    "optimal_alpha",
    "reestimate_basis_function",
    "refresh",
    "refused_additions",
    "refresh_interval",
    "run_to_end",
    "sparsity_quality",
    "unit_columns",
]

# Defaults of SparseBayes 2.0 (SB2_ControlSettings, SB2_Initialisation).
#: q_i² − s_i at or below this counts as zero: the basis function is out.
ZERO_FACTOR = 1e-12
#: Terminate only if a β update changes log β by less than this.
MIN_DELTA_LOG_BETA = 1e-6
#: Update β at every one of the first iterations, to reach the right noise level early…
BETA_UPDATE_START = 10
#: …and every this many iterations afterwards at least (`beta_interval`), since each
#: update changes every S_i, Q_i.
BETA_UPDATE_FREQUENCY = 5
#: The noise variance is kept above var(t)/BETA_MAX_FACTOR: a model that fits the
#: targets exactly would otherwise send β to infinity.
BETA_MAX_FACTOR = 1e6
#: A candidate whose unit-norm column has inner product above this with a column
#: in the model is (nearly) a copy of it and is not added (SparseBayes's basis
#: alignment test; ``alignment_max`` of the estimators). Measured: on densely
#: sampled data it keeps relevance vectors off the centres the evidence prefers
#: (sinc, N = 2000, γ = 0.25: 2.1 nats below re-estimation; 0.08 above at 1 − 1e-5),
#: but the looser test lets nearly collinear models in whose rank-one updates,
#: through the explicit H⁻¹, drift by up to 0.15 (a trend with γ = 1/72 in the
#: fast-algorithm chapter's schedule check): not the default until S, Q are
#: updated through a Cholesky factor of H.
ALIGNMENT_MAX = 1 - 1e-3
#: The starting α of the first basis function when q² ≤ s for it.
INIT_ALPHA_MAX = 1e3

# Not in SparseBayes, which has no such test (see kernelref.rvm.coordinates).
#: A candidate whose unit-norm column lies within this squared distance of the span
#: of the model's columns is never added: below it the new direction (I − UUᵀ)φ_i,
#: computed with an absolute error of a few ε, is mostly rounding.
SPAN_RESIDUAL_MIN = 1e-10
#: The target bound on the drift of the rank-one maintained S_i, Q_i from a fresh
#: factorisation (`kernelref.rvm.coordinates.measured_drift`, relative). Typical
#: drifts are 1e-12–1e-10; on ill-conditioned models (β near its cap, wide kernels)
#: single updates can add 1e-10 or more, since v_i = βψ_iᵀH⁻¹ψ_j uses H⁻¹ formed
#: explicitly. The drift is measured at each fresh factorisation, so a drift above
#: the bound is seen, and the interval cut, only after the updates that made it.
DRIFT_MAX = 1e-8
#: A deletion is refactorised at once when the basis function's γ_j = S_j/α_j is
#: above this: the downdate of H⁻¹ then multiplies its rounding by 1/(1 − γ_j).
DELETE_GAMMA_MAX = 0.99
#: S, Q are factorised afresh after this many rank-one updates at first; each
#: refactorisation measures the drift and sets the next interval
#: (`refresh_interval`).
REFRESH_INTERVAL = 16
#: The interval never exceeds this.
REFRESH_INTERVAL_MAX = 1024

#: `FastLoop` polishes the α of the model jointly (`polish_model`) once no addition
#: or deletion pays and every α_i is within a factor e^POLISH_NEAR of its optimum.
POLISH_NEAR = 1.0

#: With β learnt, it also polishes once the re-estimations together would gain at
#: least POLISH_RATIO times the best addition or deletion (`_polish_pays`): the
#: model's α, not its membership, then hold the evidence back, and coordinate
#: ascent would settle them in hundreds of small steps (the benchmark's Friedman #1,
#: c = 1, raw, seed 0: 713 of 967 iterations were re-estimations, within 0.1 nats
#: of the end only at iteration 710; with this, 205 iterations in all). Measured
#: on the benchmark's 41 problems (before `FastLoop._prune`): ratio 10 takes 5 172
#: iterations in all, 100 takes 7 553 and none 10 834, for 10% and 7% less CPU
#: time than none; but an early polish deletes what coordinate ascent would keep,
#: and leads to other maxima: on 12 Friedman #1 problems (c = 0.25, 1) ratio 10
#: ends 25.5 nats lower in all, 100 5.4 nats …
POLISH_RATIO = 100.0
#: … at most once in POLISH_EVERY iterations (a polish costs O(m³) per Newton step).
POLISH_EVERY = 20

#: How β is learnt alongside α (see `fast_regression`).
BETA_SCHEDULES = ("auto", "both", "update", "hold")
#: The 'auto' schedule's held phase stops once every α is within this of its optimum
#: in log α (and no addition or deletion pays); the phase with β learnt then
#: settles them to ``tol``.
HOLD_TOL = 10.0
#: A run that ends with at most this many basis functions has `stalled`.
STALL_SIZE = 4
#: The 'auto' schedule's held phase also ends once the β that (rvm-noise) would give
#: has changed by less than a factor e^RELEASE_TOL over the last `RELEASE_EVERY`
#: iterations: the model then explains what it will of the targets, and what the
#: held phase adds after that, at a noise level far below the data's, the phase
#: with β learnt deletes again (measured on the benchmark's Friedman problems: the
#: estimate levels off within 30–60 iterations while the held phase ran to 120–210).
RELEASE_TOL = 0.05
RELEASE_EVERY = 10

#: ``active`` indexes the columns of Φ in the model; ``alpha``, ``mu``, ``Sigma``
#: belong to them, on the scale of the columns the function was given; ``evidence`` is the log evidence after each iteration;
#: ``actions`` records ("add" | "reestimate" | "delete" | "none", column) per
#: iteration, or ("polish" | "prune", the number of basis functions it deleted:
#: `polish_model`, `FastLoop._prune`); ``n_fresh`` counts the fresh factorisations (rvm-SQ-stable) and
#: ``drift`` is the largest drift of the rank-one updates measured against them.
FastResult = namedtuple(
    "FastResult",
    "active alpha beta mu Sigma gamma log_evidence evidence actions n_iter converged "
    "n_fresh drift",
)


def sparsity_quality(S, Q, alpha, inside=None):
    """s_i, q_i from S_i, Q_i (label ``rvm-sq``).

    For a basis function in the model (finite α_i), s_i = α_iS_i/(α_i − S_i) and
    q_i = α_iQ_i/(α_i − S_i); for one outside it (α_i = ∞) s_i = S_i, q_i = Q_i.
    With α_i − S_i = α_i²/(α_i + s_i) the factor is 1 + s_i/α_i = q_i²/s_i at the
    optimum α_i: it magnifies the relative error of S_i, which is why S_i must be
    computed without cancellation (`kernelref.rvm.coordinates.stable_SQ`).
    ``inside`` indexes the finite α_i when the caller knows them (the model's
    ``active``).
    """
    if inside is None:
        inside = np.flatnonzero(np.isfinite(alpha))
    s, q = S.copy(), Q.copy()
    S_in, alpha_in = S[inside], alpha[inside]
    factor = alpha_in / (alpha_in - S_in)
    s[inside] = factor * S_in
    q[inside] = factor * Q[inside]
    return s, q


def ell(alpha, s, q):
    """ℓ(α_i) = ½[log α_i − log(α_i + s_i) + q_i²/(α_i + s_i)], the part of the log
    evidence that depends on α_i (label ``rvm-decomposition``); ℓ(∞) = 0."""
    alpha = np.asarray(alpha, dtype=float)
    finite = np.isfinite(alpha)
    a = np.where(finite, alpha, 1.0)
    value = 0.5 * (np.log(a) - np.log(a + s) + q**2 / (a + s))
    return np.where(finite, value, 0.0)


def optimal_alpha(s, q):
    """The maximiser of ℓ: s²/(q² − s) if q² > s, else ∞ (label ``rvm-fast-alpha``)."""
    theta = q**2 - s
    with np.errstate(divide="ignore"):
        return np.where(
            theta > ZERO_FACTOR, s**2 / np.where(theta > 0, theta, 1.0), np.inf
        )


def _choose_action(alpha, active, s, q, refused):
    """The optimal α and the gain ΔL of changing it, for every column.

    For every column: its optimal α (rvm-fast-alpha) and ΔL = ℓ(α_new) − ℓ(α_old)
    (rvm-fast-gains), which is an addition, a re-estimation or a deletion (a column
    that stays out gains 0). At the optimum α* = s/r, with r = (q² − s)/s,
    ℓ(α*) = ½[r − log(1 + r)], the gain of an addition; only the columns with
    q² − s above `ZERO_FACTOR` have one. Deleting the last basis function and adding
    a ``refused`` column (aligned with a basis function in the model, or inside the
    model's span; those in the model, ``active``, are never refused) are not allowed.
    """
    theta = q * q - s
    to = np.flatnonzero((theta > ZERO_FACTOR) & ~refused)
    s_to = s[to]
    r = theta[to] / s_to
    new_alpha = np.full(len(s), np.inf)
    new_alpha[to] = s_to / r
    gain = np.zeros(len(s))
    gain[to] = 0.5 * (r - np.log1p(r))  # ℓ(α_new), 0 for α_new = ∞
    ell_old = _ell_finite(alpha[active], s[active], q[active])
    if len(active) == 1 and np.isinf(new_alpha[active[0]]):  # the last one stays
        new_alpha[active], gain[active] = alpha[active], ell_old
    gain[active] -= ell_old  # − ℓ(α_old), 0 for α_old = ∞
    return new_alpha, gain


def _ell_finite(alpha, s, q):
    """ℓ(α_i) of `ell` for finite α_i only (no masking)."""
    a_s = alpha + s
    return 0.5 * (np.log(alpha / a_s) + q * q / a_s)


def unit_columns(Phi):
    """Φ with every nonzero column divided by its norm c_i, and the norms c
    (0 for a zero column): the scaling SparseBayes works in."""
    scales = np.sqrt(np.einsum("np,np->p", Phi, Phi))
    return Phi / np.where(scales > 0, scales, 1.0), scales


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
#: the iterations since the last β update, whether it has converged, and the log
#: evidence and action (as in `FastResult`) of every iteration.
FastState = namedtuple(
    "FastState", "model n_iter since_beta converged evidence actions"
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
    model (`polish_model`, on the rules of `_near` and `_polish_pays`) and, with
    β learnt, when several deletions pay at once, all of them together if that
    beats the best single deletion (`_prune`).
    S, Q and H⁻¹ are carried from one iteration to the next by rank-one updates
    (rvm-SQ-rank-one, O(Pm) on an addition or re-estimation) and factorised afresh
    (rvm-SQ-stable, O(Pm² + m³)) after a β update, and every `REFRESH_INTERVAL`
    rank-one updates, an interval adapted to the drift measured at each of them
    (`refresh`) to keep it below `DRIFT_MAX`.

    ``beta`` replaces the starting β (with ``update_beta=False``, the fixed β),
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
    ):
        self.Phi, self.usable, self.t = Phi, usable, t
        self.polish, self.release = polish, release
        self.max_iter, self.tol, self.update_beta = max_iter, tol, update_beta
        self.alignment_max = alignment_max
        self.PhiT_t = t @ Phi
        self.beta0 = initial_beta(t) if beta is None else float(beta)
        self.beta_max = BETA_MAX_FACTOR / np.var(t) if update_beta else np.inf
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
        return FastState(model, 0, 0, False, [], [])

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
        """Converged, or out of iterations."""
        return state.converged or state.n_iter >= self.max_iter

    def step(self, state):
        """One iteration: the best action, then β on its schedule, then a fresh
        factorisation when one is due."""
        model, n_iter = state.model, state.n_iter + 1
        j, new_alpha, gain, settled = choose_action(
            model, self.usable, self.tol, self.alignment_max
        )
        if (
            self.polish
            and not settled
            and gain[j] > 0
            # the best action a re-estimation (else no rule below holds)
            and np.isfinite(model.alpha[j])
            and np.isfinite(new_alpha[j])
            and self._polish_due(model, new_alpha, gain, state.actions)
        ):
            polished = polish_model(
                model, len(self.t), self.update_beta, self.beta_max, self.tol
            )
            if polished.n_steps > 0:
                return self._after_polish(state, polished, n_iter)
        pruned = False
        if self.update_beta and gain[j] > 0 and np.isinf(new_alpha[j]):
            pruned, model = self._prune(model, new_alpha, gain, j)
        if pruned:
            action, j = "prune", pruned  # the record: how many were deleted
        elif gain[j] <= 0:
            # No single α change raises the evidence: only β may still move.
            action = "none"
        elif np.isinf(new_alpha[j]):
            action = "delete"
            gamma_j = model.S[j] / model.alpha[j]  # γ_j = 1 − α_jΣ_jj
            model = delete_basis_function(model, j, self.alignment_max)
        elif not np.isfinite(model.alpha[j]):
            action = "add"
            _expect_additions(self.Phi, model, gain)
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
        beta_due = n_iter <= BETA_UPDATE_START or since_beta >= beta_interval(
            len(model.active)
        )
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
        return FastState(
            model, n_iter, since_beta, converged, state.evidence, state.actions
        )

    def _polish_due(self, model, new_alpha, gain, actions):
        """Whether to polish now: `_near` the maximum or, with β learnt, when it
        `_polish_pays`; both from the best addition or deletion's gain. With β held
        (the RVC, a held phase) only near the maximum: an early polish there sent
        the RVC elsewhere (measured, 25 nats lower)."""
        best_move = _best_move(model, new_alpha, gain)
        return _near(model, new_alpha, best_move) or (
            self.update_beta and _polish_pays(model, gain, best_move, actions)
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
        estimate = noise_update(model, len(self.t), BETA_MAX_FACTOR / np.var(self.t))
        last = model.noise_estimate
        settled = last is not None and abs(np.log(estimate / last)) < self.release
        return model._replace(noise_estimate=estimate), settled

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
            model, n_iter, since_beta, False, state.evidence, state.actions
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
        gamma = gamma_factors(model.alpha[active], np.diag(post.Sigma))
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


#: The state the sequential algorithm carries between iterations: the model
#: (``active`` sorted, ``alpha`` for every column, ∞ outside, ``beta``), the
#: orthonormal coordinates ``U``, ``Psi`` = UᵀΦ, ``tau`` = Uᵀt and
#: ``perp`` = ‖(I − UUᵀ)t‖², ``residual`` = ‖(I − UUᵀ)φ_i‖², ``S``, ``Q`` and
#: ``G`` = H⁻¹ (rvm-SQ-stable); ``align``, each column's largest |cosine| with one
#: in the model; ``log_evidence``; ``since_fresh``, the rank-one updates since
#: the last fresh factorisation, ``interval``, how many are allowed, ``drift``, the
#: largest drift measured so far, ``n_fresh``, the fresh factorisations so far, and
#: ``dead``, the columns deleted since then, whose directions U still spans;
#: ``noise_estimate``, the β (rvm-noise) gave at the last check of a held phase
#: (``FastLoop(release=...)``), or None.
FastModel = namedtuple(
    "FastModel",
    "active alpha beta U Psi tau perp residual S Q G align log_evidence "
    "since_fresh interval drift n_fresh dead noise_estimate",
)


def initial_model(Phi, active, alpha, beta):
    """The state of a model with the columns ``active`` (α for every column, ∞
    outside): its orthonormal coordinates; `refresh` fills in the rest."""
    active = np.sort(np.asarray(active, dtype=int))
    U, Psi = orthonormal_coordinates(Phi, active)
    return FastModel(
        active,
        alpha,
        beta,
        U,
        Psi,
        tau=None,
        perp=None,
        residual=None,
        S=None,
        Q=None,
        G=None,
        align=None,
        log_evidence=None,
        since_fresh=0,
        interval=REFRESH_INTERVAL,
        drift=0.0,
        n_fresh=0,
        dead=np.zeros(len(alpha), dtype=bool),
        noise_estimate=None,
    )


def beta_interval(m):
    """Iterations between β updates after the first `BETA_UPDATE_START`: every
    `BETA_UPDATE_FREQUENCY` (SparseBayes), or every m with m basis functions in the
    model, whichever is longer. A β update costs a fresh factorisation, O(Pm² + m³),
    against O(Pm) for a rank-one iteration, so this keeps the two costs in balance."""
    return max(BETA_UPDATE_FREQUENCY, m)


def refresh_interval(measured, n_updates, interval):
    """The rank-one updates allowed before the next fresh factorisation, from the
    drift ``measured`` after ``n_updates`` of them: twice the last interval while
    the drift is below `DRIFT_MAX`/100, a quarter of it above `DRIFT_MAX`, else the
    same. Measured drifts are rounding errors and differ between runs whose inputs
    round differently (the Dask backend's); wide bands keep both on the same
    schedule of fresh factorisations, and so on the same path (an interval set by
    the measured rate per update, tried, made them part within a few hundred
    iterations). Measured on the benchmark's wide kernels, single updates drift by
    1e-11–1e-9: bands a hundred times lower than these (tried first) refactorised
    at nearly every iteration there."""
    if measured <= DRIFT_MAX / 100:
        return min(2 * interval, REFRESH_INTERVAL_MAX)
    if measured > DRIFT_MAX:
        return max(interval // 4, 1)
    return interval


def refresh(model, Phi, usable, t, PhiT_t, alignment_max, measure=False):
    """Every derived quantity of ``model`` from its coordinates afresh: τ, the
    residuals, S, Q and H⁻¹ (rvm-SQ-stable), the alignments and the log evidence
    (rvm-evidence-split). One fresh factorisation, O(Pm² + m³).

    With ``measure``, the maintained S, Q are compared with the fresh ones
    (`measured_drift`) and the refresh interval adapted to keep the drift below
    `DRIFT_MAX` (see `REFRESH_INTERVAL`).
    """
    active, alpha, beta, U, Psi = (
        model.active,
        model.alpha,
        model.beta,
        model.U,
        model.Psi,
    )
    if U.shape[1] > len(active):  # drop the deleted directions
        U, Psi = drop_coordinate(U, Psi, Psi[:, active])
    align = model.align  # kept exact by every action
    if align is None and alignment_max < 1:  # |φ_iᵀφ_j|, j in the model
        align = np.max(np.abs(Psi.T @ Psi[:, active]), axis=1)
    tau = U.T @ t
    perp = max(t @ t - tau @ tau, 0.0)  # ‖(I − UUᵀ)t‖²
    residual = model.residual  # span_residual of Ψ, kept by every action …
    if residual is None or Psi is not model.Psi:  # … until U changes
        residual = span_residual(Psi, usable.astype(float))
    S, Q, G, log_det_H, tau_H_tau = fresh_statistics(
        Psi, active, alpha[active], beta, residual, PhiT_t, tau
    )
    log_evidence = split_log_evidence(len(t), beta, log_det_H, tau_H_tau, perp)
    interval, drift = model.interval, model.drift
    if measure and model.since_fresh > 0:
        tCt = beta * (perp + tau_H_tau)  # tᵀC⁻¹t (rvm-SQ-stable)
        measured = measured_drift(model.S, model.Q, S, Q, tCt)
        drift = max(drift, measured)
        interval = refresh_interval(measured, model.since_fresh, interval)
    return model._replace(
        U=U,
        Psi=Psi,
        tau=tau,
        perp=perp,
        residual=residual,
        S=S,
        Q=Q,
        G=G,
        align=align,
        log_evidence=log_evidence,
        since_fresh=0,
        dead=np.zeros(len(alpha), dtype=bool),
        interval=interval,
        drift=drift,
        n_fresh=model.n_fresh + 1,
    )


def choose_action(model, usable, tol, alignment_max):
    """The column j to act on, every column's optimal α and gain ΔL
    (`_choose_action`), and whether the α have settled (see `fast_on_unit_columns`)."""
    alpha, active = model.alpha, model.active
    s, q = sparsity_quality(model.S, model.Q, alpha, active)
    new_alpha, gain = _choose_action(
        alpha, active, s, q, refused_additions(model, usable, alignment_max)
    )
    small = np.abs(np.log(new_alpha[active] / alpha[active])) < tol
    # A re-estimation within the tolerance already counts as converged, and gains
    # only O((Δ log α)²): it is not worth an iteration.
    gain[active[small]] = 0.0
    j = int(np.argmax(gain))
    # Settled: every α in the model within the tolerance (so none leaves it) and
    # no column outside it with a finite optimum.
    settled = small.all() and np.count_nonzero(np.isfinite(new_alpha)) == len(active)
    # When no gain is positive the remaining changes of α are below what the
    # evidence resolves in floating point: the α are as settled as they can get.
    return j, new_alpha, gain, bool(settled or gain[j] <= 0)


def refused_additions(model, usable, alignment_max):
    """The columns outside the model that may not join it: unusable (zero) columns,
    those inside the model's span to within `SPAN_RESIDUAL_MIN`, and those aligned
    with a basis function in it beyond ``alignment_max``."""
    active = model.active
    # Only a new direction needs a residual above SPAN_RESIDUAL_MIN: a deleted
    # column rejoins along the direction U still holds for it.
    near = (model.residual < SPAN_RESIDUAL_MIN) & ~model.dead
    near[active] = False
    if model.U.shape[1] > len(active) and near.any():
        # U spans deleted columns too: the test is against the model's own span.
        index = np.flatnonzero(near)
        near[index] = outside_model_span(model, index) < SPAN_RESIDUAL_MIN
    refused = near
    refused |= ~usable
    if alignment_max < 1:
        refused |= model.align > alignment_max
    refused[active] = False
    return refused


def outside_model_span(model, index):
    """‖(I − P)φ_i‖² for the columns ``index``, P the projector on the span of the
    model's columns, when U also spans the directions of columns deleted since the
    last refactorisation: the part outside U (``residual``) and the part of ψ_i
    outside the span of R = Ψ_M."""
    W, _ = np.linalg.qr(model.Psi[:, model.active])
    X = model.Psi[:, index]
    X = X - W @ (W.T @ X)
    return model.residual[index] + np.einsum("mi,mi->i", X, X)


def _rank_one(model, j, v, kappa, G, own, **changes):
    """Apply (rvm-SQ-rank-one) to S, Q, and ``changes``. Column j's own S_j, Q_j
    are set to S_j·``own``, Q_j·``own`` with ``own`` = 1/(1 + δS_j), written
    without cancellation: C'⁻¹φ_j = C⁻¹φ_j/(1 + δS_j), where S_j − κS_j² would
    subtract nearly equal numbers whenever α_j ≪ S_j (the rounding of the
    updates is then mostly in this one entry)."""
    S, Q = rank_one_SQ(model.S, model.Q, v, kappa, j)
    S[j], Q[j] = model.S[j] * own, model.Q[j] * own
    return model._replace(S=S, Q=Q, G=G, since_fresh=model.since_fresh + 1, **changes)


def reestimate_basis_function(model, j, alpha_j):
    """Set α_j of a basis function in the model to ``alpha_j`` (rvm-fast-alpha) and
    update S, Q and H⁻¹ by one rank-one term (rvm-SQ-rank-one); O(Pm + m²)."""
    alpha_old, S_j = float(model.alpha[j]), float(model.S[j])
    s_j = alpha_old * S_j / (alpha_old - S_j)  # (rvm-sq)
    v, kappa, G = reestimate_step(
        model.Psi, model.G, model.beta, model.Psi[:, j], alpha_old, alpha_j, s_j
    )
    alpha = model.alpha.copy()
    alpha[j] = alpha_j
    own = alpha_j * (alpha_old + s_j) / (alpha_old * (alpha_j + s_j))
    return _rank_one(model, j, v, kappa, G, own, alpha=alpha)


def _aligned(align, Psi, j, alignment_max):
    """Each column's largest |cosine| with the model once column j has joined it;
    Ψ must span φ_j (inner products φ_iᵀφ_j = ψ_iᵀψ_j)."""
    if alignment_max < 1:
        return np.maximum(align, np.abs(Psi.T @ Psi[:, j]))
    return align


def _expect_additions(Phi, model, gain):
    """Tell a design that keeps rows of ΦᵀΦ (`new_coordinate_row`) which columns
    are likely to join the model next: those outside it, best gain first."""
    expect = getattr(Phi, "expect", None)
    if expect is not None:
        outside = np.flatnonzero(~np.isfinite(model.alpha) & (gain > 0))
        expect(outside[np.argsort(-gain[outside], kind="stable")])


def add_basis_function(model, Phi, t, usable, j, alpha_j, alignment_max):
    """Add column j with α_j: extend the coordinates by Gram–Schmidt
    (`add_coordinate`, the only O(NP) step), or, for a column deleted since the
    last refactorisation, reuse its direction; then update S, Q and H⁻¹ by one
    rank-one term (rvm-SQ-rank-one)."""
    alpha = model.alpha.copy()
    alpha[j] = alpha_j
    active = np.sort(np.append(model.active, j))
    if model.dead[j]:  # φ_j lies in the span of U
        v, kappa, G = add_in_span_step(
            model.Psi, model.G, model.beta, j, alpha_j, model.S[j]
        )
        dead = model.dead.copy()
        dead[j] = False
        return _rank_one(
            model,
            j,
            v,
            kappa,
            G,
            alpha_j / (alpha_j + model.S[j]),
            alpha=alpha,
            active=active,
            align=_aligned(model.align, model.Psi, j, alignment_max),
            dead=dead,
        )
    U, Psi = add_coordinate(Phi, model.U, model.Psi, j)
    v, kappa, G = add_step(Psi, model.G, model.beta, j, alpha_j, model.S[j])
    align = _aligned(model.align, Psi, j, alignment_max)
    u_t = U[:, -1] @ t
    return _rank_one(
        model,
        j,
        v,
        kappa,
        G,
        alpha_j / (alpha_j + model.S[j]),
        alpha=alpha,
        U=U,
        Psi=Psi,
        active=active,
        tau=np.append(model.tau, u_t),
        perp=max(model.perp - u_t**2, 0.0),
        residual=span_residual(Psi, usable.astype(float)),
        align=align,
    )


def delete_basis_function(model, j, alignment_max):
    """Remove column j from the model: S, Q and H⁻¹ by one rank-one term
    (rvm-SQ-rank-one, `delete_step`); U keeps j's direction until the next
    refactorisation (`refresh`) drops it. The alignments with j are recomputed."""
    alpha_j, S_j = float(model.alpha[j]), float(model.S[j])
    s_j = alpha_j * S_j / (alpha_j - S_j)  # (rvm-sq)
    v, kappa, G = delete_step(
        model.Psi, model.G, model.beta, model.Psi[:, j], alpha_j, s_j
    )
    alpha = model.alpha.copy()
    alpha[j] = np.inf
    active = model.active[model.active != j]
    dead = model.dead.copy()
    dead[j] = True
    align = model.align
    if alignment_max < 1:
        # Only the columns whose closest model column was j can lose alignment.
        Psi = model.Psi
        # (j itself among them; the factor absorbs the rounding of recomputed cosines).
        affected = np.flatnonzero(np.abs(Psi.T @ Psi[:, j]) >= align * (1 - 1e-9))
        align = align.copy()
        align[affected] = np.max(np.abs(Psi[:, affected].T @ Psi[:, active]), axis=1)
    own = (alpha_j + s_j) / alpha_j
    return _rank_one(
        model, j, v, kappa, G, own, alpha=alpha, active=active, dead=dead, align=align
    )


def noise_update(model, N, beta_max):
    """β from (rvm-noise) at the current α, at most ``beta_max``, from what the loop
    carries, in O(m²) (label ``rvm-noise-maintained``): γ_i = S_i/α_i for the basis
    functions in the model and ‖t − Φμ‖² = ‖(I − UUᵀ)t‖² + ‖H⁻¹τ‖²."""
    active = model.active
    gamma = model.S[active] / model.alpha[active]
    misfit = model.G @ model.tau  # β(t − Φμ) = C⁻¹t = β[(I − UUᵀ)t + UH⁻¹τ]
    return min((N - gamma.sum()) / (model.perp + misfit @ misfit), beta_max)


def _best_move(model, new_alpha, gain):
    """The largest gain ΔL of an addition or a deletion (rvm-fast-gains), or 0."""
    moves = np.isfinite(new_alpha) != np.isfinite(model.alpha)
    return gain[moves].max(initial=0.0)


def _near(model, new_alpha, best_move):
    """Whether the model is near enough its maximum for `polish_model`: no
    addition or deletion pays (``best_move``, `_best_move`), and every α_i is
    within a factor e^`POLISH_NEAR` of its own optimum. Far from it Newton's path
    is long and, like any long path of discrete choices (deletions, backtracking),
    sensitive to rounding; coordinate steps bring the model near first."""
    if best_move > 0:
        return False
    a = model.active
    return bool(np.all(np.abs(np.log(new_alpha[a] / model.alpha[a])) < POLISH_NEAR))


def _polish_pays(model, gain, best_move, actions):
    """Whether a joint polish (`polish_model`) is worth more than the next single
    steps, from the exact gains ΔL of every action (rvm-fast-gains): the best
    action is a re-estimation, the re-estimations together would gain at least
    `POLISH_RATIO` times the best addition or deletion (``best_move``,
    `_best_move`), and no polish ran in the last `POLISH_EVERY` iterations."""
    re_gain = gain[model.active]
    if re_gain.max(initial=0.0) <= best_move:
        return False
    if re_gain[re_gain > 0].sum() < POLISH_RATIO * best_move:
        return False
    return not any(kind == "polish" for kind, _ in actions[-POLISH_EVERY:])


def polish_model(model, N, update_beta, beta_max, tol=1e-3):
    """`newton_polish` of the α in the model (and β with ``update_beta``) on the
    model's coordinates: what remains once no addition or deletion pays."""
    active = model.active
    return newton_polish(
        model.Psi[:, active],
        model.tau,
        model.perp,
        model.alpha[active],
        model.beta,
        N,
        learn_beta=update_beta,
        beta_max=beta_max,
        tol=tol,
        zero_factor=ZERO_FACTOR,
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
    drive=run_to_end,
    name="hold",
    **settings,
):
    """The 'hold' schedule: the sequential algorithm at the starting β, to the
    tolerance ``hold_tol`` on log α (or, with ``release``, until the noise it
    implies settles: `FastLoop`), then from that model with β learnt. Each run is
    a `FastLoop` given to ``drive`` (`run_to_end`) with a name."""
    held = drive(
        FastLoop(
            Phi_unit,
            usable,
            t,
            update_beta=False,
            release=release,
            **{**settings, "tol": hold_tol},
        ),
        f"{name}-held",
    )
    alpha = np.full(Phi_unit.shape[1], np.inf)
    alpha[held.active] = held.alpha
    released = drive(
        FastLoop(Phi_unit, usable, t, alpha=alpha, beta=held.beta, **settings),
        f"{name}-released",
    )
    return released._replace(
        evidence=np.concatenate([held.evidence, released.evidence]),
        actions=held.actions + released.actions,
        n_iter=held.n_iter + released.n_iter,
        n_fresh=held.n_fresh + released.n_fresh,
        drift=max(held.drift, released.drift),
        converged=held.converged and released.converged,
    )


def stalled(result):
    """Whether a run stalled: it ended with at most `STALL_SIZE` basis functions.
    On kernels much wider than the data the early β updates of 'update', or a held
    phase stopped early, can leave the model at such a poor maximum (the
    fast-algorithm chapter measures it)."""
    return len(result.active) <= STALL_SIZE


def fast_regression(Phi, t, *, beta_schedule="auto", **settings):
    """The fast algorithm with the noise precision β learnt on one of the schedules
    (`fast_schedule`), on Φ's columns scaled to unit norm once for all runs; the
    result is on the scale of Φ's columns."""
    check_beta_schedule(beta_schedule)
    Phi_unit, scales = unit_columns(Phi)  # once, for every run
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
    held phase only has to find the basis functions, not settle their α — and runs
    'hold' in full as well only when that run `stalled`. (The fast-algorithm chapter
    measures all of them.) Every run is a `FastLoop` given to ``drive``;
    ``settings`` go to `FastLoop`.
    """
    tol = settings.get("tol", 1e-3)
    runs = []
    if beta_schedule == "auto":
        runs.append(
            held_then_released(
                Phi_unit,
                usable,
                t,
                HOLD_TOL,
                release=RELEASE_TOL,
                drive=drive,
                name="auto",
                **settings,
            )
        )
        if stalled(runs[0]):  # hold β until the α settle
            runs.append(
                held_then_released(
                    Phi_unit, usable, t, tol, drive=drive, name="hold", **settings
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
