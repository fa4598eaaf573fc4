"""SVC, NuSVC, SVR, NuSVR and OneClassSVM on a Dask cluster.

Each class is the reference estimator of ``kernelref.svm`` with one thing
changed: how its binary machines' QPs are solved (``_solve_all``). The
reference builds the QPs (one per pair of classes, or one) and assembles the
fitted state, so the arguments, the fitted attributes, ``predict``,
``decision_function``, multiclass handling and ``kkt_report`` are the
reference's own. Here:

- a QP on at most ``partition_size`` samples is solved whole by the reference
  SMO in one task on a worker, all such QPs at once (the small pairs of a
  one-vs-one machine);
- a larger one starts from the divide-and-conquer warm start
  (``warm_start``) and is refined by block decomposition
  (``decomposition``) on the cluster, through the shared runtime: data in the
  fit store, checkpoints, progress, resume.
"""

import hashlib
import json
import pathlib
import time
import warnings

import numpy as np

from backends.dask.cluster import get_client
from backends.dask.estimator_args import (
    check_backend_args,
    fit_identity,
    refuse_precomputed,
)
from backends.dask.runtime import (
    FORMAT,
    FitStore,
    Progress,
    StoreMismatchError,
    compute,
    gather,
    logger,
    run_loop,
)
from backends.dask.sparse_rows import is_sparse
from backends.dask.svm.columns import release_columns
from backends.dask.svm.decomposition import BlockDecomposition
from backends.dask.svm.tasks import solve_part
from backends.dask.svm.warm_start import (
    partition,
    partition_features,
    sub_problem,
    warm_start,
)
from kernelref._validation import check_integer
from kernelref.exceptions import ConvergenceWarning
from kernelref.svm import estimators as reference
from kernelref.svm.solver import Solution

__all__ = ["SVC", "SVR", "NuSVC", "NuSVR", "OneClassSVM"]

#: Arguments besides ``estimator_args.OPERATIONAL`` that change how a fit runs,
#: not what it computes: a store may be resumed with other values of these.
OPERATIONAL = ("max_iter", "cache_size")

#: Kernels of ‖x − x′‖ only: their blocks are computed on centred data.
STATIONARY = ("RBF", "Laplacian", "ARD")


def centring_shift(kernel, X):
    """The mean of X for a stationary kernel (a common shift changes no distance
    and centred data loses less to cancellation), else zeros (dot products);
    None for sparse X, which is never centred (the mean would make it dense)."""
    if is_sparse(X):
        return None
    if type(kernel).__name__ in STATIONARY:
        return X.mean(axis=0)
    return np.zeros(X.shape[1])


def materialise(X):
    """A numpy copy of numpy, Zarr or dask input (X of N × D fits the client)."""
    module = type(X).__module__
    if module.startswith("dask.array"):
        return np.asarray(compute(X))
    if module.startswith("zarr"):
        return np.asarray(X[...])
    return X


def _is_lazy(X):
    """A Zarr or dask array: the fit store reads it in place or has the cluster
    write it."""
    return type(X).__module__.startswith(("zarr", "dask.array"))


def _qp_digest(qp):
    digest = hashlib.sha256()
    for a in (qp.p, qp.y, qp.C, qp.alpha0, qp.src):
        digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return digest.hexdigest()


def refuse_a_store_inside_a_fit_store(store):
    """A ``store=`` inside the fit store of another fit is refused before any
    work (a ``StoreMismatchError`` naming that store).

    ``PlattCalibrated`` and ``OneVsRestClassifier`` keep their fits' stores in
    sub-directories of the store they are given (``platt.fit_store``); given a
    single fit's store (an earlier SVC's, as the command line's default
    ``MODEL_FILE.store`` is when a file name is used again), they nested in it,
    where removing or replacing that store removes them too. A single fit into
    a directory of a calibration's stores was refused already (not a fit store).
    """
    if store is None:
        return
    path = pathlib.Path(store).resolve()
    for parent in path.parents:
        try:
            meta = json.loads((parent / "zarr.json").read_text())
        except (OSError, ValueError):
            continue
        attributes = meta.get("attributes") if isinstance(meta, dict) else None
        if isinstance(attributes, dict) and attributes.get("format") == FORMAT:
            raise StoreMismatchError(
                parent,
                f"store {str(parent)!r} is the fit store of another fit, and the "
                f"store {str(path)!r} of this one would be inside it",
                "FitStore.prepare",
            )


