"""``RVC`` on a Dask cluster: binary, softmax and one-vs-rest, the reference's
classifier.

The reference's fast classifier (``kernelref.rvm.rvc_fast.fast_classifier``)
alternates two steps: the Gaussian approximation of the likelihood at the
current mode, Φ̃ = B^½Φ and t̃ (label ``rvc-linearised-target``), on which the
sequential algorithm runs with β = 1; and the mode itself, by Newton's method
over the m basis functions in the model (label ``rvc-irls``). Here:

- Φ is a ``StreamedDesign``; each approximation is the same design with row
  weights B^½ (``reweighted``: one pass for its column norms, Φ̃ᵀt̃, which
  the sequential algorithm asks for first, and the coordinates UᵀΦ̃ of the
  model it warm-starts from), so Φ̃ is never formed either;
- the Newton iterations need only the model's m columns, N × m on the client;
- each approximation's ``FastLoop`` runs through the shared runtime under its
  own checkpoint, so an interrupted fit resumes where it stopped.

The softmax classifier couples the classes of each point: its whitening is a
K × K block R_n per point, not a row weight. The reference runs it on Φ ⊗ I_K and
R(Φ ⊗ I_K) as structured designs whose products are sums over the points
(``kernelref.rvm.softmax_design``, label ``rvc-softmax-structured``); here their
Φ is the ``StreamedDesign`` (c = 1), so each left product is one streamed pass,
the K column norms c²_mk = Σ_n φ_m(x_n)²(B_n)_kk of an approximation are one
pass too, which also forms Φ̃ᵀt̃ and the warm start's coordinates
(``backends.dask.rvm.softmax``), and each approximation's loop runs under its
own checkpoint as above. The default stays ``multi_class='ovr'``: K binary
machines on one N × (N + 1) design, where the softmax model's Newton steps
factorise an mK × mK Hessian on NK rows.
"""

import numpy as np

from backends.dask.rvm.common import check_backend_args, open_store
from backends.dask.rvm.design import StreamedDesign
from backends.dask.rvm.loop import checkpointed_driver
from backends.dask.rvm.softmax import streamed_softmax_approximation
from backends.dask.rvm.tasks import clear_cache
from backends.dask.svm.estimators import centring_shift, materialise
from kernelref.rvm import RVC as ReferenceRVC
from kernelref.rvm.classification import BERNOULLI
from kernelref.rvm.fast import ALIGNMENT_MAX
from kernelref.rvm.regression import ALPHA_MAX
from kernelref.rvm.softmax_design import KroneckerDesign

__all__ = ["RVC", "streamed_approximation"]


def streamed_approximation(Phi, a, t, likelihood=BERNOULLI, active=None):
    """The Gaussian approximation at the latent values a as a reweighted
    ``StreamedDesign`` on unit columns, its norms, and t̃ (labels
    ``rvc-linearised-target``; ``rvc_fast.dense_approximation`` in memory); its
    one pass also forms the coordinates of the model with the columns
    ``active``, which the sequential algorithm warm-starts from."""
    if isinstance(Phi, KroneckerDesign):  # the softmax model's
        return streamed_softmax_approximation(Phi, a, t, likelihood, active)
    B_sqrt, t_tilde = likelihood.row_weights(a, t)
    unit = Phi.reweighted(B_sqrt, t_tilde, active)
    return unit, unit.scales, t_tilde


class RVC(ReferenceRVC):
    """Relevance vector classification by the fast algorithm on a Dask cluster.

    Parameters
    ----------
    kernel, gamma, degree, coef0, bias, max_iter, tol, alignment_max
        As in ``kernelref.rvm.RVC``; ``method`` must be 'fast'.
    multi_class : {'ovr', 'softmax'}
        With more than two classes: one binary machine per class (the default
        here), or the softmax model (the reference's default; see the module).
    store, chunk_size, address, progress, resume, cache_size
        As in ``backends.dask.RVR``; the progress records come per iteration
        of each approximation's sequential algorithm, numbered from 1 in each.
        On a terminal one bar per fit ('RVC', 'RVC softmax'), or per class
        with 'ovr' ('RVC 2/3'), counts them all and names the approximation.
    """

    def __init__(
        self,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        bias=True,
        method="fast",
        multi_class="ovr",
        max_iter=10000,
        tol=1e-3,
        alpha_max=ALPHA_MAX,
        alignment_max=ALIGNMENT_MAX,
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
            multi_class=multi_class,
            max_iter=max_iter,
            tol=tol,
            alpha_max=alpha_max,
            alignment_max=alignment_max,
        )
        self.store, self.chunk_size, self.address = store, chunk_size, address
        self.progress, self.resume, self.cache_size = progress, resume, cache_size

    def fit(self, X, y):
        """Fit as the reference does, each approximation's passes on the cluster."""
        check_backend_args(self)
        self._X_input, self._y_input = X, y
        try:
            return super().fit(materialise(X), y)
        finally:
            del self._X_input, self._y_input
            store = getattr(self, "_store", None)
            if store is not None:
                self._client.run(clear_cache)
                store.remove_if_temporary()
                del self._store, self._client

    def _design(self, kernel, X):
        labels = self._encoded_labels()
        store, client = open_store(self, self._X_input, labels, kernel)
        self._store = store
        shift = centring_shift(kernel, X)
        self._client = client
        Phi = StreamedDesign(
            X,
            shift,
            kernel,
            self.bias,
            store,
            client,
            unit=False,
            cache_mb=self.cache_size,
        )
        self.fit_info_ = Phi.counts  # the passes, counted as they happen
        return Phi, np.arange(Phi.shape[1])

    def _encoded_labels(self):
        """The labels as class indices, for the store's record of the data."""
        return np.unique(np.asarray(self._y_input), return_inverse=True)[1]

    def _approximation(self):
        return streamed_approximation

    def _driver(self, Phi):
        base = Phi.Phi if isinstance(Phi, KroneckerDesign) else Phi  # softmax: Φ ⊗ I_K
        run_name = getattr(self, "_run_name", "")
        self._drive = checkpointed_driver(
            base.store,
            progress=self.progress,
            resume=self.resume,
            prefix=f"rvc-{run_name}",
            label=self._bar_label(Phi, base.store, run_name),
        )
        return self._drive

    @staticmethod
    def _bar_label(Phi, store, run_name):
        """The progress bar's label: 'RVC', 'RVC softmax', or 'RVC k/K' for
        one-vs-rest's machine of the k-th class of K, as the SVMs' 'SVC 2/3'."""
        if isinstance(Phi, KroneckerDesign):
            return "RVC softmax"
        if not run_name:  # two classes
            return "RVC"
        k = int(run_name.split("-")[1])  # 'class-<k>-' (kernelref.rvm.RVC)
        K = int(store.read("labels").max()) + 1
        return f"RVC {k + 1}/{K}"

    def _run(self, Phi, t, likelihood, columns=None):
        """The reference's run, its progress bar closed at the end."""
        try:
            return super()._run(Phi, t, likelihood, columns)
        finally:
            drive = self.__dict__.pop("_drive", None)
            if drive is not None:
                drive.close()

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_store", None)
        state.pop("_client", None)
        return state
