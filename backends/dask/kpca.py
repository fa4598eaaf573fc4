"""Kernel PCA on a Dask cluster: the top eigenpairs of the centred Gram matrix
by block Krylov iteration, one streamed pass over the data per iteration.

The reference (``kernelref.kpca``) solves K̃ a = λN a (label ``kpca-eigen``)
for the centred K̃ = H K H, H = I − 11ᵀ/N (label ``kpca-centre``). Here K̃ is
never formed, nor K: each pass computes K B for one block B of p columns, the
kernel tiles evaluated on the workers from the inputs in the fit store and
discarded. B is kept centred (1ᵀB = 0), so H B = B and

    K̃ B = H (K B) = K B − 1 (1ᵀ K B)/N,

a column centring of the product: the centring costs nothing and no second
N × N array exists. The blocks B₀, K̃B₀, K̃²B₀, … orthonormalised (with full
reorthogonalisation) span a block Krylov space Q; since every column of Q has
been multiplied, Z = K̃Q is known exactly, and the Rayleigh–Ritz pairs of
QᵀZ give eigenvalue estimates θ and vectors u = Qs with residuals
‖K̃u − θu‖ = ‖Zs − θQs‖. The iteration stops when the k wanted residuals are
below ``tol`` times the largest θ; an eigenvector is then accurate to about
tol·θ₁/gap and an eigenvalue to its square.
"""

import numbers

import numpy as np

from backends.dask.blocks import COLUMN_BLOCK, product_rows
from backends.dask.cluster import get_client
from backends.dask.estimator_args import check_backend_args, refuse_precomputed
from backends.dask.runtime import FitStore, map_chunks, read_chunk, run_loop
from kernelref._validation import check_integer
from kernelref.kpca import KernelPCA as ReferenceKernelPCA

__all__ = ["KernelPCA"]


def gram_times(x_ref, i, kernel, B):
    """Row chunk i of K B, K's tiles computed on the worker from the stored inputs
    (CSR rows for sparse X: the kernel's own sparse products).

    The tiles are formed a block of ``blocks.BLOCK_ENTRIES`` at a time and
    multiplied at once (``blocks.product_rows``, as the SVMs' tasks do), so a
    task's memory grows with chunk_size, not chunk_size²: a whole 4096² tile
    (128 MiB, the default chunk_size) and its kernel's temporaries killed
    workers of 300 MiB.
    """
    X_i = read_chunk(x_ref, i)
    out = _diagonal_times(kernel, X_i, B[x_ref.rows(i)])
    for j in range(x_ref.n_chunks):
        if j != i:
            out += product_rows(X_i, kernel, read_chunk(x_ref, j), B[x_ref.rows(j)])
    return out


def _diagonal_times(kernel, X, B):
    """k(X) B with Y omitted, as the reference's K = k(X) has it (a White
    kernel's noise is on its diagonal only): the diagonal blocks of
    ``blocks.COLUMN_BLOCK`` rows by ``kernel(X_a)``, the rest by ``product_rows``."""
    n, out = X.shape[0], np.zeros((X.shape[0], B.shape[1]))
    for start in range(0, n, COLUMN_BLOCK):
        a = slice(start, min(start + COLUMN_BLOCK, n))
        out[a] += kernel(X[a]) @ B[a]
        for rest in (slice(0, a.start), slice(a.stop, n)):
            if rest.stop > rest.start:
                out[a] += product_rows(X[a], kernel, X[rest], B[rest])
    return out


def _orthonormal(A, Q):
    """An orthonormal basis of A's columns after removing their part in span(Q).

    Two passes of classical Gram–Schmidt against Q ("twice is enough"), then QR;
    columns that vanish (the space is exhausted) are dropped.
    """
    for _ in range(2):
        if Q.shape[1]:
            A = A - Q @ (Q.T @ A)
        A = A - A.mean(axis=0)  # stay orthogonal to 1, K̃'s null vector
    Y, R = np.linalg.qr(A)
    keep = np.abs(np.diag(R)) > 1e-10 * max(np.abs(np.diag(R)).max(initial=0.0), 1e-300)
    return Y[:, keep]


