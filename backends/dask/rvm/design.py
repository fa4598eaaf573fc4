"""The RVM's design matrix on a cluster: columns on the client, products streamed.

The fast algorithm's candidates are all N training points, so its design matrix
Φ = [1 | k(X, X)] is N × (N + 1): the one array of the RVM that does not fit. It
uses Φ in two ways only (``kernelref.rvm.fast.FastLoop``):

- a few columns at a time, Φ[:, j] or Φ[:, active] — N numbers per column,
  computed on the client from X, which fits there;
- left products v @ Φ and V @ Φ — one for Φᵀt at the start, one for the
  model's coordinates at a warm start, and, on an addition, the new row uᵀΦ
  of the coordinates Ψ = UᵀΦ (label ``rvm-SQ-stable``). Entry i is
  Σ_n v_n k(x_n, x_i): every kernel entry once, O(N²) however small v is.

An addition's row comes from the row φ_jᵀΦ of the Gram matrix
(``kernelref.rvm.coordinates.new_coordinate_row``), and a pass costs nearly the
same for ``prefetch`` rows as for one: so the design keeps Gram rows, and on an
addition whose row it lacks forms, in one pass, the rows of that column and of
the columns the algorithm ranks next (``expect``). Later additions of those
columns need no pass.

``StreamedDesign`` offers exactly these on the unit-norm columns
Φ̃ = diag(b) Φ diag(1/c) the algorithm works with (b the row weights of the
classifier's whitened problem, 1 for regression): a left product is one round
of tasks, one per span of candidates, each forming its N × c kernel block
in pieces in a reused buffer and returning only its c entries.
"""

import copy
import hashlib
import time
import uuid

import numpy as np

from backends.dask.blocks import kernel_block
from backends.dask.runtime import RoundArguments, gather, with_arguments
from backends.dask.rvm.tasks import (
    ROW_GROUP,
    left_product_chunk,
    norms_and_product_chunk,
    squared_norms_chunk,
)
from kernelref.rvm.coordinates import orthonormal_basis
from kernelref.rvm.design import check_kernel_columns

__all__ = [
    "PREFETCH",
    "PRODUCTS_MB",
    "ROWS_MB",
    "ROW_GROUP",
    "StreamedDesign",
    "batch_size",
    "forget",
]

#: Gram rows formed at most by the pass of an addition whose row is not kept.
PREFETCH = 32
#: MB of Gram rows the client keeps (the oldest are dropped first).
ROWS_MB = 512
#: MB of left products V @ Φ̃ the client keeps, by V (the oldest are dropped
#: first): a β schedule's runs ask for some of them again (`__rmatmul__`).
PRODUCTS_MB = 128


