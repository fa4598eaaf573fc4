"""The relevance vector classifier's fast path: Tipping & Faul's sequential
algorithm on the Gaussian approximation at each mode (``kernelref.rvm.rvc_laplace``),
from two starts — the empty model and re-estimation's dense one — the higher Laplace
evidence kept (`fast_classifier`). The rvm_classification chapter derives and
measures it.
"""

from collections import namedtuple

import numpy as np
from scipy.linalg import lapack

from kernelref.rvm.fast import (
    ALIGNMENT_MAX,
    FastLoop,
    on_user_scale,
    run_to_end,
    unit_columns,
    warm_alpha,
)
from kernelref.rvm.fast_steps import SPAN_RESIDUAL_MIN
from kernelref.rvm.reestimate import initial_alpha
from kernelref.rvm.rvc_laplace import (
    BERNOULLI,
    ClassifierFit,
    Laplace,
    laplace_posterior,
    log_posterior,
    reestimate_classifier,
)
from kernelref.rvm.softmax_design import GROWTH_FACTOR, GROWTH_MIN

__all__ = [
    "ABANDON_AFTER",
    "ABANDON_MARGIN",
    "ABANDON_MARGIN_N",
    "ACCELERATE_MAX",
    "ACCELERATE_RATE",
    "AcceleratedLaplace",
    "DENSE_START_SIZE",
    "LOOSE_TOL",
    "PATH_SWAPS",
    "REESTIMATED_ALIGNMENT_FACTOR",
    "STALL_PATIENCE",
    "START_NAMES",
    "START_REESTIMATIONS",
    "STARTS",
    "SWAP_MARGIN",
    "TIE",
    "TOL_FRACTION",
    "WIDE_START_SIZE",
    "abandon_margin",
    "approximation_step",
    "dense_approximation",
    "dense_columns",
    "dense_start",
    "extrapolated",
    "fast_classifier",
    "fast_path",
    "growth_budget",
    "guarded_mode",
    "nearly_dependent",
    "next_mode",
    "reestimated_start",
    "restored",
    "span_distances",
    "swap_pass",
]


#: A path of the fast classifier stops, unconverged, after this many Gaussian
#: approximations that neither raise its highest evidence nor move the α less than
#: the one before: the model is cycling (`fast_path`).
STALL_PATIENCE = 20

#: The kept path ends with a swap pass (`swap_pass`): one more Gaussian
#: approximation whose `FastLoop` takes at most this many swaps (its ``swaps``),
#: then the path from there; kept only if its Laplace evidence is higher. Measured
#: on ``benchmarks/bench_rvc.py`` (2026-11-24, shared machine, three runs against
#: four): rows meeting both targets 38, 38, 38 (before 36, 38, 38, 38); 7 rows gain
#: (moons s0 c = 0.25 +1.38, wine s0 c = 1 ovr +0.89 nats, ...), none loses; the
#: Gaussian approximations +8%. The five rows below re-estimation's evidence are
#: not swap-type maxima (re-estimation keeps other functions) and stay. Without
#: the path after the swap: nothing gained on them; a swap's Laplace evidence can
#: fall where the approximation's rises (54 nats, one wine class).
PATH_SWAPS = 2

#: The path after a swap (`swap_pass`) is abandoned where its first Gaussian
#: approximation's Laplace evidence falls more than this many nats below the
#: kept fit's: on ``benchmarks/bench_rvc.py`` every path after a swap that ended
#: above the fit started at most 0.01 nats below it, and the others 1.0-14.5
#: nats below, climbing back in 10-46 approximations to the fit's own maximum
#: or below it.
SWAP_MARGIN = 0.5

#: Where `fast_classifier` can start its paths, and where it does by default (in
#: this order: a later path can be abandoned against an earlier one's evidence).
#: (The re-estimated path alone, on wine one-vs-rest in ``benchmarks/bench_rvc.py``:
#: up to 1.56 nats lower, and still above the time target, 0.80 on s1 c = 4.)
START_NAMES = ("empty", "dense", "reestimated")
STARTS = ("reestimated", "empty")