class _BlockKrylov:
    """The loop of ``run_loop``: one pass over the data per step."""

    measure_name, size_name = "residual", "basis"

    def __init__(self, client, store, kernel, k, p, tol, max_passes, seed):
        self.client, self.store, self.kernel = client, store, kernel
        self.k, self.p, self.tol, self.max_passes, self.seed = (
            k,
            p,
            tol,
            max_passes,
            seed,
        )

    def start(self):
        n = self.store.n
        rng = np.random.default_rng(self.seed)
        B = _orthonormal(rng.uniform(-1.0, 1.0, (n, self.p)), np.zeros((n, 0)))
        empty = np.zeros((n, 0))
        return {
            "Q": empty,
            "Z": empty,
            "next": B,
            "column_means": np.zeros(n),
            "residual": np.inf,
            "passes": 0,
        }

    def step(self, state):
        B = state["next"]
        n = self.store.n
        ones = np.full((n, 1), 1.0 / n)
        KB = np.concatenate(
            map_chunks(
                self.client,
                gram_times,
                self.store.x_ref,
                self.kernel,
                np.hstack([B, ones]),
            ),
            axis=0,
        )
        column_means = KB[:, -1] if state["passes"] == 0 else state["column_means"]
        KB = KB[:, :-1]
        Z_B = KB - KB.mean(axis=0)  # K̃B = H K B for centred B (label kpca-centre)
        Q = np.hstack([state["Q"], B])
        Z = np.hstack([state["Z"], Z_B])
        theta, S = np.linalg.eigh(0.5 * (Q.T @ Z + Z.T @ Q))
        top = S[:, ::-1][:, : self.k]
        residual = np.linalg.norm(Z @ top - (Q @ top) * theta[::-1][: self.k], axis=0)
        scale = max(abs(theta).max(), 1e-300)
        return {
            "Q": Q,
            "Z": Z,
            "next": _orthonormal(Z_B, Q),
            "column_means": column_means,
            "residual": float(residual.max() / scale),
            "passes": state["passes"] + 1,
        }

    def done(self, state):
        full = state["next"].shape[1] == 0
        return (
            state["residual"] <= self.tol or full or state["passes"] >= self.max_passes
        )

    def measure(self, state):
        return state["residual"], state["Q"].shape[1]


