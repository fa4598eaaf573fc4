"""``backends.dask.RVR`` against the reference ``kernelref.rvm.RVR``, side by side.

Issue 12's targets, printed in one run:

- at N = 5 000 and 10 000 (sinc): the backend on one worker at most 1.5× the
  reference's time on one process, and faster on two workers; the two models
  compared (relevance vectors, evidence);
- at N = 50 000 (sinc, and sinc20: sinc seen through 20 noisy inputs; Friedman
  #1 in 20 inputs is discussed below): the fit completes on
  the embedded cluster; its time, relevance vectors, evidence, iterations, and
  the time of a streamed pass over the kernel against its floor (N² kernel
  entries at the per-entry cost measured on the workers in the same run, split
  over them), and of the client's other iterations against one O(N·m) product;
- each worker's peak memory as N grows (no worker holds an N × N array).

Every fit runs on two single-threaded worker processes (one for the one-worker
column) with one BLAS thread each; the reference runs in this process with one
BLAS thread.

Measured on a quiet machine (2026-11-24, 09:27-09:41 UTC, the Gram-row batches
of ``design.gram_row``):

- sinc N = 5000: reference 1.25 s; backend 1.34 s on one worker (1.07×) and
  1.17 s on two (0.93×); N = 10 000: 5.94 s against 3.10 s (0.52×) and 2.37 s
  (0.40×); the same relevance vectors and the evidence to 5e-11 each time.
  (With fixed 32-row batches, before they adapted to their use: 1.26× and
  1.07× at N = 5000, 0.73× and 0.55× at N = 10 000.)
- sinc20 N = 50 000, ``--schedule update``: 640 s, 52 relevance vectors, 749
  iterations, log evidence 35 144.13; 79 passes at 7.86 s against a floor of
  3.51 s (N² 20-input RBF entries at 2.81 ns over two workers): 2.24×, the
  rest being the Gram rows' products (up to 32 per pass) and the tasks'
  overhead; 134 additions from Gram rows (642 rows formed); the client's
  share 26.2 ms per iteration; worker peaks 1255 and 1269 MiB with the 1024 MB
  cache full. The same run under load (4-10, fixed 32-row batches): 1170 s,
  57 passes at 20.2 s. With the default schedule ('auto', 10:01-10:14 UTC,
  quiet): 721 s, 56 relevance vectors, 616 iterations, log evidence 35 151.19
  (7.06 above 'update'); 88 passes at 7.93 s against a floor of 3.02 s
  (2.42 ns per entry as measured in that run): 2.63×. (Those runs predate the
  re-hold after a final pass that moves the model; see ``schedules.HOLD_STALL``.)
- The re-hold's cost in streamed passes (2026-11-24, shared machine, two
  workers): sinc20 N = 5000, 98 passes with its held phase ended by the stall
  rule, 131 with the size budget alone, 47 without the re-hold (+3.10, +3.34
  nats); plain sinc N = 5000 and 10 000, 67 and 55 against 36 and 29 (the hold
  ends lower and is discarded; neither budget stops its held phase).
- sinc N = 10 000 and 50 000 with ``--cache-mb 0`` (memory that grows with
  N): worker peaks 141 and 230 MiB; 25 and 27 passes at 1.39× and 1.16× their
  floors; N = 50 000 in 121 s with 8 relevance vectors. Repeated 2026-11-24,
  16:49-17:03 UTC, after the re-hold and the swap pass (shared machine: four
  other jobs, an RBF entry at 5.15 ns against 2.4-2.9 quiet): 59 passes
  (27 before them) at 13.7 s, 2.12× their floor, 811 s, 7 relevance vectors,
  log evidence 44 199.93, worker peaks 216 and 229 MiB. The same day at
  N = 5000 (two workers, cache on): sinc 70 passes against 67 before the swap
  pass, +0.056 nats; sinc20 100 against 98, +0.24 nats.

Where the passes go (2026-11-24, 21:45-22:35 UTC, each pass labelled by its
caller; shared machine, load average 9-22, so the passes are exact and the times
are not). Sinc N = 5000, 'auto', 70 passes: 2 at the start (the norms, Φᵀt), 7
for the coordinates of each run's start, 8 Gram-row batches (15 additions from
rows, 96 rows formed), and 53 additions nearly inside the model's span (‖r‖²
below ``GRAM_ROW_RESIDUAL_MIN`` = 1e-4, down to 1e-10), one pass each: auto-held
11, auto-released 8, auto-final 5, hold-held 2, hold-released 2, hold-final 23,
auto-swap 2. The re-hold's three runs took 31 of the 70, and their end was
discarded (4368.27 against auto-final's 4368.54). Its held phase repeats the
first hold's first steps bit for bit (its first 16 additions are the first
hold's), whose new coordinate rows were already kept by their vectors u: 2
passes for its 18 additions. Sinc20 N = 5000, 100 passes: 2 at the start, 7
starts, 81 Gram-row batches (235 additions from rows, 916 rows formed: 18% of
the rows formed ahead were used), 10 additions nearly in the span (all in
hold-held). Sinc N = 20 000 with ``--cache-mb 0``, 76 passes (471 s, load 20): 2
at the start, 7 starts, 9 Gram-row batches at 9.0 s each and 58 near-span
additions at 5.3 s each; the re-hold 35 of them, its end again discarded
(17 472.40 against 17 475.07).

Changed after that (50c80ba): the norms and Φᵀt come from one pass (the same
pieces and products in the same order, so the same digits), and products
V @ Φ̃ of matrices are kept by V as the vectors' were (``PRODUCTS_MB``), so the
re-hold's cold start, the same column as the first hold's, takes no pass. The
same α, μ and evidence bit for bit: sinc N = 5000 70 -> 68 passes, sinc20
100 -> 97, sinc N = 20 000 (cache 0) 76 -> 74 (471 and 509 s at load 20-26:
no time can be read from these). Six alternated runs of ``--n 5000
--scale-n`` each, before and after (22:46-23:04 UTC, load 4-19): the backend
on one worker 3.9-10.1 s before, 4.2-5.3 s after, on two 2.5-7.9 s before,
4.5-7.2 s after (medians 5.6 -> 4.9 s and 5.2 -> 5.6 s), the reference
2.2-6.9 s: noise far above the two passes' worth (3%); the client's added
work, hashing and copying a kept product, is 2.7 ms per 32-row product at
N = 5000 and 23 ms at N = 50 000.

Not done, and why (for the next attempt at the near-span passes, the bulk):
any formula for uᵀΦ̃ from products formed earlier (the Gram row of φ_j, the
residual of φ_j formed speculatively in an earlier pass, a library of past
directions u) carries the rounding of r = φ_j − Uc, relative eps/‖r‖, as the
Gram formula does; only the pass of u itself does not. And a product formed
speculatively is not a function of the fit's state: a resumed fit (its design
empty) would form the row by a pass and part from the uninterrupted fit's
digits, unless the speculative products were saved with each checkpoint. A
lower ``GRAM_ROW_RESIDUAL_MIN`` (in ``kernelref.rvm.coordinates``) trades the
same rounding for Gram-row hits, which are few here (last note: 67 -> 58
passes on sinc N = 5000).

Friedman #1 with 20 inputs (``friedman20``) keeps a model that grows with N,
and the sequential algorithm's path with it: the reference takes 1.05 s for
149 relevance vectors at N = 1000, 2.7 s for 189 at N = 2000, and at N = 5000
stops at max_iter = 10 000 with 518 (25 s). At N = 50 000 each fresh
factorisation alone would cost O(N m²) ≈ 10¹¹ flops on the client; the
backend takes the O(N²) kernel work off the client but cannot shorten the
path, so that run is not part of the default set.
"""

