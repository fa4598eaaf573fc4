"""What the workers compute for the RVM backend: passes over k(X, X_i).

A task takes one span of candidates X_i (c points) and visits its N × c kernel
block in pieces of ``PIECE_ENTRIES`` entries, strip by strip of candidates and
data rows in order within a strip: the left product adds V[:, rows] @ piece,
the norms add w²[rows] @ piece². A worker keeps the pieces it has formed while
they fit its cache (``cache_mb``, capped at a quarter of its memory limit), so
later passes over the same chunk read them instead of forming them again (the
spans stay the same from pass to pass); cached or not, the same pieces meet the
same products in the same order, so the result does not depend on where a task
ran.
"""

import threading

import numpy as np

from backends.dask.blocks import kernel_block, reusable_buffer
from backends.dask.runtime import read_chunk

__all__ = ["ROW_GROUP", "clear_cache", "left_product_chunk", "squared_norms_chunk"]

#: Entries of one piece: 2 MiB, so the map and the product run in cache.
PIECE_ENTRIES = 2**18
#: Rows of V multiplied with a piece at once: a row's digits then depend only on
#: the group's size, not on how many groups share the pass.
ROW_GROUP = 8
#: Candidates per piece: a piece is a tall strip, PIECE_ENTRIES / STRIP data
#: rows deep, so V @ piece sums over a thousand rows even when V has many rows
#: (the design's prefetched Gram rows), and its result stays in cache.
STRIP = 256

_cache = {"pieces": {}, "bytes": 0}
_lock = threading.Lock()
_squares = threading.local()


def _budget(cache_mb):
    """Bytes this worker may cache in all: ``cache_mb``, at most a quarter of its
    memory limit, and no more than keeps the process below 60% of the limit
    (dask pauses a worker at 80%)."""
    budget = cache_mb * 2**20
    try:
        import psutil
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
        if limit:
            rss = psutil.Process().memory_info().rss
            budget = min(budget, limit / 4, 0.6 * limit - rss + _cache["bytes"])
    except (ImportError, ValueError):
        pass
    return max(budget, 0.0)


def candidate_rows(ref, span):
    """Rows ``span = (start, stop)`` of the stored X, from the cached chunks."""
    start, stop = span
    parts = []
    for c in range(start // ref.chunk_size, -(-stop // ref.chunk_size)):
        rows = ref.rows(c)
        chunk = read_chunk(ref, c)
        parts.append(chunk[max(start, rows.start) - rows.start : stop - rows.start])
    return np.concatenate(parts)


def _pieces(ref, span, kernel, shift, cache_mb):
    """(candidates, data rows, k(X[rows], X[candidates])) for every piece of the
    candidates' block, in order: strips of ``STRIP`` candidates, each visited
    down all N data rows, so a product with the piece sums over many rows."""
    key = (ref.path, tuple(span), repr(kernel), shift.tobytes())
    cached = _cache["pieces"].get(key)
    if cached is not None:
        yield from cached
        return
    Y = candidate_rows(ref, span) - shift
    width = min(STRIP, len(Y))
    height = max(1, PIECE_ENTRIES // width)
    buffer = reusable_buffer(height * width)
    budget, kept = _budget(cache_mb), []
    chunks = [
        (read_chunk(ref, r) - shift, ref.rows(r).start) for r in range(ref.n_chunks)
    ]
    for first_candidate in range(0, len(Y), width):
        columns = slice(first_candidate, min(first_candidate + width, len(Y)))
        for X_r, first_row in chunks:  # centred once per task, not once per strip
            for first in range(0, len(X_r), height):
                last = min(first + height, len(X_r))
                rows = slice(first_row + first, first_row + last)
                piece = kernel_block(kernel, X_r[first:last], Y[columns], buffer)
                with _lock:
                    keep = kept is not None and _cache["bytes"] + piece.nbytes <= budget
                    if keep:
                        _cache["bytes"] += piece.nbytes
                if keep:
                    piece = piece.copy()
                    kept.append((columns, rows, piece))
                elif kept is not None:  # not all of it fits: give back what was taken
                    with _lock:
                        _cache["bytes"] -= sum(p.nbytes for _, _, p in kept)
                    kept = None
                yield columns, rows, piece
    if kept is not None:
        _cache["pieces"][key] = kept


def _square_buffer():
    """This thread's buffer for a piece's squares, reused across pieces."""
    buffer = getattr(_squares, "value", None)
    if buffer is None:
        buffer = _squares.value = np.empty(PIECE_ENTRIES)
    return buffer


def left_product_chunk(ref, span, kernel, shift, V, cache_mb=0):
    """Worker task: V @ k(X, X[span]) for the candidates ``span = (start, stop)``,
    (k, stop − start) for V of shape (k, N); their N × c block is visited in
    pieces, never formed whole."""
    out = np.zeros((len(V), span[1] - span[0]))
    product = np.empty((ROW_GROUP, STRIP))  # reused: a fresh array per piece costs more
    groups = [slice(g, min(g + ROW_GROUP, len(V))) for g in range(0, len(V), ROW_GROUP)]
    for columns, rows, piece in _pieces(ref, span, kernel, shift, cache_mb):
        for group in groups:  # the same products whatever the number of groups
            part = product[: group.stop - group.start, : piece.shape[1]]
            np.matmul(V[group, rows], piece, out=part)
            out[group, columns] += part
    return out


def squared_norms_chunk(ref, span, kernel, shift, w2, cache_mb=0):
    """Worker task: Σ_n w²_n k(x_n, x_i)² for the candidates i in ``span``, the
    squared norms of the weighted kernel columns; for w2 of shape (K, N), the K
    sums for each candidate, (K, stop − start), in the same visit of the block
    (the softmax classifier's c²_mk, label ``rvc-softmax-structured``)."""
    out = np.zeros(w2.shape[:-1] + (span[1] - span[0],))
    square = _square_buffer()
    for columns, rows, piece in _pieces(ref, span, kernel, shift, cache_mb):
        squared = np.square(piece, out=square[: piece.size].reshape(piece.shape))
        out[..., columns] += w2[..., rows] @ squared
    return out


def norms_and_product_chunk(ref, span, kernel, shift, w2, V, cache_mb=0):
    """Worker task: `squared_norms_chunk` (row 0; rows 0 to K − 1 for w2 of shape
    (K, N)) and `left_product_chunk` of V (the rows after) for the same
    candidates, in one visit of their kernel block: each piece is formed or read
    once, and meets the same products in the same order as in the two tasks
    apart, so the digits are theirs."""
    n_norms = 1 if w2.ndim == 1 else len(w2)
    out = np.zeros((n_norms + len(V), span[1] - span[0]))
    norms, products = out[0] if w2.ndim == 1 else out[:n_norms], out[n_norms:]
    square = _square_buffer()
    product = np.empty((ROW_GROUP, STRIP))
    groups = [slice(g, min(g + ROW_GROUP, len(V))) for g in range(0, len(V), ROW_GROUP)]
    for columns, rows, piece in _pieces(ref, span, kernel, shift, cache_mb):
        squared = np.square(piece, out=square[: piece.size].reshape(piece.shape))
        norms[..., columns] += w2[..., rows] @ squared
        for group in groups:
            part = product[: group.stop - group.start, : piece.shape[1]]
            np.matmul(V[group, rows], piece, out=part)
            products[group, columns] += part
    return out


def clear_cache():
    """Worker function: drop every cached piece (at the end of a fit)."""
    with _lock:
        _cache["pieces"].clear()
        _cache["bytes"] = 0
