"""Sparse input (scipy.sparse CSR/CSC) gives the model dense input gives.

The linear, polynomial, Gaussian and sigmoid kernels take sparse X, as libsvm
does; every estimator on them must fit the same model (dual coefficients,
support sets, predictions) as on the dense copy, without ever making X dense.
"""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from kernelref.gp import GaussianProcessClassifier, GaussianProcessRegressor
from kernelref.kernels import (
    RBF,
    Constant,
    DotProduct,
    Exp,
    Laplacian,
    Linear,
    Polynomial,
    PolynomialOf,
    Sigmoid,
    White,
)
from kernelref.kpca import KernelPCA
from kernelref.ridge import KernelRidge
from kernelref.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM
from kernelref.svm.platt import PlattCalibrated
from kernelref.svm.problems import KernelRows

KERNELS = ["linear", "poly", "rbf", "sigmoid"]
FORMATS = [sp.csr_matrix, sp.csc_matrix, sp.csr_array, sp.csc_array]
# Dense and sparse runs see Gram rows equal to rounding (~1e-15) and stop at the same
# KKT gap (tol = 1e-8); the multipliers then agree to well within this.
SOLVER_ATOL = 1e-6


def sparse_data(seed=0, n=70, d=40, density=0.15):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < density)
    w = rng.normal(size=d)
    return X, X @ w + 0.1 * rng.normal(size=n)