#: A path is abandoned once, after this many Gaussian approximations, the highest
#: Laplace evidence it has reached is more than `abandon_margin` nats below the
#: evidence a path run before it ended with (`fast_path`'s ``rival``): at least
#: `ABANDON_MARGIN`, growing as the square root of the points beyond
#: `ABANDON_MARGIN_N` of them. Measured, the empty path's best evidence after five
#: approximations against the re-estimated path's final one, on the problems of
#: ``benchmarks/bench_rvc.py`` (N = 250, 379) and ``benchmarks/bench_dask_rvc.py``
#: (Ripley-like and make_classification, c = 0.25, 1, 4, two seeds, N = 1000, 2000,
#: 5000): the empty paths that went on to win were at most 3.7, 0.5, 10.1, 11.4
#: and 14.1 nats behind (N = 250, 379, 1000, 2000, 5000); the margin is 8, 9.8,
#: 16, 22.6 and 35.8 there. A fixed 8 nats abandoned winners by 3.7 (twice,
#: N = 1000), 0.9 (N = 2000), 2.5 and 9.2 nats (N = 5000); 8 nats per 250 points
#: lost none but ran breast cancer's (N = 379) losing paths to the end, 2.3×
#: the fit time on one benchmark row. A smaller margin, replayed on the benchmark's
#: 72 pairs of paths: 4 nats abandons no path that went on to win there and saves 5%
#: of the approximations' time; 3 nats abandons two.
ABANDON_AFTER = 5
ABANDON_MARGIN = 8.0
ABANDON_MARGIN_N = 250

#: The 'reestimated' path runs the alignment test at this fraction of
#: ``alignment_max``'s distance from 1 (1 − 1e-5 by default): re-estimation's
#: maxima on wide kernels combine nearly parallel basis functions, which the
#: re-estimated start, holding many, lets the loop keep (measured in
#: ``benchmarks/bench_rvc.py``: make_classification s0 c = 0.25 from 4.55 nats
#: below re-estimation to 0.14, moons s0 c = 0.25 from 0.69 to 0.00). The
#: empty path keeps ``alignment_max``: its growth from one basis function is
#: what the looser test sends elsewhere. Only where the dense start's columns are
#: `nearly_dependent` (a kernel wide for the data): on a narrow kernel nearly
#: parallel columns come only from the whitening, and the looser test kept them
#: into a poorer maximum (wine s1 c = 4 softmax 0.81 nats below re-estimation,
#: 0.43 with the usual test; wine s0 c = 4 softmax +1.08 -> +0.44 above it; the
#: other 46 rows bit for bit the same).
REESTIMATED_ALIGNMENT_FACTOR = 100

#: The dense start keeps at most this many basis functions (`dense_start`).
DENSE_START_SIZE = 50
#: ... and where Φ's numerical rank is below that, this many (`dense_columns`).
WIDE_START_SIZE = 100
#: Distances within this relative margin of the largest count as tied.
TIE = 1e-6

#: Re-estimations from the dense start before the 'reestimated' path's
#: sequential algorithm (`reestimated_start`).
START_REESTIMATIONS = 10

#: The sequential algorithm's tolerance on log α on the first approximations of
#: a path, while its model changes: the next approximation moves the α anyway.
#: Once the model stays, `TOL_FRACTION` of the largest change of log α between
#: the last two approximations (at most `TOL_FRACTION` times the last
#: tolerance), down to ``tol`` and never up again.
LOOSE_TOL = 1.0
TOL_FRACTION = 0.1

#: A path whose model stays and whose last step in log α is a multiple ρ of the
#: one before with |ρ| at least this (slow convergence, or an oscillation) is
#: extrapolated (`extrapolated`), by at most ACCELERATE_MAX in each log α.
#: Measured on ``benchmarks/bench_rvc.py``'s 48 rows: at 0.25, the same evidence and
#: approximations within 4 on every row (the tails contract by ρ ≈ 0.25, where the
#: sum of the steps to come is a third of the last); without it, wine s0 c = 4
#: one-vs-rest takes 543 approximations instead of 159.
ACCELERATE_RATE = 0.5
ACCELERATE_MAX = 3.0


