"""Model files: every estimator saves and loads without pickle and predicts
bit-identically; damaged, foreign and newer files are refused by name."""

import os
import pickle
import struct

import numpy as np
import pytest

import kernelref
from kernelref import io
from kernelref.base import BaseEstimator
from kernelref.gp import GaussianProcessClassifier, GaussianProcessRegressor
from kernelref.gp_softmax import SoftmaxGaussianProcessClassifier
from kernelref.kernels import RBF, Kernel, Linear, Polynomial
from kernelref.kfda import KernelFisherDiscriminant
from kernelref.kpca import KernelPCA
from kernelref.nadaraya_watson import NadarayaWatson
from kernelref.ridge import KernelRidge
from kernelref.rvm import RVC, RVR
from kernelref.structured import (
    DiscreteHMM,
    GaussianMixture,
    Graph,
    HMMFisherKernel,
    IntersectionKernel,
    MixtureKernel,
    RandomWalkKernel,
    SpectrumKernel,
)
from kernelref.svm import (
    SVC,
    SVR,
    NuSVC,
    NuSVR,
    OneClassSVM,
    OneVsRestClassifier,
    PlattCalibrated,
)

rng = np.random.default_rng(0)
X = rng.normal(size=(40, 2))
X_new = rng.normal(size=(9, 2))
t = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
y2 = (X[:, 0] + X[:, 1] > 0).astype(int)
y3 = np.digitize(X[:, 0], [-0.4, 0.4])
labels3 = np.array(["a", "b", "c"])[y3]

# (estimator, X, y, X_new): every estimator and every mode whose fitted state differs.
CASES = {
    "KernelRidge": (KernelRidge(lam=0.1, gamma=0.5), X, t, X_new),
    "KernelRidge-composite": (
        KernelRidge(lam=0.1, kernel=2.0 * RBF(0.5) + Linear() * Polynomial(2)),
        X,
        t,
        X_new,
    ),
    "NadarayaWatson": (NadarayaWatson(gamma=2.0), X, t, X_new),
    "KernelPCA": (KernelPCA(n_components=3, gamma=0.5), X, None, X_new),
    "GaussianProcessRegressor": (
        GaussianProcessRegressor(1.0 * RBF(1.0), noise=0.01, normalize_y=True),
        X,
        t,
        X_new,
    ),
    "GaussianProcessClassifier": (GaussianProcessClassifier(RBF(1.0)), X, y2, X_new),
    "GaussianProcessClassifier-3": (
        GaussianProcessClassifier(RBF(1.0), optimizer=None),
        X,
        labels3,
        X_new,
    ),
    "SVC": (SVC(C=10, gamma=0.5), X, y2, X_new),
    "SVC-3-ovr": (
        SVC(C=1, gamma=0.5, decision_function_shape="ovo"),
        X,
        labels3,
        X_new,
    ),
    "NuSVC": (NuSVC(nu=0.3, kernel="poly", degree=2), X, y3, X_new),
    "SVR": (SVR(C=1, epsilon=0.05), X, t, X_new),
    "NuSVR": (NuSVR(nu=0.4, kernel="linear"), X, t, X_new),
    "OneClassSVM": (OneClassSVM(nu=0.2, gamma=0.5), X, None, X_new),
    "OneVsRestClassifier": (OneVsRestClassifier(SVC(gamma=0.5)), X, labels3, X_new),
    "PlattCalibrated": (
        PlattCalibrated(SVC(gamma=0.5), cv=3, random_state=0),
        X,
        y2,
        X_new,
    ),
    "KernelFisherDiscriminant": (
        KernelFisherDiscriminant(gamma=0.5),
        X,
        labels3,
        X_new,
    ),
    "SoftmaxGaussianProcessClassifier": (
        SoftmaxGaussianProcessClassifier(RBF(1.0), optimizer=None),
        X,
        labels3,
        X_new,
    ),
    "RVR-fast": (RVR(gamma=0.5), X, t, X_new),
    "RVR-em": (RVR(gamma=0.5, method="em", max_iter=2000, tol=1e-2), X, t, X_new),
    "RVR-reestimate": (
        RVR(kernel="linear", method="reestimate", bias=False),
        X,
        t,
        X_new,
    ),
    "RVC-binary": (RVC(gamma=0.5), X, y2, X_new),
    "RVC-softmax": (RVC(gamma=0.5), X, labels3, X_new),
    "RVC-ovr": (RVC(gamma=0.5, multi_class="ovr", method="reestimate"), X, y3, X_new),
    "SVC-strings": (
        SVC(kernel=SpectrumKernel(n=2), C=1.0),
        np.array(["abab", "abba", "bbbb", "aaab", "baba", "abbb"], dtype=object),
        np.array([0, 1, 1, 0, 0, 1]),
        ["abaa", "bbba"],
    ),
    "KernelRidge-sets": (
        KernelRidge(lam=0.1, kernel=IntersectionKernel()),
        [frozenset({1, 2}), frozenset({2, 3}), frozenset({1, 3, 4})],
        np.array([0.0, 1.0, 2.0]),
        [frozenset({1}), frozenset({3, 4})],
    ),
    "SVR-graphs": (
        SVR(kernel=RandomWalkKernel(lam=0.05)),
        [
            Graph(np.array([[0, 1], [1, 0]]), labels="xy", alphabet="xy"),
            Graph(
                np.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]]), labels="xxy", alphabet="xy"
            ),
        ],
        np.array([1.0, 2.0]),
        [Graph(np.array([[0.0]]), labels="y", alphabet="xy")],
    ),
    "KernelRidge-mixture": (
        KernelRidge(
            lam=0.1,
            kernel=MixtureKernel(
                GaussianMixture(
                    np.array([0.3, 0.7]),
                    np.array([[0.0, 0.0], [1.0, 1.0]]),
                    np.array([1.0, 2.0]),
                )
            ),
        ),
        X,
        t,
        X_new,
    ),
    "SVC-hmm": (
        SVC(
            kernel=HMMFisherKernel(
                DiscreteHMM(
                    np.array([0.6, 0.4]),
                    np.array([[0.7, 0.3], [0.2, 0.8]]),
                    np.array([[0.9, 0.1], [0.3, 0.7]]),
                ),
                reference=[(0, 1, 1), (1, 0), (0, 0, 1, 1), (1, 1, 1, 0), (0, 1, 0)],
            )
        ),
        [(0, 0, 1), (1, 1, 1), (0, 1), (1, 1, 0, 1)],
        np.array([0, 1, 0, 1]),
        [(0, 1, 0)],
    ),
}


