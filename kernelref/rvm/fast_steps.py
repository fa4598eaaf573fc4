"""The steps of the sequential algorithm on the state it carries (`FastModel`).

`FastLoop` (``kernelref.rvm.fast``) runs them: `initial_model` and `refresh`
factorise a model afresh (label ``rvm-SQ-stable``); `choose_action` takes the
gains of every single change (``kernelref.rvm.sparsity``); `add_basis_function`,
`reestimate_basis_function` and `delete_basis_function` carry S_i, Q_i and H⁻¹
to the changed model by rank-one updates (label ``rvm-SQ-rank-one``), in the
orthonormal coordinates of ``kernelref.rvm.coordinates``; `noise_update` is β's
re-estimate in O(m²) (label ``rvm-noise-maintained``); `polish_model` the joint
Newton step of ``kernelref.rvm.polish``.
"""

from collections import namedtuple

import numpy as np

from kernelref.rvm.coordinates import (
    add_coordinate,
    add_in_span_step,
    add_step,
    coordinate_norms,
    delete_step,
    drop_coordinate,
    fresh_statistics,
    measured_drift,
    orthonormal_basis,
    orthonormal_coordinates,
    rank_one_SQ,
    reestimate_step,
    span_residual,
    split_log_evidence,
)
from kernelref.rvm.polish import newton_polish
from kernelref.rvm.sparsity import ZERO_FACTOR, action_gains, sparsity_quality

__all__ = [
    "BETA_UPDATE_FREQUENCY",
    "DRIFT_MAX",
    "FastModel",
    "POLISH_EVERY",
    "POLISH_NEAR",
    "POLISH_RATIO",
    "REFRESH_INTERVAL",
    "REFRESH_INTERVAL_MAX",
    "SPAN_RESIDUAL_MIN",
    "add_basis_function",
    "best_move",
    "beta_interval",
    "choose_action",
    "delete_basis_function",
    "expect_additions",
    "initial_model",
    "near_maximum",
    "noise_update",
    "outside_model_span",
    "polish_model",
    "polish_pays",
    "reestimate_basis_function",
    "refresh",
    "refresh_interval",
    "refused_additions",
]

#: After its first iterations (``kernelref.rvm.fast.BETA_UPDATE_START``) the loop
#: updates β every this many iterations at least (`beta_interval`), since each
#: update changes every S_i, Q_i.
BETA_UPDATE_FREQUENCY = 5

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
#: least POLISH_RATIO times the best addition or deletion (`polish_pays`): the
#: model's α, not its membership, then hold the evidence back, and coordinate
#: ascent would settle them in hundreds of small steps (the benchmark's Friedman #1,
#: c = 1, raw, seed 0: 713 of 967 iterations were re-estimations, within 0.1 nats
#: of the end only at iteration 710; with this, 205 iterations in all). Measured
#: on the benchmark's 41 problems (before `pruned_model`): ratio 10 takes 5 172
#: iterations in all, 100 takes 7 553 and none 10 834, for 10% and 7% less CPU
#: time than none; but an early polish deletes what coordinate ascent would keep,
#: and leads to other maxima: on 12 Friedman #1 problems (c = 0.25, 1) ratio 10
#: ends 25.5 nats lower in all, 100 5.4 nats …
POLISH_RATIO = 100.0

#: … at most once in POLISH_EVERY iterations (a polish costs O(m³) per Newton step).
POLISH_EVERY = 20


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
#: (``FastLoop(release=...)``), or None; ``norms``, ‖ψ_i‖² (`coordinate_norms`),
#: from which ``residual`` is formed, or None where they are not kept.
class FastModel(
    namedtuple(
        "FastModel",
        "active alpha beta U Psi tau perp residual S Q G align log_evidence "
        "since_fresh interval drift n_fresh dead noise_estimate norms",
    )
):
    __slots__ = ()

    def _replace(self, **changes):
        """namedtuple's ``_replace``, in half its time where a few of the 20 fields
        change (the loop replaces one or two at most iterations: 0.9 against 2.1 µs)."""
        values = list(self)
        try:
            for name, value in changes.items():
                values[_FIELD_INDEX[name]] = value
        except KeyError:
            unknown = [name for name in changes if name not in _FIELD_INDEX]
            raise ValueError(f"Got unexpected field names: {unknown!r}") from None
        return tuple.__new__(type(self), values)