def dense_approximation(Phi, a, t, likelihood, active=None):
    """Φ̃ = B^½Φ at the latent values a on columns of unit norm, their norms, and
    t̃ (label ``rvc-linearised-target``): the problem `fast_classifier` runs the
    sequential algorithm on. ``active``, the columns of the model the algorithm
    warm-starts from, is for a design that forms their coordinates on the way
    (the Dask backend's): here Φ̃ is at hand. A design that whitens itself
    (``Phi.whitened``: the softmax model's `KroneckerDesign`) answers instead."""
    whitened = getattr(Phi, "whitened", None)
    if whitened is not None:
        return whitened(a, t, likelihood)
    Phi_tilde, t_tilde = likelihood.whiten(Phi, a, t)
    Phi_unit, scales = unit_columns(Phi_tilde, overwrite=True)  # Φ̃ is new
    return Phi_unit, scales, t_tilde


def fast_classifier(
    Phi,
    t,
    likelihood=BERNOULLI,
    *,
    max_iter=1000,
    tol=1e-3,
    alignment_max=ALIGNMENT_MAX,
    approximation=None,
    drive=run_to_end,
    starts=STARTS,
    columns=None,
):
    """Tipping & Faul's fast algorithm on the Gaussian approximation (their §4),
    from each of ``starts`` (`fast_path`), the highest Laplace evidence kept.

    The Laplace evidence has many local maxima, and the α loops reach different
    ones from different starts. 'empty' builds the model up from the basis
    function most aligned with the target, as the sequential algorithm does on
    regression; 'dense' starts, as re-estimation does, from many basis functions
    with small α (`dense_start`); 'reestimated' from there after
    `START_REESTIMATIONS` iterations of re-estimation (`reestimated_start`),
    whose pruning while the mode moves is what finds re-estimation's better
    maxima; it runs the looser alignment test (`REESTIMATED_ALIGNMENT_FACTOR`)
    where the dense start's columns are `nearly_dependent`. The default runs
    'empty' and 'reestimated' (the book's RVC chapter and
    ``benchmarks/bench_rvc.py`` measure the choice). The kept path ends with
    a swap pass (`swap_pass`), kept only if it raises the Laplace evidence. A
    path that reaches the model where an earlier one converged stops there
    (`fast_path`'s ``joins``). ``n_iter`` and ``n_loop_iter`` count the α
    iterations and the sequential algorithm's iterations of every path and the
    pass.

    Φ is used only through its columns, ``approximation`` (`dense_approximation`
    by default) and ``drive`` (`kernelref.rvm.fast.run_to_end`, given each
    approximation's `FastLoop` and a name): the Dask backend passes a streamed
    design and its own two. ``columns``: the dense start's basis functions
    (`dense_columns`), where the caller has chosen them already.
    """
    unknown = set(starts) - set(START_NAMES)
    if not starts or unknown:
        raise ValueError(
            f"starts must be a nonempty sequence of {START_NAMES}; got {starts!r}."
        )
    dense = None
    if set(starts) != {"empty"}:
        dense = dense_start(Phi, t, likelihood, columns)
    loose = 1 - (1 - alignment_max) / REESTIMATED_ALIGNMENT_FACTOR
    if dense is not None and not nearly_dependent(
        Phi, np.flatnonzero(np.isfinite(dense[0])), alignment_max
    ):
        loose = alignment_max  # a kernel narrow for the data: the usual test
    fits, alignments, n_iter = [], [], 0
    for start in starts:
        path_alignment = loose if start == "reestimated" else alignment_max
        alpha, w = (None, None) if start == "empty" else dense
        if start == "reestimated":
            alpha, w, n_reestimations = reestimated_start(
                Phi, t, likelihood, alpha, w, tol=tol
            )
            n_iter += n_reestimations
            if alpha is None:  # every basis function pruned: no path from here,
                if fits or start != starts[-1]:  # unless no other path is left
                    continue
                start = "empty"
        fit = fast_path(
            Phi,
            t,
            likelihood,
            alpha,
            w,
            max_iter=max_iter,
            tol=tol,
            alignment_max=path_alignment,
            approximation=approximation,
            drive=drive,
            name=f"{start}-",
            rival=max((fit.log_evidence for fit in fits), default=-np.inf),
            joins=fits,
        )
        n_iter += fit.n_iter
        fits.append(fit)
        alignments.append(path_alignment)
    n_loop_iter = sum(fit.n_loop_iter for fit in fits)
    b = int(np.argmax([fit.log_evidence for fit in fits]))
    best = fits[b]
    if PATH_SWAPS and len(best.keep):
        swapped = swap_pass(
            Phi,
            t,
            likelihood,
            best,
            max_iter=max_iter,
            tol=tol,
            alignment_max=alignments[b],
            approximation=approximation,
            drive=drive,
        )
        n_iter += swapped.n_iter
        n_loop_iter += swapped.n_loop_iter
        if swapped.log_evidence > best.log_evidence:
            best = swapped
    return best._replace(n_iter=n_iter, n_loop_iter=n_loop_iter)


