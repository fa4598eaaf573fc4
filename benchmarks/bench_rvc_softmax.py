"""The softmax RVC with many classes: digits, 10 classes, against one-vs-rest and
re-estimation, side by side, with the default fit's time split by phase.

Problem: ``load_digits``, the first N points for training (N = 400, 700, 1200),
the next points up to 1797 for testing; inputs standardised on the training set
(the features constant there left as they are); the RBF kernel of the RVC's
default width γ = 1/D. Rows: the default ``RVC()`` (``multi_class='softmax'``,
``method='fast'``), ``RVC(multi_class='ovr')`` (its log evidence the sum over
the ten binary models, not comparable to the softmax model's) and
``RVC(method='reestimate')`` (the softmax model; it forms the NK × MK design and
the MK × MK Hessian, so only up to ``--reestimate-max`` points). Columns: wall
and CPU seconds, the Laplace log evidence, the test error, the kept weights and
relevance vectors, the Gaussian approximations and loop iterations, and for the
default the largest model an approximation ended with.

The phases of the default fit (CPU seconds, from wrappers around
``kernelref.rvm.rvc_fast``'s functions): ``start``, the dense start's columns,
its mode and ten re-estimations; ``loops``, the sequential algorithm on each
Gaussian approximation (whitening, warm start, steps); ``modes``, the Newton
modes between them (with the extrapolated ones); ``rest``, the remainder.

Measured 2026-11-24, 21:40-23:30 UTC, on a machine shared with seven other
engineers (load average 7-27: wall seconds are 2-3x the CPU seconds, and CPU
seconds themselves inflate under such load).

Diagnosis (before ``KroneckerDesign.growth_budget``; per approximation, the
weights it started and ended with, from a driver that records them):

- The paths pass through models of several hundred weights because of the
  *first approximations*, not the dense start (50 weights) nor re-estimations
  of nearly infinite α. N = 700: after the re-estimated start (10
  re-estimations of 50 weights, 48-50 kept) the first approximation, made at a
  poor mode, grew the model to 915 weights (2531 loop iterations: 1089
  additions, 1217 re-estimations, 224 deletions; 78.8 s wall) and the second,
  at the Newton mode of those 915 (an NK x 915 whitened design, 23 s of Newton
  steps in all), deleted 889 of them one at a time (963 iterations, 70.9 s);
  the path then settled at 38 weights in 29 cheap approximations. The empty
  path did the same on a smaller scale (1 -> 298 -> 84 weights, 5.7 s) before
  it was abandoned after five approximations. Fresh factorisations (O(Pm^2)
  refreshes) were 106, 23.5 s of the 187 s wall (65 s user CPU); the rest of
  the two big approximations is the O(Pm) steps at m ~ 900, P = 7010, and the
  additions' copies of U (NK x m) and Psi (m x P). N = 400: the same pattern at
  48 -> 111 weights (2.4 s in all).
- N = 1200 (a run of the code before the bound, started at 21:45 under load
  5-27): not finished after 27 CPU minutes, when it was stopped; a quieter run
  of the last session took 247 s.

Change: each Gaussian approximation may end with at most twice the weights it
started with, at least 400 (``kernelref.rvm.softmax_design.GROWTH_FACTOR``,
``GROWTH_MIN``), the loop's ``max_size`` budget; the next approximation, at the
new mode, goes on from there. CPU seconds, the same machine and hour:

    N     before: L / cpu / appr / loop       after: L / cpu / appr / loop
    400   -61.10 / 3.1 / 77 / 1485            -61.10 / 2.5 / 77 / 1485 (not reached)
    700   -83.87 / 73.0, 76.6 / 47 / 5626     -83.72 / 14.8-18.2 / 43 / 2731
    1200  (not finished, see above)           -110.39 / 45.8 / 76 / 3432

(N = 700: two before/after pairs run back to back, 4.2-4.5x; the largest model an
approximation ends with is now 400. N = 1200, the benchmark's run: loops 39.0 s,
modes 6.0 s; 38 of the 76 approximations end above 100 weights.) The 12
softmax rows of ``bench_rvc`` (iris, wine; P < 400) take the same paths: the
same approximations, loop iterations and evidence on every row; its other rows
do not use the structured design.

Tried (bounds max(f*m, g); eight digits subsets, N = 300-700, the first N
points or random ones, log evidence against the unbounded path's):

- f = 2, g = 10: -0.5 to -3.9 nats on 7 of 8 (+1.1 on one), CPU 1.0-3.2 s
  against 2.6-32.8 s;
- f = 4, g = 40: -2.4 to -5.5 on 4 of 6 (+1.3 on one); f = 8, g = 100: -1.2 on
  2 of 6;
- f = 2, g = 200: -0.3 to -3.7 on 5 of 8; f = 2, g = 300: -0.96 to -1.73 on
  3, +1.03 and +1.30 on 2, of 8;
- f = 2, g = 400 (adopted): equal on two, +1.30 and +0.15 on two, -0.13 on one
  of five. The overshoot explores: its prune, at the mode of a rich model, finds
  better maxima than growth a few weights at a time, so the bound is set where
  it cuts the cost of the largest excursions only.

Not done: N = 1200 still takes 46 s of CPU: the approximations' fixed
cost at m ~ 100 (the warm start's coordinates, one product with Phi of
O(NMK m)) and, on that row, paths cycling between two models for the 20
approximations ``STALL_PATIENCE`` allows. One-vs-rest is 4-12x faster at N = 400
and 700 but not at N = 1200, where it took 602 s of CPU (521 approximations,
12 601 loop iterations over its ten classes).

One-vs-rest at N = 1200 (diagnosed 23:30-23:45 UTC, shared machine; each class
fitted alone as a binary ``RVC()`` on the same Φ, CPU seconds): nine classes
take 0.2-0.7 s each (29-82 approximations, 244-834 loop iterations, largest
model 16-42 weights, 4-20 kept, no warning); class 4 takes all the rest. Its
empty path reaches, after 25 approximations, a mode of 11 weights with saturated
probabilities (max |a| = 425, every point right); the Newton mode after the next
approximation has 117 points confidently wrong (the class has ~120) (B down to
4.6e-9, whitened residuals up to 1.5e4, exp overflows), and the approximation
there (log evidence -1.2e8) adds basis functions with α ~ 1e-8 to 1e-15 until
the model holds nearly every column: 11 -> ~1190 weights, over 2000 loop
iterations with a fresh O(Pm^2) factorisation at each (drift: refresh interval
1), 114 s of CPU for that one approximation alone before it was stopped. The
mode at the big model prunes back to ~10 weights and the path cycles so until
``STALL_PATIENCE``: the class took ~599 s, 78 α iterations (68 approximations,
10 start re-estimations) and ~9000 loop iterations (the benchmark's totals less
the other nine classes'), ending at 14 weights, L = -18.33. Change
(``rvc_fast.growth_budget``): binary fits get the softmax's bound (2m, at least
400; a design may still answer for itself, or None). Class 4 then cycles 11 ->
400 -> 9 weights (0.4 s up, 2.5 s down) and ends as before: 19.6 s, 66
approximations, 5770 loop iterations, 14 weights, L = -18.32, ConvergenceWarning
(cycling) as before. The other nine classes never reach 400 weights: same paths.
This benchmark's ovr row at N = 1200 after it (23:42 UTC): 21.2 s CPU (was 602),
519 α iterations (521), 9365 loop iterations (12 601), L -252.17, error 0.107,
117 weights, 103 RVs (all as before); the softmax row unchanged (-110.39, 76 /
3432, 42.3 s). ``bench_rvc`` before and after: all 48 rows the same evidence,
approximations and loop iterations (P <= 380 there: the bound of 400 never
binds); 39 of 48 meet both. Not done: the cause, a Newton mode with the
positives saturated wrong after an approximation at an all-right saturated mode
(``next_mode`` from a wild μ), is left; the cycle it starts still costs class 4
~20x the other classes.

The benchmark's run after the change (24a0db0, 22:55-23:24 UTC, load 5-27):

      N method         wall/s    cpu/s         L    err     w  RVs  appr   loop  peak
    400 softmax          6.43     2.49    -61.10  0.208    28   27    77   1485   202
    400 ovr              1.19     0.59   -119.91  0.183    59   49   460   2397
    400 reestimate     229.55   133.78    -61.91  0.193    33   32  3468      0
    700 softmax         22.51    14.82    -83.72  0.102    38   37    43   2731   400
    700 ovr              4.25     1.24   -177.20  0.106    82   71   502   3254
   1200 softmax         95.39    45.76   -110.39  0.106    50   49    76   3432   400
   1200 ovr           1124.14   601.96   -252.17  0.107   117  103   521  12601

(one-vs-rest's L is the sum of ten binary models' evidences, not comparable).

The cause of class 4's cycle (2026-11-25, 00:40-01:50 UTC, shared machine, load
5-16; ``rvc_fast.guarded_mode``, ``bench_rvc``'s tenth pass): not Newton. Every mode
on that path, the bad one included, is scipy's minimiser of the negative log
posterior at its alpha. The path had reached, by Aitken's extrapolation, a mode
of 14 weights with five alpha of 2e-6 to 6e-5 (|w| 80-410, L = -18.32) where every
point but three sits far from the boundary (B ~ e^-|a|); the approximation made
there, which sees those points only through B, re-estimated and then deleted the
five, and the mode at its alpha got 117 of the class's points wrong (L = -702.9).
Change: where the mode falls more than ``abandon_margin`` below the last one after
deletions, the approximation is cut back to the model it was made at (its
re-estimated alpha kept, its deletions and additions not). On the code before
f21e30b's joins class 4 then converged at -18.28 in 1.7 s CPU (20.4 s, -18.32,
unconverged before). Since the joins class 4 stops before the collapse, at the
re-estimated path's fixed point (-21.15, 16 vectors, 0.6 s; the same with this
change). This benchmark, the code of main before and after (b1a964d), CPU s:

      N method     before: L / cpu / appr / loop     after: L / cpu / appr / loop
    400 softmax    -61.10 / 2.17 / 77 / 1485         the same (2.32 s)
    400 ovr        -119.91 / 0.53 / 443 / 2367       -119.20 / 0.51 / 418 / 2187
    700 softmax    -83.72 / 13.9 / 43 / 2731         the same (14.2 s)
    700 ovr        -177.20 / 1.19 / 496 / 3245       the same (1.13 s)
   1200 softmax    -110.39 / 40.2 / 76 / 3432        the same (42.1 s)
   1200 ovr        -254.99 / 3.21 / 523 / 4335       -254.99 / 3.09 / 529 / 4371

(test error 0.183 -> 0.181 at N = 400 ovr, the rest unchanged; one-vs-rest at
N = 1200 is -254.99 since the joins, -252.17 before them). Restoring a model at the
growth bound (400 weights) is left out: done, N = 700 softmax kept 400 weights at
each approximation (15 -> 241 s CPU).
"""

