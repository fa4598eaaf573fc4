"""Block decomposition of (svm-generic-qp): SMO's pairs become working sets of q.

Each outer iteration (label ``svm-block-step``):

1. on the client, pick a working set B of at most q variables from the
   gradient: the most violating variables of I_up and I_low (within each class
   for the ν forms), keeping the free variables of the previous set so that
   indices do not oscillate (``select_working_set``);
2. on the client, solve the q-variable subproblem (label ``svm-subproblem``)

       min_d ½ dᵀ Q_BB d + G_Bᵀ d,   y_Bᵀ d = 0 (and e_Bᵀ d = 0),
       0 ≤ α_B + d ≤ C_B,

   with the reference SMO, in the variables α_B + d: its linear term is
   G_B − Q_BB α_B and its start α_B;
3. on the workers, chunk by chunk, the gradient update G += Q[:, B] Δα_B
   (label ``svm-gradient-update``): each task forms k(X_chunk, X_U) for the
   samples U behind the moved variables and returns its slice of the update.

For the linear kernel on sparse X the update is X Δw with the sparse vector
Δw = Σ_s Δα_s y_s x_s (w of ``svm-hard-stationarity``): one pass over each
chunk's stored entries instead of |B| kernel columns of N entries
(``tasks.linear_chunk``); the full gradient likewise uses w.

The client holds O(N) state: α, G and the last working set. The stopping
rule is libsvm's, m(α) − M(α) < tol on all variables (label
``smo-optimality``), so the result is what ``kkt_report`` certifies.
"""

import time

import numpy as np

from backends.dask.blocks import sparse_combination
from backends.dask.runtime import map_chunks
from backends.dask.svm.columns import (
    cached_product_chunk,
    elementwise,
    frequent_columns,
)
from backends.dask.svm.tasks import (
    linear_chunk,
    product_chunk,
    product_chunk_at,
    shifted,
)
from kernelref.kernels.vector import Linear
from kernelref.svm import problems
from kernelref.svm.solver import Solution, calculate_rho, solve

#: The subproblem is solved to max(SUB_TOL_SHARE · gap, tol / 2): loosely while
#: the outer gap is large (its exact optimum would be moved by the next working
#: set anyway), to below tol at the end.
SUB_TOL_SHARE = 0.1


def violation_sets(qp, alpha):
    """(I_up, I_low) as boolean masks (label ``smo-optimality``)."""
    positive = qp.y > 0
    below, above = alpha < qp.C, alpha > 0
    return np.where(positive, below, above), np.where(positive, above, below)


def groups(qp):
    """The variables whose pairs keep the equalities: all, or each class (ν)."""
    if not qp.nu:
        return [np.ones(len(qp.y), bool)]
    return [qp.y > 0, qp.y < 0]


def gap(qp, alpha, G):
    """m(α) − M(α), the largest over the groups (label ``smo-optimality``)."""
    up, low = violation_sets(qp, alpha)
    nyg = -qp.y * G
    worst = -np.inf
    for g in groups(qp):
        if (up & g).any() and (low & g).any():
            worst = max(worst, nyg[up & g].max() - nyg[low & g].min())
    return float(worst)


def _top(values, mask, k):
    """Up to k indices of mask's entries with the largest values, largest first."""
    candidates = np.flatnonzero(mask)
    if len(candidates) > k:
        part = np.argpartition(-values[candidates], k - 1)[:k]
        candidates = candidates[part]
    return candidates[np.argsort(-values[candidates], kind="stable")]