def outputs(model, X_new):
    """Every prediction the model offers on `X_new`."""
    out = {}
    for name in ("predict", "decision_function", "predict_proba", "transform"):
        if hasattr(model, name):
            out[name] = getattr(model, name)(X_new)
    if isinstance(model, (GaussianProcessRegressor, RVR)):
        out["std"] = model.predict(X_new, return_std=True)[1]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_loaded_model_predicts_bit_identically(case, tmp_path):
    estimator, X_fit, y_fit, X_test = CASES[case]
    model = estimator.fit(X_fit) if y_fit is None else estimator.fit(X_fit, y_fit)
    path = tmp_path / "model.krm"
    model.save(path)
    loaded = kernelref.load(path)
    assert type(loaded) is type(model)
    assert loaded.get_params(deep=False).keys() == model.get_params(deep=False).keys()
    expected, got = outputs(model, X_test), outputs(loaded, X_test)
    assert expected and expected.keys() == got.keys()
    for name in expected:
        assert np.array_equal(np.asarray(got[name]), np.asarray(expected[name])), name
        assert np.asarray(got[name]).dtype == np.asarray(expected[name]).dtype, name
    assert os.listdir(tmp_path) == ["model.krm"]  # no temporary left


def test_file_holds_no_pickle_and_names_the_estimator(tmp_path):
    model = SVC(gamma=0.5).fit(X, y2)
    path = model.save(tmp_path / "svc.krm", provenance={"data": {"sha256": "abc"}})
    header = io.read_header(path)
    assert (
        header["format"] == "kernelref.model" and header["version"] == io.FORMAT_VERSION
    )
    assert header["estimator"] == "kernelref.svm.estimators:SVC"
    assert header["kernel"]["class"] == "RBF"
    assert header["provenance"]["data"] == {"sha256": "abc"}
    assert header["provenance"]["library_version"] == kernelref.__version__
    assert b"\x80\x04\x95" not in path.read_bytes()  # pickle protocol 4 frame


def test_kernel_spec_round_trip():
    kernel = 2.0 * RBF(0.5) + Linear() * Polynomial(degree=2, gamma=0.1)
    assert Kernel.from_spec(kernel.spec()) == kernel
    with pytest.raises(ValueError, match="unknown kernel 'os.system'"):
        Kernel.from_spec({"class": "os.system", "params": {}})


@pytest.fixture
def saved(tmp_path):
    return KernelRidge(lam=0.1, gamma=0.5).fit(X, t).save(tmp_path / "ridge.krm")


def test_truncated_file_is_refused(saved):
    saved.write_bytes(saved.read_bytes()[:-100])
    with pytest.raises(io.ModelFileError, match=f"{saved}.* is truncated"):
        kernelref.load(saved)


def test_corrupted_file_is_refused(saved):
    raw = bytearray(saved.read_bytes())
    raw[-200] ^= 1
    saved.write_bytes(bytes(raw))
    with pytest.raises(io.ModelFileError, match=f"{saved} is corrupted.*checksum"):
        kernelref.load(saved)


def test_future_version_is_refused(saved):
    raw = bytearray(saved.read_bytes())
    raw[8:12] = struct.pack("<I", io.FORMAT_VERSION + 1)
    saved.write_bytes(bytes(raw))
    with pytest.raises(
        io.ModelFileError, match="version 2, newer .* upgrade kernelref"
    ):
        kernelref.load(saved)


