"""Reference ``KernelRidge.fit`` against scikit-learn's, side by side.

Target (issue 2): at N = 5000 the reference is no slower (ratio ≤ 1.0).
Both build the RBF Gram matrix and solve by Cholesky; the timings alternate
so that load from other processes falls on both alike.
"""

import argparse
import time

import numpy as np

from kernelref.ridge import KernelRidge


def best_time(fit, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fit()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None):
    from sklearn.kernel_ridge import KernelRidge as SklearnKernelRidge

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--d", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, args.d))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=args.n)
    ours = KernelRidge(lam=1.0, kernel="rbf", gamma=0.05)
    theirs = SklearnKernelRidge(alpha=1.0, kernel="rbf", gamma=0.05)

    t_ours, t_theirs = [], []
    for _ in range(args.repeats):
        t_ours.append(best_time(lambda: ours.fit(X, y), 1))
        t_theirs.append(best_time(lambda: theirs.fit(X, y), 1))
    gap = np.max(np.abs(ours.dual_coef_ - theirs.dual_coef_))
    print(f"KernelRidge.fit, RBF, N={args.n}, D={args.d} (best of {args.repeats})")
    print(f"  kernelref     {min(t_ours):8.3f} s")
    print(f"  scikit-learn  {min(t_theirs):8.3f} s")
    print(
        f"  ratio kernelref/scikit-learn = {min(t_ours) / min(t_theirs):.2f} "
        "(target <= 1.0)"
    )
    print(f"  max |a_ours - a_sklearn| = {gap:.1e}")


if __name__ == "__main__":
    main()
