"""Gram build into a Zarr store against the in-memory numpy floor.

The floor is what one numpy process does with the whole matrix in memory:
the N×D×N product XXᵀ into a preallocated N×N array, then ``np.exp`` over its
N² entries (the first touch of fresh memory is not timed). The store is
``GramStore.build`` of the RBF Gram matrix on the default cluster (an embedded
LocalCluster: one single-threaded worker process per core), timed from the
call to the completion marker, cluster start-up excluded; the blocks go to
the operating system's page cache (no fsync), as any file write does. Each
side is timed as the best of two runs.

Rates are in Gram entries per second: the floor makes all N² entries; the
store makes the blocks i ≥ j, from which every entry of K is read. Both rates
are printed, and the ratio store/floor on N² entries.

    python -m benchmarks.bench_gram_store            # N = 20 000, D = 20
    python -m benchmarks.bench_gram_store --n 3000   # a smoke run
"""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

from backends.dask.blocks import lower_blocks, n_blocks
from backends.dask.cluster import get_client
from backends.dask.gram_store import GramStore
from kernelref.kernels import RBF

TARGET_RATIO = 0.5


def floor_seconds(X, repeats=2):
    """Best time of XXᵀ into a preallocated array plus exp over it, in place."""
    G = np.ones((len(X), len(X)))
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(X, X.T, out=G)
        np.exp(G, out=G)
        best = min(best, time.perf_counter() - start)
    return best


def store_seconds(X, kernel, path, chunk_size, compressor, repeats=2):
    """Best time of a full build of the store at `path` (rebuilt each run), and the
    store."""
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        store = GramStore.build(
            path,
            X,
            kernel,
            chunk_size=chunk_size,
            compressor=compressor,
            overwrite=True,
        )
        best = min(best, time.perf_counter() - start)
    return best, store


def check_store(store, X, kernel):
    """The last block row's first block and a diagonal block against the reference."""
    last = store.n_blocks - 1
    for i, j in ((last, 0), (last, last)):
        expected = kernel(X[store.block_slice(i)], X[store.block_slice(j)])
        error = np.abs(store.block(i, j) - expected).max()
        if error > 1e-12:
            raise AssertionError(
                f"block ({i}, {j}) differs from the reference by {error:.1e}"
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=20_000, help="samples N (default 20000)"
    )
    parser.add_argument("--d", type=int, default=20, help="features D (default 20)")
    parser.add_argument(
        "--chunk-size", type=int, default=1024, help="block edge (default 1024)"
    )
    parser.add_argument("--compressor", choices=["none", "lz4"], default="none")
    parser.add_argument(
        "--dir",
        default=None,
        help="directory for the store (default: a temporary one, removed after)",
    )
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, args.d))
    kernel = RBF(gamma=1.0 / args.d)
    n_entries = args.n**2
    n_b = n_blocks(args.n, args.chunk_size)
    stored_entries = sum(
        min(args.chunk_size, args.n - i * args.chunk_size)
        * min(args.chunk_size, args.n - j * args.chunk_size)
        for i, j in lower_blocks(n_b)
    )

    t_floor = floor_seconds(X)
    client = get_client()
    workers = client.scheduler_info()["workers"].values()
    threads = sum(w["nthreads"] for w in workers)

    workdir = tempfile.mkdtemp(prefix="bench_gram_store_", dir=args.dir)
    try:
        t_store, store = store_seconds(
            X,
            kernel,
            os.path.join(workdir, "gram"),
            args.chunk_size,
            None if args.compressor == "none" else args.compressor,
        )
        check_store(store, X, kernel)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    floor_rate, store_rate = n_entries / t_floor, n_entries / t_store
    ratio = store_rate / floor_rate
    print(
        f"Gram build, RBF, N = {args.n}, D = {args.d}, chunk {args.chunk_size}, "
        f"compressor {args.compressor}; store on {len(workers)} workers / {threads} "
        "threads"
    )
    print(f"{'':28}{'seconds':>9}{'Mentries/s':>12}{'MB/s':>9}")
    print(
        f"{'floor (numpy, in memory)':28}{t_floor:9.2f}{floor_rate / 1e6:12.1f}"
        f"{8 * floor_rate / 1e6:9.0f}"
    )
    print(
        f"{'Zarr store (K entries)':28}{t_store:9.2f}{store_rate / 1e6:12.1f}"
        f"{8 * store_rate / 1e6:9.0f}"
    )
    written = stored_entries / t_store
    print(
        f"{'Zarr store (written)':28}{t_store:9.2f}{written / 1e6:12.1f}"
        f"{8 * written / 1e6:9.0f}"
    )
    print(
        f"ratio store/floor = {ratio:.2f} (target >= {TARGET_RATIO}: "
        f"{'met' if ratio >= TARGET_RATIO else 'NOT met'}); "
        f"per worker thread {ratio / threads:.2f}"
    )
    return ratio


if __name__ == "__main__":
    main()
