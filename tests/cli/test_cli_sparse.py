"""Sparse data files on the command line: a libsvm file or a scipy.sparse .npz
(``save_npz``) reaches a model that takes scipy.sparse X as CSR, never dense,
in fit, predict, evaluate and svm-predict; a libsvm test file whose lines stop
before the model's last feature is padded as libsvm's svm-predict pads it; a
model that needs dense X gets it dense, and is refused by name, before any
work, when that would take more than 1 GiB."""

import numpy as np
import pytest
import scipy.sparse as sp
from test_cli import write_libsvm  # tests/cli is on sys.path (rootdir-less test dir)

import kernelref
from kernelref.cli import data

#: features of the wide files: dense, one row would take 800 MB, 40 rows 32 GB
WIDE = 10**8


def wide_problem(n=40, seed=0):
    """CSR X of `n` rows over `WIDE` columns: 30 informative columns among the
    first 60 and one far column per row; labels ±1 and a real target."""
    rng = np.random.default_rng(seed)
    near = sp.random(n, 60, density=0.5, random_state=seed, format="coo")
    rows = np.concatenate([near.row, np.arange(n)])
    far = rng.integers(60, WIDE, n)
    far[-1] = WIDE - 1  # a libsvm file is as wide as its largest index
    columns = np.concatenate([near.col, far])
    values = np.concatenate([near.data, rng.normal(size=n)])
    X = sp.csr_matrix((values, (rows, columns)), shape=(n, WIDE))
    X.sort_indices()
    near = near.tocsr()
    score = np.asarray(near[:, :5].sum(axis=1)).ravel()
    return X, np.where(score > np.median(score), 1, -1), score


def write_sparse_libsvm(path, X, y):
    """One line per CSR row, only its stored entries (write_libsvm loops over
    every column)."""
    with open(path, "w") as f:
        for i, label in enumerate(y):
            row = slice(X.indptr[i], X.indptr[i + 1])
            entries = zip(X.indices[row], X.data[row])
            f.write(
                f"{float(label)!r} "
                + " ".join(f"{j + 1}:{float(v)!r}" for j, v in entries)
            )
            f.write("\n")


CASES = {
    "SVC": ({"gamma": 0.5, "C": 10.0}, "labels", "predict"),
    "KernelRidge": ({"gamma": 0.5, "lam": 0.1}, "score", "predict"),
    "SVR": ({"gamma": 0.5, "C": 10.0}, "score", "predict"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_wide_libsvm_file_is_fitted_and_predicted_sparse(name, cli, tmp_path):
    """40 rows of 10^8 features (32 GB dense): fit, predict and evaluate take
    seconds, the model equals the Python API's fit on the CSR matrix, and the
    model file keeps the training rows sparse. Before, the file was made dense
    (MemoryError)."""
    X, labels, score = wide_problem()
    params, target, _ = CASES[name]
    y = labels if target == "labels" else score
    write_sparse_libsvm(tmp_path / "wide.svm", X, y)
    command = ["fit", name, "--data", "wide.svm", "--out", "m.krm"]
    for key, value in params.items():
        command += ["--param", f"{key}={value}"]
    code, out, err = cli(*command)
    assert code == 0, err
    model = kernelref.load(tmp_path / "m.krm")
    expected = getattr(kernelref, name, None) or getattr(kernelref.svm, name)
    expected = expected(**params).fit(X, y)
    np.testing.assert_allclose(model.predict(X), expected.predict(X), atol=1e-10)
    assert (tmp_path / "m.krm").stat().st_size < 1e6
    code, out, err = cli("predict", "m.krm", "--data", "wide.svm", "--out", "p.npy")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), model.predict(X))
    code, out, err = cli("evaluate", "m.krm", "--data", "wide.svm", "--json")
    assert code == 0 and '"samples": 40' in out, err


