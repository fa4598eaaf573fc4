"""``backends.dask.RVC`` against the reference ``kernelref.rvm.RVC``, side by side.

The backend runs the reference's fast classifier (``kernelref.rvm.rvc_fast``)
with each Gaussian approximation a reweighted ``StreamedDesign``: every
approximation costs one streamed pass over the N × N kernel for its column
norms, Φ̃ᵀt̃ and the coordinates of the model it warm-starts from (three
passes until 2026-11-24, see the end), one per batch of Gram rows its
additions need, and one per addition nearly inside the model's span. On a
cluster these passes are what a user pays for; this benchmark counts them.

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

Measured 2026-11-24, 13:55-14:40 UTC, on a shared machine (two cores, three
other engineers' benchmarks; load average 1.5-9.7): the times are noisy, the
passes and evidence are not. Where the reference was fitted too, the backend
kept its relevance vectors, its evidence to 2e-8 and max |p_dask - p_ref|
below 5e-8 (at N = 10 000 ripley its loop ran one iteration more, 713
against 712, to the same model), except on the one-path code's classif
c = 0.25 (below).

N = 5000, c = 1, passes (ripley / classif) and the kept Laplace log evidence:

=============================  ==========  ====================  ==========
code                           passes      log evidence          approx.
=============================  ==========  ====================  ==========
3d25b8f (one path, empty)       93 / 140   -1107.39 / -1001.75    8 / 8
0254419 = 2055f92^, eaae011    201 / 385   -1108.50 / -1004.78   27 / 49
0529391 (main at 13:50)        233 / 251   -1108.50 / -1010.98   26 / 19
0529391 + one-pass norms       207 / 232   the same              26 / 19
=============================  ==========  ====================  ==========

("approx.": Gaussian approximations over all paths; 3d25b8f ran the
sequential algorithm to convergence on each, from the empty model only;
eaae011 ran the empty path, then the re-estimated one, in full.) The passes
rose 1.8-2.5x since the one-path code, and the evidence fell by 1.1 and
9.2 nats.

Where main's passes go (ripley N = 5000, c = 1, 233 passes, by the caller of
each pass): each of the 26 approximations makes three passes however little
its loop does (the norms, Φ̃ᵀt̃, the warm start's coordinates UᵀΦ̃: 78), the
additions of columns nearly inside the model's span (‖r‖² below
``GRAM_ROW_RESIDUAL_MIN`` = 1e-4, so the kept Gram row would lose digits)
take one pass each (120), and Gram-row batches 35. The dense start's column
choice and its ten re-estimations make none (N × 200 and N × 50 columns on
the client). The in-span additions come in bursts on the approximations
where the loop's tolerance has just tightened and the model shrinks
(re-estimated path's sixth: 246 loop iterations, 21 -> 14 functions, 30
such passes; empty path's seventh: 214 iterations, 17); 13 approximations
whose loop ran 1-3 iterations still cost 3 passes each (39). The two paths
split the passes about evenly (104 and 129); here the empty path's result
is kept and the re-estimated path's 104 passes bought nothing.

The fix made here (``backends/dask/rvm/classification.py``): the norms and
Φ̃ᵀt̃ of each approximation in one pass (the same pieces, products and
order, so the same digits and path): 233 -> 207 and 251 -> 232 passes.
At N = 1500 (chunk 512) the fits before and after it have bitwise equal α,
μ, evidence and test probabilities on both problems, in 126 -> 102 and
129 -> 107 passes. The
warm start's UᵀΦ̃ joined that pass later (below).

Main (with the fix) at other widths and N, passes and seconds (the backend
/ the reference in memory; with the kernel cached by the workers a pass
costs about what its floor does):

- N = 5000, c = 0.25: ripley 151 passes, 10.96 s / 6.93 s; classif 242,
  14.64 s / 7.18 s. c = 4: ripley 272, 22.33 s / 11.25 s; classif 221,
  33.28 s / 18.27 s.
  The one-path code (3d25b8f) at N = 5000: ripley c = 0.25 63 passes
  (-1135.91 against main's -1136.77), c = 4 115 (-1088.43 against
  -1086.47); classif c = 4 200 (-947.36 against -950.80); classif
  c = 0.25 557 passes, where its reference fit took 11 212 loop iterations
  (76-185 s) to -1112.25, 49.9 nats above main, and the backend did not
  follow it (11 164 iterations, 28 relevance vectors against 31, -1.99 nats,
  max |p_dask - p_ref| = 0.33): that code's best row was not reproducible.
- N = 10 000, c = 1: ripley 199 passes, 26.5 s / 37.8 s (0.70); classif
  248, 50.1 s / 59.8 s (0.84).
- N = 20 000, c = 1, the backend alone (``--n --scale-n 20000``; the kernel
  no longer fits the workers' caches): ripley 262 passes, 142.8 s, of which
  133.6 s in passes at 1.29x their floor, -4411.20, 16 relevance vectors
  (the one-path code: 135 passes, 70.7 s, -4413.91, 12); classif 736
  passes (500 re-estimated path, 236 empty), 500 s, 390 s in passes at
  1.00x the floor and 110 s on the client, -4796.72, 91 relevance vectors
  (the one-path code: 368 passes, 228 s, -4800.90, 70). At this N main is
  above the one-path code on both (+2.7 and +4.2 nats) for twice its
  passes and 2.0-2.2x its time.
  Each Gram-row batch sends its rows to every task (dask warns of 14-25 MiB
  graphs at N = 20 000): ``design.gram_row`` could scatter them once.
- ``--cache-mb 0`` (every pass forms the kernel, as out of core), N = 5000,
  c = 1: ripley 207 passes in 16.4 s of passes (main before the fix 233 in
  13.4 s) and classif 232 in 14.7 s (251 in 18.8 s): 1.9-2.8x the floor per
  pass, and the backend 2.2-2.9x the reference's time. Repeated at
  14:24 (load average 5): 233 -> 207 and 251 -> 232 passes again, but a
  pass took 0.08-0.14 s from run to run, so no time gain can be read; the
  saving is the passes.

The paths at scale (the reference in memory, N = 5000, both seeds, c = 0.25,
1, 4: 12 problems; main's default against 3d25b8f's single path and against
each of main's paths alone): main is below the one-path code on 8 of 12
(classif s0 c = 0.25 -49.9 nats, where that code took 11 212 loop
iterations and 185 s; s0 c = 1 -9.2; s1 c = 4 -5.8; s0 c = 4 -3.4; ripley
-0.3 to -1.1) and above it on 4 (+2.0 to +6.9). The empty path is kept on 7
of 12. The abandonment rule (``rvc_fast.ABANDON_MARGIN`` = 8 nats after 5
approximations, calibrated at N = 250) lost evidence on 2 of 12: the empty
path was 9.4 and 14.1 nats behind after its fifth approximation and gained
11.9 and 23.3 more (classif s0 c = 1: -2.5 nats kept; s1 c = 4: -9.2),
where at N = 250 none gained more than 10.8; the Laplace evidence grows with
N, and a fixed margin in nats abandons more paths the larger N is.
Without the abandonment the two would have kept +2.5 and +9.2 nats at
13 - 5 and 68 - 5 more approximations of the empty path (two passes each
at least, and their additions). On these 12 problems the empty path alone
ends at or above main's default on 9 (by +2.5 and +9.2 on two, -0.06 to
-2.5 on three, 8.6 nats more in all) with 11-68 approximations against
main's 29-56 α iterations (ten of them re-estimations, which cost no
pass). Proposed to ``rvc_fast``'s owner, not changed here: an abandonment
margin that grows with N, or at large N the empty path first or alone; and,
for the backend's passes, fewer approximations in the tolerance's tail
(each costs two passes at least).

Adopted the same day (f188019, the lead; reference in memory, shared machine):
the margin is ``rvc_fast.abandon_margin``, 8 nats times sqrt(N/250) beyond 250
points. On the 12 problems at N = 1000, 2000 and 5000 the default now ends
exactly where both paths run in full do (+7.4, +0.9 and +11.7 nats in all over
the fixed margin), in 0.96x, 1.06x and 1.02x their CPU time (the fixed margin:
0.86x-0.92x); the empty path alone was 49.6, 14.9 and 3.1 nats lower in all
at N = 1000, 2000, 5000, so both paths stay. The passes this costs the backend
at N = 5000 are not measured here.

2026-11-24, 16:20-16:40 UTC (shared machine; the passes and evidence are exact,
the times are not), c = 1, two commits:

- 0ad40ab: the warm start's coordinates UᵀΦ̃ join the approximation's one pass
  (``StreamedDesign.reweighted(b, t, active)``; U is the QR of the model's
  weighted columns scaled by norms computed on the client: the span does not
  depend on the scaling). One pass fewer per approximation, the same relevance
  vectors and iterations: N = 2000 ripley 120 -> 101 passes, classif
  165 -> 139.
- 8a64622: a checkpoint is one .npz file instead of a Zarr group of ~25
  arrays. Two checkpoints per approximation had cost ~80 ms each to write
  and remove: the client's time outside the passes at N = 2000 fell from
  6.25 and 7.25 s to 0.61 and 1.64 s, the backend from 9.1x and 5.0x the
  reference's time to 3.0x and 3.6x.

With both, and the sqrt(N) abandonment margin (which keeps both paths):
N = 5000 ripley 182 passes (78 re-estimated path, 104 empty), -1108.503347,
backend / reference 0.98; classif 240 passes (108 + 132), -1008.494122, 1.12;
the reference's relevance vectors, the evidence within 4.3e-11 and
max |p_dask - p_ref| below 1.2e-11.

The softmax RVC at N = 1000 (2026-11-24, 21:45-22:40 UTC, shared machine, load
average 9-24): where its time goes. Three Gaussian classes in 2-D (centres about
1.5 apart, sd 0.6, γ = 1), ``multi_class='softmax'``, chunk 2048: 121 passes
before 702b7b5 (the reference's RVC path changed) and 123 after, of which one
per Gaussian approximation (36: the norms, Φ̃ᵀt̃ and the warm start's
coordinates together), 64 Gram-row batches and 22 additions nearly inside the
span (one pass each), 1 cold start. At load 9 the backend took 4.6 s against the
reference's 1.7 s: 3.3 s in 121 passes of 27 ms each, every one a round trip
with the kernel cached on the workers (client.map 0.7 ms, the wait for the tasks
21.7 ms, gather 3.8 ms, cancel 0.4 ms), and 1.3 s on the client. At this N a
pass is the scheduler's latency and a product of at most 32 rows with 10⁶ cached
entries, not the kernel: fewer passes is the only lever, and the near-span
additions keep theirs (``bench_dask_rvm``'s docstring says why). The products
kept by the design since 50c80ba are not asked for again here (no hit in this
fit), so the softmax and binary RVC make the passes they made before (binary,
N = 600: 61 and 61, α bit for bit).
"""

