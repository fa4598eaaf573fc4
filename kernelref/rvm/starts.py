"""A second start for the regression fast path: re-estimation's dense model.

The sequential algorithm (``kernelref.rvm.fast``) builds its model up from one
basis function and reaches one local maximum of the evidence; re-estimation,
which starts from every basis function at a broad prior, often reaches another.
`dense_restart` starts the sequential algorithm from there: a bounded set of
independent columns (`dense_columns`), a few re-estimations of their α and β
(labels ``rvm-reestimate-alpha``, ``rvm-noise``) to prune the irrelevant ones,
then `FastLoop` warm-started from what is left.

Not a default (``benchmarks/bench_rvm.py --dense-start`` measures it): on the
benchmark's 41 rows the higher of the two runs met the evidence target on two
more rows (39), but the added run costs about as much as the first, and in the
same run the time target was met on 10 rows instead of 29; nothing measured in the
first run (its size, β against its cap) told the rows where it pays from the
others.
"""

import numpy as np

from kernelref.rvm.design import initial_beta
from kernelref.rvm.fast import SPAN_RESIDUAL_MIN, FastLoop, run_to_end
from kernelref.rvm.reestimate import initial_alpha, reestimate

__all__ = ["DENSE_SIZE", "DENSE_REESTIMATIONS", "dense_columns", "dense_restart"]

#: The dense start keeps at most this many basis functions (`dense_columns`).
DENSE_SIZE = 50
#: Re-estimations of the dense start's α and β before the sequential algorithm.
DENSE_REESTIMATIONS = 30


def dense_columns(Phi, usable, size=DENSE_SIZE):
    """At most ``size`` usable columns of Φ, chosen among evenly spaced ones as a
    pivoted QR would: next the column farthest from the span of those chosen,
    while that squared distance (of unit columns) is above `SPAN_RESIDUAL_MIN`;
    of distances within 1e-6 of the largest, the first. Uses only
    ``Phi[:, index]`` (a streamed design offers it)."""
    P = Phi.shape[1]
    candidates = np.unique(np.linspace(0, P - 1, min(P, 4 * size)).astype(int))
    candidates = candidates[usable[candidates]]
    R = np.array(Phi[:, candidates], dtype=float)
    norms = np.sqrt(np.einsum("nj,nj->j", R, R))
    R /= np.where(norms > 0, norms, 1.0)
    chosen = []
    for _ in range(min(size, len(candidates))):
        distance = np.einsum("nj,nj->j", R, R)
        if distance.max() <= SPAN_RESIDUAL_MIN:
            break
        j = int(np.argmax(distance >= (1 - 1e-6) * distance.max()))
        chosen.append(candidates[j])
        q = R[:, j] / np.sqrt(distance[j])
        R -= np.outer(q, q @ R)  # modified Gram–Schmidt
    return np.sort(np.array(chosen, dtype=int))


def dense_restart(
    Phi_unit,
    usable,
    t,
    *,
    size=DENSE_SIZE,
    n_reestimations=DENSE_REESTIMATIONS,
    drive=run_to_end,
    name="dense",
    **settings,
):
    """The sequential algorithm from re-estimation's dense start on unit columns:
    `dense_columns` at α_i = 1/N² (`initial_alpha`) and the starting β,
    ``n_reestimations`` iterations of `reestimate`, then a `FastLoop` (with
    ``settings``) warm-started from the α and β they reach, given to ``drive``.
    Returns its `FastResult` (``n_iter`` counts the re-estimations too), or None
    when re-estimation pruned every basis function."""
    keep = dense_columns(Phi_unit, usable, size)
    if len(keep) == 0:
        return None
    try:
        start = reestimate(
            np.asarray(Phi_unit[:, keep]),
            t,
            np.full(len(keep), initial_alpha(len(t))),
            initial_beta(t),
            max_iter=n_reestimations,
            tol=settings.get("tol", 1e-3),
        )
    except RuntimeError:  # every basis function pruned: no start
        return None
    alpha = np.full(Phi_unit.shape[1], np.inf)
    alpha[keep[start.keep]] = start.alpha
    loop = FastLoop(Phi_unit, usable, t, alpha=alpha, beta=start.beta, **settings)
    result = drive(loop, name)
    return result._replace(n_iter=result.n_iter + start.n_iter)