class _DaskSVM:
    """The backend's half of the five machines (a mixin before the reference)."""

    def _validate_backend(self):
        refuse_precomputed(self, "kernelref.svm")
        check_integer(
            self.working_set_size,
            "working_set_size",
            low=2,
            meaning="It is q, the variables of each outer iteration's subproblem.",
        )
        check_integer(
            self.partition_size,
            "partition_size",
            low=2,
            meaning="QPs on more samples are split into parts of this size.",
        )
        check_backend_args(self, chunk_meaning="It is rows per task.")
        refuse_a_store_inside_a_fit_store(self.store)

    def fit(self, X, y=None, sample_weight=None):
        """Fit as the reference does, each QP solved on the cluster."""
        self._validate_backend()
        self._X_input = X
        try:
            return super().fit(materialise(X), y, sample_weight=sample_weight)
        finally:
            del self._X_input

    # -- the backend's solve ----------------------------------------------------
    def _solve_all(self, qps, rows):
        X = rows.X  # the reference's validated X: sparse stays CSR, in the store too
        client = get_client(self.address)
        store = FitStore.prepare(
            self.store,
            self._X_input if _is_lazy(self._X_input) else X,
            identity=self._identity(qps),
            chunk_size=self.chunk_size,
            client=client,
        )
        self.store_ = None if store.is_temporary else str(store.path)
        self.fit_info_ = [{} for _ in qps]
        solutions = [None] * len(qps)
        small = [
            p
            for p, qp in enumerate(qps)
            if len(np.unique(qp.src)) <= self.partition_size
        ]
        try:
            for p, solution in zip(small, self._solve_small(qps, small, store, client)):
                solutions[p] = solution
            for p, qp in enumerate(qps):
                if solutions[p] is None:
                    solutions[p] = self._solve_large(p, len(qps), qp, X, store, client)
        finally:
            release_columns(client, store.x_ref)  # kept columns: up to ¼ of a worker
            store.remove_if_temporary()
        return solutions

    def _identity(self, qps):
        return {
            **fit_identity(self, self.kernel_, OPERATIONAL),
            "problems": [_qp_digest(qp) for qp in qps],
        }

    def _solve_small(self, qps, which, store, client):
        """Solve each QP of `which` whole, in one task each, all at once.

        One bar (or callback) counts the machines solved: a ``Record`` per
        machine, its SMO's last violation m(α) − M(α) and its support vectors. A
        machine whose solution the store holds is not solved again; a fit that
        finds some says so as ``run_loop`` does (``Record.resumed_from``, the
        bar's description, an INFO record of ``backends.dask.runtime``)."""
        if not which:
            return []
        results, futures = {}, {}
        for p in which:
            loaded = store.load_state(f"machine-{p}") if self.resume else None
            if loaded is not None:
                results[p] = loaded[0]
                continue
            samples = np.unique(qps[p].src)
            part, _ = sub_problem(qps[p], samples)
            futures[p] = client.submit(
                solve_part,
                store.x_ref,
                self.kernel_,
                samples,
                part,
                self.tol,
                pure=False,
            )
        name, label = self._progress_names()
        machines = "machine" if len(which) == 1 else "machines"
        with Progress(
            self.progress,
            f"{name}: {len(which)} {machines} solved whole",
            "gap",
            "SVs",
            label,
        ) as bar:
            if results:
                self._say_resumed(bar, which, results)
            try:
                for p, future in futures.items():
                    (s,) = gather(client, [future])
                    results[p] = {
                        "alpha": s.alpha,
                        "rho": s.rho,
                        "r": s.r,
                        "objective": s.objective,
                        "n_iter": s.n_iter,
                        "gap": s.gap,
                    }
                    store.save_state(results[p], 0, f"machine-{p}")
                    bar.update(len(results), s.gap, np.count_nonzero(s.alpha))
            finally:
                client.cancel(list(futures.values()))
        out = []
        for p in which:
            s = results[p]
            self.fit_info_[p] = {
                "solver": "reference SMO on a worker",
                "iterations": int(s["n_iter"]),
            }
            out.append(
                Solution(
                    s["alpha"],
                    float(s["rho"]),
                    float(s["r"]),
                    float(s["objective"]),
                    int(s["n_iter"]),
                    0.0,
                    True,
                )
            )
        return out

    def _progress_names(self):
        """(the bar's name of this fit, the records' ``label``): the class, and
        the fit a wrapper named in ``fit_label`` ("pair 0-2 fold 3/5", set by
        ``kernelref.svm.platt`` while it fits a fold), which the label repeats;
        without one, the class and no label."""
        name = type(self).__name__
        fit = getattr(self, "fit_label", None)
        return (name, None) if fit is None else (f"{name} {fit}",) * 2

    @staticmethod
    def _say_resumed(bar, which, results):
        """The machines of `which` found solved in the store: the bar's records
        count on after them, and the log says which they are."""
        bar.resume(len(results))
        found = [f"machine-{p}" for p in which if p in results]
        logger.info(
            "%s: resumed from the checkpoints %s (%d of %d machines solved)",
            bar.label,
            ", ".join(repr(c) for c in found),
            len(found),
            len(which),
        )

    def _solve_large(self, p, n_machines, qp, X, store, client):
        """Warm start, then block decomposition through the runtime."""
        shift = centring_shift(self.kernel_, X)
        timings, info = {}, self.fit_info_[p]

        def initial_alpha():
            tick = time.perf_counter()
            samples = np.unique(qp.src)
            parts = [
                samples[i]
                for i in partition(
                    partition_features(X[samples]),
                    self.partition_size,
                    self.random_state,
                    multiple=sum(client.nthreads().values()) or 1,
                )
            ]
            alpha, found, iterations = warm_start(
                qp, store.x_ref, self.kernel_, client, parts, self.tol
            )
            timings["partition solves"] = time.perf_counter() - tick
            info.update(
                partition_sizes=[len(s) for s in parts],
                partition_support=found,
                partition_iterations=iterations,
            )
            return alpha

        loop = BlockDecomposition(
            qp,
            X,
            shift,
            self.kernel_,
            store,
            client,
            q=self.working_set_size,
            tol=self.tol,
            timings=timings,
            start=initial_alpha,
        )
        tick = time.perf_counter()
        name, label = self._progress_names()
        state, n_iter = run_loop(
            loop,
            store,
            progress=self.progress,
            resume=self.resume,
            max_iter=None if self.max_iter < 0 else self.max_iter,
            description=f"{name} {p + 1}/{n_machines}" if n_machines > 1 else name,
            name=f"machine-{p}",
            label=label,
        )
        timings["total"] = time.perf_counter() - tick
        info.update(
            solver="block decomposition", outer_iterations=n_iter, timings=timings
        )
        solution = loop.solution(state, n_iter)
        if not solution.converged:
            warnings.warn(
                f"the block decomposition stopped at max_iter={self.max_iter} outer "
                f"iterations with m(α) − M(α) = {solution.gap:.3g} ≥ tol = "
                f"{self.tol:g}; raise max_iter, or fit again into the same store to "
                "continue.",
                ConvergenceWarning,
                stacklevel=4,
            )
        return solution