import argparse
import time
from collections import defaultdict

import numpy as np

from benchmarks.bench_dask_rvm import cluster, entry_cost


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


def compare(
    problem, n, c, client, per_entry, cache_mb=1024, chunk_size=2048, reference=True
):
    """One problem: the reference in memory (unless not ``reference``: N too
    large for it) and the backend, side by side."""
    from kernelref.rvm import RVC

    X, y, X_test = data(problem, n)
    gamma = c / X.shape[1]
    print(
        f"{problem}, N = {n}, γ = {gamma:g} (c = {c:g}), two workers, cache "
        f"{cache_mb:g} MB each"
    )
    if reference:
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
    if reference:
        same = np.array_equal(backend.relevance_, reference.relevance_)
        gap = backend.predict_proba(X_test) - reference.predict_proba(X_test)
        print(
            f"    same relevance vectors: {same}; evidence difference "
            f"{backend.log_evidence_ - reference.log_evidence_:+.2e}; "
            f"max |p_dask - p_ref| = {np.abs(gap).max():.2e}; the backend / the "
            f"reference = {t_dask / t_ref:.2f}"
        )
    floor = n * n * per_entry / 2
    print(
        f"    a pass: {info['pass_seconds'] / info['passes']:.3f} s against a floor "
        f"of {floor:.3f} s (N² entries at {per_entry * 1e9:.2f} ns over two "
        f"workers): {info['pass_seconds'] / info['passes'] / floor:.2f}×; passes × "
        f"floor {info['passes'] * floor:.2f} s"
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
        "--scale-n",
        type=int,
        nargs="*",
        default=[],
        help="N to fit with the backend alone (too large for the reference)",
    )
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
        for n in args.scale_n:
            for problem in args.problems:
                for c in args.widths:
                    compare(
                        problem,
                        n,
                        c,
                        client,
                        per_entry[problem],
                        args.cache_mb,
                        reference=False,
                    )


if __name__ == "__main__":
    main()
