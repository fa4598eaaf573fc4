"""Streamed kernel products, CG kernel ridge, matrix-free GP and Nyström ridge on Dask.

Parts (``--part``, default ``product``):

- ``product``: one streamed product K V at N = 10 000, D = 20 (RBF, γ = 0.05)
  against the two-worker floor — N² RBF entries at the per-entry time each
  worker measures, in the same run, computing tiles into a reused buffer, split
  over the workers (target: product ≤ 2× floor); and the CG iterations of
  kernel ridge (λ = 0.1, tol 1e-6) with the rank-100 pivoted-Cholesky
  preconditioner against larger ranks.
- ``cg50k``: ``KernelRidge(solver="cg")`` at N = 50 000, printing progress.
- ``nystrom``: ``KernelRidge(solver="nystrom")`` at N = 1 000 000, D = 20,
  M = 10 000; test error against an exact solve on a subsample, and the time
  per CG iteration against the floor for computing the K_NM blocks.

The machine may be shared: every ratio is of things measured in one run.

Measured on 2026-11-24 on the shared 2-core VM (load 10-27 from other engineers'
work, so absolute times are several times a quiet machine's):

- product, N = 10 000: 1 column 2.51 s against a floor of 1.46 s (ratio 1.71);
  8 columns 2.87 s against 1.16 s (2.49). Before this change: ~2.3 s, ~12× the
  floor on a quieter machine (issue 11).
- CG iterations at N = 10 000 (tol 1e-6): pivoted Cholesky rank 100: 93; rank
  300: 70; rank 1000: 33 (preconditioner 0.6 s, 8.7 s, 35 s on the client).
- nystrom, N = 1 000 000, M = 10 000, λ = 1, γ = 0.05, capped at 8 iterations
  (relative residual 0.054): 1010 s in all; 64.4 s per iteration against a
  K_NM floor of 56.2 s (ratio 1.15); test RMSE 0.185 against 0.217 for exact
  ridge on a 10 000-point subsample (noise standard deviation 0.1).
- cg50k, N = 50 000, rank 1000, tol 1e-6: 70 iterations, 639 s in all with the
  client's preconditioner, progress printed every 10 iterations (9.1 s per
  iteration against a product floor of 7.7 s). Before: unfinished after 25 min.

The matrix-free GP (accuracy by probe count, CG iterations against the
preconditioner's rank, N = 100 000) is ``bench_dask_gp_matrix_free``.
"""

import argparse
import time

import numpy as np

from backends.dask import cg
from backends.dask.blocks import kernel_block, reusable_buffer
from backends.dask.cluster import get_client
from kernelref.kernels import RBF