class KernelPCA(ReferenceKernelPCA):
    """Kernel PCA whose Gram matrix is streamed on a Dask cluster, never stored.

    Parameters
    ----------
    n_components : int
        Number of components k (required: all N would need the whole Gram matrix).
    kernel, gamma, degree, coef0, random_state
        As in ``kernelref.kpca.KernelPCA``; ``kernel="precomputed"`` is refused.
    eigen_solver : "auto", "dense" or "arpack"
        Checked as the reference checks it, so that its scripts run unchanged,
        and otherwise unused: the eigenpairs come from the block Krylov iteration.
    alpha, fit_inverse_transform
        As in the reference: learn the pre-image map B = (K_Y + αI)⁻¹ X of
        ``inverse_transform`` (label ``kpca-preimage``), here by the backend's
        ``KernelRidge`` (K_Y tiled in a temporary Gram store and factorised on the
        cluster), so α must be > 0.
    block_size : int or None
        Columns p of each Krylov block; None means max(2k, k + 10).
    tol : float
        Stop when every wanted Ritz residual ‖K̃u − θu‖ ≤ tol·θ₁.
    max_passes : int
        Cap on the passes over the data.
    store, chunk_size, address, progress, resume
        The fit store (inputs in row chunks and the checkpointed Krylov basis),
        rows per chunk, the scheduler, progress and resumption (``runtime``).
        ``scipy.sparse`` X is stored as CSR rows and never densified; its kernel
        tiles come from the kernel's sparse products (``sparse_rows``).

    Attributes
    ----------
    eigenvalues_, eigenvectors_, dual_coef_, X_fit_
        As in the reference.
    n_passes_ : int
        Passes over the data (products K B), including any made before a resume.
    """

    def __init__(
        self,
        n_components=10,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        eigen_solver="auto",
        random_state=None,
        alpha=1.0,
        fit_inverse_transform=False,
        block_size=None,
        tol=1e-9,
        max_passes=30,
        store=None,
        chunk_size=4096,
        address=None,
        progress=None,
        resume=True,
    ):
        super().__init__(
            n_components=n_components,
            kernel=kernel,
            gamma=gamma,
            degree=degree,
            coef0=coef0,
            eigen_solver=eigen_solver,
            random_state=random_state,
            alpha=alpha,
            fit_inverse_transform=fit_inverse_transform,
        )
        self.block_size = block_size
        self.tol = tol
        self.max_passes = max_passes
        self.store = store
        self.chunk_size = chunk_size
        self.address = address
        self.progress = progress
        self.resume = resume

    def _check_backend(self, n):
        refuse_precomputed(self, "kernelref.kpca")
        if self.n_components is None:
            raise ValueError(
                "n_components must be an integer for backends.dask.KernelPCA (all "
                "components need the whole Gram matrix; use kernelref.kpca.KernelPCA)."
            )
        if self.block_size is not None:
            check_integer(self.block_size, "block_size", meaning="Columns per block.")
        check_integer(self.max_passes, "max_passes", meaning="It caps the passes.")
        check_backend_args(self, chunk_meaning="It is rows per chunk.")
        if (
            isinstance(self.tol, bool)
            or not isinstance(self.tol, numbers.Real)
            or not 0 < self.tol < 1
        ):
            raise ValueError(f"tol must be a number in (0, 1); got {self.tol!r}.")
        seed = self.random_state
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
        ):
            raise TypeError(
                f"random_state must be an integer seed or None; got {seed!r}."
            )

    def fit(self, X, y=None):
        """Top k eigenpairs of K̃ (label ``kpca-eigen``), normalised
        (``kpca-normalise``)."""
        self._check_backend(None)
        X, kernel, k, _ = self._validate(X)
        if self.fit_inverse_transform and self.alpha == 0:
            raise ValueError(
                "alpha must be > 0 for backends.dask.KernelPCA with "
                "fit_inverse_transform=True: the pre-image map's K_Y + αI is "
                "factorised by a tiled Cholesky; use a small alpha such as 1e-8."
            )
        n = X.shape[0]
        p = min(n - 1, self.block_size or max(2 * k, k + 10))
        client = get_client(self.address)
        identity = {
            "estimator": "backends.dask.KernelPCA",
            "kernel": kernel.spec(),
            "n_components": k,
            "block_size": p,
            "tol": self.tol,
            "random_state": self.random_state,
        }
        store = FitStore.prepare(
            self.store,
            X,  # sparse X is stored as CSR (sparse_rows), never densified
            identity=identity,
            chunk_size=self.chunk_size,
            client=client,
        )
        loop = _BlockKrylov(
            client, store, kernel, k, p, self.tol, self.max_passes, self.random_state
        )
        state, _ = run_loop(
            loop,
            store,
            progress=self.progress,
            resume=self.resume,
            description="kernel PCA",
        )
        Q, Z = state["Q"], state["Z"]
        theta, S = np.linalg.eigh(0.5 * (Q.T @ Z + Z.T @ Q))
        lam, U = theta[::-1][:k], Q @ S[:, ::-1][:, :k]
        self._fit_eigenpairs(X, kernel, state["column_means"], lam, U)
        self.n_passes_ = int(state["passes"])
        self.residual_ = float(state["residual"])
        self.store_ = str(store.path)
        return self

    def _fit_inverse_transform(self, X):
        """B = (K_Y + αI)⁻¹ X for the training projections Y (label
        ``kpca-preimage``), solved by the backend's kernel ridge on the cluster."""
        from backends.dask.ridge import KernelRidge

        Y = self.eigenvectors_ * np.sqrt(self.eigenvalues_)
        ridge = KernelRidge(lam=self.alpha, kernel=self.kernel_, address=self.address)
        self.inverse_dual_coef_ = ridge.fit(Y, X).dual_coef_
        self.X_transformed_fit_ = Y