class StreamedDesign:
    """Φ̃ = diag(b) [1 | k(X, X)] diag(1/c), never formed (see the module).

    ``X`` is on the client and, for the tasks, in the fit ``store``; ``shift``
    centres it for a stationary kernel. The norms c come from one pass at
    construction (``scales``; 0 marks a zero column, which stays zero), or are
    1 with ``unit=False``; `reweighted` gives the design for row weights b.
    Each worker caches kernel pieces up to ``cache_mb`` (``tasks``).
    """

    __array_ufunc__ = None  # so that v @ design calls __rmatmul__

    def __init__(
        self,
        X,
        shift,
        kernel,
        bias,
        store,
        client,
        unit=True,
        cache_mb=0,
        prefetch=PREFETCH,
        rows_mb=ROWS_MB,
        t=None,
    ):
        self.X, self.shift, self.kernel, self.bias = X - shift, shift, kernel, bias
        self.store, self.client, self.cache_mb = store, client, cache_mb
        self.prefetch, self.rows_mb = prefetch, rows_mb
        self.spans = self._spans()
        self.weights = np.ones(len(X))
        self.offset = 1 if bias else 0
        self.counts = {
            "passes": 0,
            "pass_seconds": 0.0,
            "row_additions": 0,
            "gram_rows": 0,
        }
        self._seen, self._rows, self._expected = {}, {}, np.empty(0, dtype=int)
        self._kept = None  # the coordinates `reweighted` formed, for `coordinates`
        self._hits = self._extra = 0
        if unit and t is not None:  # the norms and Φ̃ᵀt in one pass
            self._norms_and_targets(np.asarray(t, dtype=float))
        else:
            self._set_scales(self._squared_norms() if unit else None)

    def _set_scales(self, squared):
        """c from the kernel columns' squared norms (`_squared_norms`), the bias
        column's being ‖b‖²; None: c = 1 (Φ itself)."""
        if squared is None:
            self.scales = np.ones(self.shape[1])
        else:
            kernel_part = np.sqrt(squared)
            check_kernel_columns(kernel_part)
            bias = [np.sqrt((self.weights**2).sum())] if self.bias else []
            self.scales = np.concatenate([bias, kernel_part])
        self._inverse = np.where(
            self.scales > 0, 1 / np.maximum(self.scales, 1e-300), 0
        )

    def reweighted(self, weights, t=None, active=None):
        """diag(b)Φ on unit columns, for the row weights b (the classifier's
        B^½, label ``rvc-linearised-target``): one pass for the norms, which with
        ``t`` also forms Φ̃ᵀt (`norms_and_product_chunk`), kept as ``t @ design``
        would give it: the sequential algorithm asks for it first. With the
        columns ``active`` of the model it warm-starts from, the same pass forms
        that model's coordinates (`coordinates`)."""
        other = copy.copy(self)
        other.weights = np.asarray(weights, dtype=float)
        other._seen, other._rows, other._kept = {}, {}, None
        other._hits = other._extra = 0
        if t is None:  # the norms alone (the rvm_cluster chapter's check)
            other._set_scales(other._squared_norms())
            return other
        t = np.asarray(t, dtype=float)
        U = other._basis(active)
        products = other._norms_and_targets(t, U)
        if U.shape[1]:
            other._kept = (np.sort(np.asarray(active, dtype=int)), U, products[1:])
        return other

    def _norms_and_targets(self, t, U=None):
        """One pass for the norms c (`_set_scales`) and the products of t and of
        Uᵀ (N × m, or none) with Φ̃, which it returns (t's kept as ``t @ design``
        would give it: the sequential algorithm asks for it first). The pass's
        pieces meet the products of the two passes apart in the same order
        (`norms_and_product_chunk`), so the norms' digits are theirs, and so are
        t's where t is the only row (a row's digits depend on the group of rows
        it is multiplied with and on W's memory layout, kept as it was)."""
        W = (np.atleast_2d(t) if U is None else np.vstack([t, U.T])) * self.weights
        w2 = self.weights**2
        both = self._round(norms_and_product_chunk, self.shift, w2, W, self.cache_mb)
        self._set_scales(both[0])
        products = self._product(W, both[1:])
        self._keep_product(_key(t), products[:1])
        return products

    def _basis(self, active):
        """An orthonormal basis U of the span of the columns ``active`` of
        diag(b)Φ (N × m; m = 0 without them): the span of the unit columns,
        whose norms c the coming pass computes. The QR is of the columns scaled
        by norms computed here; Ψ = UᵀΦ̃ = (Uᵀdiag(b)Φ) diag(1/c) from the pass."""
        index = np.sort(np.asarray([] if active is None else active, dtype=int))
        if not len(index):
            return np.zeros((len(self.X), 0))
        A = self._weighted_columns(index)
        norms = np.linalg.norm(A, axis=0)
        return orthonormal_basis(A / np.where(norms > 0, norms, 1.0))

    def coordinates(self, active):
        """(U, Ψ) of the model with the columns ``active`` if `reweighted`
        formed them for exactly those columns, else None
        (``kernelref.rvm.coordinates.orthonormal_coordinates``)."""
        kept = self._kept
        if kept is None or not np.array_equal(kept[0], np.sort(active)):
            return None
        return kept[1].copy(), kept[2].copy()

    @property
    def shape(self):
        return (len(self.X), len(self.X) + self.offset)

    def _spans(self):
        """The candidates of each task: equal spans, at least two per worker
        thread (a pass is then balanced whatever the store's chunk size)."""
        n = len(self.X)
        threads = sum(self.client.nthreads().values()) or 1
        tasks = min(n, max(self.store.n_chunks, 2 * threads))
        edges = np.linspace(0, n, tasks + 1).round().astype(int)
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]

    def _round(self, func, *args):
        """One pass: ``func(ref, span, kernel, *args)`` for every span, in order.
        Array arguments above ``GRAPH_ARRAY_BYTES`` (V, w²) reach the tasks via the
        fit store (``runtime.RoundArguments``), once, not in the task graph."""
        tick = time.perf_counter()
        n = len(self.spans)
        with RoundArguments(self.store, (self.kernel, *args)) as arguments:
            round_key = f"{func.__name__}-{uuid.uuid4().hex}"  # the dashboard's name
            futures = self.client.map(
                with_arguments,
                [func] * n,
                [self.store.x_ref] * n,
                self.spans,
                *[[a] * n for a in arguments.values],
                key=[f"{round_key}-{i}" for i in range(n)],
            )
            try:
                parts = gather(self.client, futures)
            finally:
                self.client.cancel(futures)
        self.counts["passes"] += 1
        self.counts["pass_seconds"] += time.perf_counter() - tick
        return np.concatenate(parts, axis=-1)

    def _squared_norms(self):
        """Σ_n b²_n k(x_n, x_i)² for every kernel column i: one pass."""
        w2 = self.weights**2
        return self._round(squared_norms_chunk, self.shift, w2, self.cache_mb)

    def weighted_square_norms(self, d):
        """Σ_n Φ̃[n, m]² d_nk for every column m and each column k of the N × K
        array d (``kernelref.rvm.softmax_design.weighted_square_norms``): the K
        sums of every kernel column in one pass, the bias column's on the
        client."""
        w2 = np.asarray(d, dtype=float).T * self.weights**2  # (K, N)
        kernel_part = self._round(squared_norms_chunk, self.shift, w2, self.cache_mb)
        return self._norms(w2, kernel_part)

    def norms_and_product(self, d, V):
        """`weighted_square_norms` of d and V @ Φ̃ for V of shape (r, N), in the
        one pass of the two (the softmax model's approximation: its column norms,
        Φ̃ᵀt̃ and the warm start's coordinates, ``backends.dask.rvm.softmax``)."""
        w2 = np.asarray(d, dtype=float).T * self.weights**2
        W = np.asarray(V, dtype=float) * self.weights
        both = self._round(norms_and_product_chunk, self.shift, w2, W, self.cache_mb)
        return self._norms(w2, both[: len(w2)]), self._product(W, both[len(w2) :])

    def _norms(self, w2, kernel_part):
        """The (M, K) sums Σ_n Φ̃[n, m]² d_nk from w2 = (d diag(b)²)ᵀ and the
        pass's kernel columns' sums (K, N); the bias column's are w2's row sums."""
        out = np.empty((self.shape[1], len(w2)))
        if self.bias:
            out[0] = w2.sum(axis=1)
        out[self.offset :] = kernel_part.T
        out *= (self._inverse**2)[:, None]
        return out

    def columns(self, index):
        """Φ̃[:, index] (N × len(index)), from X on the client."""
        index = np.asarray(index, dtype=int)
        out = self._weighted_columns(index)
        out *= self._inverse[index]
        return out

    def _weighted_columns(self, index):
        """diag(b)Φ[:, index], before the scaling to unit norm."""
        out = np.empty((len(self.X), len(index)))
        is_bias = index < self.offset
        out[:, is_bias] = 1.0
        points = index[~is_bias] - self.offset
        if len(points):
            out[:, ~is_bias] = kernel_block(self.kernel, self.X, self.X[points])
        out *= self.weights[:, None]
        return out

    def __getitem__(self, key):
        rows, index = key
        if rows != slice(None):
            raise IndexError("a StreamedDesign gives whole columns only: Phi[:, j]")
        if np.ndim(index) == 0:
            return self.columns([int(index)])[:, 0]
        return self.columns(index)

    def expect(self, ranked):
        """The columns likely to join the model next, most likely first
        (``kernelref.rvm.fast``): the ones the next missing Gram row brings along."""
        self._expected = np.asarray(ranked, dtype=int)

    def gram_row(self, j):
        """φ̃_jᵀΦ̃, from memory or by one pass that also forms the rows of
        expected columns not yet kept, `_batch_size` rows in all. A batch is
        whole groups of ``ROW_GROUP`` rows (zeros where there are fewer
        columns), each group one product on the workers, and each column is
        formed alone, so a row's digits do not depend on which others shared
        its pass (a resumed fit forms other batches)."""
        self.counts["row_additions"] += 1
        if j in self._rows:
            self._hits += 1
            return self._rows[j]
        size = self._batch_size()
        others = [int(k) for k in self._expected if k != j and k not in self._rows]
        batch = [j, *others[: size - 1]]
        V = np.zeros((size, len(self.X)))
        for row, k in zip(V, batch):  # one at a time: digits independent of batch
            row[:] = self.columns([k])[:, 0]
        rows = V @ self
        self._forget(len(batch))
        for k, row in zip(batch, rows):
            self._rows[k] = row
        self._extra += len(batch) - 1
        self.counts["gram_rows"] += len(batch)
        return self._rows[j]

    def _batch_size(self):
        """Rows of the next batch (`batch_size`)."""
        return batch_size(self.prefetch, self._hits, self._extra)

    def _forget(self, n_new):
        """Drop the oldest kept rows so that n_new more fit in ``rows_mb``."""
        forget(self._rows, n_new, self.rows_mb, self.shape[1], self.prefetch)

    def __rmatmul__(self, V):
        """V @ Φ̃ for V of shape (N,) or (k, N): one streamed pass. A V seen
        before is answered from memory, up to ``PRODUCTS_MB``: the targets t,
        which every run of a β schedule asks for; the coordinates of a cold
        start and the new coordinate rows of its additions, which the 'auto'
        schedule's second hold repeats from its first iterations (the same
        column first, the same steps, bit for bit, until the two runs' budgets
        part). A pass gives a V's rows the same digits whatever passes came
        before, so a product from memory is the one a pass would give."""
        V = np.asarray(V, dtype=float)
        key = _key(V)
        if key in self._seen:
            out = self._seen[key].copy()
            return out[0] if V.ndim == 1 else out
        W = np.atleast_2d(V) * self.weights
        out = self._product(
            W, self._round(left_product_chunk, self.shift, W, self.cache_mb)
        )
        self._keep_product(key, out)
        return out[0] if V.ndim == 1 else out

    def _keep_product(self, key, product):
        """Keep a (k, P) product under ``key``, dropping the oldest beyond
        ``PRODUCTS_MB``."""
        room = PRODUCTS_MB * 2**20
        if product.nbytes > room:
            return
        self._seen[key] = product.copy()
        while sum(p.nbytes for p in self._seen.values()) > room:
            self._seen.pop(next(iter(self._seen)))

    def _product(self, W, kernel_part):
        """V @ Φ̃ from W = V diag(b) and the pass's W @ k(X, X)."""
        out = np.empty((len(W), self.shape[1]))
        if self.bias:
            out[:, 0] = W.sum(axis=1)
        out[:, self.offset :] = kernel_part
        out *= self._inverse
        return out


