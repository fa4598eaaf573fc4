"""The matrix-free GP (``GaussianProcessRegressor(solver="cg")``) on the embedded
cluster.

Parts (``--part``, default ``all``: the three side by side in one run):

- ``accuracy``: evidence and gradient of ``MatrixFreeEvidence`` against the exact
  ones (dense Cholesky, which the exact path equals to 1e-8) at N = 4000, D = 5,
  1.0 * RBF(0.2), σ² = 0.05, rank 100, CG tol 1e-6: root-mean-square relative
  errors over ``--seeds`` probe seeds, by probe count, for Hutchinson and Hutch++.
- ``rank``: CG iterations against the preconditioner's rank (fixed ranks and
  ``"auto"``) for the GP's solve (N = 4000, D = 20, 1.0 * RBF(0.05), σ² = 0.05,
  4 probes) and for ``KernelRidge(solver="cg")`` (same data, λ = 0.1).
- ``variance``: predictive standard deviations (block CG) of 256 test points
  at N = 4000, D = 5 against the exact ones, by ``predict_tol``, beside the
  fit's time.
- ``large``: one evidence-and-gradient evaluation at N = 100 000, D = 20
  (1.0 * RBF(0.05), σ² = ``--noise``, rank "auto", ``--probes`` probes, CG tol
  ``--tol``), progress printed; CG iterations, probes, time, and the time per
  streamed product against its floor (N² RBF entries at the per-entry time the
  workers measure in the same run, split over them).

The machine may be shared: every ratio is of things measured in one run.

Measured on 2026-11-24 on the shared 2-core VM while other engineers computed
(load 5-20 on 2 cores, so absolute times are several times a quiet machine's):

- accuracy: the table in ``backends.dask.gp_matrix_free`` (e.g. 16 probes:
  log p 6.4e-3, log|A| 1.4e-3, gradient 1.2e-2 / 1.3e-2 relative; Hutch++
  the same within the seeds' noise).
- rank (CG iterations to tol 1e-6; "auto" stops at the cap 3√N = 189 here,
  the remainder's trace staying far above 0.1·σ²N on this 20-D kernel):

      rank    GP its   GP s   ridge its   ridge s
        25      140     35        98        10
        50      107     59        74        20
       100       84     47        61        10
       200       72     42        52         8
       400       53     29        39         7
      auto (189) 73     34        52        16

- variance (N = 4000, D = 5, rank 100; fit: evidence and gradient, 80 CG
  iterations on 9 columns, 21.3 s): 256 test points in one batch, every
  variance above the exact one (an upper bound, as ``cg-variance`` says) and
  within its bound:

      predict_tol   CG its   seconds   variance excess      bound (max)
        1e-2          24       19.6    3.1e-4 .. 6.5e-3       1.5
        1e-4          46       23.4    7.7e-8 .. 3.7e-6       1.5e-4
        1e-6          71       41.7    7.4e-12 .. 6.6e-10     1.7e-8

  A product with 256 columns costs about three of the fit's 9-column ones
  here, so a batch at the fit's tolerance costs about two fits.
- large: N = 100 000, σ² = 0.1, 8 probes, tol 1e-4, rank "auto" (948, the
  cap): completed, in two runs through ``--store``, both from the code of
  commit 4502fc4 so that the checkpoint matched. The first (08:08-08:28 UTC,
  niced under a load of 8-10) ran 4 CG iterations and was stopped; the resumed
  run (08:47-09:24 UTC, the test suite running beside it for its first 10
  minutes) continued from iteration 4 and converged after 69 iterations on 9
  columns (the target and 8 probes): 2226 s for the rest of the evaluation
  (preconditioner 36 s, CG 2162 s, gradient round 28 s), 30.4 s per streamed
  product against a floor of 22.9 s measured at its start (ratio 1.33); log p =
  -13350.8 ± 40.2, gradient [-11588.1, -33609.7] ± [22.3, 150.1]. On a quiet
  machine the floor is about 12.4 s per product (measured at the first run's
  start: 2.4-2.6 ns per RBF entry per worker).
"""

import argparse
import pathlib
import tempfile
import time

import numpy as np

from backends.dask.cluster import get_client
from backends.dask.gp_matrix_free import MatrixFreeEvidence
from backends.dask.runtime import FitStore
from benchmarks.bench_dask_cg import data, floor_seconds
from kernelref.gp import GaussianProcessRegressor as ReferenceGPR
from kernelref.kernels import RBF


def fit_store(client, X, name, chunk_size=1024):
    path = pathlib.Path(tempfile.mkdtemp(prefix="bench-gp-mf-")) / "fit.zarr"
    return FitStore.prepare(
        path, X, identity={"bench": name}, chunk_size=chunk_size, client=client
    )


