"""GramStore: blocks equal to the reference kernel, attributes that identify
the kernel and the data, refusal of stale stores, and interrupted builds that
are detected and resumed."""

import hashlib

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

from resilience import Interrupted  # noqa: E402

from backends.dask.blocks import lower_blocks  # noqa: E402
from backends.dask.gram_store import GramStore  # noqa: E402
from kernelref.kernels import RBF, Polynomial  # noqa: E402

# 250 = 3·64 + 58: four block rows, the last one ragged; ten stored blocks.
N, D, CHUNK = 250, 3, 64


@pytest.fixture
def X():
    return np.random.default_rng(0).standard_normal((N, D))


def assert_blocks_match(store, K):
    """Every block (i, j), stored or transposed, equals the reference to 1e-12."""
    for i in range(store.n_blocks):
        for j in range(store.n_blocks):
            expected = K[store.block_slice(i), store.block_slice(j)]
            np.testing.assert_allclose(store.block(i, j), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("compressor", [None, "lz4"])
def test_blocks_equal_reference_kernel(client, tmp_path, X, compressor):
    kernel = RBF(gamma=0.3)
    store = GramStore.build(
        tmp_path / "gram",
        X,
        kernel,
        chunk_size=CHUNK,
        compressor=compressor,
        client=client,
    )
    assert store.is_complete
    assert (store.n, store.chunk_size, store.n_blocks) == (N, CHUNK, 4)
    assert store.block(3, 1).shape == (N - 3 * CHUNK, CHUNK)
    assert_blocks_match(store, kernel(X))
    np.testing.assert_array_equal(
        np.diag(store.block(3, 3)), kernel.diag(X[3 * CHUNK :])
    )


def test_compressor_is_recorded_in_the_array(client, tmp_path, X):
    plain = GramStore.build(tmp_path / "plain", X, RBF(), chunk_size=CHUNK)
    packed = GramStore.build(
        tmp_path / "packed", X, RBF(), chunk_size=CHUNK, compressor="lz4"
    )
    assert plain.array.compressors == ()
    (codec,) = packed.array.compressors
    assert isinstance(codec, zarr.codecs.BloscCodec) and codec.cname.value == "lz4"


def test_attributes_describe_kernel_and_data(client, tmp_path, X):
    kernel = Polynomial(degree=2, gamma=0.5, coef0=1.0)
    store = GramStore.build(tmp_path / "gram", X, kernel, chunk_size=CHUNK)
    attrs = dict(zarr.open_group(str(tmp_path / "gram"), mode="r").attrs)
    digest = hashlib.sha256(repr((N, D)).encode() + X.tobytes()).hexdigest()
    assert attrs["kernel"] == {
        "class": "Polynomial",
        "params": {
            "degree": 2,
            "gamma": 0.5,
            "coef0": 1.0,
            "gamma_bounds": [1e-05, 100000.0],
            "coef0_bounds": [1e-05, 100000.0],
        },
    }
    assert attrs["data"] == {"sha256": digest, "shape": [N, D], "dtype": "float64"}
    assert (attrs["n"], attrs["chunk_size"], attrs["layout"]) == (N, CHUNK, "lower")
    assert attrs["format_version"] == 1 and attrs["complete"] is True
    assert store.array.chunks == (CHUNK, CHUNK)


def test_readable_by_plain_zarr(client, tmp_path, X):
    kernel = RBF(gamma=0.3)
    GramStore.build(tmp_path / "gram", X, kernel, chunk_size=CHUNK)
    A = zarr.open_array(str(tmp_path / "gram" / "K"), mode="r")[...]
    K = kernel(X)
    block_row = np.arange(N) // CHUNK
    lower = block_row[:, None] >= block_row[None, :]
    np.testing.assert_allclose(A[lower], K[lower], rtol=0, atol=1e-12)
    assert np.isnan(A[~lower]).all(), "blocks above the diagonal are not stored"


def test_complete_store_is_opened_not_recomputed(client, tmp_path, X):
    kernel = RBF(gamma=0.3)
    GramStore.build(tmp_path / "gram", X, kernel, chunk_size=CHUNK)
    calls = []
    again = GramStore.build(
        tmp_path / "gram",
        X,
        kernel,
        chunk_size=CHUNK,
        progress=lambda done, total: calls.append(done),
    )
    assert calls == []
    assert again.is_complete
    assert_blocks_match(GramStore.open(tmp_path / "gram", X, kernel), kernel(X))


def test_store_for_other_data_is_refused(client, tmp_path, X):
    kernel = RBF(gamma=0.3)
    GramStore.build(tmp_path / "gram", X, kernel, chunk_size=CHUNK)
    other = X.copy()
    other[7, 1] += 1e-9
    with pytest.raises(ValueError, match="built for other data.*overwrite=True"):
        GramStore.build(tmp_path / "gram", other, kernel, chunk_size=CHUNK)
    with pytest.raises(
        ValueError, match="built for other data.*pass the X it was built from"
    ):
        GramStore.open(tmp_path / "gram", X=other)


def test_store_for_other_kernel_is_refused(client, tmp_path, X):
    GramStore.build(tmp_path / "gram", X, RBF(gamma=0.3), chunk_size=CHUNK)
    with pytest.raises(
        ValueError, match="built with kernel.*'gamma': 0.3.*overwrite=True"
    ):
        GramStore.build(tmp_path / "gram", X, RBF(gamma=0.4), chunk_size=CHUNK)
    with pytest.raises(ValueError, match="built with kernel"):
        GramStore.open(tmp_path / "gram", kernel=RBF(gamma=0.4))
    with pytest.raises(ValueError, match="chunk_size=64, not 32"):
        GramStore.build(tmp_path / "gram", X, RBF(gamma=0.3), chunk_size=32)


def test_overwrite_rebuilds_for_the_new_kernel(client, tmp_path, X):
    GramStore.build(tmp_path / "gram", X, RBF(gamma=0.3), chunk_size=CHUNK)
    kernel = RBF(gamma=0.4)
    store = GramStore.build(
        tmp_path / "gram", X, kernel, chunk_size=CHUNK, overwrite=True
    )
    assert store.attrs["kernel"]["params"]["gamma"] == 0.4
    assert_blocks_match(store, kernel(X))


def test_interrupted_build_is_detected_and_resumed(client, tmp_path, X):
    kernel = RBF(gamma=0.3)
    # Many small blocks, so that most are still queued when the build stops.
    chunk = 16
    n_total = len(lower_blocks(-(-N // chunk)))

    def stop_at_first_block(done, total):
        raise Interrupted

    with pytest.raises(Interrupted):
        GramStore.build(
            tmp_path / "gram", X, kernel, chunk_size=chunk, progress=stop_at_first_block
        )
    half = GramStore(tmp_path / "gram")
    assert not half.is_complete
    missing = half.missing_blocks()
    assert 0 < len(missing) < n_total - 1
    with pytest.raises(ValueError, match="incomplete"):
        GramStore.open(tmp_path / "gram")

    computed = []
    store = GramStore.build(
        tmp_path / "gram",
        X,
        kernel,
        chunk_size=chunk,
        progress=lambda done, total: computed.append(total),
    )
    assert store.is_complete
    # Only blocks still missing are computed (stragglers may finish meanwhile).
    assert 1 <= computed[-1] <= len(missing)
    assert_blocks_match(GramStore.open(tmp_path / "gram", X, kernel), kernel(X))


class CrashingRBF(RBF):
    """An RBF kernel whose worker fails on blocks of unequal sides (the ragged
    last block row), standing for a worker lost mid-build. It reports the
    spec of the RBF kernel it stands for, so that one may resume its store."""

    def __call__(self, X, Y=None):
        if Y is not None and len(X) != len(Y):
            raise MemoryError("worker lost")
        return super().__call__(X, Y)

    def spec(self):
        return RBF(gamma=self.gamma).spec()


def test_failed_worker_leaves_store_incomplete(client, tmp_path, X):
    with pytest.raises(MemoryError, match="worker lost"):
        GramStore.build(tmp_path / "gram", X, CrashingRBF(gamma=0.3), chunk_size=CHUNK)
    assert not GramStore(tmp_path / "gram").is_complete
    with pytest.raises(ValueError, match="incomplete"):
        GramStore.open(tmp_path / "gram")
    kernel = RBF(gamma=0.3)
    store = GramStore.build(tmp_path / "gram", X, kernel, chunk_size=CHUNK)
    assert_blocks_match(store, kernel(X))


def test_store_cut_short_at_creation_is_incomplete(client, tmp_path, X):
    from backends.dask.gram_store import FORMAT

    zarr.open_group(str(tmp_path / "gram"), mode="w", attributes={"format": FORMAT})
    with pytest.raises(ValueError, match="incomplete"):
        GramStore.open(tmp_path / "gram")
    kernel = RBF(gamma=0.3)
    store = GramStore.build(tmp_path / "gram", X, kernel, chunk_size=CHUNK)
    assert_blocks_match(store, kernel(X))


def test_bad_input_is_refused_before_work(tmp_path, X):
    path = tmp_path / "gram"
    bad = X.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        GramStore.build(path, bad, RBF())
    with pytest.raises(TypeError, match="kernel must be a kernelref.kernels.Kernel"):
        GramStore.build(path, X, "rbf")
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        GramStore.build(path, X, RBF(), chunk_size=0)
    with pytest.raises(ValueError, match="compressor must be None"):
        GramStore.build(path, X, RBF(), compressor="zstd")
    with pytest.raises(TypeError, match="progress must be a callable"):
        GramStore.build(path, X, RBF(), progress=3)
    assert not path.exists()
    with pytest.raises(ValueError, match="holds no Gram store"):
        GramStore.open(path)


def test_foreign_directory_is_never_cleared(tmp_path, X):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a Gram store.*not cleared"):
        GramStore.build(tmp_path, X, RBF(), overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_block_index_out_of_range(client, tmp_path, X):
    store = GramStore.build(tmp_path / "gram", X, RBF(), chunk_size=CHUNK)
    with pytest.raises(IndexError, match="j must be a block index in 0..3"):
        store.block(0, 4)