import argparse
import pathlib
import time

import numpy as np


def sinc(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-10, 10, size=(n, 1))
    return X, np.sinc(X[:, 0] / np.pi) + rng.normal(0, 0.1, size=n), 0.1


def friedman20(n, seed=0):
    """Friedman #1 with 20 inputs (5 relevant), standardised; noise at a third
    of the signal's standard deviation; γ = 1/(2·20)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 20))
    f = (
        10 * np.sin(np.pi * X[:, 0] * X[:, 1])
        + 20 * (X[:, 2] - 0.5) ** 2
        + 10 * X[:, 3]
        + 5 * X[:, 4]
    )
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, f + rng.normal(0, f.std() / 3, size=n), 1 / 40


def sinc20(n, seed=0):
    """Tipping's sinc seen through 20 noisy inputs: a latent z ~ U(−10, 10) along
    a random direction of R²⁰, plus N(0, 0.3²) in every input; targets sinc(z)
    with noise 0.1; Tipping's γ = 1/18."""
    rng = np.random.default_rng(seed)
    z = rng.uniform(-10, 10, size=n)
    direction = rng.normal(size=20)
    X = np.outer(z, direction / np.linalg.norm(direction))
    X += 0.3 * rng.normal(size=(n, 20))
    return X, np.sinc(z / np.pi) + rng.normal(0, 0.1, size=n), 1 / 18


PROBLEMS = {"sinc": sinc, "friedman20": friedman20, "sinc20": sinc20}


def peak_memory():
    """Worker function: the process's peak resident memory (VmHWM), bytes."""
    status = pathlib.Path("/proc/self/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmHWM"].split()[0]) * 1024


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


def cluster(n_workers):
    from distributed import Client, LocalCluster

    local = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )
    return local, Client(local)


def fit_backend(
    X, t, gamma, client, chunk_size=2048, cache_mb=1024, beta_schedule="auto"
):
    from backends.dask import RVR

    model = RVR(
        gamma=gamma,
        chunk_size=chunk_size,
        progress=False,
        cache_size=cache_mb,
        beta_schedule=beta_schedule,
    )
    model.set_params(address=client.scheduler.address)
    tick = time.perf_counter()
    model.fit(X, t)
    return model, time.perf_counter() - tick


