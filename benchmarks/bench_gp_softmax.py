"""Softmax GP classification and the GP kernels, side by side (issue 15).

1. One Newton step of the softmax Laplace approximation: the structured step
   (GPML Algorithm 3.3: C + 1 Cholesky factorisations of n × n matrices, label
   ``gpcm-inverse``) against the dense CN × CN solve of ``gpcm-newton``, on the
   same iterate; the two results are compared too.
2. The GP regression evidence and its gradient with an ARD Matérn 5/2 kernel:
   kernelref (``Matern.gradient_dot``, O(n²) memory) against scikit-learn (an
   (n, n, D) gradient array), peak memory as tracemalloc sees numpy allocate.

Timings alternate so that load from other processes falls on both alike; the
printed numbers are ratios of runs made side by side, best of ``--repeats``.
"""

import argparse
import time
import tracemalloc

import numpy as np
from scipy.special import softmax

from kernelref.gp import GaussianProcessRegressor
from kernelref.gp_softmax import newton_step
from kernelref.kernels import RBF, Matern


def timed(evaluate):
    """(seconds, peak MiB above the start, value) of one call."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    value = evaluate()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return seconds, peak / 2**20, value


def dense_newton_step(K, A, Y):
    """f_new = (K⁻¹ + W)⁻¹(Wf + y − π) = K(I + WK)⁻¹b with CN × CN matrices."""
    C, n = A.shape
    F = A @ K
    pi = softmax(F, axis=0)
    Pi = np.vstack([np.diag(p) for p in pi])
    W = np.diag(pi.ravel()) - Pi @ Pi.T
    K_big = np.kron(np.eye(C), K)
    b = W @ F.ravel() + (Y - pi).ravel()
    return K_big @ np.linalg.solve(np.eye(C * n) + W @ K_big, b)


def softmax_step(n, C, repeats):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2))
    y = rng.integers(0, C, size=n)
    Y = (np.arange(C)[:, None] == y[None, :]).astype(float)
    K = (2.0 * RBF(0.5))(X)
    A = 0.3 * rng.normal(size=(C, n))
    ours, dense = [], []
    for _ in range(repeats):
        ours.append(timed(lambda: (newton_step(K, A, Y) @ K).ravel()))
        dense.append(timed(lambda: dense_newton_step(K, A, Y)))
    gap = np.max(np.abs(ours[0][2] - dense[0][2])) / np.max(np.abs(dense[0][2]))
    t_ours, t_dense = min(r[0] for r in ours), min(r[0] for r in dense)
    print(
        f"  n={n:5d} C={C}: structured {t_ours:7.3f} s, dense {t_dense:7.3f} s, "
        f"dense/structured = {t_dense / t_ours:6.1f}, relative difference {gap:.1e}"
    )


def matern_evidence(n, d, repeats):
    from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
    from sklearn.gaussian_process.kernels import ConstantKernel
    from sklearn.gaussian_process.kernels import Matern as SklearnMatern

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    ell = rng.uniform(1.0, 4.0, size=d)
    ours = GaussianProcessRegressor(
        1.3 * Matern(ell, nu=2.5), noise=0.1, optimizer=None
    ).fit(X, y)
    theirs = SklearnGPR(
        ConstantKernel(1.3) * SklearnMatern(ell, nu=2.5), alpha=0.1, optimizer=None
    ).fit(X, y)
    theta, their_theta = ours.kernel_.theta, theirs.kernel_.theta
    runs_ours, runs_theirs = [], []
    for _ in range(repeats):
        runs_ours.append(
            timed(lambda: ours.log_marginal_likelihood(theta, eval_gradient=True))
        )
        runs_theirs.append(
            timed(
                lambda: theirs.log_marginal_likelihood(their_theta, eval_gradient=True)
            )
        )
    t_ours, mem_ours = min(r[0] for r in runs_ours), max(r[1] for r in runs_ours)
    t_theirs = min(r[0] for r in runs_theirs)
    mem_theirs = max(r[1] for r in runs_theirs)
    (lml, grad), (their_lml, their_grad) = runs_ours[0][2], runs_theirs[0][2]
    grad_gap = np.max(np.abs(grad - their_grad)) / np.max(np.abs(their_grad))
    print(
        f"  n={n} D={d}: kernelref {t_ours:7.3f} s peak {mem_ours:7.1f} MiB; "
        f"scikit-learn {t_theirs:7.3f} s peak {mem_theirs:7.1f} MiB"
    )
    print(
        f"  scikit-learn/kernelref: time {t_theirs / t_ours:.2f}, memory "
        f"{mem_theirs / mem_ours:.2f}; |lml difference| {abs(lml - their_lml):.1e}, "
        f"relative gradient difference {grad_gap:.1e}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="+", default=[200, 400])
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--n-gp", type=int, default=1000)
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    print("Softmax GPC, one Newton step (best of repeats):")
    for n in args.n:
        softmax_step(n, args.classes, args.repeats)
    print(f"GP evidence + gradient, ARD Matern 5/2 (best of {args.repeats}):")
    matern_evidence(args.n_gp, args.d, args.repeats)


if __name__ == "__main__":
    main()