def swap_pass(
    Phi, t, likelihood, fit, *, max_iter, tol, alignment_max, approximation, drive
):
    """The swap pass at the end of the kept path ``fit``: one more Gaussian
    approximation at its mode, whose `FastLoop` starts converged and screens
    every swap of a basis function for a column outside the model
    (``kernelref.rvm.swaps``, label ``rvm-swap-gain``, with β = 1 held), taking
    at most `PATH_SWAPS` that pay on the approximation; where it took one, the
    mode there (`guarded_mode`) and the path run on from it (`fast_path`) to a
    fixed point. A `ClassifierFit` with the higher Laplace evidence of the two
    (the caller keeps it only if above ``fit``'s), or ``fit`` itself where no
    swap paid or the swap's mode collapsed; ``n_iter`` and ``n_loop_iter`` count
    this pass's work.

    A swap can collapse like any deletion (`guarded_mode`): on
    ``benchmarks/bench_rvc.py``'s 48 rows 6 of the 15 swaps taken had a mode
    32-63 nats below the fit's. Their paths ended after one approximation
    (`SWAP_MARGIN`) and the fit was kept; cut back at once, every row
    ends bit for bit the same, one approximation sooner per collapse."""
    approximation = dense_approximation if approximation is None else approximation
    P, active = Phi.shape[1], fit.keep
    alpha = np.full(P, np.inf)
    alpha[active] = fit.alpha
    w = np.zeros(P)
    w[active] = fit.mu
    step = approximation_step(
        Phi,
        t,
        likelihood,
        active,
        w,
        alpha,
        approximation=approximation,
        drive=drive,
        name="swap-approximation",
        tol=tol,
        alignment_max=alignment_max,
        swaps=PATH_SWAPS,
        at_maximum=True,
    )
    if not any(kind == "swap" and k >= 0 for kind, k in step.actions):
        return fit._replace(n_iter=1, n_loop_iter=step.n_iter)
    mode, kept = guarded_mode(Phi, t, likelihood, step, w, alpha, fit.log_evidence)
    if kept is not step:  # the swap's mode collapsed: cut back to fit's model
        return fit._replace(n_iter=1, n_loop_iter=step.n_iter)
    w = np.zeros(P)
    w[step.active] = mode.mu
    path = fast_path(
        Phi,
        t,
        likelihood,
        warm_alpha(step, P),
        w,
        max_iter=max_iter,
        tol=tol,
        alignment_max=alignment_max,
        approximation=approximation,
        drive=drive,
        name="swapped-",
        rival=fit.log_evidence,
        abandon=(1, SWAP_MARGIN),
        joins=(fit,),
    )
    n_iter, n_loop_iter = path.n_iter + 1, path.n_loop_iter + step.n_iter
    if path.log_evidence > mode.log_evidence:
        return path._replace(
            n_iter=n_iter,
            n_loop_iter=n_loop_iter,
            converged=path.converged and fit.converged,
        )
    return ClassifierFit(
        step.active,
        step.alpha,
        mode.mu,
        mode.Sigma,
        mode.log_evidence,
        fit.evidence,
        n_iter,
        fit.converged,
        n_loop_iter,
    )