def entry_seconds(seconds=1.0):
    """On a worker: seconds per RBF entry computed into a reused tile buffer."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(cg.TILE_ROWS, 20))
    Y = rng.normal(size=(cg.TILE_COLS, 20))
    xn, yn = np.einsum("ij,ij->i", X, X), np.einsum("ij,ij->i", Y, Y)
    buffer = reusable_buffer(cg.TILE_ROWS * cg.TILE_COLS)
    kernel = RBF(gamma=0.05)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        kernel_block(kernel, X, Y, buffer, xn, yn)
        count += 1
    return (time.perf_counter() - start) / (count * X.shape[0] * Y.shape[0])


def floor_seconds(client, n_entries):
    """n_entries RBF entries split over the workers, each at its measured rate
    (all workers measured at once, as they compute in a product)."""
    per_entry = client.run(entry_seconds)
    return n_entries * np.mean(list(per_entry.values())) / len(per_entry), per_entry


def data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * np.cos(X[:, 1] * X[:, 2]) + 0.1 * rng.normal(size=n)
    return X, y


def part_product(client, args):
    n, lam, kernel = args.n, 0.1, RBF(gamma=0.05)
    X, y = data(n, 20)
    with cg.StreamedGram(
        X, kernel, client, 4096, cg.kernel_shift(kernel, X)
    ) as K_times:
        K_times(y[:, None])  # warm: every worker reads its chunks once
        for k in (1, 8):
            V = np.random.default_rng(1).normal(size=(n, k))
            times = []
            for _ in range(3):
                floor, per_entry = floor_seconds(client, n * n)
                start = time.perf_counter()
                K_times(V)
                times.append((time.perf_counter() - start, floor))
            product, floor = min(times)
            rates = ", ".join(f"{1e9 * s:.2f}" for s in per_entry.values())
            print(
                f"product K V, N={n}, D=20, {k} column(s): {product:.3f} s; floor "
                f"{floor:.3f} s (ns/entry per worker: {rates}); ratio "
                f"{product / floor:.2f} (target <= 2)"
            )
        for rank in (100, 300, 1000):
            start = time.perf_counter()
            M = cg.WoodburyPreconditioner(cg.pivoted_cholesky(kernel, X, rank), lam)
            built = time.perf_counter() - start
            start = time.perf_counter()
            result = cg.conjugate_gradients(K_times, y, lam, M, tol=1e-6)
            solve = time.perf_counter() - start
            print(
                f"CG ridge, pivoted Cholesky rank {rank}: {result.n_iter} iterations, "
                f"{solve:.1f} s ({solve / (result.n_iter + 1):.3f} s per product), "
                f"preconditioner {built:.1f} s"
            )


def part_cg50k(client, args):
    from backends.dask import KernelRidge

    n = args.n
    X, y = data(n, 20)

    def report(record):
        if record.iteration % 10 == 0:
            print(
                f"  iteration {record.iteration}: residual {record.measure:.2e}, "
                f"{record.elapsed:.0f} s",
                flush=True,
            )

    start = time.perf_counter()
    model = KernelRidge(
        lam=0.1,
        gamma=0.05,
        solver="cg",
        tol=1e-6,
        rank=args.rank,
        chunk_size=4096,
        progress=report,
    ).fit(X, y)
    elapsed = time.perf_counter() - start
    floor, _ = floor_seconds(client, n * n)
    print(
        f"CG ridge N={n}: {model.n_iter_} iterations in {elapsed:.0f} s "
        f"({elapsed / model.n_iter_:.2f} s per iteration; product floor {floor:.2f} s)"
    )


def part_nystrom(client, args):
    from backends.dask import KernelRidge
    from kernelref.ridge import KernelRidge as ReferenceKernelRidge

    n, m, lam, gamma = args.n, args.m, 1.0, 0.05
    X, y = data(n, 20)
    X_test, y_test = data(2000, 20, seed=1)
    times = []

    def report(record):
        times.append(record.elapsed)
        print(
            f"  iteration {record.iteration}: residual {record.measure:.2e}, "
            f"{record.elapsed:.0f} s",
            flush=True,
        )

    print(f"Nystrom ridge N={n}, D=20, M={m}, lam={lam}, gamma={gamma}", flush=True)
    start = time.perf_counter()
    model = KernelRidge(
        lam=lam,
        gamma=gamma,
        solver="nystrom",
        n_centres=m,
        tol=args.tol,
        max_iter=args.max_iter,
        chunk_size=8192,
        progress=report,
    ).fit(X, y)
    elapsed = time.perf_counter() - start
    per_iteration = np.median(np.diff(times))
    floor, _ = floor_seconds(client, n * m)
    sub = 10000
    exact = ReferenceKernelRidge(lam=lam * sub / n, gamma=gamma).fit(X[:sub], y[:sub])
    rmse = np.sqrt(np.mean((model.predict(X_test) - y_test) ** 2))
    rmse_exact = np.sqrt(np.mean((exact.predict(X_test) - y_test) ** 2))
    print(
        f"Nystrom ridge N={n}, M={m}: {model.n_iter_} iterations, {elapsed:.0f} s in "
        f"all; {per_iteration:.1f} s per iteration, K_NM floor {floor:.1f} s, ratio "
        f"{per_iteration / floor:.2f}"
    )
    print(
        f"  test RMSE {rmse:.4f}; exact ridge on a {sub}-point subsample "
        f"(lam scaled by {sub}/{n}): {rmse_exact:.4f}; noise floor 0.1"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--part",
        default="product",
        choices=["product", "cg50k", "nystrom"],
    )
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--m", type=int, default=10000)
    parser.add_argument("--rank", type=int, default=100)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-iter", type=int, default=1000)
    args = parser.parse_args(argv)
    defaults = {
        "product": 10000,
        "cg50k": 50000,
        "nystrom": 1000000,
    }
    args.n = args.n or defaults[args.part]
    client = get_client()
    print(f"workers: {len(client.scheduler_info()['workers'])}")
    parts = {
        "product": part_product,
        "cg50k": part_cg50k,
        "nystrom": part_nystrom,
    }
    parts[args.part](client, args)


if __name__ == "__main__":
    main()