import argparse
import time
import warnings
from contextlib import contextmanager

import numpy as np

import kernelref.rvm.rvc_fast as rvc_fast
from kernelref.rvm import RVC

#: Training sizes (the first N points of ``load_digits``).
SIZES = (400, 700, 1200)

#: Re-estimation of the softmax model only up to this N: its NK × MK design and
#: MK × MK Hessian are 0.4 GB each at N = 700.
REESTIMATE_MAX = 400

#: ``rvc_fast`` functions timed, and the phase each counts to.
PHASES = {
    "dense_start": "start",
    "reestimated_start": "start",
    "approximation_step": "loops",
    "next_mode": "modes",
    "extrapolated": "modes",
}


def digits(N):
    """The first N digits for training, the rest for testing, standardised on
    the training points."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    centre, spread = X[:N].mean(0), X[:N].std(0)
    X = (X - centre) / np.where(spread > 0, spread, 1.0)
    return X[:N], y[:N], X[N:], y[N:]


@contextmanager
def phase_timer():
    """CPU seconds spent in each phase of `PHASES` while inside, and the model
    size each approximation ended with (``sizes``). Nested calls (an
    extrapolated mode inside no other phase) count once."""
    spent = {phase: 0.0 for phase in set(PHASES.values())}
    record = {"spent": spent, "sizes": [], "depth": 0}
    originals = {name: getattr(rvc_fast, name) for name in PHASES}

    def timed(name, function):
        def wrapper(*args, **kwargs):
            record["depth"] += 1
            start = time.process_time()
            try:
                result = function(*args, **kwargs)
            finally:
                record["depth"] -= 1
            if record["depth"] == 0:
                spent[PHASES[name]] += time.process_time() - start
            if name == "approximation_step":
                record["sizes"].append(len(result.active))
            return result

        return wrapper

    for name, function in originals.items():
        setattr(rvc_fast, name, timed(name, function))
    try:
        yield record
    finally:
        for name, function in originals.items():
            setattr(rvc_fast, name, function)


def fit(model, X, y):
    """``model`` fitted on (X, y): the model, wall and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a cycling path's ConvergenceWarning
        model.fit(X, y)
    return model, time.perf_counter() - wall, time.process_time() - cpu