_FIELD_INDEX = {name: i for i, name in enumerate(FastModel._fields)}


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
        norms=None,
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
        align = np.abs(Psi.T @ Psi[:, active]).max(axis=1)
    tau = U.T @ t
    perp = max(t @ t - tau @ tau, 0.0)  # ‖(I − UUᵀ)t‖²
    residual, norms = model.residual, model.norms  # kept by every action …
    if residual is None or Psi is not model.Psi:  # … until U changes
        norms = coordinate_norms(Psi)
        residual = span_residual(Psi, usable.astype(float), norms)
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
        norms=norms,
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
    (`action_gains`), and whether the α have settled (see `fast_on_unit_columns`)."""
    alpha, active = model.alpha, model.active
    s, q = sparsity_quality(model.S, model.Q, alpha, active)
    theta = q * q - s
    # Only a column with q² − s above ZERO_FACTOR could join: whether the others
    # are refused does not matter to the gains.
    wanted = theta > ZERO_FACTOR
    refused = refused_additions(model, usable, alignment_max, wanted)
    new_alpha, gain = action_gains(alpha, active, s, q, refused, theta, wanted)
    small = np.abs(np.log(new_alpha[active] / alpha[active])) < tol
    # A re-estimation within the tolerance already counts as converged, and gains
    # only O((Δ log α)²): it is not worth an iteration.
    gain[active[small]] = 0.0
    j = int(gain.argmax())
    # Settled: every α in the model within the tolerance (so none leaves it) and
    # no column outside it with a finite optimum.
    # (count_nonzero: ndarray.all's answer without its Python wrapper)
    n = len(active)
    settled = np.count_nonzero(small) == n
    settled = settled and np.count_nonzero(np.isfinite(new_alpha)) == n
    # When no gain is positive the remaining changes of α are below what the
    # evidence resolves in floating point: the α are as settled as they can get.
    return j, new_alpha, gain, bool(settled or gain[j] <= 0)


def refused_additions(model, usable, alignment_max, wanted=None):
    """The columns outside the model that may not join it: unusable (zero) columns,
    those inside the model's span to within `SPAN_RESIDUAL_MIN`, and those aligned
    with a basis function in it beyond ``alignment_max``. With ``wanted`` (a mask
    of the columns whose answer matters), the others may be reported refused
    without the test of the model's span, which costs a QR factorisation."""
    active = model.active
    refused = model.residual < SPAN_RESIDUAL_MIN
    if model.U.shape[1] > len(active):  # (else no column is dead)
        # Only a new direction needs a residual above SPAN_RESIDUAL_MIN: a deleted
        # column rejoins along the direction U still holds for it.
        refused &= ~model.dead
        refused[active] = False
        if refused.any() and (wanted is None or (refused & wanted).any()):
            # U spans deleted columns too: the test is against the model's own span.
            index = refused.nonzero()[0]
            refused[index] = outside_model_span(model, index) < SPAN_RESIDUAL_MIN
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
    W = orthonormal_basis(model.Psi[:, model.active])
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


def expect_additions(Phi, model, gain):
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
    active = _appended(model.active, j, model.active.searchsorted(j))  # still sorted
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
    norms = coordinate_norms(Psi, model.norms)  # only the new row's squares added
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
        tau=_appended(model.tau, u_t),
        perp=max(model.perp - u_t**2, 0.0),
        residual=span_residual(Psi, usable.astype(float), norms),
        norms=norms,
        align=align,
    )


def _appended(x, value, k=None):
    """The 1-d array ``x`` with ``value`` inserted before its entry k (at its end
    without k): np.append's or np.insert's result, in a third of their time."""
    n = len(x)
    k = n if k is None else k
    out = np.empty(n + 1, dtype=x.dtype)
    out[:k] = x[:k]
    out[k] = value
    out[k + 1 :] = x[k:]
    return out


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
        affected = (np.abs(Psi.T @ Psi[:, j]) >= align * (1 - 1e-9)).nonzero()[0]
        align = align.copy()
        align[affected] = np.abs(Psi[:, affected].T @ Psi[:, active]).max(axis=1)
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


def best_move(model, new_alpha, gain):
    """The largest gain ΔL of an addition or a deletion (rvm-fast-gains), or 0."""
    moves = np.isfinite(new_alpha) != np.isfinite(model.alpha)
    return gain[moves].max(initial=0.0)


def near_maximum(model, new_alpha, best):
    """Whether the model is near enough its maximum for `polish_model`: no
    addition or deletion pays (``best``, from `best_move`), and every α_i is
    within a factor e^`POLISH_NEAR` of its own optimum. Far from it Newton's path
    is long and, like any long path of discrete choices (deletions, backtracking),
    sensitive to rounding; coordinate steps bring the model near first."""
    if best > 0:
        return False
    a = model.active
    return bool((np.abs(np.log(new_alpha[a] / model.alpha[a])) < POLISH_NEAR).all())


def polish_pays(model, gain, best, actions):
    """Whether a joint polish (`polish_model`) is worth more than the next single
    steps, from the exact gains ΔL of every action (rvm-fast-gains): the best
    action is a re-estimation, the re-estimations together would gain at least
    `POLISH_RATIO` times the best addition or deletion (``best``,
    from `best_move`), and no polish ran in the last `POLISH_EVERY` iterations."""
    re_gain = gain[model.active]
    if re_gain.max(initial=0.0) <= best:
        return False
    if re_gain[re_gain > 0].sum() < POLISH_RATIO * best:
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
