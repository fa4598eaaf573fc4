"""A damaged store is refused or repaired, never used: a deleted or truncated
Gram chunk, a truncated zarr.json, a deleted tile of a stored Cholesky factor."""

import json
import warnings

import numpy as np
import pytest

from backends.dask import KernelRidge
from backends.dask.gram_store import GramStore
from backends.dask.integrity import DamagedChunkError, StoreError
from kernelref.kernels import RBF
from kernelref.ridge import KernelRidge as ReferenceKernelRidge

pytestmark = pytest.mark.slow

CHUNK = 16
KERNEL = RBF(gamma=0.5)


@pytest.fixture
def X():
    return np.random.default_rng(0).normal(size=(40, 3))


def chunk_file(store, i, j):
    return store.path / "K" / store.array.metadata.encode_chunk_key((i, j))


def test_deleted_gram_chunk_is_refused_on_open_and_recomputed_by_build(
    client, tmp_path, X
):
    store = GramStore.build(
        tmp_path / "gram", X, KERNEL, chunk_size=CHUNK, client=client
    )
    chunk_file(store, 1, 0).unlink()
    with pytest.raises(DamagedChunkError, match=r"block \(1, 0\).*is missing") as info:
        GramStore.open(tmp_path / "gram")
    assert str(store.path) in str(info.value)
    with pytest.warns(RuntimeWarning, match=r"damaged block\(s\) \[\(1, 0\)\]"):
        GramStore.build(tmp_path / "gram", X, KERNEL, chunk_size=CHUNK, client=client)
    repaired = GramStore.open(tmp_path / "gram", X, KERNEL)
    np.testing.assert_allclose(
        repaired.block(1, 0), KERNEL(X[16:32], X[:16]), rtol=1e-12
    )


def test_truncated_gram_chunk_is_not_read(client, tmp_path, X):
    store = GramStore.build(
        tmp_path / "gram", X, KERNEL, chunk_size=CHUNK, client=client
    )
    path = chunk_file(store, 2, 1)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DamagedChunkError, match=r"block \(2, 1\).*checksum") as info:
        store.block(2, 1)
    assert info.value.block == (2, 1) and str(store.path) in str(info.value)
    with pytest.raises(DamagedChunkError, match=r"\(2, 1\)"):
        store.block(1, 2)  # read through the transpose


def test_truncated_metadata_names_the_file_and_the_fix(client, tmp_path, X):
    store = GramStore.build(
        tmp_path / "gram", X, KERNEL, chunk_size=CHUNK, client=client
    )
    meta = store.path / "zarr.json"
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(StoreError, match="zarr.json.*overwrite=True"):
        GramStore.open(tmp_path / "gram")
    with pytest.raises(StoreError, match="overwrite=True"):
        GramStore.build(tmp_path / "gram", X, KERNEL, chunk_size=CHUNK, client=client)
    rebuilt = GramStore.build(
        tmp_path / "gram", X, KERNEL, chunk_size=CHUNK, client=client, overwrite=True
    )
    assert json.loads(meta.read_text())["attributes"]["complete"] is True
    np.testing.assert_allclose(rebuilt.block(2, 2), KERNEL(X[32:]), rtol=1e-12)


def test_damaged_array_metadata_is_wrapped(client, tmp_path, X):
    store = GramStore.build(
        tmp_path / "gram", X, KERNEL, chunk_size=CHUNK, client=client
    )
    (store.path / "K" / "zarr.json").write_text("{")
    with pytest.raises(StoreError, match="gram.*cannot be read.*overwrite=True"):
        GramStore.open(tmp_path / "gram")


def test_damaged_factor_is_discarded_not_reused(client, tmp_path, X):
    t = np.sin(X[:, 0])
    reference = ReferenceKernelRidge(lam=0.1, kernel=KERNEL).fit(X, t).predict(X)
    model = KernelRidge(
        lam=0.1,
        kernel=KERNEL,
        store=tmp_path / "gram",
        chunk_size=CHUNK,
        address=client.scheduler.address,
    )
    model.fit(X, t)
    tile = tmp_path / "gram" / "cholesky" / "c" / "2" / "1"
    assert tile.is_file()
    tile.unlink()
    with pytest.warns(
        RuntimeWarning, match=r"cholesky.*damaged tile\(s\) \[\(2, 1\)\]"
    ):
        model.fit(X, t)
    np.testing.assert_allclose(model.predict(X), reference, rtol=1e-8, atol=1e-10)


def test_deleted_gram_chunk_does_not_reach_the_predictions(client, tmp_path, X):
    t = np.cos(X[:, 1])
    reference = ReferenceKernelRidge(lam=0.1, kernel=KERNEL).fit(X, t).predict(X)
    model = KernelRidge(
        lam=0.1,
        kernel=KERNEL,
        store=tmp_path / "gram",
        chunk_size=CHUNK,
        address=client.scheduler.address,
    )
    model.fit(X, t)
    (tmp_path / "gram" / "K" / "c" / "1" / "1").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        model.fit(X, t)
    prediction = model.predict(X)
    assert np.isfinite(prediction).all()
    np.testing.assert_allclose(prediction, reference, rtol=1e-8, atol=1e-10)


# -- the fit store's data ------------------------------------------------------
def fit_store(path, X, t):
    from backends.dask.runtime import FitStore

    return FitStore.prepare(
        path,
        X,
        identity={"fit": "integrity"},
        chunk_size=CHUNK,
        client=None,
        arrays={"t": t},
    )


def x_chunk_file(store, i):
    import zarr

    array = zarr.open_array(store=store.x_ref.path, mode="r")
    return store.path / "X" / array.metadata.encode_chunk_key((i, 0))


def test_fit_store_data_chunks_are_verified_before_use(tmp_path, X):
    """A deleted or altered chunk of a fit store's X is refused by name, where
    Zarr would read a deleted chunk as zeros; an all-zero chunk is written and
    verifies; the targets are verified too."""
    from backends.dask.runtime import FitStore, read_chunk

    X = X.copy()
    X[CHUNK : 2 * CHUNK] = 0.0  # a chunk Zarr would not write by default
    t = X[:, 0] + 1.0
    store = fit_store(tmp_path / "fit", X, t)
    np.testing.assert_array_equal(read_chunk(store.x_ref, 1), X[CHUNK : 2 * CHUNK])
    np.testing.assert_array_equal(store.read("t"), t)
    x_chunk_file(store, 0).unlink()
    path = x_chunk_file(store, 2)
    path.write_bytes(path.read_bytes()[:-8])
    reopened = FitStore.open(store.path)
    with pytest.raises(DamagedChunkError, match=r"block \(0, 0\).*is missing.*store="):
        read_chunk(reopened.x_ref, 0)
    with pytest.raises(DamagedChunkError, match="does not match its checksum"):
        read_chunk(reopened.x_ref, 2)
    (store.path / "t" / "c" / "1").unlink()
    with pytest.raises(DamagedChunkError, match=r"block \(1,\)"):
        reopened.read("t")


def test_fit_store_without_records_still_reads(tmp_path, X):
    """A store written before the checksums were kept (no chunk_checksums in its
    attributes) is read as before, unverified."""
    import zarr

    from backends.dask.runtime import FitStore, read_chunk

    store = fit_store(tmp_path / "old", X, X[:, 1])
    group = zarr.open_group(store=str(store.path), mode="r+")
    attrs = dict(group.attrs)
    del attrs["chunk_checksums"]
    group.attrs.put(attrs)
    old = FitStore.open(store.path)
    assert not old.x_ref.checked
    np.testing.assert_array_equal(read_chunk(old.x_ref, 2), X[2 * CHUNK :])
