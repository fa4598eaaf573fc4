"""``RVR`` on a Dask cluster: the reference estimator with its fast solve replaced.

The reference's ``RVR`` builds the N × (N + 1) design matrix and runs the fast
algorithm on it (``_fit_fast``). Here the same ``FastLoop`` runs on the client
against a ``StreamedDesign``, whose left products are rounds of tasks over the
fit store, and each run of the β schedule goes through the shared runtime
(``loop.checkpointed_driver``). Validation, the fitted attributes, prediction
and persistence are the reference's own.

What is kept where:

- client: the model (active set, α, β), H⁻¹ (m × m), and the O(N·m) per
  candidate state of the algorithm — the coordinates Ψ = UᵀΦ̃ (m × N), U
  (N × m), S, Q, the alignments — which every iteration reads and updates in
  O(N·m); X (N × D) for the columns of the basis functions that join; Gram
  rows φ̃_jᵀΦ̃ of likely additions, up to ``design.ROWS_MB``;
- workers: the O(N²) kernel work, one pass over k(X, X) for the norms and
  Φ̃ᵀt at the start, and one per addition whose Gram row φ̃_jᵀΦ̃ (which
  gives uᵀΦ̃, the new row of Ψ) the client does not keep: that pass forms the
  rows of the next likely additions too (``design.PREFETCH``);
- fit store: X and t, and the checkpoint of each run.
"""

from backends.dask.rvm.common import check_backend_args, open_store
from backends.dask.rvm.design import StreamedDesign
from backends.dask.rvm.loop import checkpointed_driver
from backends.dask.rvm.tasks import clear_cache
from backends.dask.svm.estimators import centring_shift, materialise
from kernelref.rvm import RVR as ReferenceRVR
from kernelref.rvm.fast import ALIGNMENT_MAX, on_user_scale
from kernelref.rvm.regression import ALPHA_MAX
from kernelref.rvm.schedules import fast_schedule

__all__ = ["RVR"]


class RVR(ReferenceRVR):
    """Relevance vector regression by the fast algorithm on a Dask cluster.

    Parameters
    ----------
    kernel, gamma, degree, coef0, bias, max_iter, tol, alignment_max, beta_schedule
        As in ``kernelref.rvm.RVR``; ``method`` must be 'fast' (and ``update``,
        ``alpha_max`` are unused). Each run of the schedule costs streamed
        passes: the default 'auto' may add a bounded second hold, which on
        densely sampled data about doubles them (``benchmarks/bench_dask_rvm.py``,
        N = 5000: sinc20 98 passes against 47, for 3.1 nats more evidence; sinc
        67 against 36, for none), and 'auto' ends with a swap pass, one pass for
        its warm start and one per swap taken (sinc, N = 5000: 70 against 67,
        two swaps, +0.06 nats); 'update' makes a single run.
    store : path or None
        The fit store (X, t, the checkpoints); None: a temporary directory.
    chunk_size : int
        Rows of X per task, and candidates per task of a streamed pass.
    address : str or None
        Scheduler address; None: the active client or an embedded cluster.
    progress : None, False or callable
        A bar on a terminal (None), nothing (False), or a callback receiving a
        ``Record(iteration, measure=log evidence, model_size, elapsed)`` per
        iteration of each run of the β schedule.
    resume : bool
        Continue from the store's checkpoints (True) or start afresh.
    cache_size : float
        MB of kernel pieces each worker keeps between passes (at most a quarter
        of its memory limit); a pass over cached pieces reads instead of
        computing. 0 turns the cache off. It is emptied after the fit.

    Attributes
    ----------
    As ``kernelref.rvm.RVR``, and ``fit_info_``: the streamed passes over the
    kernel (``passes``), the seconds they took (``pass_seconds``), the
    additions whose new coordinates came from a Gram row (``row_additions``;
    the others, nearly inside the model's span, take a pass of their own:
    ``kernelref.rvm.coordinates.new_coordinate_row``) and the Gram rows the
    passes formed (``gram_rows``);
    ``store_``, the fit store's path (None if temporary).
    """

    def __init__(
        self,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        bias=True,
        method="fast",
        update="standard",
        max_iter=10000,
        tol=1e-3,
        alpha_max=ALPHA_MAX,
        alignment_max=ALIGNMENT_MAX,
        beta_schedule="auto",
        store=None,
        chunk_size=4096,
        address=None,
        progress=None,
        resume=True,
        cache_size=1024,
    ):
        super().__init__(
            kernel=kernel,
            gamma=gamma,
            degree=degree,
            coef0=coef0,
            bias=bias,
            method=method,
            update=update,
            max_iter=max_iter,
            tol=tol,
            alpha_max=alpha_max,
            alignment_max=alignment_max,
            beta_schedule=beta_schedule,
        )
        self.store, self.chunk_size, self.address = store, chunk_size, address
        self.progress, self.resume, self.cache_size = progress, resume, cache_size

    def fit(self, X, y):
        """Fit as the reference does, the fast algorithm's passes on the cluster."""
        check_backend_args(self)
        self._X_input = X
        try:
            return super().fit(materialise(X), y)
        finally:
            del self._X_input

    def _fit_fast(self, X, t):
        store, client = open_store(self, self._X_input, t, self.kernel_)
        try:
            shift = centring_shift(self.kernel_, X)
            Phi = StreamedDesign(
                X,
                shift,
                self.kernel_,
                self.bias,
                store,
                client,
                cache_mb=self.cache_size,
                t=t,  # Φ̃ᵀt in the pass of the norms
            )
            drive = checkpointed_driver(
                store, progress=self.progress, resume=self.resume, prefix="rvr-"
            )
            result = fast_schedule(
                Phi,
                Phi.scales > 0,
                t,
                self.beta_schedule,
                drive=drive,
                max_iter=self.max_iter,
                tol=self.tol,
                alignment_max=self.alignment_max,
            )
        finally:
            client.run(clear_cache)
            store.remove_if_temporary()
        self.fit_info_ = Phi.counts
        return on_user_scale(result, Phi.scales)