def dense_columns(Phi):
    """The columns of re-estimation's start (`dense_start`): at most
    `DENSE_START_SIZE`, chosen among evenly spaced columns of Φ as a pivoted QR
    would: next the unit column farthest from the span of those chosen, while
    that squared distance is above `SPAN_RESIDUAL_MIN` (the sequential
    algorithm's test for a new direction). They depend on Φ alone: one-vs-rest
    chooses them once for all its classes.

    Of distances within a factor 1 − `TIE` of the largest the first column is
    taken: a pivoted QR takes the largest, and where several are nearly equal
    (many, on a dense sample) designs whose entries round differently (the Dask
    backend's) chose differently.

    Where the span test stops the choice short of `DENSE_START_SIZE` (a kernel
    wide for the data: Φ's numerical rank is below it), re-estimation's optimum
    combines nearly parallel basis functions with large weights, which a start
    of independent ones lacks: the start is then `WIDE_START_SIZE` evenly spaced
    columns instead (measured in ``benchmarks/bench_rvc.py``)."""
    P = Phi.shape[1]
    candidates = np.unique(
        np.linspace(0, P - 1, min(P, 4 * DENSE_START_SIZE)).astype(int)
    )
    R, _ = unit_columns(Phi[:, candidates])  # the parts outside the chosen span
    keep = []
    for _ in range(min(DENSE_START_SIZE, len(candidates))):
        distance = np.einsum("nj,nj->j", R, R)
        if distance.max() <= SPAN_RESIDUAL_MIN:
            break
        j = int(np.argmax(distance >= (1 - TIE) * distance.max()))
        keep.append(candidates[j])
        q = R[:, j] / np.sqrt(distance[j])
        R = R - np.outer(q, q @ R)  # modified Gram–Schmidt
    if len(keep) < min(DENSE_START_SIZE, len(candidates)):
        return np.unique(np.linspace(0, P - 1, min(P, WIDE_START_SIZE)).astype(int))
    return np.sort(keep)


def span_distances(Phi, columns):
    """The squared distance of each unit column u_i of Φ[:, ``columns``] from the
    span of the others, 1/[(UᵀU)⁻¹]_ii; zeros where UᵀU is not numerically
    positive definite (a column in the others' span)."""
    U, scales = unit_columns(Phi[:, columns])
    L, info = lapack.dpotrf(U.T @ U, lower=1, clean=1)
    if info != 0 or not np.all(scales > 0):
        return np.zeros(len(columns))
    L_inv, _ = lapack.dtrtri(L, lower=1)
    return 1.0 / np.einsum("ij,ij->j", L_inv, L_inv)  # (UᵀU)⁻¹ = L⁻ᵀL⁻¹


def nearly_dependent(Phi, columns, alignment_max=ALIGNMENT_MAX):
    """Whether one of the dense start's basis functions ``columns`` lies within the
    alignment test's distance of the span of the others (`span_distances` below
    1 − ``alignment_max``², where a single column at cosine ``alignment_max``
    lies): a kernel wide for the data, where re-estimation's maxima combine
    nearly parallel basis functions and the 'reestimated' path runs the looser
    alignment test (`REESTIMATED_ALIGNMENT_FACTOR`)."""
    return bool(span_distances(Phi, columns).min() < 1 - alignment_max**2)


def dense_start(Phi, t, likelihood, columns=None):
    """α and the mode of re-estimation's start (α_i = 1/N², `initial_alpha`) on
    the basis functions ``columns`` (`dense_columns` of Φ unless given)."""
    keep = dense_columns(Phi) if columns is None else columns
    P = Phi.shape[1]
    alpha = np.full(P, np.inf)
    alpha[keep] = initial_alpha(len(t))
    mode = laplace_posterior(Phi[:, keep], t, alpha[keep], None, likelihood)
    w = np.zeros(P)
    w[keep] = mode.mu
    return alpha, w


def reestimated_start(Phi, t, likelihood, alpha, w, *, tol=1e-3):
    """`START_REESTIMATIONS` iterations of `reestimate_classifier` on the basis
    functions in the model of ``alpha`` (from its mode ``w``): α (``np.inf``
    outside the model), the last mode, and the iterations run; α = None if
    re-estimation pruned every basis function."""
    keep = np.flatnonzero(np.isfinite(alpha))
    try:
        fit = reestimate_classifier(
            Phi[:, keep],
            t,
            alpha[keep],
            likelihood,
            max_iter=START_REESTIMATIONS,
            tol=tol,
            w0=w[keep],
        )
    except RuntimeError:  # every basis function pruned: no start
        return None, None, START_REESTIMATIONS
    alpha, w = np.full(len(alpha), np.inf), np.zeros(len(alpha))
    alpha[keep[fit.keep]], w[keep[fit.keep]] = fit.alpha, fit.mu
    return alpha, w, fit.n_iter


def abandon_margin(N):
    """How far, in nats, a path's evidence may trail its rival's before it is
    abandoned, for N points: `ABANDON_MARGIN`, times √(N/`ABANDON_MARGIN_N`) where
    that is more (the evidence is a sum over the points; the gaps between its
    maxima measured grow about so)."""
    return ABANDON_MARGIN * max(1.0, np.sqrt(N / ABANDON_MARGIN_N))


