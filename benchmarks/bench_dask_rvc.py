"""``backends.dask.RVC`` against the reference ``kernelref.rvm.RVC``, side by side.

The backend runs the reference's fast classifier (``kernelref.rvm.rvc_fast``)
with each Gaussian approximation a reweighted ``StreamedDesign``: every
approximation costs at least one streamed pass over the N × N kernel (its
column norms), one for Φ̃ᵀt̃ and one for the model's coordinates at its warm
start, and one per batch of Gram rows its additions need. On a cluster these
passes are what a user pays for; this benchmark counts them.

Problems (inputs standardised, RBF kernel of width γ = c/D):

- ``ripley``: Ripley's two-class mixture of Gaussians in 2-D (as in
  ``bench_rvc``), at N training points;
- ``classif``: ``make_classification`` with 5 features, 3 informative, 5% of
  the labels flipped.

For each: the reference fit in memory (its seconds, Laplace log evidence,
relevance vectors, α iterations including the start's re-estimations, and
the sequential algorithm's iterations), then the backend on two
single-threaded worker processes (seconds, streamed passes and their seconds,
the same numbers), whether the two kept the same relevance vectors, their
evidence difference, and max |p_dask − p_ref| on 2000 test points; the floor
of a pass (N² kernel entries at the per-entry cost measured on the workers in
the same run, split over the two) and the passes times that floor; and the
passes of each path of the fast classifier (re-estimated start, empty start),
each approximation's passes counted from its norms pass to its end.

Run old code with this file: ``cd WT && PYTHONPATH=WT python
/path/to/bench_dask_rvc.py`` (the per-path split reads the approximations'
checkpoint names, which older code names without the path).
"""

import argparse
import time
from collections import defaultdict

import numpy as np