def _backend_init(
    self,
    store,
    chunk_size,
    working_set_size,
    partition_size,
    address,
    progress,
    resume,
    random_state,
):
    self.store, self.chunk_size = store, chunk_size
    self.working_set_size, self.partition_size = working_set_size, partition_size
    self.address, self.progress, self.resume = address, progress, resume
    self.random_state = random_state


_BACKEND_DOC = """
    Backend arguments
    -----------------
    store : path or None
        The fit store (data, checkpoints); None: a temporary directory. Wrapped
        in ``kernelref.svm.PlattCalibrated`` (or ``OneVsRestClassifier``), each
        of its fits keeps its own store in a sub-directory of this one
        (``platt.fit_store``).
    chunk_size : int
        Rows of X per task.
    working_set_size : int
        q, the variables of each outer iteration's subproblem. Larger q means
        fewer outer iterations (passes over the data) and a costlier subproblem
        on the client; at N = 20 000 (RBF, D = 20) q = 512, 1024, 2048 and 4096
        took 163, 19, 7 and 5 outer iterations, and 2048 the least time.
    partition_size : int
        QPs on at most this many samples are solved whole on a worker; larger
        ones are split into parts of about this size for the warm start.
    address : str or None
        Scheduler address; None: the active client or an embedded cluster.
    progress : None, False or callable
        A bar on a terminal (None), nothing (False), or a callback receiving a
        ``Record(iteration, measure=gap, model_size=SVs, elapsed, resumed_from)``
        after each outer iteration of a large QP, and after each small QP solved
        whole (``iteration`` then counts the small QPs solved).
    resume : bool
        Continue from the store's checkpoints (True) or start afresh.
    random_state : int
        Seed of the partitions' k-means.

    X is anything the reference takes (a list, a pandas frame, scipy.sparse for
    the kernels that take it), a Zarr array (read in place) or a dask array
    (written by the cluster). Sparse X is never densified: the fit store holds
    it as CSR (O(N + nnz) bytes, ``backends.dask.sparse_rows``), the workers
    compute kernel blocks from sparse products as the reference does, and the
    fitted ``support_vectors_`` stay sparse. The warm start's k-means sees
    sparse X through a hashed projection (``warm_start.partition_features``).

    ``max_iter`` caps the outer iterations of the block decomposition.
    ``fit_info_`` reports, per binary machine, the solver used, the outer
    iterations, the partitions' sizes and the support vectors each found, and
    the time of each phase.
"""