def approximation_step(
    Phi, t, likelihood, active, w, alpha, *, approximation, drive, name, **settings
):
    """The sequential algorithm on the Gaussian approximation at the weights w of
    the basis functions ``active`` (label ``rvc-linearised-target``), with β = 1
    held, warm-started from ``alpha`` (None: from one basis function): the
    `FastLoop` given to ``drive`` under ``name``, its result on Φ's scale.
    ``settings`` go to the `FastLoop`."""
    a = Phi[:, active] @ w[active]
    Phi_unit, scales, t_tilde = approximation(Phi, a, t, likelihood, active)
    unit_alpha = None
    if alpha is not None:  # a unit column φ/c carries the weight c·w: α/c²
        unit_alpha = alpha / np.where(scales > 0, scales, 1.0) ** 2
    loop = FastLoop(
        Phi_unit,
        scales > 0,
        t_tilde,
        beta=1.0,
        update_beta=False,
        alpha=unit_alpha,
        **settings,
    )
    return on_user_scale(drive(loop, name), scales)


def next_mode(Phi_active, t, likelihood, step, w):
    """The mode (label ``rvc-irls``) at the α of the approximation's result
    ``step``, by Newton from its weights μ (one IRLS step ahead of the last mode)
    or, where they fit worse, from the last mode's weights w: μ of an
    approximation far from the new mode can be wild (huge weights at α found to
    a loose tolerance)."""
    w0 = max(
        (step.mu, w[step.active]),
        key=lambda v: log_posterior(Phi_active, t, step.alpha, v, likelihood),
    )
    return laplace_posterior(Phi_active, t, step.alpha, w0, likelihood)