def describe(name, model, seconds):
    return (
        f"  {name:<22} {seconds:8.2f} s  {len(model.relevance_):4d} RVs  "
        f"log evidence {model.log_evidence_:.6f}  {model.n_iter_} iterations"
    )


def compare(n):
    """The backend on one and on two workers against the reference."""
    from kernelref.rvm import RVR

    X, t, gamma = sinc(n)
    tick = time.perf_counter()
    reference = RVR(gamma=gamma).fit(X, t)
    seconds = {"reference": time.perf_counter() - tick}
    print(f"sinc, N = {n}, γ = {gamma}")
    print(describe("reference, 1 process", reference, seconds["reference"]))
    for workers in (1, 2):
        local, client = cluster(workers)
        with local, client:
            fit_backend(X[:500], t[:500], gamma, client)  # workers warmed up
            model, seconds[workers] = fit_backend(X, t, gamma, client)
        info = model.fit_info_
        print(
            describe(f"backend, {workers} worker(s)", model, seconds[workers])
            + f"  ({info['passes']} passes, {info['pass_seconds']:.2f} s)"
        )
        same = np.array_equal(model.relevance_, reference.relevance_)
        print(
            f"    same relevance vectors as the reference: {same}; evidence "
            f"difference {model.log_evidence_ - reference.log_evidence_:+.2e}"
        )
    print(
        f"  ratio 1 worker / reference = {seconds[1] / seconds['reference']:.2f} "
        "(target <= 1.5)"
    )
    print(
        f"  ratio 2 workers / reference = {seconds[2] / seconds['reference']:.2f} "
        "(target < 1)"
    )


def scale_run(problem, n, cache_mb, beta_schedule="auto"):
    """One fit at scale on the embedded cluster, against the floors."""
    X, t, gamma = PROBLEMS[problem](n)
    local, client = cluster(2)
    with local, client:
        per_entry = np.mean(list(client.run(entry_cost, X.shape[1]).values()))
        model, seconds = fit_backend(X, t, gamma, client, 4096, cache_mb, beta_schedule)
        peaks = sorted(client.run(peak_memory).values())
    info = model.fit_info_
    m = len(model.alpha_)
    pass_floor = n * n * per_entry / 2
    Psi = np.random.default_rng(0).normal(size=(max(m, 1), n))
    w = np.ones(max(m, 1))
    tick = time.perf_counter()
    for _ in range(10):
        Psi.T @ w
    product_floor = (time.perf_counter() - tick) / 10
    client_seconds = seconds - info["pass_seconds"]
    print(
        f"{problem}, N = {n}, γ = {gamma:g}, β schedule {beta_schedule!r}, two "
        f"workers, cache {cache_mb} MB each"
    )
    print(describe("backend", model, seconds))
    print(
        f"  {info['row_additions']} additions from Gram rows ({info['gram_rows']} "
        "rows formed); the other passes: norms, Φᵀt, additions nearly in the span"
    )
    print(
        f"  {info['passes']} streamed passes, {info['pass_seconds']:.1f} s: "
        f"{info['pass_seconds'] / info['passes']:.2f} s each against a floor of "
        f"{pass_floor:.2f} s (N² entries at {per_entry * 1e9:.2f} ns over two "
        f"workers): {info['pass_seconds'] / info['passes'] / pass_floor:.2f}×"
    )
    print(
        f"  the client's share: {client_seconds:.1f} s over {model.n_iter_} "
        f"iterations, {client_seconds / model.n_iter_ * 1e3:.1f} ms each, against "
        f"{product_floor * 1e3:.2f} ms for one Ψᵀw (m = {m}, N = {n}): "
        f"{client_seconds / model.n_iter_ / product_floor:.1f}×"
    )
    print(f"  worker peak memory: {', '.join(f'{p / 2**20:.0f} MiB' for p in peaks)}")
    return peaks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="*", default=[5000, 10000])
    parser.add_argument("--scale-n", type=int, nargs="*", default=[10000, 50000])
    parser.add_argument(
        "--problems", nargs="*", default=["sinc", "sinc20"], choices=PROBLEMS
    )
    parser.add_argument(
        "--schedule",
        default="auto",
        choices=["auto", "update", "hold", "both"],
        help="the β schedule of the scale runs",
    )
    parser.add_argument(
        "--cache-mb",
        type=float,
        default=1024,
        help="each worker's kernel cache in the scale runs (0: none, to see the "
        "memory that grows with N)",
    )
    args = parser.parse_args(argv)
    for n in args.n:
        compare(n)
    peaks = {}
    for problem in args.problems:
        for n in args.scale_n:
            peaks[problem, n] = max(scale_run(problem, n, args.cache_mb, args.schedule))
    if peaks:
        print(
            "worker peak memory against N (no worker holds N × N; the cache "
            f"adds up to {args.cache_mb:g} MB):"
        )
        for (problem, n), peak in peaks.items():
            print(f"  {problem:<11} N = {n:>6}: {peak / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
