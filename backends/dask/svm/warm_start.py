"""The divide-and-conquer warm start (Hsieh, Si & Dhillon 2014).

Partition the samples into clusters, solve the QP restricted to each cluster
(the others' multipliers held at α⁰) on its own diagonal block of Q, in
parallel on the workers with the reference SMO, and concatenate the parts'
α. Kernel values between clusters far apart are small, so the block-diagonal
problem is close to the whole one, and most support vectors are found inside
the partitions (label ``svm-dc-warm-start``). The result is feasible for the
whole problem (each part keeps its share of the equalities), so the block
decomposition refines it to the global optimum.

The clusters come from k-means on a sample of the data in input space; a
cluster much larger than the target size is cut along its principal
direction, so that no partition's solve dominates.
"""

from dataclasses import replace

import numpy as np
import scipy.sparse

from backends.dask.runtime import gather
from backends.dask.svm.tasks import solve_part
from kernelref.svm import problems

#: k-means sees at most this many samples per cluster.
KMEANS_SAMPLE_PER_CLUSTER = 64
KMEANS_ITERATIONS = 20
#: A cluster of more than this many times the target size is cut.
OVERSIZE = 1.5


def kmeans(X, k, rng, iterations=KMEANS_ITERATIONS):
    """Lloyd's k-means with k-means++ seeding; returns the centres (k, D)."""
    centres = [X[rng.integers(len(X))]]
    d2 = ((X - centres[0]) ** 2).sum(axis=1)
    for _ in range(1, k):
        centres.append(X[rng.choice(len(X), p=d2 / d2.sum())] if d2.sum() > 0 else X[0])
        d2 = np.minimum(d2, ((X - centres[-1]) ** 2).sum(axis=1))
    centres = np.array(centres)
    for _ in range(iterations):
        label = nearest(X, centres)
        for c in range(k):
            members = X[label == c]
            if len(members):
                centres[c] = members.mean(axis=0)
    return centres


def nearest(X, centres, rows=65536):
    """Index of the nearest centre of every row of X."""
    c2 = (centres**2).sum(axis=1)
    out = np.empty(len(X), np.int64)
    for start in range(0, len(X), rows):
        block = X[start : start + rows]
        out[start : start + rows] = (c2 - 2.0 * block @ centres.T).argmin(axis=1)
    return out


#: Columns of the hashed projection through which k-means sees sparse X.
HASHED_FEATURES = 64


def partition_features(X):
    """What k-means partitions: dense X itself; sparse X (N × D, D up to
    millions) hashed to ``HASHED_FEATURES`` dense columns, column j going to
    bucket h(j) with sign s(j) (the count sketch, which keeps inner products
    and distances in expectation). O(nnz) work; no D-long array is formed."""
    if not scipy.sparse.issparse(X):
        return X
    X = X.tocsr()
    mixed = (X.indices.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(
        32
    )
    bucket = (mixed % np.uint64(HASHED_FEATURES)).astype(np.int64)
    sign = np.where((mixed >> np.uint64(16)) & np.uint64(1), 1.0, -1.0)
    hashed = scipy.sparse.csr_matrix(
        (X.data * sign, bucket, X.indptr), shape=(X.shape[0], HASHED_FEATURES)
    )
    return hashed.toarray()  # duplicate buckets in a row are summed


def partition(X, size, seed, multiple=1):
    """Sample indices split into parts of at most about `size` each (sorted
    arrays), their number rounded up to a multiple of `multiple` (the threads,
    so that every worker thread gets as many parts)."""
    n = len(X)
    k = max(1, -(-n // size))
    k = min(n, -(-k // multiple) * multiple)
    if k == 1:
        return [np.arange(n)]
    rng = np.random.default_rng(seed)
    sample = rng.choice(n, size=min(n, KMEANS_SAMPLE_PER_CLUSTER * k), replace=False)
    label = nearest(X, kmeans(X[sample], k, rng))
    parts = []
    size = -(-n // k)
    for c in range(k):
        members = np.flatnonzero(label == c)
        parts.extend(_cut(X, members, size))
    return [p for p in parts if len(p)]


def _cut(X, members, size):
    """`members` cut into pieces of about `size` along its principal direction."""
    if len(members) <= OVERSIZE * size:
        return [members]
    centred = X[members] - X[members].mean(axis=0)
    direction = np.linalg.svd(
        centred[:: max(1, len(members) // 2048)], full_matrices=False
    )[2][0]
    order = members[np.argsort(centred @ direction, kind="stable")]
    pieces = -(-len(members) // size)
    return [np.sort(piece) for piece in np.array_split(order, pieces)]


def sub_problem(qp, samples):
    """The QP's variables on `samples`: the restricted QP (``src`` indexing
    `samples`) and the variables' indices in the whole problem."""
    position = np.full(qp.src.max() + 1, -1)
    position[samples] = np.arange(len(samples))
    variables = np.flatnonzero(position[qp.src] >= 0)
    part = problems.QP(
        p=qp.p[variables],
        y=qp.y[variables],
        C=qp.C[variables],
        alpha0=qp.alpha0[variables],
        src=position[qp.src[variables]],
        nu=qp.nu,
    )
    return part, variables


def shared_start(qp, parts):
    """α⁰ with each part's share of the equalities (label ``svm-dc-warm-start``).

    For each sign s of y, the whole start puts T_s = Σ_{y_t = s} α⁰_t on its
    variables; part P gets T_s in proportion to its bounds, T_s ΣC_P,s / ΣC_s,
    filled greedily. That is at most ΣC_P,s, since T_s ≤ ΣC_s, so every part is
    feasible, and the shares add up to the whole: the concatenated parts keep
    yᵀα = Δ and, for the ν forms, eᵀα = Δ₂. (C-SVC and ε-SVR start at 0.)
    """
    alpha = np.zeros(len(qp.y))
    owner = np.full(qp.src.max() + 1, -1)
    for k, samples in enumerate(parts):
        owner[samples] = k
    for sign in (1.0, -1.0):
        side = qp.y == sign
        total, bound = qp.alpha0[side].sum(), qp.C[side].sum()
        if total <= 0:
            continue
        for k in range(len(parts)):
            mine = np.flatnonzero(side & (owner[qp.src] == k))
            share = total * qp.C[mine].sum() / bound
            alpha[mine] = problems._greedy_fill(share, qp.C[mine])
    return alpha


def warm_start(qp, X_ref, kernel, client, parts, tol):
    """α from the parts' QPs, each on its own diagonal block, solved concurrently
    on the workers; the parts start from their shares (``shared_start``).

    `parts` are sorted sample indices of the stored X. Returns (α, the support
    vectors each part found, SMO iterations of each part).
    """
    alpha = shared_start(qp, parts)
    futures, places = [], []
    for samples in parts:
        part, variables = sub_problem(qp, samples)
        part = replace(part, alpha0=alpha[variables])
        futures.append(
            client.submit(solve_part, X_ref, kernel, samples, part, tol, pure=False)
        )
        places.append((samples, variables))
    found, iterations = [], []
    try:
        for (samples, variables), solution in zip(places, gather(client, futures)):
            alpha[variables] = solution.alpha
            on_sample = np.bincount(
                np.searchsorted(samples, qp.src[variables]), weights=solution.alpha
            )
            found.append(int(np.count_nonzero(on_sample)))
            iterations.append(int(solution.n_iter))
    finally:
        client.cancel(futures)
    return alpha, found, iterations