def weights(model):
    """Weights kept: softmax, the (M, K) mask; one-vs-rest, the binary models'."""
    kept = getattr(model, "kept_weights_", None)
    if kept is not None:
        return int(kept.sum())
    if hasattr(model, "estimators_"):
        return int(sum(len(e.alpha_) for e in model.estimators_))
    return len(model.alpha_)


HEADER = (
    f"  {'N':>5s} {'method':12s} {'wall/s':>8s} {'cpu/s':>8s} {'L':>9s} "
    f"{'err':>6s} {'w':>5s} {'RVs':>4s} {'appr':>5s} {'loop':>6s} {'peak':>5s}"
)


def row(N, name, model, wall, cpu, X_test, y_test, peak=""):
    L = float(np.sum(model.log_evidence_))
    err = float(np.mean(model.predict(X_test) != y_test))
    print(
        f"  {N:5d} {name:12s} {wall:8.2f} {cpu:8.2f} {L:9.2f} {err:6.3f} "
        f"{weights(model):5d} {len(model.relevance_):4d} "
        f"{int(np.sum(model.n_iter_)):5d} {int(np.sum(model.n_loop_iter_)):6d} "
        f"{peak:>5}",
        flush=True,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument(
        "--reestimate-max",
        type=int,
        default=REESTIMATE_MAX,
        help="run re-estimation only up to this many points",
    )
    args = parser.parse_args(argv)
    print(
        "Softmax RVC on digits (10 classes): the default against one-vs-rest and "
        "re-estimation, one process, single-threaded BLAS; the machine may be "
        "shared (CPU seconds are steadier than wall seconds)."
    )
    print(HEADER)
    for N in args.sizes:
        X, y, X_test, y_test = digits(N)
        with phase_timer() as record:
            model, wall, cpu = fit(RVC(), X, y)
        row(N, "softmax", model, wall, cpu, X_test, y_test, max(record["sizes"]))
        spent = record["spent"]
        rest = cpu - sum(spent.values())
        print(
            "        phases (cpu/s): "
            + ", ".join(f"{p} {spent[p]:.2f}" for p in ("start", "loops", "modes"))
            + f", rest {rest:.2f}; approximations ending above 100 weights: "
            f"{sum(size > 100 for size in record['sizes'])}",
            flush=True,
        )
        model, wall, cpu = fit(RVC(multi_class="ovr"), X, y)
        row(N, "ovr", model, wall, cpu, X_test, y_test)
        if N <= args.reestimate_max:
            model, wall, cpu = fit(RVC(method="reestimate"), X, y)
            row(N, "reestimate", model, wall, cpu, X_test, y_test)


if __name__ == "__main__":
    main()