def guarded_mode(Phi, t, likelihood, step, w, alpha, log_evidence):
    """`next_mode` at the approximation's result ``step``, made at the mode w of
    the model ``alpha`` (``np.inf`` outside it; None: the empty start) whose
    Laplace evidence was ``log_evidence`` (−∞: not known): the mode and
    ``step``; or, where that mode's evidence falls more than `abandon_margin`
    below ``log_evidence`` after the approximation deleted basis functions,
    `restored`'s mode and result if its evidence is higher.

    An approximation made at a mode whose probabilities saturate (points far
    from the boundary: B ≈ e^(−|a|)) sees those points only through its
    quadratic model, at curvature B, and deletes the weights of small α that
    keep them right; the mode at its α then gets them wrong. Digits, N = 1200,
    one-vs-rest, class 4 (``benchmarks/bench_rvc_softmax``): −18.3 → −702.9
    nats, 117 points confidently wrong, and a cycle through models of 400
    weights; iris s0 c = 1 softmax (``benchmarks/bench_rvc``): −13.9 → −46.4,
    a cycle of 9 approximations until `STALL_PATIENCE`. Newton found the mode
    each time (the log posterior at fixed α is strictly concave, and scipy's
    minimiser agrees): the α were wrong, not the mode. A model as large as the
    approximation's result may grow to (``growth_budget``) is not restored: its
    pruning is the way back from an excursion to the bound (digits softmax,
    N = 700: restoring a 400-weight model at each approximation took the fit
    from 15 to 240 s of CPU).
    """
    mode = next_mode(Phi[:, step.active], t, likelihood, step, w)
    floor = log_evidence - abandon_margin(Phi.shape[0] // likelihood.K)
    if alpha is None or not mode.log_evidence < floor:
        return mode, step
    inside = np.isfinite(alpha)
    growth = getattr(Phi, "growth_budget", growth_budget)
    if inside[step.active].sum() == inside.sum() or (
        growth is not None and inside.sum() >= growth(len(step.active))
    ):
        return mode, step  # nothing deleted, or an excursion pruned
    back = restored(Phi, t, likelihood, step, w, alpha)
    return back if back[0].log_evidence > mode.log_evidence else (mode, step)


def restored(Phi, t, likelihood, step, w, alpha):
    """The approximation's result ``step`` cut back to the model it was made at,
    ``alpha`` (its mode w): the α it re-estimated taken, the basis functions it
    deleted back at their last α, those it added left out. Returns the mode
    there (`next_mode`) and that result. (Their α raised together by a factor
    e^s, s ∈ [0, 7] chosen by the Laplace evidence, a line search towards the
    deletion: s = 0 was best at every restoration measured.)"""
    inside = np.isfinite(alpha)
    full = alpha.copy()
    kept = inside[step.active]
    full[step.active[kept]] = step.alpha[kept]
    active = np.flatnonzero(inside)
    weights = w.copy()
    weights[step.active] = step.mu  # Newton's starts: the approximation's μ, w
    back = step._replace(active=active, alpha=full[active], mu=weights[active])
    return next_mode(Phi[:, active], t, likelihood, back, w), back


def fast_path(
    Phi,
    t,
    likelihood,
    alpha=None,
    w=None,
    *,
    max_iter=1000,
    tol=1e-3,
    alignment_max=ALIGNMENT_MAX,
    approximation=None,
    drive=run_to_end,
    name="",
    rival=-np.inf,
    abandon=None,
    joins=(),
):
    """The fast algorithm from one start: α (``np.inf`` outside the model; None:
    empty) and the weights w of the first approximation (None: w = 0).

    Each iteration whitens the approximation at the current mode (label
    ``rvc-linearised-target``), runs ``kernelref.rvm.fast``'s additions,
    re-estimations and deletions on it with the noise precision fixed at 1
    (B is inside Φ̃), warm-started from the current model, and then finds the
    new mode (rvc-irls). SparseBayes re-finds the mode after every single
    action; running the sequential algorithm on each approximation, to a
    tolerance loose while the model changes (`LOOSE_TOL`, `TOL_FRACTION`),
    reaches the same kind of fixed point — a mode whose α maximise the evidence
    of the approximation made there — with fewer Newton solves. Where the α
    converge slowly or oscillate, the next approximation is made at their
    extrapolated limit (`extrapolated`). Converged when an approximation run at
    ``tol`` changed neither the model nor any log α_i by ``tol`` or more.

    The loop need not reach a fixed point: a basis function worth adding under
    one approximation can be worth deleting under the next, and the model then
    cycles. When `STALL_PATIENCE` approximations have neither raised the highest
    Laplace evidence seen nor moved the α less than the one before (a model
    settling onto its fixed point can lose evidence on the way), the loop stops,
    unconverged, and returns the fit with that evidence. It stops so too once,
    after `ABANDON_AFTER` approximations, that evidence is more than
    `abandon_margin` below ``rival`` (another path's final evidence): the path
    is then not the one `fast_classifier` keeps. ``abandon``, a pair (after,
    margin), replaces those two numbers (`swap_pass`: 1 and `SWAP_MARGIN`).

    A path whose approximation ends on the model of one of ``joins`` (converged
    fits of paths run before it) stops there and returns that fit, with this
    path's counts: it has reached that path's fixed point. (Measured on
    ``benchmarks/bench_rvc.py``'s 48 rows: every path that reached the model an
    earlier path ended on went on to that path's evidence, within 6e-4 nats;
    joining saves 5-17 of the approximations on the rows where it happens.)
    """
    approximation = dense_approximation if approximation is None else approximation
    P = Phi.shape[1]
    after, margin = ABANDON_AFTER, abandon_margin(Phi.shape[0] // likelihood.K)
    if abandon is not None:  # (after, margin) given: the swap pass's path
        after, margin = abandon
    w = np.zeros(P) if w is None else w
    active = (
        np.zeros(0, dtype=int) if alpha is None else np.flatnonzero(np.isfinite(alpha))
    )
    evidence = []
    best, since_best, n_loop_iter = None, 0, 0
    loop_tol, last_change, last_step = max(tol, LOOSE_TOL), np.inf, None
    # each approximation's model is bounded (`growth_budget`); a design may
    # answer for itself (the softmax's KroneckerDesign), or None: no bound
    growth = getattr(Phi, "growth_budget", growth_budget)
    for n_iter in range(1, max_iter + 1):
        step = approximation_step(
            Phi,
            t,
            likelihood,
            active,
            w,
            alpha,
            approximation=approximation,
            drive=drive,
            name=f"{name}approximation-{n_iter}",
            tol=loop_tol,
            alignment_max=alignment_max,
            max_size=None if growth is None else growth(len(active)),
        )
        n_loop_iter += step.n_iter
        mode, step = guarded_mode(
            Phi, t, likelihood, step, w, alpha, evidence[-1] if evidence else -np.inf
        )
        active = step.active
        Phi_active = Phi[:, active]
        evidence.append(mode.log_evidence)
        new_alpha = warm_alpha(step, P)
        w = np.zeros(P)
        w[step.active] = mode.mu
        change, step_log = np.inf, None
        if alpha is not None and np.array_equal(
            np.isfinite(alpha), np.isfinite(new_alpha)
        ):
            step_log = np.log(new_alpha[active] / alpha[active])
            change = np.max(np.abs(step_log))
        settled = loop_tol <= tol and change < tol
        if not settled and step_log is not None and last_step is not None:
            accelerated = extrapolated(
                Phi_active, t, likelihood, step.alpha, mode, step_log, last_step
            )
            if accelerated is not None:
                mode, step = accelerated, step._replace(alpha=accelerated.alpha)
                new_alpha[active], w[active] = step.alpha, mode.mu
                evidence[-1], step_log = mode.log_evidence, None
        last_step = step_log
        # The next approximation's α need be found only to a fraction of how far
        # the approximations still move them: never looser than before, and
        # tighter by at most TOL_FRACTION (an approximation that changed nothing
        # at a loose tolerance says little about how settled the α are).
        loop_tol = max(tol, min(loop_tol, TOL_FRACTION * max(change, loop_tol)))
        alpha = new_alpha
        fit = ClassifierFit(
            step.active,
            step.alpha,
            mode.mu,
            mode.Sigma,
            mode.log_evidence,
            None,
            n_iter,
            settled,
            n_loop_iter,
        )
        if settled:
            return fit._replace(evidence=np.array(evidence))
        joined = next(
            (f for f in joins if f.converged and np.array_equal(f.keep, step.active)),
            None,
        )
        if joined is not None:  # on the model where an earlier path converged
            return joined._replace(
                evidence=np.array(evidence), n_iter=n_iter, n_loop_iter=n_loop_iter
            )
        if best is None or fit.log_evidence > best.log_evidence:
            best, since_best = fit, 0
        elif not change < last_change:  # not a model settling: a cycle
            since_best += 1
            if since_best >= STALL_PATIENCE:
                break
        if n_iter >= after and best.log_evidence < rival - margin:
            break
        last_change = change
    return best._replace(
        evidence=np.array(evidence), n_iter=n_iter, n_loop_iter=n_loop_iter
    )


def growth_budget(m):
    """The most weights a Gaussian approximation that starts with m may end with
    (`fast_path` asks, where the design does not answer itself, as the softmax's
    ``KroneckerDesign.growth_budget`` does, by the same rule):
    ``softmax_design.GROWTH_FACTOR``·m, at least ``GROWTH_MIN``. An approximation
    made at a mode with saturated probabilities (B ≈ 0 on a misclassified point,
    a huge whitened target) can otherwise grow the model to nearly every column
    before the next mode prunes it again."""
    return max(GROWTH_FACTOR * m, GROWTH_MIN)


def extrapolated(Phi, t, likelihood, alpha, mode, step, last_step):
    """Aitken's extrapolation of the α of a path whose model stays: where the
    last step in log α, ``step``, is a multiple ρ of the one before,
    ``last_step`` (|ρ| at least `ACCELERATE_RATE`: slow linear convergence, or
    for ρ < 0 an oscillation about the fixed point), the geometric series of the
    steps to come sums to step·ρ/(1 − ρ). Returns the Laplace approximation
    there (a `Laplace` with its ``alpha``), or None."""
    size = last_step @ last_step
    rho = (step @ last_step) / size if size > 0 else 0.0
    if not (ACCELERATE_RATE <= abs(rho) and -2 < rho < 1):
        return None
    jump = np.clip(step * rho / (1 - rho), -ACCELERATE_MAX, ACCELERATE_MAX)
    alpha = alpha * np.exp(jump)
    ahead = laplace_posterior(Phi, t, alpha, mode.mu, likelihood)
    return AcceleratedLaplace(*ahead, alpha)


#: A `Laplace` approximation at extrapolated α (`extrapolated`).
AcceleratedLaplace = namedtuple("AcceleratedLaplace", Laplace._fields + ("alpha",))
