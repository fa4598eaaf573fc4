"""``backends.dask.SVC`` on the embedded cluster against scikit-learn's libsvm.

Issue 10's targets, printed side by side in one run:

- at N = 50 000 (and 20 000): the backend's fit in at most 0.5× libsvm's time,
  objective within 1e-4 relative, KKT-certified (the certificate computed on
  the cluster); the share of time in each phase;
- ``--scale 500000``: N = 500 000 completes (under 30 minutes), with its
  certificate, against libsvm's time extrapolated from the smaller N by a
  power law fitted to the measured times;
- the time per outer iteration on one and on two workers, and each worker's
  peak memory as N grows.

Measured here on a quiet machine (embedded cluster, two single-threaded workers):
N = 50 000: libsvm 19.6 s, backend 6.9 s (ratio 0.35, 20 outer iterations,
objective within 9e-8 relative); N = 20 000: 2.9 s against 2.9 s (ratio 1.00);
N = 500 000: 1015 s (16.9 min), 1136 outer iterations, KKT max violation 5.7e-4
certified on the cluster in 91 s; libsvm extrapolated as t ~ N^2.08: ~39 min.

Data: ``make_classification(n_features=20, n_informative=10, flip_y=0.05)``,
standardised; RBF with γ = 0.05, C = 1, tol = 1e-3. libsvm gets a kernel cache
of min(N² · 4 bytes, ``--cache-mb``).
"""

import argparse
import pathlib
import time
import warnings

import numpy as np

from kernelref.exceptions import ConvergenceWarning


def dataset(n, seed=0):
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=n, n_features=20, n_informative=10, flip_y=0.05, random_state=seed
    )
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, y


def peak_memory():
    """Worker function: the process's peak resident memory (VmHWM), bytes."""
    status = pathlib.Path("/proc/self/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmHWM"].split()[0]) * 1024


def fit_libsvm(X, y, cache_mb):
    from sklearn.svm import SVC

    model = SVC(C=1.0, gamma=0.05, tol=1e-3, cache_size=cache_mb)
    start = time.perf_counter()
    model.fit(X, y)
    return model, time.perf_counter() - start


def libsvm_objective(model, X, y):
    """f(α) of libsvm's solution, from its dual coefficients (C-SVC, binary)."""
    from kernelref.kernels import RBF

    coef = model.dual_coef_[0]
    K = RBF(gamma=0.05)(X[model.support_])
    return float(0.5 * coef @ K @ coef - np.abs(coef).sum())


def fit_backend(X, y, address=None, **kw):
    from backends.dask import SVC

    model = SVC(C=1.0, gamma=0.05, tol=1e-3, address=address, progress=False, **kw)
    start = time.perf_counter()
    model.fit(X, y)
    return model, time.perf_counter() - start


def certificate(model, X, y, address=None):
    from backends.dask.svm import kkt_report

    start = time.perf_counter()
    report = kkt_report(model, X, y, address=address)
    return report, time.perf_counter() - start


def phases(model, wall):
    info = model.fit_info_[0]
    timings = info.get("timings", {})
    parts = {
        k: timings.get(k, 0.0)
        for k in ("partition solves", "full gradient", "subproblem", "gradient updates")
    }
    parts["scheduling and client"] = max(0.0, wall - sum(parts.values()))
    return ", ".join(f"{k} {v:.1f} s ({100 * v / wall:.0f}%)" for k, v in parts.items())


def compare(n, cache_mb):
    X, y = dataset(n)
    theirs, t_theirs = fit_libsvm(X, y, min(cache_mb, n * n * 4 / 2**20 + 100))
    ours, t_ours = fit_backend(X, y)
    report, t_kkt = certificate(ours, X, y)
    f_ours = -report.dual_objective
    f_theirs = libsvm_objective(theirs, X, y)
    info = ours.fit_info_[0]
    print(f"SVC, RBF, N={n}, D=20, C=1, gamma=0.05, tol=1e-3")
    print(
        f"  libsvm (scikit-learn) {t_theirs:8.2f} s  {len(theirs.support_)} SVs, "
        f"{theirs.n_iter_[0]} iterations"
    )
    print(
        f"  backends.dask.SVC     {t_ours:8.2f} s  {len(ours.support_)} SVs, "
        f"{info.get('outer_iterations')} outer iterations, "
        f"{len(info.get('partition_sizes', []))} partitions finding "
        f"{sum(info.get('partition_support', []))} SVs"
    )
    print(f"  ratio backend/libsvm = {t_ours / t_theirs:.2f} (target <= 0.5)")
    print(
        f"  objective: ours {f_ours:.6f}, libsvm {f_theirs:.6f}, relative difference "
        f"{abs(f_ours - f_theirs) / abs(f_theirs):.1e} (target <= 1e-4)"
    )
    print(
        f"  KKT max violation {report.max_violation:.2e} (< tol 1e-3), duality gap "
        f"{report.duality_gap:.3g}; certificate on the cluster in {t_kkt:.1f} s"
    )
    print(f"  phases: {phases(ours, t_ours)}")
    return t_theirs