def kernel_objects():
    return [
        Linear(),
        Polynomial(degree=3, gamma=0.3, coef0=1.0),
        RBF(gamma=0.2),
        Sigmoid(gamma=0.05, coef0=0.1),
        2.0 * RBF(0.2) + White(0.1),
        Constant(0.5) * Polynomial(degree=2, gamma=0.5, coef0=1.0),
        DotProduct(0.7),
        DotProduct(0.5) ** 2 + White(0.1),
        Exp(0.05 * Linear()),
        PolynomialOf(RBF(0.2), [0.5, 1.0, 2.0]),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kernel", kernel_objects(), ids=repr)
def test_sparse_kernel_values_equal_dense(kernel, fmt):
    X, _ = sparse_data()
    Y = X[:9] + (X[:9] != 0) * 0.5
    assert kernel.accepts_sparse
    scale = np.abs(kernel(X)).max()
    np.testing.assert_allclose(kernel(fmt(X)), kernel(X), rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(
        kernel(fmt(X), fmt(Y)), kernel(X, Y), rtol=0, atol=1e-13 * scale
    )
    np.testing.assert_allclose(
        kernel(X, fmt(Y)), kernel(X, Y), rtol=0, atol=1e-13 * scale
    )
    np.testing.assert_allclose(
        kernel.diag(fmt(X)), kernel.diag(X), rtol=1e-14, atol=1e-14
    )
    if len(kernel.theta):
        np.testing.assert_allclose(
            kernel.gradient(fmt(X)), kernel.gradient(X), rtol=0, atol=1e-12 * scale
        )


@pytest.mark.parametrize("kernel", kernel_objects()[:4], ids=repr)
def test_sparse_gram_rows_equal_dense_rows(kernel):
    X, _ = sparse_data(1)
    dense, sparse = KernelRows(kernel, X), KernelRows(kernel, sp.csc_matrix(X))
    for n in range(len(X)):
        np.testing.assert_allclose(sparse.row(n), dense.row(n), rtol=0, atol=1e-12)


def test_kernels_not_built_from_inner_products_refuse_sparse():
    X, y = sparse_data()
    assert not Laplacian().accepts_sparse
    assert not (RBF() + Laplacian()).accepts_sparse
    with pytest.raises(TypeError, match="sparse"):
        SVC(kernel="laplacian").fit(sp.csr_matrix(X), y > 0)
    with pytest.raises(TypeError, match="sparse"):
        KernelRidge(kernel="precomputed").fit(sp.csr_matrix(X @ X.T), y)
    with pytest.raises(TypeError, match="sparse"):
        GaussianProcessRegressor(kernel=Laplacian()).fit(sp.csr_matrix(X), y)


@pytest.mark.parametrize("fmt", [sp.csr_matrix, sp.csc_array, sp.coo_matrix])
def test_complex_sparse_input_is_refused_not_cast(fmt):
    """As a complex dense X: casting to float64 would drop the imaginary parts
    (with only a ComplexWarning)."""
    X, y = sparse_data()
    with pytest.raises(ValueError, match="X is complex.*Complex data not supported"):
        SVR(kernel="rbf").fit(fmt(X + 1j * X), y)
    model = KernelRidge(kernel="linear").fit(fmt(X), y)
    with pytest.raises(ValueError, match="X is complex"):
        model.predict(fmt(X.astype(complex)))


def test_sparse_nan_is_refused_with_its_row():
    X, y = sparse_data()
    Xs = sp.csr_matrix(X)
    Xs.data[Xs.indptr[5]] = np.nan
    with pytest.raises(ValueError, match="row 5"):
        SVR(kernel="rbf").fit(Xs, y)


def _assert_same_svm(dense, sparse, X):
    """Same fitted state, and the same predictions on new points X."""
    np.testing.assert_array_equal(sparse.support_, dense.support_)
    np.testing.assert_allclose(
        sparse.dual_coef_, dense.dual_coef_, rtol=0, atol=SOLVER_ATOL
    )
    np.testing.assert_allclose(
        sparse.intercept_, dense.intercept_, rtol=0, atol=SOLVER_ATOL
    )
    assert sp.issparse(sparse.support_vectors_)
    np.testing.assert_array_equal(
        sparse.support_vectors_.toarray(), dense.support_vectors_
    )
    assert sparse.n_features_in_ == dense.n_features_in_
    np.testing.assert_allclose(
        sparse.decision_function(sp.csr_matrix(X)),
        dense.decision_function(X),
        rtol=0,
        atol=10 * SOLVER_ATOL,
    )
    predicted = sparse.predict(sp.csc_matrix(X))
    if predicted.dtype.kind == "f":  # regression: decision values
        np.testing.assert_allclose(
            predicted, dense.predict(X), rtol=0, atol=10 * SOLVER_ATOL
        )
    else:
        # a point with f = 0 to solver accuracy may take either label
        clear = np.abs(dense.pairwise_decision(X)).min(axis=1) > 100 * SOLVER_ATOL
        assert clear.mean() > 0.9
        np.testing.assert_array_equal(predicted[clear], dense.predict(X)[clear])


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    "make,target",
    [
        (lambda k: SVC(kernel=k, tol=1e-8), "binary"),
        (lambda k: SVC(kernel=k, tol=1e-8), "three"),
        (lambda k: NuSVC(kernel=k, nu=0.3, tol=1e-8), "three"),
        (lambda k: SVR(kernel=k, C=0.3, tol=1e-8), "real"),
        (lambda k: NuSVR(kernel=k, C=0.3, tol=1e-8), "real"),
        (lambda k: OneClassSVM(kernel=k, nu=0.3, tol=1e-8), None),
    ],
    ids=["SVC", "SVC-3", "NuSVC-3", "SVR", "NuSVR", "OneClassSVM"],
)
def test_svm_fits_the_same_model_on_sparse_input(make, target, kernel):
    X, z = sparse_data(2)
    y = {
        "binary": z > 0,
        "three": np.digitize(z, np.quantile(z, [1 / 3, 2 / 3])),
        "real": z,
        None: None,
    }[target]
    fmt = sp.csc_matrix if target == "three" else sp.csr_matrix
    dense, sparse = make(kernel).fit(X, y), make(kernel).fit(fmt(X), y)
    # gamma="scale" from the sparse variance E[x²] − E[x]², equal to rounding
    assert type(sparse.kernel_) is type(dense.kernel_)
    assert getattr(sparse.kernel_, "gamma", 1.0) == pytest.approx(
        getattr(dense.kernel_, "gamma", 1.0), rel=1e-12
    )
    _assert_same_svm(dense, sparse, sparse_data(12)[0])


def test_kkt_report_takes_the_sparse_training_data():
    """kkt_report certifies a model fitted on CSR from that CSR, as from the dense
    array (it refused sparse X as a kernel that takes none, for an RBF kernel)."""
    X, z = sparse_data(2)
    y = np.digitize(z, np.quantile(z, [1 / 3, 2 / 3]))
    model = SVC(gamma=0.5).fit(sp.csr_matrix(X), y)
    from kernelref.svm import kkt_report

    sparse, dense = kkt_report(model, sp.csr_matrix(X), y), kkt_report(model, X, y)
    assert sparse.max_violation == pytest.approx(dense.max_violation, rel=1e-10)
    assert sparse.max_violation < model.tol
    for a, b in zip(sparse.pair_reports, dense.pair_reports):
        assert a.dual_objective == pytest.approx(b.dual_objective, rel=1e-10)


def test_svc_on_sparse_input_agrees_with_libsvm():
    from sklearn.svm import SVC as SklearnSVC

    X, z = sparse_data(3)
    y = z > 0
    ours = SVC(kernel="rbf", gamma="scale", tol=1e-8).fit(sp.csr_matrix(X), y)
    theirs = SklearnSVC(kernel="rbf", gamma="scale", tol=1e-8).fit(sp.csr_matrix(X), y)
    np.testing.assert_array_equal(ours.support_, theirs.support_)
    np.testing.assert_allclose(
        ours.decision_function(sp.csr_matrix(X)),
        theirs.decision_function(sp.csr_matrix(X)),
        atol=1e-5,
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_platt_probabilities_are_the_same_on_sparse_input(kernel):
    """The SVM's probabilities (Platt scaling on cross-validated decision values)
    take the sparse X the wrapped SVC takes, and give the dense probabilities."""
    X, z = sparse_data(9)
    X_test = sparse_data(13)[0]

    def make():
        return PlattCalibrated(SVC(kernel=kernel, tol=1e-8), cv=3, random_state=0)

    three = np.digitize(z, [-1, 1])
    for labels, fmt in ((z > 0, sp.csr_matrix), (three, sp.csc_matrix)):
        dense, sparse = make().fit(X, labels), make().fit(fmt(X), labels)
        np.testing.assert_allclose(
            sparse.predict_proba(fmt(X_test)),
            dense.predict_proba(X_test),
            rtol=0,
            atol=1e-6,
        )
        np.testing.assert_allclose(
            sparse.predict_log_proba(fmt(X_test)),
            dense.predict_log_proba(X_test),
            rtol=1e-6,
            atol=1e-6,
        )


def test_wrappers_take_sparse_input_when_the_wrapped_estimator_does():
    """One-vs-rest and Platt scaling ask the estimator they wrap (its kernel,
    or the default kernel for kernel=None, or the estimator it wraps in turn),
    and give the dense answers; scikit-learn's sparse tag says the same."""
    from kernelref.gp_softmax import SoftmaxGaussianProcessClassifier
    from kernelref.svm.multiclass import OneVsRestClassifier

    X, z = sparse_data(10, n=45, d=12, density=0.3)
    y = np.digitize(z, np.quantile(z, [1 / 3, 2 / 3]))
    X_test = sparse_data(14, n=10, d=12, density=0.3)[0]
    makers = [
        lambda: OneVsRestClassifier(GaussianProcessClassifier(optimizer=None)),
        lambda: PlattCalibrated(
            OneVsRestClassifier(SVC(kernel="linear", tol=1e-8)), cv=3, random_state=0
        ),
    ]
    for make in makers:
        dense, sparse = make().fit(X, y), make().fit(sp.csr_matrix(X), y)
        assert sparse.__sklearn_tags__().input_tags.sparse
        np.testing.assert_allclose(
            sparse.decision_function(sp.csc_matrix(X_test)),
            dense.decision_function(X_test),
            rtol=1e-6,
            atol=1e-6,
        )
    assert SoftmaxGaussianProcessClassifier().__sklearn_tags__().input_tags.sparse
    laplacian = OneVsRestClassifier(SVC(kernel="laplacian"))
    assert not PlattCalibrated(laplacian).__sklearn_tags__().input_tags.sparse
    with pytest.raises(TypeError, match="toarray"):
        PlattCalibrated(laplacian).fit(sp.csr_matrix(X), y)


def test_platt_refuses_sparse_input_when_its_svm_does():
    X, z = sparse_data(9)
    with pytest.raises(TypeError, match="toarray"):
        PlattCalibrated(SVC(kernel="laplacian")).fit(sp.csr_matrix(X), z > 0)


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_ridge_and_kpca_on_sparse_input(kernel):
    X, z = sparse_data(4)
    dense = KernelRidge(lam=0.3, kernel=kernel, gamma=0.1).fit(X, z)
    sparse = KernelRidge(lam=0.3, kernel=kernel, gamma=0.1).fit(sp.csr_matrix(X), z)
    np.testing.assert_allclose(
        sparse.dual_coef_, dense.dual_coef_, rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(
        sparse.predict(sp.csc_matrix(X[:10])),
        dense.predict(X[:10]),
        rtol=1e-10,
        atol=1e-12,
    )
    if kernel == "sigmoid":
        return  # not positive semi-definite: no kernel PCA
    pca_dense = KernelPCA(n_components=4, kernel=kernel, gamma=0.1).fit(X)
    pca_sparse = KernelPCA(n_components=4, kernel=kernel, gamma=0.1).fit(
        sp.csr_matrix(X)
    )
    np.testing.assert_allclose(
        pca_sparse.eigenvalues_, pca_dense.eigenvalues_, rtol=1e-10
    )
    np.testing.assert_allclose(
        pca_sparse.transform(sp.csr_matrix(X[:10])),
        pca_dense.transform(X[:10]),
        rtol=0,
        atol=1e-10,
    )


@pytest.mark.parametrize(
    "kernel",
    [
        1.0 * RBF(0.5) + White(0.1),
        Polynomial(degree=2, gamma=0.5, coef0=1.0) + White(0.1),
        1.0 * Linear() + White(0.1),
        Sigmoid(gamma=0.05, coef0=0.0) + White(0.5),
        DotProduct(0.5) ** 2 + White(0.1),
    ],
    ids=repr,
)
def test_gp_regression_is_the_same_on_sparse_input(kernel):
    """The posterior at fixed θ, and the evidence with its gradient — all that
    ML-II sees — at a θ away from the start."""
    X, z = sparse_data(5, n=40, d=12, density=0.3)
    dense = GaussianProcessRegressor(kernel=kernel, noise=1e-6, optimizer=None).fit(
        X, z
    )
    sparse = GaussianProcessRegressor(kernel=kernel, noise=1e-6, optimizer=None).fit(
        sp.csr_matrix(X), z
    )
    np.testing.assert_allclose(sparse.alpha_, dense.alpha_, rtol=1e-9, atol=1e-12)
    mean_s, std_s = sparse.predict(sp.csc_matrix(X[:8]), return_std=True)
    mean_d, std_d = dense.predict(X[:8], return_std=True)
    np.testing.assert_allclose(mean_s, mean_d, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(std_s, std_d, rtol=1e-9, atol=1e-12)
    theta = dense.kernel_.theta + 0.3
    lml_s, grad_s = sparse.log_marginal_likelihood(theta, eval_gradient=True)
    lml_d, grad_d = dense.log_marginal_likelihood(theta, eval_gradient=True)
    assert lml_s == pytest.approx(lml_d, rel=1e-12)
    np.testing.assert_allclose(grad_s, grad_d, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "kernel",
    [
        1.0 * RBF(0.5),
        0.5 * Linear(),
        Polynomial(degree=2, gamma=0.5, coef0=1.0),
        Sigmoid(gamma=0.05, coef0=0.0),
    ],
    ids=repr,
)
def test_gp_classification_on_sparse_input(kernel):
    X, z = sparse_data(6, n=40, d=12, density=0.3)
    y = np.digitize(z, np.quantile(z, [1 / 3, 2 / 3]))
    for labels in (z > 0, y):
        optimizer = None if isinstance(kernel, Sigmoid) else "L-BFGS-B"
        dense = GaussianProcessClassifier(kernel=kernel, optimizer=optimizer).fit(
            X, labels
        )
        sparse = GaussianProcessClassifier(kernel=kernel, optimizer=optimizer).fit(
            sp.csr_matrix(X), labels
        )
        np.testing.assert_allclose(
            sparse.predict_proba(sp.csr_matrix(X)),
            dense.predict_proba(X),
            rtol=0,
            atol=1e-8,
        )


def test_sparse_input_is_never_made_dense():
    """With two million columns a dense X would take 0.96 GB; every fit and
    prediction here must peak far below that."""
    rng = np.random.default_rng(7)
    n, d, per_row = 60, 2_000_000, 20
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.choice(2000, size=n * per_row) * 997 % d  # spread over all columns
    X = sp.csr_matrix((rng.normal(size=n * per_row), (rows, cols)), shape=(n, d))
    y = np.asarray(X[:, :].sum(axis=1)).ravel() > 0
    dense_bytes = n * d * 8
    fits = [lambda k=k: SVC(kernel=k, gamma=0.1).fit(X, y).predict(X) for k in KERNELS]
    fits += [
        lambda: KernelRidge(kernel="rbf", gamma=0.1).fit(X, y).predict(X),
        lambda: KernelPCA(n_components=3, kernel="rbf", gamma=0.1).fit(X).transform(X),
        lambda: GaussianProcessRegressor(kernel=RBF(0.1), optimizer=None).fit(X, y),
        lambda: (
            PlattCalibrated(SVC(kernel="rbf", gamma=0.1), cv=3)
            .fit(X, y)
            .predict_proba(X)
        ),
    ]
    for fit in fits:
        tracemalloc.start()
        try:
            fit()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < dense_bytes / 10, peak


@pytest.mark.parametrize(
    "kernel",
    [
        1.0 * RBF(0.5),
        0.5 * Linear(),
        Polynomial(degree=2, gamma=0.5, coef0=1.0),
        Sigmoid(gamma=0.05, coef0=0.0) + White(0.5),
    ],
    ids=repr,
)
def test_softmax_gp_classification_on_sparse_input(kernel):
    from kernelref.gp_softmax import SoftmaxGaussianProcessClassifier

    X, z = sparse_data(8, n=40, d=12, density=0.3)
    y = np.digitize(z, np.quantile(z, [1 / 3, 2 / 3]))
    make = SoftmaxGaussianProcessClassifier
    dense = make(kernel=kernel, optimizer=None).fit(X, y)
    sparse = make(kernel=kernel, optimizer=None).fit(sp.csr_matrix(X), y)
    assert sparse.log_marginal_likelihood_value_ == pytest.approx(
        dense.log_marginal_likelihood_value_, rel=1e-12
    )
    np.testing.assert_allclose(
        sparse.predict_proba(sp.csc_matrix(X), method="moderated"),
        dense.predict_proba(X, method="moderated"),
        rtol=0,
        atol=1e-12,
    )
