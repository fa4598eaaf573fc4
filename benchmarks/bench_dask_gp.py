"""Exact GP regression and kernel PCA on two Dask workers, against their floor.

The floor is the workers' own: one b × b matrix product on each worker at once
gives the aggregate product rate R (flop/s) in this run, and

- the fit with its evidence (tiled Cholesky of K + σ²I, solve, log-determinant)
  is compared with N³/3 flops at R (target ≤ 1.5×);
- the evidence and its gradient at a new θ, which need the factor and the
  whole inverse, with N³ flops at R (factorisation included; target ≤ 1.5×);
- the right-looking order of ``linalg.tiled_cholesky`` with the left-looking one;
- scikit-learn's GaussianProcessRegressor (one process, all in memory) with the
  Dask fit at the same, smaller N;
- KernelPCA's top 10 components at N_kpca: passes over the data (target ≤ 10).

The workers' memory limit is far below the 8·N² bytes of the Gram matrix; the
kernel tiles are computed on the workers and only the factor is stored.
Everything is timed in the same run, and the rate is measured again after each
phase, but on a shared machine the ratios are only as steady as the others'
load; the load average is printed at the start and the end of the run.

Measured on a quiet machine (2026-11-24, 07:37-07:44 UTC, ``--n 30000 --no-left
--n-kpca 0 --n-sklearn 0``, two workers with memory_limit=2.5GB against the 7.2 GB
Gram matrix; load average 0.4 at the start, 2.5 at the end, the other engineers
reading code):

- R = 116.6 GFLOP/s before the fit, 120.2 after it, 108.7 after the gradient;
- fit with evidence: 97.9 s against a floor of 77.2 s (N³/3 at R), ratio 1.27
  (1.29 at the mean of the rates before and after; target 1.5);
- evidence and gradient at a new θ: 324.7 s against a floor of 231.6 s (N³ at
  R), ratio 1.40 (1.38 at the mean of the bracketing rates; target 1.5).

KernelPCA's top 10 components at N = 50 000 (``--n 4096 --no-left
--n-sklearn 0``, 2026-11-24 10:00 UTC, quiet, load 0.7-1.7): 7 passes over the
data (target ≤ 10), 51.0 s in all, 7.3 s per pass, relative Ritz residual
7.7e-11. (The exact GP's ratios at N = 4096 in that run, 4.1 and 4.8, are the
fixed costs of a small problem, not a measurement against the targets.)

An earlier run on a loaded machine, kept for the scikit-learn comparison
(2026-11-24, 05:26-06:00 UTC, ``--n 30000 --chunk 2048 --no-left``,
two workers with memory_limit=2.5GB against the 7.2 GB Gram matrix). The machine
was NOT quiet: four other engineers were running tests and benchmarks, the load
average was 11.5 at the start and rose past 20 during the fit, so R was 19.9
GFLOP/s instead of the ~140 GFLOP/s two workers reach on a quiet machine:

- fit with evidence at N = 30 000: 724 s against a floor of 452 s at R = 19.9
  GFLOP/s, ratio 1.60 (1.64 at the mean of the rates measured before and after,
  19.9 and 20.9 GFLOP/s). At a load of 11 to 21 on two cores the ratio measures
  the others' share of the machine as much as this code.
- evidence and gradient at a new θ (factorisation, solve, the 15 column blocks of
  the inverse and the contraction with ∂K): 2338 s against a floor of 1357 s for
  N³ flops at R = 19.9 GFLOP/s, ratio 1.72 (1.97 at the mean of the rates
  measured just before and after, 20.9 and 24.5 GFLOP/s). The load average was
  20-27 during most of this phase, and a third process measured the two-worker
  rate at 5.8 GFLOP/s in the middle of it, so the rate the workers really had
  was far below the bracketing measurements and neither ratio is a measurement
  of the code against the 1.5 target; a quiet machine is needed for that.
- scikit-learn at N = 25 000 (its fit peaks at ~3.07 × 8N² bytes, measured:
  15 GB; 30 000 would need 22 GB, more than the shared machine had free), same
  run, load ~9: scikit-learn 406 s (one process, one BLAS thread, in memory),
  the Dask fit 212 s (ratio 0.52), log evidences equal to 3.5e-10. The load
  average at the end of the run was 9.2.

What this session changed, measured side by side in CPU time (which the load
disturbs far less than wall time): one update task of two 2048-tile GEMM steps
took 768 ms of CPU with Zarr reads and fresh arrays and 613 ms with the direct
reads into reused buffers (two GEMMs alone: about 540 ms), i.e. the task's
overhead fell from ~40% to ~13% of its products.
"""