def part_accuracy(client, args):
    """Relative errors of log p, log|A| and the gradient against the exact ones."""
    n, noise = 4000, 0.05
    X, y = data(n, 5)
    kernel = 1.0 * RBF(gamma=0.2)
    exact = ReferenceGPR(kernel=kernel, noise=noise, optimizer=None).fit(X, y)
    lml, gradient = exact.log_marginal_likelihood(kernel.theta, eval_gradient=True)
    logdet = 2 * np.log(np.diag(exact.L_)).sum() + n * np.log(noise)
    store = fit_store(client, X, "accuracy")
    print(
        f"accuracy, N={n}, D=5, 1.0*RBF(0.2), noise {noise}, rank 100, tol 1e-6: "
        f"exact log p {lml:.2f}, log|A| {logdet:.2f}, gradient "
        f"{np.round(gradient, 2).tolist()}; RMS relative error over {args.seeds} seeds"
    )
    print(
        "estimator   probes  CG columns  log p    log|A|   gradient (c, gamma)"
        "      CG its  s/eval"
    )
    for estimator in args.estimators:
        for m in (4, 16, 64):
            errors, seconds, iterations = [], [], []
            for seed in range(args.seeds):
                evidence = MatrixFreeEvidence(
                    client,
                    store,
                    X,
                    y,
                    noise,
                    n_probes=m,
                    tol=1e-6,
                    rank=100,
                    random_state=seed,
                    trace_estimator=estimator,
                    resume=False,
                )
                start = time.perf_counter()
                lml_mf, gradient_mf = evidence.evaluate(kernel)
                seconds.append(time.perf_counter() - start)
                iterations.append(evidence.n_iter)
                errors.append(
                    [
                        abs(lml_mf - lml) / abs(lml),
                        abs(evidence.logdet - logdet) / abs(logdet),
                        *np.abs(gradient_mf - gradient) / np.abs(gradient),
                    ]
                )
            e = np.sqrt(np.mean(np.square(errors), axis=0))
            print(
                f"{estimator:10s}  {m:6d}  {evidence.n_columns:10d}  {e[0]:.1e}  "
                f"{e[1]:.1e}  {e[2]:.1e}, {e[3]:.1e}  {np.mean(iterations):14.0f}  "
                f"{np.mean(seconds):6.1f}",
                flush=True,
            )


def part_rank(client, args):
    """CG iterations against the preconditioner's rank, GP and kernel ridge."""
    from backends.dask import KernelRidge

    n, noise = 4000, 0.05
    X, y = data(n, 20)
    kernel = 1.0 * RBF(gamma=0.05)
    store = fit_store(client, X, "rank")
    print(f"rank, N={n}, D=20, RBF(0.05): GP noise {noise} (4 probes), ridge lam 0.1")
    print("rank      GP rank  GP CG its  GP s   ridge rank  ridge CG its  ridge s")
    for rank in (25, 50, 100, 200, 400, "auto"):
        evidence = MatrixFreeEvidence(
            client, store, X, y, noise, n_probes=4, rank=rank, resume=False
        )
        start = time.perf_counter()
        evidence.evaluate(kernel, eval_gradient=False)
        gp_seconds = time.perf_counter() - start
        start = time.perf_counter()
        ridge = KernelRidge(
            lam=0.1,
            gamma=0.05,
            solver="cg",
            rank=rank,
            tol=1e-6,
            chunk_size=1024,
            progress=False,
        ).fit(X, y)
        ridge_seconds = time.perf_counter() - start
        print(
            f"{str(rank):8s}  {evidence.rank_:7d}  {evidence.n_iter:9d}  "
            f"{gp_seconds:4.0f}   {ridge.preconditioner_rank_:10d}  "
            f"{ridge.n_iter_:12d}  {ridge_seconds:7.0f}",
            flush=True,
        )


