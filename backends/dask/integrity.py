"""Checksums of the chunks of a Zarr array on disk, so a damaged store is never used.

When a task writes a chunk (a Gram block, a Cholesky tile) it records the
CRC-32 of the chunk's file in a small manifest file beside it,
``<array>/checksums/<i>.<j>``: one file per chunk, written atomically, so
tasks writing different chunks at once never race on a shared attributes
file. Before a chunk is used it is verified against its record; a chunk
that is missing, truncated or altered is reported with the store's path and
its block index (``DamagedChunkError``), and the caller recomputes it where
the store can be rebuilt (Gram blocks, a factor) or refuses it.

The checksum guards against truncated, missing or altered files, not against
an adversary, so a CRC-32 suffices: on an 8 MiB chunk (edge 1024) it took
1.2–1.8 ms against 16–20 ms for computing the RBF block on 20 features, while
sha256 took as long as the block itself (``benchmarks/bench_integrity.py``,
on a shared machine).
"""

import os
import pathlib
import uuid
import zlib

__all__ = [
    "DamagedChunkError",
    "StoreError",
    "array_directory",
    "damaged_chunks",
    "record_chunk",
    "verify_chunk",
]

MANIFEST = "checksums"


class StoreError(ValueError):
    """A store on disk cannot be read as it is: its metadata is damaged, or it
    is not the kind of store expected. The message names the store and the fix."""


class DamagedChunkError(StoreError):
    """A chunk of a stored array is missing or does not match its checksum."""

    def __init__(self, message, path, block):
        super().__init__(message)
        self.path, self.block = path, block


def array_directory(array):
    """The directory of a Zarr array in a local store."""
    return pathlib.Path(array.store.root) / array.path


def _chunk_file(directory, array, block):
    return directory / array.metadata.encode_chunk_key(tuple(block))


def _record_file(directory, block):
    return directory / MANIFEST / ".".join(str(int(b)) for b in block)


def _digest(path):
    return f"crc32:{zlib.crc32(path.read_bytes()):08x}"


def record_chunk(array, block):
    """Record the checksum of the chunk `block` of `array` as now on disk.

    Called by the task that has just written the chunk; the record is written
    to a temporary name and renamed, so it is either whole or absent.
    """
    directory = array_directory(array)
    record = _record_file(directory, block)
    record.parent.mkdir(exist_ok=True)
    temporary = record.with_name(f".{record.name}.{uuid.uuid4().hex}")
    temporary.write_text(_digest(_chunk_file(directory, array, block)))
    os.replace(temporary, record)


def forget_chunk(array, block):
    """Remove the chunk `block` and its record, so that it reads as not written."""
    directory = array_directory(array)
    for path in (_chunk_file(directory, array, block), _record_file(directory, block)):
        path.unlink(missing_ok=True)


def chunk_problem(array, block):
    """What is wrong with the stored chunk `block`: "" if it matches its record."""
    directory = array_directory(array)
    chunk, record = _chunk_file(directory, array, block), _record_file(directory, block)
    if not chunk.is_file():
        return "is missing"
    if not record.is_file():
        return (
            "has no recorded checksum "
            "(it was written by an older version, or cut short)"
        )
    if _digest(chunk) != record.read_text().strip():
        return "does not match its checksum (the file is truncated or altered)"
    return ""


def damaged_chunks(array, blocks):
    """The blocks among `blocks` whose chunk is missing or damaged, with what is
    wrong."""
    found = []
    for block in blocks:
        problem = chunk_problem(array, block)
        if problem:
            found.append((tuple(block), problem))
    return found


def verify_chunk(array, block, fix):
    """Raise ``DamagedChunkError`` naming the store, the block and `fix` unless the
    chunk `block` of `array` matches its recorded checksum."""
    problem = chunk_problem(array, block)
    if problem:
        path = array_directory(array)
        raise DamagedChunkError(
            f"block {tuple(block)} of the stored array {str(path)!r} {problem}; it is "
            f"not used. {fix}",
            str(path),
            tuple(block),
        )
