"""The joint steps of the sequential loop: one iteration that changes several α.

`FastLoop` (``kernelref.rvm.fast``) takes the best single addition,
re-estimation or deletion (``kernelref.rvm.fast_steps``), or one of these when
it pays more: a Newton polish of every α (and β) of the model (`polish_model`,
when `polish_due`; the model after it is `polished_model`), a prune of several
deletions at once (`pruned_model`) and, at a converged model, a swap of a basis
function for a column outside it (when `swap_due`; the screen is `polished_swap`
of ``kernelref.rvm.swaps``, the model after it `swapped_model`). Each ends with
the model factorised afresh by ``refactorise``: `refresh` on the loop's data
(rvm-SQ-stable), since every statistic the rank-one updates carry changes.
"""

import numpy as np

from kernelref.rvm.coordinates import add_coordinate
from kernelref.rvm.fast_steps import best_move, near_maximum, polish_pays

__all__ = [
    "polish_due",
    "polished_model",
    "pruned_model",
    "swap_due",
    "swapped_model",
]


def polish_due(model, new_alpha, gain, actions, update_beta):
    """Whether to polish now: `near_maximum` the maximum or, with β learnt
    (``update_beta``), when it `polish_pays`; both from the best addition or
    deletion's gain. With β held (the RVC, a held phase) only near the maximum: an
    early polish there sent the RVC elsewhere (measured, 25 nats lower)."""
    best = best_move(model, new_alpha, gain)
    return near_maximum(model, new_alpha, best) or (
        update_beta and polish_pays(model, gain, best, actions)
    )


def polished_model(model, polished, refactorise):
    """The model after a `polish_model` step: α of the model and β set, every
    statistic factorised afresh."""
    alpha = model.alpha.copy()
    alpha[model.active] = polished.alpha
    active = model.active[np.isfinite(polished.alpha)]
    if len(active) < len(model.active):  # deletions: alignments and U change
        model = model._replace(active=active, align=None)
    return refactorise(model._replace(alpha=alpha, beta=polished.beta))


def pruned_model(model, new_alpha, gain, j, refactorise):
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
    trial = refactorise(
        model._replace(alpha=alpha, active=a[np.isfinite(alpha[a])], align=None)
    )
    if trial.log_evidence > model.log_evidence + gain[j]:
        return len(out), trial
    return 0, model._replace(n_fresh=trial.n_fresh)  # the trial counts


def swap_due(state, swaps):
    """With ``swaps``: the loop (its `FastState`) has converged since its last swap
    screen, and fewer than ``swaps`` swaps were taken."""
    if not swaps or not state.converged:
        return False
    if state.actions and state.actions[-1] == ("swap", -1):
        return False  # screened at this maximum: no swap paid
    taken = sum(1 for kind, k in state.actions if kind == "swap" and k >= 0)
    return taken < swaps


def swapped_model(model, found, Phi, refactorise):
    """The model after the swap ``found`` (`polished_swap`): column k joins the
    coordinates, the polish's α and β are taken and every statistic is factorised
    afresh."""
    polished = found.polished
    U, Psi = add_coordinate(Phi, model.U, model.Psi, found.k)
    alpha = np.full(len(model.alpha), np.inf)
    alpha[found.active] = polished.alpha
    return refactorise(
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