import argparse
import os
import tempfile
import time

import numpy as np


def product_rate(client, b, repeats=3):
    """Aggregate flop/s of one b × b product on every worker at once (best of
    repeats)."""

    def one_product(b):
        import time

        import numpy as np

        A = np.random.default_rng(0).normal(size=(b, b))
        start = time.perf_counter()
        A @ A
        return time.perf_counter() - start

    best = np.inf
    for _ in range(repeats):
        times = client.run(one_product, b)  # all workers at once
        best = min(best, max(times.values()))
    return len(times) * 2.0 * b**3 / best


def data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


def bracket(name, seconds, flops, R_before, R_after):
    """The ratio against the mean of the rates measured just before and after a
    phase: on a shared machine the rate changes with the others' load."""
    R = 0.5 * (R_before + R_after)
    print(
        f"    ({name}: R before {R_before / 1e9:.1f}, after {R_after / 1e9:.1f} "
        f"GFLOP/s; ratio at their mean {seconds * R / flops:.2f})"
    )


def timed(f, *args):
    start = time.perf_counter()
    value = f(*args)
    return value, time.perf_counter() - start


def main(argv=None):
    import distributed

    from backends.dask.gp import GaussianProcessRegressor
    from backends.dask.gp.tiles import KernelTiles
    from backends.dask.linalg import create_factor, tiled_cholesky
    from backends.dask.runtime import FitStore
    from kernelref.kernels import RBF

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=30000, help="exact GP size")
    parser.add_argument("--chunk", type=int, default=2048, help="tile edge")
    parser.add_argument("--d", type=int, default=5)
    parser.add_argument("--memory-limit", default="2.5GB", help="per worker")
    parser.add_argument(
        "--n-sklearn",
        type=int,
        default=25000,
        help="scikit-learn's N: its fit holds about 3 N × N arrays at its peak "
        "(15 GB at 25 000 of this machine's 24 GiB); 0 skips it",
    )
    parser.add_argument("--n-kpca", type=int, default=50000, help="0 skips it")
    parser.add_argument(
        "--no-left", action="store_true", help="skip the left-looking run"
    )
    args = parser.parse_args(argv)
    n, b = args.n, args.chunk
    kernel = 1.0 * RBF(
        0.125
    )  # gamma; length scale 1/√(2γ) = 2, as scikit-learn's below
    noise = 1e-2

    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=args.memory_limit,
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as client,
        tempfile.TemporaryDirectory(prefix="bench-dask-gp-") as tmp,
    ):
        address = cluster.scheduler_address
        R = product_rate(client, b)
        print(
            f"exact GP, RBF, N={n}, D={args.d}, tiles {b}, two single-threaded workers "
            f"with memory_limit={args.memory_limit} (Gram {8 * n * n / 1e9:.1f} GB)"
        )
        print(f"  aggregate product rate R = {R / 1e9:.1f} GFLOP/s (machine shared)")
        print(
            "  load average (1, 5, 15 min) at the start: %.2f %.2f %.2f"
            % os.getloadavg()
        )
        # warm-up: the workers import the modules and read a store once, untimed
        X, y = data(2 * b, args.d, seed=3)
        GaussianProcessRegressor(
            kernel,
            noise=noise,
            optimizer=None,
            chunk_size=b,
            store=f"{tmp}/warm-up",
            address=address,
            progress=False,
        ).fit(X, y).log_marginal_likelihood(kernel.theta, True)
        X, y = data(n, args.d)
        gp = GaussianProcessRegressor(
            kernel,
            noise=noise,
            optimizer=None,
            chunk_size=b,
            store=f"{tmp}/gp",
            address=address,
            progress=False,
        )
        _, t_fit = timed(lambda: gp.fit(X, y))
        R_after = product_rate(client, b)
        floor_fit = n**3 / 3 / R
        print(
            f"  fit with evidence   {t_fit:8.1f} s   "
            f"floor N³/3 at R {floor_fit:8.1f} s   ratio {t_fit / floor_fit:.2f} "
            "(target <= 1.5)"
        )
        bracket("fit", t_fit, n**3 / 3, R, R_after)
        theta = gp.kernel_.theta + 0.05
        # a new θ: the factor, α, the evidence and the gradient's inverse, all timed
        _, t_total = timed(lambda: gp.log_marginal_likelihood(theta, True))
        R_end = product_rate(client, b)
        floor_grad = n**3 / R
        print(
            f"  evidence + gradient {t_total:8.1f} s   "
            f"floor N³ at R   {floor_grad:8.1f} s   ratio {t_total / floor_grad:.2f} "
            "(target <= 1.5)"
        )
        bracket("evidence + gradient", t_total, n**3, R_after, R_end)
        if not args.no_left:
            store = FitStore.prepare(
                f"{tmp}/order", X, identity={"bench": 1}, chunk_size=b, client=client
            )
            tiles = KernelTiles(kernel, store.x_ref)
            times = {}
            for order in ("right", "left"):
                L = create_factor(f"{tmp}/order/L-{order}", n, b)
                _, times[order] = timed(
                    lambda: tiled_cholesky(tiles, noise, L, client, order=order)
                )
            print(
                f"  tiled Cholesky alone: right-looking {times['right']:.1f} s "
                f"({times['right'] / floor_fit:.2f}× floor), left-looking "
                f"{times['left']:.1f} s ({times['left'] / floor_fit:.2f}× floor)"
            )

        if args.n_sklearn:
            compare_sklearn(args.n_sklearn, args, kernel, noise, b, tmp, address)
        if args.n_kpca:
            kpca_passes(args.n_kpca, args, tmp, address)
        print(
            "  load average (1, 5, 15 min) at the end: %.2f %.2f %.2f" % os.getloadavg()
        )