def part_large(client, args):
    """One evidence-and-gradient evaluation at N = 100 000.

    The floor is measured first, beside the run. With ``--store`` the solve
    checkpoints there and a rerun resumes it; an interrupt (Ctrl-C, or
    ``timeout -s INT``) prints the figures measured so far.
    """
    n, noise = args.n, args.noise
    X, y = data(n, 20)
    kernel = 1.0 * RBF(gamma=0.05)
    floor, per_entry = floor_seconds(client, n * n)
    rates = ", ".join(f"{1e9 * s:.2f}" for s in per_entry.values())
    print(
        f"large, N={n}, D=20, 1.0*RBF(0.05), noise {noise}, {args.probes} probes "
        f"({args.estimator}), rank auto, tol {args.tol}; product floor {floor:.1f} s "
        f"(ns/entry per worker: {rates})",
        flush=True,
    )
    if args.store:
        path = pathlib.Path(args.store)
        store = FitStore.prepare(
            path, X, identity={"bench": "large"}, chunk_size=4096, client=client
        )
    else:
        store = fit_store(client, X, "large", chunk_size=4096)
    records = []

    def report(record):
        records.append(record)
        print(
            f"  CG iteration {record.iteration}: residual {record.measure:.2e}, "
            f"{record.elapsed:.0f} s",
            flush=True,
        )

    evidence = MatrixFreeEvidence(
        client,
        store,
        X,
        y,
        noise,
        n_probes=args.probes,
        tol=args.tol,
        rank="auto",
        trace_estimator=args.estimator,
        progress=report,
        resume=bool(args.store),
    )
    start = time.perf_counter()
    try:
        lml, gradient = evidence.evaluate(kernel)
    except KeyboardInterrupt:
        print(f"interrupted after {time.perf_counter() - start:.0f} s", flush=True)
        lml = None
    elapsed = time.perf_counter() - start
    if len(records) > 1:
        per_product = float(np.median(np.diff([r.elapsed for r in records])))
        print(
            f"  time per streamed product {per_product:.1f} s against a floor of "
            f"{floor:.1f} s: ratio {per_product / floor:.2f}"
        )
    if lml is None:
        return
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in evidence.seconds.items())
    print(
        f"matrix-free GP N={n}: {evidence.n_iter} CG iterations on "
        f"{evidence.n_columns} columns (1 target + {args.probes} probes), "
        f"preconditioner rank {evidence.rank_}; {elapsed:.0f} s for evidence and "
        f"gradient ({parts})"
    )
    print(
        f"  log p {lml:.1f} ± {0.5 * evidence.logdet_std_error:.1f}, gradient "
        f"{np.round(gradient, 1).tolist()} ± "
        f"{np.round(evidence.gradient_std_error, 1).tolist()}"
    )


def part_variance(client, args):
    """Predictive standard deviations of ``solver="cg"`` (block CG,
    ``backends.dask.gp_variance``) at N = 4000 against the exact ones."""
    from backends.dask import GaussianProcessRegressor
    from backends.dask.gp_variance import predictive_covariance

    n, noise, kernel = 4000, 0.05, 1.0 * RBF(gamma=0.2)
    X, y = data(n, 5)
    X_test, _ = data(256, 5, seed=1)
    exact = ReferenceGPR(kernel=kernel, noise=noise, optimizer=None).fit(X, y)
    _, std_exact = exact.predict(X_test, return_std=True)
    start = time.perf_counter()
    model = GaussianProcessRegressor(
        kernel=kernel,
        noise=noise,
        optimizer=None,
        solver="cg",
        tol=1e-6,
        rank=100,
        n_probes=8,
        chunk_size=1024,
        progress=False,
    ).fit(X, y)
    fit_seconds = time.perf_counter() - start
    print(
        f"variance, N={n}, D=5: fit (evidence and gradient) {fit_seconds:.1f} s, "
        f"{model.n_iter_} CG iterations on {model.fit_info_['n_columns']} columns",
        flush=True,
    )
    for tol in (1e-2, 1e-4, 1e-6):
        model.set_params(predict_tol=tol)
        start = time.perf_counter()
        result = predictive_covariance(model, X_test)
        seconds = time.perf_counter() - start
        excess = result.value - std_exact**2
        print(
            f"  predict_tol {tol:g}: 256 test points in {seconds:.1f} s "
            f"({result.n_iter} CG iterations); variance above the exact by "
            f"{excess.min():.1e}..{excess.max():.1e}, bound up to "
            f"{result.error_bound.max():.1e}",
            flush=True,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--part",
        default="all",
        choices=["all", "accuracy", "rank", "large", "variance"],
    )
    parser.add_argument("--n", type=int, default=100000)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--probes", type=int, default=8)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--store", default=None, help="fit store of the large part (resumable)"
    )
    parser.add_argument(
        "--estimator",
        default="hutchinson",
        choices=["hutchinson", "hutch++"],
        help="trace estimator of the large part",
    )
    parser.add_argument(
        "--estimators",
        nargs="+",
        default=["hutchinson", "hutch++"],
        choices=["hutchinson", "hutch++"],
        help="trace estimators of the accuracy part",
    )
    args = parser.parse_args(argv)
    client = get_client()
    print(f"workers: {len(client.scheduler_info()['workers'])}", flush=True)
    parts = {
        "accuracy": part_accuracy,
        "rank": part_rank,
        "variance": part_variance,
        "large": part_large,
    }
    for name, part in parts.items():
        if args.part in ("all", name):
            part(client, args)


if __name__ == "__main__":
    main()