def select_working_set(qp, alpha, G, previous, q):
    """The working set B (indices into the variables), at most q of them.

    Half of it may be the free variables (0 < α < C) of the previous set; the
    rest are, in each group, the variables of I_up with the largest −y_tG_t
    and those of I_low with the smallest, among those that can still be part
    of a violating pair (−y_tG_t > M(α) for I_up, < m(α) for I_low).
    """
    up, low = violation_sets(qp, alpha)
    nyg = -qp.y * G
    free = (alpha > 0) & (alpha < qp.C)
    kept = previous[free[previous]][: q // 2] if len(previous) else previous
    chosen = np.zeros(len(alpha), bool)
    chosen[kept] = True
    parts = groups(qp)
    quota = max(1, (q - len(kept)) // (2 * len(parts)))
    picked = [kept]
    for g in parts:
        if not ((up & g).any() and (low & g).any()):
            continue
        m, M = nyg[up & g].max(), nyg[low & g].min()
        # A free variable is in both sets: `chosen` keeps it from entering twice.
        for side, values in ((up & (nyg > M), nyg), (low & (nyg < m), -nyg)):
            new = _top(values, side & g & ~chosen, quota)
            chosen[new] = True
            picked.append(new)
    return np.concatenate(picked).astype(np.int64)


def solve_subproblem(qp, alpha, G, B, K_U, src_B, tol):
    """α_B after the subproblem (label ``svm-subproblem``) on B.

    `K_U` is the kernel matrix of the samples U behind B, `src_B` maps each
    variable of B to its row of K_U. Returns (new α_B, SMO iterations).
    """
    y_B, alpha_B = qp.y[B], alpha[B]
    coef = np.bincount(src_B, weights=y_B * alpha_B, minlength=len(K_U))
    Q_alpha = y_B * (K_U @ coef)[src_B]
    sub = problems.QP(
        p=G[B] - Q_alpha, y=y_B, C=qp.C[B], alpha0=alpha_B, src=src_B, nu=qp.nu
    )
    rows = problems.KernelRows("precomputed", K_U)
    solution = solve(sub, rows, tol=tol, shrinking=False)
    return solution.alpha, solution.n_iter


class BlockDecomposition:
    """The fit loop of ``runtime.run_loop`` for one QP (one binary machine).

    `X` is the training data on the client (for the q × q subproblem kernels),
    centred by `shift` for the kernel blocks (sparse X: CSR, shift None);
    `store` the fit store the workers read X from; `start` computes the
    starting α (α⁰, or the divide-and-conquer warm start).
    """

    measure_name, size_name = "gap", "SVs"

    def __init__(self, qp, X, shift, kernel, store, client, *, q, tol, start, timings):
        self.qp, self.X, self.shift, self.kernel = qp, X, shift, kernel
        self.store, self.client = store, client
        self.q, self.tol = int(min(q, len(qp.y))), tol
        self.initial_alpha = start
        self.timings = timings
        # Linear kernel on sparse X: gradients from X w (``tasks.linear_chunk``);
        # other maps of inner products: kernel columns kept on the workers
        # (``columns.cached_product_chunk``) on one set of frequent columns.
        self.linear = shift is None and type(kernel) is Linear
        self.cached = shift is None and not self.linear and bool(elementwise(kernel))
        self.frequent = frequent_columns(X) if self.cached else None

    # -- the runtime's interface -------------------------------------------------
    def start(self):
        alpha = self.initial_alpha()
        G = self.gradient(alpha)
        return {
            "alpha": alpha,
            "G": G,
            "previous": np.empty(0, np.int64),
            "gap": gap(self.qp, alpha, G),
        }

    def done(self, state):
        return state["gap"] < self.tol

    def measure(self, state):
        coef = np.bincount(self.qp.src, weights=state["alpha"])
        return state["gap"], int(np.count_nonzero(coef))

    def step(self, state):
        alpha, G = state["alpha"], state["G"]
        tick = time.perf_counter()
        B = select_working_set(self.qp, alpha, G, state["previous"], self.q)
        U, src_B = np.unique(self.qp.src[B], return_inverse=True)
        X_U = shifted(self.X[U], self.shift)
        K_U = self.kernel(X_U)
        sub_tol = max(SUB_TOL_SHARE * state["gap"], 0.5 * self.tol)
        alpha_B, _ = solve_subproblem(self.qp, alpha, G, B, K_U, src_B, sub_tol)
        self._add("subproblem", tick)
        delta = alpha_B - alpha[B]
        coef = np.bincount(src_B, weights=self.qp.y[B] * delta, minlength=len(U))
        moved = np.flatnonzero(coef)
        alpha = alpha.copy()
        alpha[B] = alpha_B
        update = self.product(
            X_U[moved], coef[moved], "gradient updates", samples=U[moved]
        )
        G = G + self.qp.y * update[self.qp.src]
        return {"alpha": alpha, "G": G, "previous": B, "gap": gap(self.qp, alpha, G)}

    # -- pieces ------------------------------------------------------------------
    def product(self, Y, coef, phase, task=product_chunk, samples=None):
        """k(X, Y) @ coef over every training sample, on the workers; with
        ``task=product_chunk_at``, Y holds row indices of the stored X. With
        `samples` (Y's rows of the stored X) on sparse X, through the workers'
        cached kernel columns (``columns.cached_product_chunk``)."""
        tick = time.perf_counter()
        if Y.shape[0] == 0:
            return np.zeros(self.store.n)
        if self.linear:
            if task is product_chunk_at:
                Y = self.X[Y]
            w = sparse_combination(Y.tocsr(), coef)
            parts = map_chunks(self.client, linear_chunk, self.store.x_ref, *w)
            self._add(phase, tick)
            return np.concatenate(parts)
        if self.cached and samples is not None:
            args = (cached_product_chunk, self.kernel, self.frequent, Y, samples)
        else:
            args = (task, self.kernel, self.shift, Y)
        parts = map_chunks(self.client, args[0], self.store.x_ref, *args[1:], coef)
        self._add(phase, tick)
        return np.concatenate(parts)

    def gradient(self, alpha):
        """G = Qα + p (label ``svm-gradient``), the product on the workers."""
        coef = np.bincount(
            self.qp.src, weights=self.qp.y * alpha, minlength=self.store.n
        )
        used = np.flatnonzero(coef)
        K_coef = self.product(used, coef[used], "full gradient", product_chunk_at)
        return self.qp.p + self.qp.y * K_coef[self.qp.src]

    def _add(self, phase, tick):
        self.timings[phase] = self.timings.get(phase, 0.0) + time.perf_counter() - tick

    def solution(self, state, n_iter):
        """The reference solver's ``Solution`` of the final state."""
        alpha, G = state["alpha"], state["G"]
        rho, r = calculate_rho(self.qp, alpha, G)
        objective = float(0.5 * alpha @ (G + self.qp.p))
        final_gap = state["gap"]
        return Solution(
            alpha, rho, r, objective, int(n_iter), final_gap, final_gap < self.tol
        )
