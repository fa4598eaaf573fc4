"""The β schedules of the fast algorithm: how the noise precision β is learnt
alongside α (`BETA_SCHEDULES`).

Each schedule is a few runs of the sequential loop (`FastLoop` of
``kernelref.rvm.fast``), each from where another ended, the highest evidence
kept: 'update' (SparseBayes's, β re-estimated from the first iteration), 'hold'
(β held at its start until the α settle, then learnt), 'both', and the default
'auto' (a short held phase, a `final_pass` at a looser alignment test, the hold
again when that run `stalled` or the pass `moved` the model, and a swap pass).
Each run after the first starts from the `FastModel` where the one before it
ended (``FastResult.model``, `FastLoop`'s ``model``), not from its α alone: its
orthonormal coordinates are taken as they are, and S, Q too where that run ended
on a fresh factorisation (a converged run does), so a run costs no QR of the
model's columns, no UᵀΦ and no factorisation to start (measured on
``benchmarks/bench_rvm.py``'s 41 rows: the same basis functions and evidence, to
rounding; with μ and Σ formed once, for the run kept, and two smaller cuts,
11% less CPU time; the twelfth pass in its docstring).
The constants below are the schedules' budgets, with what was measured to choose
them. `fast_regression` runs a schedule on the user's columns.
"""

import numpy as np

from kernelref.rvm.fast import (
    ALIGNMENT_MAX,
    FastLoop,
    on_user_scale,
    run_to_end,
    unit_columns,
    with_posterior,
)

__all__ = [
    "BETA_SCHEDULES",
    "FINAL_ALIGNMENT_FACTOR",
    "HOLD_SIZE_FACTOR",
    "HOLD_STALL",
    "HOLD_TOL",
    "RELEASE_TOL",
    "RUN_TIE_RTOL",
    "STALL_SIZE",
    "SWAP_ROUNDS",
    "best_run",
    "check_beta_schedule",
    "continued",
    "fast_regression",
    "fast_schedule",
    "final_pass",
    "held_then_released",
    "moved",
    "stalled",
]

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
#: The 'auto' schedule's `final_pass` runs the alignment test at this fraction of
#: ``alignment_max``'s distance from 1. Measured on sinc, N = 2000, γ = 0.25: after
#: the full hold it reaches +0.02 nats over re-estimation (1 − 1e-5: +0.06), where
#: the hold alone ends 0.14 below and 'auto' 1.89 below.
FINAL_ALIGNMENT_FACTOR = 10
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
#: Runs whose log evidence is within this fraction of |L| (at least this many nats)
#: below the highest are taken as ending at the same maximum (`best_run`). A
#: `final_pass` from a converged run ends where that run did, its β one fixed-point
#: step on (1e-8 relative on the Dask tests' Friedman #1), with a log evidence
#: equal to rounding (1e-13 apart): which of the two rounds higher is a coin toss
#: that the Dask backend's rounding can call the other way, and the swap pass
#: then starts from the other run (measured: β 1.3e-8 apart, against 1e-8
#: allowed, after a change of the polish's arithmetic at the 1e-15 level).
RUN_TIE_RTOL = 1e-10


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
    released = drive(
        FastLoop(Phi_unit, usable, t, model=held.model, beta=held.beta, **settings),
        f"{name}-released",
    )
    return continued(held, released)


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


def best_run(runs):
    """The run with the highest log evidence, the last of those within
    `RUN_TIE_RTOL` of it: in 'auto' each run starts where an earlier one ended, so
    of two at one maximum the later took the more steps to it (and the choice
    does not depend on how the two round)."""
    top = max(run.log_evidence for run in runs)
    floor = top - RUN_TIE_RTOL * max(1.0, abs(top))
    return [run for run in runs if run.log_evidence >= floor][-1]


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
        model=previous.model,
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
    # μ and Σ only for the run kept (`with_posterior`, below)
    settings = {**settings, "posterior": False}
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
        best = best_run(runs)
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
    return with_posterior(best_run(runs), len(t))
