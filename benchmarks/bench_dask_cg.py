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
- ``falkon``: why CG on ``falkon-system`` needed so many iterations there,
  at N = 100 000 with dense M × M algebra on the client (no cluster):
  cond(BᵀHB), CG iterations and test error for FALKON's preconditioner and the
  sketched one (``backends.dask.nystrom``), against M (``--ms``) and λ/N
  (``--lams``).

The machine may be shared: every ratio is of things measured in one run.

Measured on 2026-11-24 on the shared 2-core VM (load 10-27 from other engineers'
work, so absolute times are several times a quiet machine's):

- product, N = 10 000: 1 column 2.51 s against a floor of 1.46 s (ratio 1.71);
  8 columns 2.87 s against 1.16 s (2.49). Before this change: ~2.3 s, ~12× the
  floor on a quieter machine (issue 11).
- CG iterations at N = 10 000 (tol 1e-6): pivoted Cholesky rank 100: 93; rank
  300: 70; rank 1000: 33 (preconditioner 0.6 s, 8.7 s, 35 s on the client).
- nystrom with the sketched preconditioner (``SketchedPreconditioner``, the
  default since FALKON's stalled here), N = 1 000 000, M = 10 000, λ = 1,
  γ = 0.05, tol 1e-6, 2026-11-24 08:36-08:46 UTC while the test suite ran
  beside it (load 3-4): converged in 17 iterations, 591 s in all with the
  preconditioner; 21.5 s per iteration against a K_NM floor of 23.2 s measured
  at the start (ratio 0.93: the floor's own measurement shared the machine);
  cond(B'HB) >= 6.39 from CG's Lanczos coefficients; test RMSE 0.1785 against
  0.2169 for exact ridge on a 10 000-point subsample (noise standard deviation
  0.1).
- before, with FALKON's preconditioner: nystrom, N = 1 000 000, M = 10 000, λ = 1,
  γ = 0.05, capped at 8 iterations
  (relative residual 0.054): 1010 s in all; 64.4 s per iteration against a
  K_NM floor of 56.2 s (ratio 1.15); test RMSE 0.185 against 0.217 for exact
  ridge on a 10 000-point subsample (noise standard deviation 0.1).
  Why it was capped: with FALKON's preconditioner CG needs 67–75 iterations
  to 1e-6 at λ/N = 1e-6 (``falkon`` part, N = 100 000, M = 1000 and 2000:
  cond(BᵀHB) 216 and 289), about 1.5 h at 64 s each. FALKON estimates
  K_NMᵀK_NM on the centres' own rows, biased where M centres cannot resolve
  the kernel at the scale λ/N (Nyström's leftover variance 0.21–0.28 ≫ 1e-6).
  Estimated on 4M other rows (``SketchedPreconditioner``, now the default):
  cond 9.1 and 8.5, 20 iterations, the same test error. Not yet rerun at
  N = 10⁶ (it takes the whole machine): ``python -m benchmarks.bench_dask_cg
  --part nystrom`` (tol 1e-6, max_iter 1000; prints cond(BᵀHB) ≥ CG's
  Lanczos estimate).
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
        f"{per_iteration / floor:.2f}; cond(B'HB) >= "
        f"{model.condition_estimate_:.3g} (CG's Lanczos estimate)"
    )
    print(
        f"  test RMSE {rmse:.4f}; exact ridge on a {sub}-point subsample "
        f"(lam scaled by {sub}/{n}): {rmse_exact:.4f}; noise floor 0.1"
    )


def part_falkon(client, args):
    """Why FALKON's CG stalls at small λ/N: cond(BᵀHB), CG iterations and test
    error with FALKON's preconditioner and the sketched one (``nystrom``),
    against λ and M, on the client with dense M × M matrices."""
    import warnings

    from scipy.linalg import solve_triangular

    from backends.dask import nystrom

    n, kernel = args.n, RBF(gamma=0.05)
    X, y = data(n, 20)
    X_test, y_test = data(2000, 20, seed=1)
    rng = np.random.default_rng(0)
    print(f"FALKON conditioning, N={n}, D=20, gamma=0.05 (uniform centres)")
    for m in args.ms:
        index = np.sort(rng.choice(n, size=m, replace=False))
        C = X[index]
        K_MM = kernel(C)
        T = np.linalg.cholesky(K_MM + nystrom.JITTER * np.eye(m))
        G, b, leftover = np.zeros((m, m)), np.zeros(m), 0.0
        for s in range(0, n, 8192):  # K_NMᵀK_NM, K_NMᵀt, Nyström's leftover variance
            K = kernel(X[s : s + 8192], C)
            G += K.T @ K
            b += K.T @ y[s : s + 8192]
            Z = solve_triangular(T, K.T, lower=True, check_finite=False)
            leftover += np.sum(1.0 - np.einsum("ij,ij->j", Z, Z))
        leftover /= n  # mean of k(x, x) − k_xMᵀK_MM⁻¹k_Mx over the data
        print(f"M={m}: mean Nystrom leftover variance {leftover:.2e}")
        K_test = kernel(X_test, C)
        X_S = X[nystrom.sketch_rows(n, index, 0)]
        for lam_per_point in args.lams:
            lam = lam_per_point * n
            H = G + lam * K_MM
            start = time.perf_counter()
            falkon = nystrom.FalkonPreconditioner(K_MM, n, lam)
            built = {"FALKON": time.perf_counter() - start}
            start = time.perf_counter()
            sketched = nystrom.SketchedPreconditioner(kernel, X_S, C, K_MM, n, lam)
            built["sketched"] = time.perf_counter() - start
            for name, P in (("FALKON", falkon), ("sketched", sketched)):
                BHB = P.B_T(P.B_T(H).T)
                w = np.linalg.eigvalsh(0.5 * (BHB + BHB.T))
                report = []
                for tol in (1e-3, 1e-6):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        run = cg.conjugate_gradients(
                            lambda V: BHB @ V, P.B_T(b), 0.0, tol=tol, max_iter=3000
                        )
                    rmse = np.sqrt(np.mean((K_test @ P.B(run.a) - y_test) ** 2))
                    report.append(f"{run.n_iter} to {tol:g} (test RMSE {rmse:.4f})")
                print(
                    f"  lam/N={lam_per_point:.0e} {name:8s} (built in "
                    f"{built[name]:.1f} s): eig(B'HB) {w[0]:.2e}..{w[-1]:.2e}, cond "
                    f"{w[-1] / w[0]:.3g}; CG iterations {', '.join(report)}",
                    flush=True,
                )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--part",
        default="product",
        choices=["product", "cg50k", "nystrom", "falkon"],
    )
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--m", type=int, default=10000)
    parser.add_argument("--rank", type=int, default=100)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-iter", type=int, default=1000)
    parser.add_argument("--ms", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument(
        "--lams", type=float, nargs="+", default=[1e-6, 1e-5, 1e-4, 1e-3]
    )
    args = parser.parse_args(argv)
    defaults = {
        "product": 10000,
        "cg50k": 50000,
        "nystrom": 1000000,
        "falkon": 100000,
    }
    args.n = args.n or defaults[args.part]
    client = None
    if args.part != "falkon":  # the falkon part is dense algebra on the client
        client = get_client()
        print(f"workers: {len(client.scheduler_info()['workers'])}")
    parts = {
        "product": part_product,
        "cg50k": part_cg50k,
        "nystrom": part_nystrom,
        "falkon": part_falkon,
    }
    parts[args.part](client, args)


if __name__ == "__main__":
    main()
