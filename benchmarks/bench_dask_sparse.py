"""``backends.dask.SVC`` on sparse text-like X that would not fit densely.

Issue 15's sparse input at the size that motivated it: N = 20 000 documents,
D = 10⁶ columns, 10⁻⁴ of the entries stored (about 100 per row): 16 MB as CSR,
160 GB dense. Printed side by side in one run, not asserted:

- the fit times of the backend (embedded cluster, two single-threaded
  workers), the reference's sparse SMO and libsvm's sparse SVC (scikit-learn,
  a test-only peer, where it is installed), and the backend's ratio to each;
- the growth of the client's and the workers' peak memory (VmHWM) during the
  backend's fit, and the bytes of X in its fit store, beside X's dense size;
- the agreement with the reference: support sets, dual coefficients,
  predictions on held-out rows, and the KKT certificate computed on the cluster.

Measured here on a shared machine (load 6-10 on its 2 cores, so the times are
inflated; the ratios come from the same minutes), RBF:

- N = 20 000 (160 GB dense, 21 MB CSR): backend 253 s, 50 outer iterations,
  14 146 SVs, KKT max violation 5.1e-4 < tol, certified on the cluster;
  reference 26 s (ratio 9.8); supports differ in 2 margin points, held-out
  predictions all equal. Peak memory grew by 497 MB on the client (the
  q × q subproblem, the in-process scheduler) and ~200 MB per worker; X took
  17 MB in the store.
- N = 10 000: backend 51 s (full gradient 15 s, gradient updates 23 s,
  partition solves 8 s, subproblem 5 s), reference 4.2 s (ratio 12).
- N = 5000: backend 17 s, reference 2.5 s, libsvm 54 s (backend/libsvm 0.32);
  same supports, max |Δ dual| 1.2e-3 at tol 1e-3.

The backend's time was its kernel products: on this data a sparse block
k(X_i, X_U) cost 34-42 ns per entry (``X_i X_Uᵀ`` by scipy's sparse product,
whose result is dense here because frequent columns are shared, then
densified), against ~2.5 ns for a dense BLAS block, and the decomposition
evaluates whole columns (N per moved variable) where the reference's SMO
computes only the rows it visits. Blocks of 256, 1024 or 4096 rows changed
the cost per entry by under 20%.

Since then the workers split the inner products over the columns most pairs
of rows share (``backends.dask.blocks.column_codes``: ~110 columns here, each
stored by over 0.4% of the pairs): X_F X_Fᵀ by one dense BLAS product, the
rest (0.47 shared entries per pair) summed by ``np.bincount`` over the pairs'
positions. Products of 4096 × 2048-10 000 rows (as the workers' gradient
products): 11.5 against 19.5-20 ns per entry for the plain sparse product
(1.7 times faster; warm calls alternated, best of 3), equal to it to 3e-15
relative. Measured before/after side by side in one run each (shared
machine, load 1-4.5; ``--libsvm-max-n 0``), RBF:

- N = 20 000, three runs: backend 84.7 -> 58.4 s, 79.5 -> 42.2 s and 62.3 ->
  40.9 s (reference 8.4-12.7 s; backend/reference 6.7 -> 6.0, 9.0 -> 4.9 and
  7.5 -> 4.8); gradient updates 62.7 -> 37.0, 49.1 -> 26.3 and 41.1 -> 25.5
  s, full gradient 9.7 -> 7.7, 16.7 -> 6.0 and 10.0 -> 5.7 s; the same 50
  outer iterations, 14 146 SVs, KKT violation 5.1e-4 and 2 support
  differences from the reference (held-out predictions all equal).
- N = 5000, three runs: backend 3.9 -> 3.8, 4.4 -> 3.5 and 3.8 -> 3.2 s
  (reference 0.7-0.8 s), the same supports as the reference: here the
  client's partition solves and subproblem take half the time.
- N = 20 000, ``--kernel linear``, one run: backend 200.3 -> 144.7 s
  (reference 11.8-12.7 s), gradient updates 162.5 -> 110.6 s; the same 252
  outer iterations and 13 022 SVs.

Tried: F = 32-1024 fixed (optimum 100-200: each dense column costs ~0.04 ns
per entry), adding scipy's sparse product of the rest (~40% slower than the
bincount sum), and a split made in O(D) per product from column counts
(slower than the plain product for a working set of 256 rows at D = 10⁶;
now O(stored entries), and products under 4 kernel entries per stored entry
keep the plain path). The same split for KernelPCA's whole-chunk blocks
(``kernel_block``): a 4096 × 3904 block 0.26 -> 0.19 s warm, but a KernelPCA
fit at N = 8000 took 8.5-9.6 s against 7.2-7.8 s before (4 runs each, the
same 9 passes); not adopted.

Where the time went after that (RBF, N = 20 000, one profiled fit, load ~10):
the gradient updates' rounds 119 s of 174 s (workers' products 207 s summed
over two workers; 5 chunks of 4096 rows on 2 workers leave one idle a fifth of
the time), the client's q × q kernel K_U 18.6 s, the full gradient 21 s, the
partition solves 9 s, the subproblem's SMO 4.9 s; working-set selection 0.1 s.
The 50 outer iterations moved 62 369 variables but only 10 753 distinct ones
(the free variables of a working set move again in the next): an LRU of 6000
columns would have missed 27% of them, of 11 000 17%. So now:

- **Linear kernel: w-based gradients.** k(X, Y) @ coef = X (Yᵀ coef), so each
  worker updates its gradient slice by X_i Δw, Δw = Σ_s Δα_s y_s x_s a sparse
  vector (``tasks.linear_chunk``), one pass over its stored entries instead of
  |B| kernel columns: 79.9 -> 7.9 ms CPU per 4096-row chunk at 1500 moved
  columns (13.0 -> 4.7 ms at 100), equal to 2e-12. N = 20 000, ``--kernel
  linear``, before and after back to back (load 4-5): backend 288.4 -> 70.4 s
  (reference 14.9 and 13.6 s: ratio 19.3 -> 5.2), gradient updates 222.4 ->
  26.5 s, full gradient 10.4 -> 0.4 s; the same 252 outer iterations, 13 022
  SVs, KKT 5.1e-4, 3 support differences from the reference. (Under load
  19-28: 330.3 s, ratio 4.66.) Now the client's subproblems lead (35.5 s,
  ~0.14 s per iteration, K_U by scipy's product ~0.05 s of it) and the rounds
  are scheduling (~0.1 s each for ~8 ms of work per chunk).
- **Other kernels: kernel columns kept on the workers**
  (``svm.columns``, ``COLUMN_CACHE_BYTES`` = 1 GiB per worker, least recently
  used out; the reference keeps up to 4 GiB of rows). A column's digits depend
  only on x_u and the chunk (one set of frequent columns per fit, fixed row
  blocks, at least two columns per BLAS product), so a kept column is the
  bits of a fresh one and fits do not depend on the caches (tests check a
  column alone against it among others, and kept against fresh products).
  Replaying the fit's 50 moved sets on one chunk: 4.17 -> 2.00 s CPU (0.48);
  a fresh column costs 16-20 ns per entry against 13-15 before (the per-fit
  frequent set, the columns' transposed copy ~2.7 ns), a kept one ~1.5. Side
  by side, before and after at once: backend 537.3 -> 374.9 s (load 20-28)
  and 166.4 -> 95.8 s (load 4-9), gradient updates 341.1 -> 183.0 and 98.4 ->
  41.0 s; back to back (load 4.5): 71.0 -> 43.0 s (reference 9.8 and 11.4 s:
  ratio 7.3 -> 3.8), gradient updates 44.2 -> 20.6 s. Each time the same 50
  outer iterations, 14 146 SVs, KKT 5.1e-4, 2 support differences from the
  reference and all held-out predictions equal; workers' memory growth
  216/181 -> 1229/1254 MB. Tried: the dense products written in Fortran order
  (no transposed copy) give other digits in other company (90 000 of 4·10⁶
  entries differ), so the copy stays; the same split for the client's K_U is
  slower than scipy's product there (0.095 against 0.051 s CPU at q = 2048).

Data: word-like columns, column j drawn with probability ∝ 1/(j + 1) (a Zipf
law, so frequent columns are shared by many rows), duplicates summed, values
uniform in [0, 1); labels the sign of a random linear score on the 1000 most
frequent columns, with 5% flipped. RBF with γ = "scale", C = 1, tol = 1e-3;
``--kernel linear`` for the linear kernel. libsvm's sparse kernel rows are
slow at this D (80 s at N = 5000, where the reference took 2 s), so it runs
only up to ``--libsvm-max-n`` (5000).

    python -m benchmarks.bench_dask_sparse                 # N = 20 000, D = 10⁶
    python -m benchmarks.bench_dask_sparse --n 5000 --kernel linear
"""