def test_renamed_pickle_is_refused_without_unpickling(tmp_path):
    path = tmp_path / "model.krm"
    path.write_bytes(pickle.dumps(KernelRidge()))
    with pytest.raises(io.ModelFileError, match="looks like a Python pickle"):
        kernelref.load(path)


def test_class_outside_kernelref_is_never_resolved():
    with pytest.raises(ValueError, match="outside kernelref"):
        io._resolve("os:system", object)
    with pytest.raises(ValueError, match="not an allowed kernelref class"):
        io._resolve("kernelref.io:ModelFileError", Kernel)


def test_unsaveable_attribute_is_named(tmp_path):
    model = GaussianProcessClassifier(
        RBF(1.0), optimizer=lambda f, x0, b: (x0, f(x0)[0])
    )
    model.fit(X, y2)
    with pytest.raises(TypeError, match="cannot save model.optimizer: a .*function"):
        model.save(tmp_path / "gpc.krm")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kind", ["csr_matrix", "csr_array"])
def test_sparse_training_data_round_trip(kind, tmp_path):
    import scipy.sparse

    X_sparse = getattr(scipy.sparse, kind)(np.where(np.abs(X) > 0.7, X, 0.0))
    model = SVC(kernel="linear").fit(X_sparse, y2)
    loaded = kernelref.load(model.save(tmp_path / "sparse.krm"))
    assert type(loaded.support_vectors_) is type(model.support_vectors_)
    assert (loaded.support_vectors_ != model.support_vectors_).nnz == 0
    assert np.array_equal(
        loaded.decision_function(X_sparse), model.decision_function(X_sparse)
    )


def test_backend_model_loads_as_its_reference_class_without_the_backend(
    tmp_path, monkeypatch
):
    backend = pytest.importorskip("backends.dask")
    reference = KernelRidge(lam=0.1, gamma=0.5).fit(X, t)
    model = backend.KernelRidge(lam=0.1, gamma=0.5, chunk_size=16, solver="cg")
    for name in ("dual_coef_", "X_fit_", "kernel_", "n_features_in_"):
        setattr(model, name, getattr(reference, name))
    path = model.save(tmp_path / "backend.krm")
    assert type(kernelref.load(path)) is backend.KernelRidge
    assert io.read_header(path)["model"]["reference"] == "kernelref.ridge:KernelRidge"

    resolve = io._resolve

    def without_backends(path, base):
        if path.startswith("backends."):
            raise ImportError("No module named 'dask'")
        return resolve(path, base)

    monkeypatch.setattr(io, "_resolve", without_backends)
    loaded = kernelref.load(path)
    assert type(loaded) is KernelRidge
    assert loaded.get_params() == reference.get_params()
    assert np.array_equal(loaded.predict(X_new), reference.predict(X_new))

    # where no backend is registered, its package is outside the allowed ones
    monkeypatch.setattr(io, "_resolve", resolve)
    monkeypatch.setattr("kernelref.cli.plugins.packages", lambda: [])
    with pytest.raises(ValueError, match="outside kernelref and the registered"):
        io._resolve("backends.dask.ridge:KernelRidge", BaseEstimator)
    assert type(kernelref.load(path)) is KernelRidge


def test_registered_backend_packages_come_from_entry_points():
    pytest.importorskip("backends.dask")
    from kernelref.cli import plugins

    assert "backends.dask" in plugins.packages()
    assert io._allowed_packages()[0] == "kernelref"


def test_state_cannot_replace_methods(saved):
    import hashlib
    import json

    raw = saved.read_bytes()
    size = struct.unpack_from("<Q", raw, 16)[0]
    header = json.loads(raw[24 : 24 + size])
    header["model"]["state"]["predict"] = 1
    forged = json.dumps(header).encode()
    body = raw[:16] + struct.pack("<Q", len(forged)) + forged + raw[24 + size : -32]
    saved.write_bytes(body + hashlib.sha256(body).digest())
    with pytest.raises(io.ModelFileError, match="'predict' is not an attribute"):
        kernelref.load(saved)


@pytest.mark.parametrize(
    "estimator", [SVC(kernel="precomputed"), NuSVR(kernel="precomputed")]
)
def test_a_model_with_an_empty_array_round_trips(estimator, tmp_path):
    """A precomputed-kernel SVM keeps support_vectors_ of shape (0, 0); saving it
    failed with 'memoryview: cannot cast view with zeros in shape or strides'."""
    K = X @ X.T
    model = estimator.fit(K, y2 if isinstance(estimator, SVC) else X[:, 0])
    assert model.support_vectors_.size == 0
    model.save(tmp_path / "model.krm")
    loaded = kernelref.load(tmp_path / "model.krm")
    assert loaded.support_vectors_.shape == model.support_vectors_.shape
    assert np.array_equal(loaded.predict(K), model.predict(K))
