"""Reference ``SVC.fit`` (RBF) against scikit-learn's (libsvm), side by side.

Target (issue 3): ratio ≤ 1.0 at N = 10 000 and 20 000, D = 20, with the same C, γ
and tol = 1e-3 and libsvm's cache large enough to hold the kernel. Both stop when
m(α) − M(α) < tol. Ours caches Gram rows in float64 (N² · 8 bytes: 0.8 GB at
N = 10 000, 3.2 GB at 20 000), computing each row on first use with one GEMV.

A last line fits both on sparse CSR data (issue 15, as libsvm takes sparse input):
N = 5 000, D = 2 000, 1 % of entries stored; ours computes a row as one sparse
product over the columns where x_n has entries. No target; the ratio is reported.
"""

import argparse
import time

import numpy as np
import scipy.sparse as sp

from kernelref.svm import SVC


def dataset(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(
        X[:, 0] * X[:, 1] + 0.5 * np.sin(2 * X[:, 2]) + 0.3 * rng.normal(size=n) > 0,
        1,
        -1,
    )
    return X, y


def sparse_dataset(n, d, density, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(
        n,
        d,
        density=density,
        format="csr",
        random_state=seed,
        data_rvs=rng.standard_normal,
    )
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1, -1)
    return X, y


def time_both(ours, theirs, X, y, repeats):
    """Best-of-`repeats` fit times (ours, theirs), fitted alternately."""
    t_ours = t_theirs = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        theirs.fit(X, y)
        t_theirs = min(t_theirs, time.perf_counter() - start)
        start = time.perf_counter()
        ours.fit(X, y)
        t_ours = min(t_ours, time.perf_counter() - start)
    return t_ours, t_theirs


def main(argv=None):
    from sklearn.svm import SVC as SklearnSVC

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="+", default=[10000, 20000])
    parser.add_argument("--d", type=int, default=20)
    parser.add_argument(
        "--shrinking",
        type=int,
        default=1,
        help="shrinking for ours (1, the default of both libraries; libsvm "
        "shrinks here in either case)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="fits of each, alternating; the best time of each is compared",
    )
    parser.add_argument(
        "--sparse-n",
        type=int,
        default=5000,
        help="N of the sparse comparison (0 skips it)",
    )
    args = parser.parse_args(argv)
    for n in args.n:
        X, y = dataset(n, args.d)
        gamma, C = 1.0 / args.d, 1.0
        theirs = SklearnSVC(
            C=C, gamma=gamma, tol=1e-3, cache_size=n * n * 4 / 2**20 + 100
        )
        ours = SVC(C=C, gamma=gamma, tol=1e-3, shrinking=bool(args.shrinking))
        t_ours, t_theirs = time_both(ours, theirs, X, y, args.repeats)
        gap = np.max(
            np.abs(ours.decision_function(X[:500]) - theirs.decision_function(X[:500]))
        )
        print(
            f"SVC.fit, RBF, N={n}, D={args.d}, tol=1e-3, "
            f"shrinking={bool(args.shrinking)}, best of {args.repeats}"
        )
        print(
            f"  kernelref     {t_ours:8.3f} s  ({ours.n_iter_[0]} iterations, "
            f"{1e6 * t_ours / ours.n_iter_[0]:.0f} µs per iteration incl. rows)"
        )
        print(f"  scikit-learn  {t_theirs:8.3f} s  ({theirs.n_iter_[0]} iterations)")
        print(
            f"  ratio kernelref/scikit-learn = {t_ours / t_theirs:.2f} (target <= 1.0)"
        )
        print(
            f"  support vectors {len(ours.support_)} vs {len(theirs.support_)}; "
            f"max |f_ours - f_sklearn| = {gap:.1e}"
        )

    if args.sparse_n:
        n, d, density = args.sparse_n, 2000, 0.01
        X, y = sparse_dataset(n, d, density)
        gamma = 1.0 / (d * density)
        theirs = SklearnSVC(
            C=1.0, gamma=gamma, tol=1e-3, cache_size=n * n * 4 / 2**20 + 100
        )
        ours = SVC(C=1.0, gamma=gamma, tol=1e-3)
        t_ours, t_theirs = time_both(ours, theirs, X, y, args.repeats)
        gap = np.max(
            np.abs(ours.decision_function(X[:500]) - theirs.decision_function(X[:500]))
        )
        print(
            f"SVC.fit, RBF, sparse CSR, N={n}, D={d}, {density:.0%} stored, "
            f"best of {args.repeats}"
        )
        print(f"  kernelref     {t_ours:8.3f} s  ({ours.n_iter_[0]} iterations)")
        print(f"  scikit-learn  {t_theirs:8.3f} s  ({theirs.n_iter_[0]} iterations)")
        print(f"  ratio kernelref/scikit-learn = {t_ours / t_theirs:.2f}")
        print(
            f"  support vectors {len(ours.support_)} vs {len(theirs.support_)}; "
            f"max |f_ours - f_sklearn| = {gap:.1e}"
        )


if __name__ == "__main__":
    main()