import argparse
import pathlib
import tempfile
import time

import numpy as np
import scipy.sparse


def text_like(n, d, density, seed=0):
    """Sparse rows of the module's data; (X, y)."""
    rng = np.random.default_rng(seed)
    nnz = int(round(density * n * d))
    columns = np.exp(rng.random(nnz) * np.log(d + 1)).astype(np.int64) - 1
    X = scipy.sparse.csr_matrix(
        (rng.random(nnz), (rng.integers(n, size=nnz), np.minimum(columns, d - 1))),
        shape=(n, d),
    )
    score = X[:, :1000] @ rng.normal(size=min(d, 1000))
    y = np.where(score > np.median(score), 1, -1)
    flip = rng.random(n) < 0.05
    y[flip] = -y[flip]
    return X, y


def peak_memory():
    """The process's peak resident memory (VmHWM), bytes; 0 without /proc."""
    status = pathlib.Path("/proc/self/status")
    if not status.exists():
        return 0
    fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
    return int(fields["VmHWM"].split()[0]) * 1024


def timed(fit):
    start = time.perf_counter()
    model = fit()
    return model, time.perf_counter() - start


def compare(ours, theirs, X_test):
    """Support sets, dual coefficients and predictions of two fitted SVCs."""
    same = np.array_equal(ours.support_, theirs.support_)
    differ = len(set(ours.support_.tolist()) ^ set(theirs.support_.tolist()))
    dual = np.abs(ours.dual_coef_ - theirs.dual_coef_).max() if same else np.nan
    agree = np.mean(ours.predict(X_test) == theirs.predict(X_test))
    return (
        f"supports differ in {differ}, max |Δ dual| {dual:.2g}, predictions {agree:.4f}"
    )