def batch_size(prefetch, hits, extra):
    """Rows of the next batch of Gram rows: ``prefetch`` at first and while a
    quarter of the ``extra`` rows formed ahead are used (``hits``), fewer groups
    of ``ROW_GROUP`` as fewer are (one at least). Where additions seldom follow
    the ranking, or their columns lie nearly in the span and take their own
    pass, extra rows are wasted work."""
    groups = max(prefetch // ROW_GROUP, 1)
    used = hits / extra if extra else 1.0
    return ROW_GROUP * min(groups, 1 + int(4 * (groups - 1) * used))


def forget(rows, n_new, rows_mb, width, prefetch):
    """Drop the oldest of the kept Gram ``rows`` (a dict, oldest first, each
    ``width`` numbers) so that n_new more fit in ``rows_mb`` MB."""
    room = max(int(rows_mb * 2**20 // (8 * width)), prefetch)
    while rows and len(rows) + n_new > room:
        rows.pop(next(iter(rows)))


def _key(v):
    """The name under which a vector's (or a matrix's) product is kept: its
    numbers and shape, and a matrix's layout (a pass multiplies V diag(b), which
    keeps V's layout, and its digits depend on it; a vector's is always one
    contiguous row)."""
    layout = repr((v.shape, v.strides if v.ndim > 1 else None)).encode()
    return hashlib.sha256(layout + v.tobytes()).hexdigest()