def scaling(n, chunk_size=2048):
    """Time per outer iteration on one and two workers, from the same start."""
    import distributed

    X, y = dataset(n, seed=1)
    rows = []
    for workers in (1, 2):
        with (
            distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            address = client.scheduler.address
            # Two parts: a rough start, so that 20 outer iterations all do work.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model, _ = fit_backend(
                    X,
                    y,
                    address,
                    partition_size=n // 2 + 1,
                    max_iter=20,
                    chunk_size=chunk_size,
                )
            timings = model.fit_info_[0]["timings"]
            outer = model.fit_info_[0]["outer_iterations"]
            per = timings["gradient updates"] / outer
            wall = (timings["gradient updates"] + timings["subproblem"]) / outer
            rows.append((workers, per, wall, max(client.run(peak_memory).values())))
    print(
        f"Outer iterations at N={n} (q=2048, chunks of {chunk_size} rows), the first "
        "20 after a two-part start:"
    )
    for workers, per, wall, peak in rows:
        print(
            f"  {workers} worker(s): gradient update {per * 1e3:7.1f} ms, with "
            f"subproblem {wall * 1e3:7.1f} ms per iteration; worker peak "
            f"{peak / 2**20:.0f} MiB"
        )
    print(
        f"  speed-up of the products from 1 to 2 workers: {rows[0][1] / rows[1][1]:.2f}"
    )


def memory_growth(sizes):
    """Each worker's peak memory after a fit, as N grows (fresh workers each)."""
    import distributed

    print("Worker peak memory against N (fresh two-worker cluster per N):")
    for n in sizes:
        X, y = dataset(n, seed=2)
        with (
            distributed.LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            fit_backend(X, y, client.scheduler.address)
            peak = max(client.run(peak_memory).values())
        print(
            f"  N={n:7d}: {peak / 2**20:6.0f} MiB per worker "
            f"(the Gram matrix would be {8 * n * n / 2**30:.1f} GiB)"
        )


def scale_run(n, libsvm_times):
    X, y = dataset(n, seed=3)
    ours, t_ours = fit_backend(X, y)
    report, t_kkt = certificate(ours, X, y)
    sizes = np.array(sorted(libsvm_times))
    times = np.array([libsvm_times[s] for s in sizes])
    slope, intercept = np.polyfit(np.log(sizes), np.log(times), 1)
    extrapolated = float(np.exp(intercept + slope * np.log(n)))
    print(
        f"Scale: N={n}: backend {t_ours / 60:.1f} min (target < 30), "
        f"{len(ours.support_)} SVs, {ours.fit_info_[0].get('outer_iterations')} outer "
        f"iterations; KKT max violation {report.max_violation:.2e}, certificate "
        f"{t_kkt:.0f} s"
    )
    print(
        f"  libsvm extrapolated as t ~ N^{slope:.2f} from N={sizes.tolist()}: "
        f"{extrapolated / 60:.0f} min; ratio {t_ours / extrapolated:.2f}"
    )
    print(f"  phases: {phases(ours, t_ours)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="*", default=[20000, 50000])
    parser.add_argument("--cache-mb", type=float, default=12000)
    parser.add_argument(
        "--scale",
        type=int,
        default=0,
        help="also fit this N (500000 for the issue's scale target)",
    )
    parser.add_argument("--scaling-n", type=int, default=20000)
    parser.add_argument("--memory-n", type=int, nargs="*", default=[20000, 50000])
    args = parser.parse_args(argv)
    libsvm_times = {n: compare(n, args.cache_mb) for n in args.n}
    if args.scaling_n:
        scaling(args.scaling_n)
    if args.memory_n:
        memory_growth(args.memory_n)
    if args.scale:
        scale_run(args.scale, libsvm_times)


if __name__ == "__main__":
    main()