def ripley(n, seed=0):
    """Ripley's problem: each class an equal mixture of two Gaussians of variance
    0.03 (``bench_rvc.ripley_like``)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    means = np.array([[[-0.7, 0.3], [0.3, 0.3]], [[-0.3, 0.7], [0.4, 0.7]]])
    noise = np.sqrt(0.03) * rng.normal(size=(n, 2))
    return means[y, rng.integers(0, 2, n)] + noise, y


def classif(n, seed=0):
    from sklearn.datasets import make_classification

    return make_classification(
        n,
        n_features=5,
        n_informative=3,
        n_redundant=1,
        flip_y=0.05,
        random_state=seed,
    )


PROBLEMS = {"ripley": ripley, "classif": classif}
N_TEST = 2000


def data(problem, n, seed=0):
    """Training and test inputs, standardised on the training set."""
    X, y = PROBLEMS[problem](n + N_TEST, seed)
    X_train, X_test = X[:n], X[n:]
    centre, spread = X_train.mean(0), X_train.std(0)
    return (X_train - centre) / spread, y[:n], (X_test - centre) / spread


def entry_cost(d, n=4096, repeats=5):
    """Worker function: seconds per RBF entry of a kernel block in a reused
    buffer, for inputs of dimension d (the floor of a streamed pass)."""
    from backends.dask.blocks import kernel_block, reusable_buffer
    from kernelref.kernels import RBF

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(n, d)), rng.normal(size=(512, d))
    buffer = reusable_buffer(n * 512)
    kernel_block(RBF(0.1), X, Y, buffer)
    tick = time.perf_counter()
    for _ in range(repeats):
        kernel_block(RBF(0.1), X, Y, buffer)
    return (time.perf_counter() - tick) / (repeats * n * 512)


def cluster(n_workers=2):
    from distributed import Client, LocalCluster

    local = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )
    return local, Client(local)


def path_of(name):
    """The fast classifier's path of an approximation's checkpoint name
    ('rvc-class-0-empty-approximation-3' -> 'empty')."""
    head = name.rsplit("approximation-", 1)[0].removeprefix("rvc-")
    head = head.split("-", 2)[-1] if head.startswith("class-") else head
    return head.strip("-") or "one path"


def counted_rvc(**params):
    """The backend's RVC, and the passes of each approximation by path, recorded
    as it fits (one-vs-rest's machines, of the same class, record there too)."""
    from backends.dask import RVC

    per_path = defaultdict(lambda: defaultdict(float))

    class CountedRVC(RVC):
        def _driver(self, Phi):
            drive = super()._driver(Phi)
            counts = Phi.counts
            mark = {"passes": counts["passes"], "seconds": counts["pass_seconds"]}

            def counted(loop, name):
                result = drive(loop, name)
                record = per_path[path_of(name)]
                record["approximations"] += 1
                record["passes"] += counts["passes"] - mark["passes"]
                record["pass_seconds"] += counts["pass_seconds"] - mark["seconds"]
                mark.update(passes=counts["passes"], seconds=counts["pass_seconds"])
                return result

            return counted

    return CountedRVC(**params), per_path


def describe(name, model, seconds):
    return (
        f"  {name:<12} {seconds:8.2f} s  {len(model.relevance_):4d} RVs  "
        f"log evidence {model.log_evidence_:.6f}  {model.n_iter_} α iterations, "
        f"{model.n_loop_iter_} loop iterations"
    )


def compare(problem, n, c, client, per_entry, cache_mb=1024, chunk_size=2048):
    from kernelref.rvm import RVC

    X, y, X_test = data(problem, n)
    gamma = c / X.shape[1]
    print(
        f"{problem}, N = {n}, γ = {gamma:g} (c = {c:g}), two workers, cache "
        f"{cache_mb:g} MB each"
    )
    tick = time.perf_counter()
    reference = RVC(gamma=gamma).fit(X, y)
    t_ref = time.perf_counter() - tick
    print(describe("reference", reference, t_ref))
    backend, per_path = counted_rvc(
        gamma=gamma,
        chunk_size=chunk_size,
        progress=False,
        cache_size=cache_mb,
        address=client.scheduler.address,
    )
    tick = time.perf_counter()
    backend.fit(X, y)
    t_dask = time.perf_counter() - tick
    info = backend.fit_info_
    print(
        describe("backend", backend, t_dask)
        + f"  ({info['passes']} passes, {info['pass_seconds']:.2f} s)"
    )
    same = np.array_equal(backend.relevance_, reference.relevance_)
    gap = backend.predict_proba(X_test) - reference.predict_proba(X_test)
    print(
        f"    same relevance vectors: {same}; evidence difference "
        f"{backend.log_evidence_ - reference.log_evidence_:+.2e}; "
        f"max |p_dask - p_ref| = {np.abs(gap).max():.2e}"
    )
    floor = n * n * per_entry / 2
    print(
        f"    a pass: {info['pass_seconds'] / info['passes']:.3f} s against a floor "
        f"of {floor:.3f} s (N² entries at {per_entry * 1e9:.2f} ns over two "
        f"workers): {info['pass_seconds'] / info['passes'] / floor:.2f}×; passes × "
        f"floor {info['passes'] * floor:.2f} s; the backend / the reference = "
        f"{t_dask / t_ref:.2f}"
    )
    for path, record in per_path.items():
        print(
            f"    path {path!r}: {int(record['approximations'])} approximations, "
            f"{int(record['passes'])} passes ({record['pass_seconds']:.2f} s)"
        )
    print(
        f"    additions from Gram rows {info['row_additions']}, rows formed "
        f"{info['gram_rows']}; client outside the passes "
        f"{t_dask - info['pass_seconds']:.2f} s",
        flush=True,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="*", default=[5000])
    parser.add_argument(
        "--problems", nargs="*", default=["ripley", "classif"], choices=PROBLEMS
    )
    parser.add_argument("--widths", type=float, nargs="*", default=[1.0])
    parser.add_argument(
        "--cache-mb",
        type=float,
        default=1024,
        help="each worker's kernel cache (0: every pass forms the kernel, as out "
        "of core)",
    )
    args = parser.parse_args(argv)
    local, client = cluster(2)
    with local, client:
        per_entry = {}
        for problem in args.problems:
            d = data(problem, 10)[0].shape[1]
            per_entry[problem] = np.mean(list(client.run(entry_cost, d).values()))
        X, y, _ = data(args.problems[0], 300)
        counted_rvc(progress=False, address=client.scheduler.address)[0].fit(X, y)
        for n in args.n:
            for problem in args.problems:
                for c in args.widths:
                    compare(problem, n, c, client, per_entry[problem], args.cache_mb)


if __name__ == "__main__":
    main()