def test_svm_predict_keeps_a_wide_test_file_sparse(cli, tmp_path):
    X, labels, _ = wide_problem()
    write_sparse_libsvm(tmp_path / "wide.svm", X, labels)
    code, _, err = cli("svm-train", "-g", "0.5", "-c", "10", "wide.svm", "m.krm")
    assert code == 0, err
    code, out, err = cli("svm-predict", "wide.svm", "m.krm", "out.txt")
    assert code == 0, err
    model = kernelref.load(tmp_path / "m.krm")
    predicted = np.loadtxt(tmp_path / "out.txt")
    np.testing.assert_array_equal(predicted, model.predict(X))
    assert "Accuracy = 100% (40/40)" in out


def test_a_libsvm_test_file_is_padded_to_the_models_features(cli, tmp_path):
    """libsvm lines omit trailing zero features, so a test file may end before
    the model's last column: predict and evaluate pad it, as svm-predict does
    (before, 'X has 7 features, but it is expecting 9')."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 9))
    y = np.where(X[:, 0] > 0, 1, -1)
    write_libsvm(tmp_path / "train.svm", X, y)
    X_test = X[:8].copy()
    X_test[:, 7:] = 0
    write_libsvm(tmp_path / "test.svm", X_test, y[:8])
    assert data.read(tmp_path / "test.svm")[0].shape == (8, 7)
    for model in ("SVC", "RVC"):
        code, _, err = cli("fit", model, "--data", "train.svm", "--out", "m.krm")
        assert code == 0, err
        fitted = kernelref.load(tmp_path / "m.krm")
        code, _, err = cli("predict", "m.krm", "--data", "test.svm", "--out", "p.npy")
        assert code == 0, (model, err)
        np.testing.assert_array_equal(
            np.load(tmp_path / "p.npy"), fitted.predict(X_test)
        )
        code, out, err = cli("evaluate", "m.krm", "--data", "test.svm")
        assert code == 0 and "samples: 8" in out, (model, err)


def test_a_save_npz_file_is_read_as_sparse_X(cli, tmp_path):
    """scipy.sparse.save_npz's file holds X alone: read as CSR for KernelPCA and
    OneClassSVM (fit and predict), dense for a model that needs dense X; a
    target or weight is refused, naming the libsvm format (before: 'holds arrays
    [...] but no X')."""
    X, _, _ = wide_problem(n=30)
    sp.save_npz(tmp_path / "X.npz", X)
    Xr, y = data.read(tmp_path / "X.npz", sparse=True)
    assert sp.issparse(Xr) and y is None and (Xr != X).nnz == 0
    params = {"KernelPCA": ["n_components=3", "gamma=0.5"], "OneClassSVM": []}
    for name, extra in params.items():
        command = ["fit", name, "--data", "X.npz", "--out", f"{name}.krm"]
        command += [f"--param={p}" for p in extra]
        code, _, err = cli(*command)
        assert code == 0, (name, err)
        model = kernelref.load(tmp_path / f"{name}.krm")
        code, _, err = cli(
            "predict", f"{name}.krm", "--data", "X.npz", "--out", f"{name}.npy"
        )
        assert code == 0, (name, err)
        method = model.transform if name == "KernelPCA" else model.predict
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), method(X))
    small = sp.random(20, 6, density=0.4, random_state=1, format="csr")
    sp.save_npz(tmp_path / "small.npz", small)
    Xd, _ = data.read(tmp_path / "small.npz")
    assert isinstance(Xd, np.ndarray) and np.array_equal(Xd, small.toarray())
    code, _, err = cli(
        "fit", "SVC", "--data", "small.npz", "--target", "y", "--out", "s.krm"
    )
    assert code != 0 and "holds X only" in err and "libsvm format" in err
    assert not (tmp_path / "s.krm").exists()


def test_a_model_that_needs_dense_X_is_refused_a_huge_sparse_file(cli, tmp_path):
    """RVR needs dense X: the 32 GB dense form of the wide file is refused before
    any work, naming the models that take sparse X (before: MemoryError)."""
    X, _, score = wide_problem()
    write_sparse_libsvm(tmp_path / "wide.svm", X, score)
    code, _, err = cli("fit", "RVR", "--data", "wide.svm", "--out", "r.krm")
    assert code != 0 and "needs it dense, 29.8 GiB" in err
    assert "KernelRidge" in err and "'rbf'" in err
    assert not (tmp_path / "r.krm").exists()