def compare_sklearn(m, args, kernel, noise, b, tmp, address):
    """scikit-learn's fit (one process, in memory) and ours at the same N = m."""
    from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
    from sklearn.gaussian_process.kernels import RBF as SklearnRBF
    from sklearn.gaussian_process.kernels import ConstantKernel

    from backends.dask.gp import GaussianProcessRegressor

    Xs, ys = data(m, args.d, seed=1)
    model = SklearnGPR(
        ConstantKernel(1.0) * SklearnRBF(2.0), alpha=noise, optimizer=None
    )
    theirs, t_sk = timed(model.fit, Xs, ys)
    theirs_lml = theirs.log_marginal_likelihood_value_
    del theirs, model  # its N × N factor, before our fit at the same N
    ours = GaussianProcessRegressor(
        kernel,
        noise=noise,
        optimizer=None,
        chunk_size=min(b, m),
        store=f"{tmp}/gp-small",
        address=address,
        progress=False,
    )
    _, t_ours = timed(lambda: ours.fit(Xs, ys))
    gap = abs(theirs_lml - ours.log_marginal_likelihood_value_)
    print(
        f"  at N={m}: scikit-learn fit {t_sk:.1f} s (one process, in memory), "
        f"Dask fit {t_ours:.1f} s, ratio Dask/scikit-learn {t_ours / t_sk:.2f}; "
        f"|Δ log evidence| = {gap:.1e}"
    )


def kpca_passes(n_kpca, args, tmp, address):
    """KernelPCA's top 10 components at N = n_kpca: passes over the data and time."""
    from backends.dask.kpca import KernelPCA

    Xk, _ = data(n_kpca, args.d, seed=2)
    kpca = KernelPCA(
        10,
        gamma=0.1,
        chunk_size=4096,
        store=f"{tmp}/kpca",
        address=address,
        random_state=0,
        progress=False,
    )
    _, t_kpca = timed(lambda: kpca.fit(Xk))
    print(
        f"KernelPCA top 10, RBF, N={n_kpca}: {kpca.n_passes_} passes "
        f"(target <= 10), {t_kpca:.1f} s, {t_kpca / kpca.n_passes_:.1f} s per pass, "
        f"relative Ritz residual {kpca.residual_:.1e}"
    )


if __name__ == "__main__":
    main()
