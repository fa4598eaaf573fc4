"""A refused scipy.sparse X is told why, on its own path, and what to do.

Three reasons differ: the estimator's path needs dense X whatever the kernel (an
RVM), the path takes sparse X but not with this kernel (an SVM with a Laplacian
kernel), or X is a precomputed Gram matrix. Each message names the argument,
the reason that holds, and the fix; none blames a kernel that takes sparse X.
"""

import importlib
import pkgutil
import re

import numpy as np
import pytest
import scipy.sparse as sp

import kernelref
from kernelref import _validation
from kernelref.base import BaseEstimator
from kernelref.gp import GaussianProcessClassifier, GaussianProcessRegressor
from kernelref.gp_softmax import SoftmaxGaussianProcessClassifier
from kernelref.kernels import SPARSE_KERNEL_NAMES, Kernel, Laplacian, Matern
from kernelref.kpca import KernelPCA
from kernelref.nadaraya_watson import NadarayaWatson
from kernelref.ridge import KernelRidge
from kernelref.rvm import RVC, RVR
from kernelref.structured import SpectrumKernel
from kernelref.svm import SVC, SVR, OneVsRestClassifier
from kernelref.svm.kkt import kkt_report
from kernelref.svm.platt import PlattCalibrated

rng = np.random.default_rng(0)
X = rng.normal(size=(24, 3))
y = np.where(X[:, 0] > 0, 1, -1)
X_sparse = sp.csr_matrix(X * (np.abs(X) > 0.5))

DENSE_PATH = re.escape(
    "X is a scipy.sparse matrix, but this path needs dense input. Pass a dense "
    "array (X.toarray()). The estimators that take sparse X are the SVMs"
)


def kernel_refusal(kernel):
    return re.escape(
        f"X is a scipy.sparse matrix, but the kernel {kernel!r} is not computed "
        "from inner products and needs dense input. Pass a dense array "
        "(X.toarray()), or use a kernel that takes sparse X: 'linear', 'poly', "
        "'rbf' or 'sigmoid'"
    )


@pytest.mark.parametrize(
    "estimator", [RVR(kernel="rbf"), RVC(kernel="rbf"), NadarayaWatson(kernel="rbf")]
)
def test_a_dense_path_says_so_and_does_not_blame_its_rbf_kernel(estimator):
    target = y if isinstance(estimator, RVC) else X[:, 0]
    with pytest.raises(TypeError, match=DENSE_PATH) as info:
        estimator.fit(X_sparse, target)
    assert "the kernel 'rbf'" not in str(info.value)


@pytest.mark.parametrize(
    "estimator",
    [
        SVC(kernel="laplacian"),
        SVR(kernel=Laplacian(0.5)),
        KernelRidge(kernel="laplacian"),
        KernelPCA(kernel=Matern(1.0)),
        GaussianProcessRegressor(kernel=Matern(1.0), optimizer=None),
        GaussianProcessClassifier(kernel=Laplacian(0.5), optimizer=None),
        SoftmaxGaussianProcessClassifier(kernel=Matern(1.0), optimizer=None),
    ],
)
def test_a_sparse_path_names_the_kernel_that_needs_dense_input(estimator):
    with pytest.raises(TypeError, match=kernel_refusal(estimator.kernel)):
        estimator.fit(X_sparse, y)


def test_prediction_names_the_fitted_kernel():
    model = SVC(kernel="laplacian").fit(X, y)
    with pytest.raises(TypeError, match=kernel_refusal(model.kernel_)):
        model.predict(X_sparse)
    with pytest.raises(TypeError, match=kernel_refusal(model.kernel_)):
        kkt_report(model, X_sparse, y)


def test_a_wrapper_names_the_kernel_of_the_svm_it_wraps():
    with pytest.raises(TypeError, match=kernel_refusal("laplacian")):
        PlattCalibrated(SVC(kernel="laplacian")).fit(X_sparse, y)
    with pytest.raises(TypeError, match=DENSE_PATH):
        OneVsRestClassifier(RVC()).fit(X_sparse, y)


def test_a_precomputed_gram_matrix_is_taken_dense():
    gram = X @ X.T
    message = re.escape(
        "X is a scipy.sparse matrix, but with kernel='precomputed' it is a Gram "
        "matrix, which is taken dense. Pass X.toarray()."
    )
    with pytest.raises(TypeError, match=message):
        SVC(kernel="precomputed").fit(sp.csr_matrix(gram), y)
    model = SVC(kernel="precomputed").fit(gram, y)
    with pytest.raises(TypeError, match=message):
        model.predict(sp.csr_matrix(gram))


def test_a_kernel_on_objects_asks_for_a_list_of_samples():
    with pytest.raises(TypeError, match="SpectrumKernel compares objects.*list"):
        KernelRidge(kernel=SpectrumKernel(2)).fit(X_sparse, X[:, 0])


def test_sparse_input_with_a_kernel_on_inner_products_is_still_taken():
    dense = SVC(kernel="rbf", gamma=0.5).fit(X_sparse.toarray(), y)
    sparse = SVC(kernel="rbf", gamma=0.5).fit(X_sparse, y)
    np.testing.assert_array_equal(sparse.support_, dense.support_)


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_the_messages_list_exactly_what_takes_sparse_input():
    """SPARSE_ESTIMATORS and SPARSE_KERNELS are prose; they must name every
    estimator declaring ``sparse_input`` and every kernel declaring
    ``accepts_sparse`` (composites inherit theirs), and nothing else."""
    for module in pkgutil.walk_packages(kernelref.__path__, "kernelref."):
        importlib.import_module(module.name)
    phrase = {
        "_BaseSVM": "the SVMs",
        "KernelRidge": "KernelRidge",
        "KernelPCA": "KernelPCA",
        "GaussianProcessRegressor": "the Gaussian processes",
        "GaussianProcessClassifier": "the Gaussian processes",
        "SoftmaxGaussianProcessClassifier": "the Gaussian processes",
    }
    declared = {
        c.__name__ for c in _subclasses(BaseEstimator) if c.__dict__.get("sparse_input")
    }
    assert declared == set(phrase)
    assert all(words in _validation.SPARSE_ESTIMATORS for words in phrase.values())
    sparse_kernels = {
        c.__name__
        for c in _subclasses(Kernel)
        if c.__dict__.get("accepts_sparse") is True
    }
    listed = re.findall(r"\b[A-Z]\w+", _validation.SPARSE_KERNELS.split("objects")[1])
    assert set(listed) == sparse_kernels
    for name in set(SPARSE_KERNEL_NAMES) - {"polynomial"}:
        assert f"'{name}'" in _validation.SPARSE_KERNELS
