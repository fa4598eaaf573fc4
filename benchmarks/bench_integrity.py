"""What checking a stored chunk costs, beside computing it.

A Gram store records the sha256 of every chunk it writes and verifies it before
the chunk is used (``backends.dask.integrity``). This prints, for one square
chunk of edge c of an RBF Gram matrix on D features, the best of three times of
computing the block, of its sha256 and of its crc32 (zlib), and the ratios of
the checksums to the block. Printed, not asserted.

    python -m benchmarks.bench_integrity                 # c = 1024, D = 20
    python -m benchmarks.bench_integrity --chunk 256
"""

import argparse
import hashlib
import time
import zlib

import numpy as np

from kernelref.kernels import RBF


def best_seconds(work, repeats=3):
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--features", type=int, default=20)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2 * args.chunk, args.features))
    kernel = RBF(gamma=0.1)
    A, B = X[: args.chunk], X[args.chunk :]
    block = kernel(A, B)
    payload = block.tobytes()
    seconds = {
        "block": best_seconds(lambda: kernel(A, B)),
        "sha256": best_seconds(lambda: hashlib.sha256(payload).hexdigest()),
        "crc32": best_seconds(lambda: zlib.crc32(payload)),
    }
    mib = len(payload) / 2**20
    print(f"chunk {args.chunk}² float64 ({mib:.1f} MiB), D = {args.features}")
    for name, value in seconds.items():
        ratio = value / seconds["block"]
        print(f"  {name:7s} {value * 1e3:8.2f} ms   {ratio:6.3f} × block")


if __name__ == "__main__":
    main()