def run(args, client):
    from backends.dask import svm as dask_svm
    from kernelref import svm as reference

    X, y = text_like(args.n + 1000, args.d, args.density)
    X, X_test, y = X[: args.n], X[args.n :], y[: args.n]
    dense_gb = 8 * X.shape[0] * X.shape[1] / 1e9
    csr_mb = (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 1e6
    print(
        f"N = {args.n}, D = {args.d}, density {args.density:g}: {X.nnz} entries, "
        f"CSR {csr_mb:.1f} MB, dense {dense_gb:.1f} GB; kernel {args.kernel}"
    )
    params = dict(kernel=args.kernel, C=1.0, gamma="scale", tol=1e-3)
    store = pathlib.Path(tempfile.mkdtemp(prefix="bench-sparse-")) / "fit"
    client_before = peak_memory()
    workers_before = client.run(peak_memory)
    ours, t_ours = timed(
        lambda: dask_svm.SVC(
            **params, store=store, progress=False, address=client.scheduler.address
        ).fit(X, y)
    )
    growth = {
        w: (m - workers_before[w]) / 1e6 for w, m in client.run(peak_memory).items()
    }
    stored = sum(f.stat().st_size for f in (store / "X").rglob("*")) / 1e6
    print(
        f"backend  {t_ours:8.1f} s  ({ours.fit_info_[0]['solver']}, "
        f"{ours.fit_info_[0].get('outer_iterations', 0)} outer iterations, "
        f"{len(ours.support_)} SVs)"
    )
    timings = ours.fit_info_[0].get("timings", {})
    print("  phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    print(
        f"  memory growth: client {(peak_memory() - client_before) / 1e6:.0f} MB, "
        f"workers {', '.join(f'{g:.0f}' for g in growth.values())} MB; "
        f"X in the store {stored:.1f} MB"
    )
    report = dask_svm.kkt_report(ours, X, y, address=client.scheduler.address)
    print(f"  KKT max violation on the cluster {report.max_violation:.2g}")
    ref, t_ref = timed(lambda: reference.SVC(**params).fit(X, y))
    print(f"reference {t_ref:7.1f} s  ratio backend/reference {t_ours / t_ref:.2f}")
    print(f"  against the reference: {compare(ours, ref, X_test)}")
    try:
        from sklearn.svm import SVC
    except ImportError:
        print("libsvm: scikit-learn is not installed")
        return
    if args.n > args.libsvm_max_n:
        print(f"libsvm: not run at N > --libsvm-max-n = {args.libsvm_max_n}")
        return
    peer, t_peer = timed(lambda: SVC(**params, cache_size=2000).fit(X, y))
    print(f"libsvm   {t_peer:8.1f} s  ratio backend/libsvm {t_ours / t_peer:.2f}")
    agree = np.mean(peer.predict(X_test) == ours.predict(X_test))
    print(f"  predictions agree with libsvm's on {agree:.4f} of held-out rows")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--d", type=int, default=1_000_000)
    parser.add_argument("--density", type=float, default=1e-4)
    parser.add_argument("--kernel", default="rbf", choices=["rbf", "linear"])
    parser.add_argument("--libsvm-max-n", type=int, default=5000)
    args = parser.parse_args(argv)
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        run(args, client)


if __name__ == "__main__":
    main()