class SVC(_DaskSVM, reference.SVC):
    __doc__ = reference.SVC.__doc__ + _BACKEND_DOC

    def __init__(
        self,
        C=1.0,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        shrinking=True,
        tol=1e-3,
        cache_size=200,
        class_weight=None,
        max_iter=-1,
        decision_function_shape="ovr",
        break_ties=False,
        store=None,
        chunk_size=4096,
        working_set_size=2048,
        partition_size=4000,
        address=None,
        progress=None,
        resume=True,
        random_state=0,
    ):
        super().__init__(
            C=C,
            kernel=kernel,
            degree=degree,
            gamma=gamma,
            coef0=coef0,
            shrinking=shrinking,
            tol=tol,
            cache_size=cache_size,
            class_weight=class_weight,
            max_iter=max_iter,
            decision_function_shape=decision_function_shape,
            break_ties=break_ties,
        )
        _backend_init(
            self,
            store,
            chunk_size,
            working_set_size,
            partition_size,
            address,
            progress,
            resume,
            random_state,
        )


class NuSVC(_DaskSVM, reference.NuSVC):
    __doc__ = reference.NuSVC.__doc__ + _BACKEND_DOC

    def __init__(
        self,
        nu=0.5,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        shrinking=True,
        tol=1e-3,
        cache_size=200,
        class_weight=None,
        max_iter=-1,
        decision_function_shape="ovr",
        break_ties=False,
        store=None,
        chunk_size=4096,
        working_set_size=2048,
        partition_size=4000,
        address=None,
        progress=None,
        resume=True,
        random_state=0,
    ):
        super().__init__(
            nu=nu,
            kernel=kernel,
            degree=degree,
            gamma=gamma,
            coef0=coef0,
            shrinking=shrinking,
            tol=tol,
            cache_size=cache_size,
            class_weight=class_weight,
            max_iter=max_iter,
            decision_function_shape=decision_function_shape,
            break_ties=break_ties,
        )
        _backend_init(
            self,
            store,
            chunk_size,
            working_set_size,
            partition_size,
            address,
            progress,
            resume,
            random_state,
        )


class SVR(_DaskSVM, reference.SVR):
    __doc__ = reference.SVR.__doc__ + _BACKEND_DOC

    def __init__(
        self,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        tol=1e-3,
        C=1.0,
        epsilon=0.1,
        shrinking=True,
        cache_size=200,
        max_iter=-1,
        store=None,
        chunk_size=4096,
        working_set_size=2048,
        partition_size=4000,
        address=None,
        progress=None,
        resume=True,
        random_state=0,
    ):
        super().__init__(
            kernel=kernel,
            degree=degree,
            gamma=gamma,
            coef0=coef0,
            tol=tol,
            C=C,
            epsilon=epsilon,
            shrinking=shrinking,
            cache_size=cache_size,
            max_iter=max_iter,
        )
        _backend_init(
            self,
            store,
            chunk_size,
            working_set_size,
            partition_size,
            address,
            progress,
            resume,
            random_state,
        )


class NuSVR(_DaskSVM, reference.NuSVR):
    __doc__ = reference.NuSVR.__doc__ + _BACKEND_DOC

    def __init__(
        self,
        nu=0.5,
        C=1.0,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        shrinking=True,
        tol=1e-3,
        cache_size=200,
        max_iter=-1,
        store=None,
        chunk_size=4096,
        working_set_size=2048,
        partition_size=4000,
        address=None,
        progress=None,
        resume=True,
        random_state=0,
    ):
        super().__init__(
            nu=nu,
            C=C,
            kernel=kernel,
            degree=degree,
            gamma=gamma,
            coef0=coef0,
            shrinking=shrinking,
            tol=tol,
            cache_size=cache_size,
            max_iter=max_iter,
        )
        _backend_init(
            self,
            store,
            chunk_size,
            working_set_size,
            partition_size,
            address,
            progress,
            resume,
            random_state,
        )


class OneClassSVM(_DaskSVM, reference.OneClassSVM):
    __doc__ = reference.OneClassSVM.__doc__ + _BACKEND_DOC

    def __init__(
        self,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        tol=1e-3,
        nu=0.5,
        shrinking=True,
        cache_size=200,
        max_iter=-1,
        store=None,
        chunk_size=4096,
        working_set_size=2048,
        partition_size=4000,
        address=None,
        progress=None,
        resume=True,
        random_state=0,
    ):
        super().__init__(
            kernel=kernel,
            degree=degree,
            gamma=gamma,
            coef0=coef0,
            tol=tol,
            nu=nu,
            shrinking=shrinking,
            cache_size=cache_size,
            max_iter=max_iter,
        )
        _backend_init(
            self,
            store,
            chunk_size,
            working_set_size,
            partition_size,
            address,
            progress,
            resume,
            random_state,
        )
