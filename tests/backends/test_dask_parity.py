"""A reference script moved to the cluster runs unchanged: the Dask estimators take
the reference's arguments and inputs and give its models (small N, the two-worker
``client`` fixture)."""

import pickle

import numpy as np
import pytest
import scipy.sparse

pytest.importorskip("distributed")

import kernelref  # noqa: E402
from backends.dask import (  # noqa: E402
    GaussianProcessClassifier as DaskGaussianProcessClassifier,
)
from backends.dask import (  # noqa: E402
    GaussianProcessRegressor as DaskGaussianProcessRegressor,
)
from backends.dask import KernelPCA as DaskKernelPCA  # noqa: E402
from backends.dask import KernelRidge as DaskKernelRidge  # noqa: E402
from backends.dask import svm as dask_svm  # noqa: E402
from kernelref import svm as reference  # noqa: E402
from kernelref.gp import (  # noqa: E402
    GaussianProcessRegressor as ReferenceGaussianProcessRegressor,
)
from kernelref.gp_classify import (
    GaussianProcessClassifier as ReferenceGaussianProcessClassifier,  # noqa: E402
)
from kernelref.kernels import RBF, Constant  # noqa: E402
from kernelref.kpca import KernelPCA as ReferenceKernelPCA  # noqa: E402
from kernelref.ridge import KernelRidge  # noqa: E402

pytestmark = pytest.mark.slow

SVMS = ["SVC", "NuSVC", "SVR", "NuSVR", "OneClassSVM"]


def three_classes(n=90, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.digitize(X[:, 0] + 0.3 * rng.normal(size=n), [-0.4, 0.4])


@pytest.mark.parametrize("name", SVMS)
def test_svm_takes_every_reference_argument(name):
    ours = set(getattr(dask_svm, name)().get_params())
    assert set(getattr(reference, name)().get_params()) <= ours


@pytest.mark.parametrize("name", ["SVC", "NuSVC"])
def test_break_ties_predicts_as_the_reference(name, client):
    X, y = three_classes()
    params = dict(gamma=0.5, decision_function_shape="ovr", break_ties=True)
    if name == "NuSVC":
        params["nu"] = 0.3
    ref = getattr(reference, name)(**params).fit(X, y)
    ours = getattr(dask_svm, name)(
        **params, progress=False, address=client.scheduler.address
    ).fit(X, y)
    assert ours.get_params()["break_ties"] is True
    grid = np.random.default_rng(1).normal(size=(200, 3))
    np.testing.assert_array_equal(ours.predict(grid), ref.predict(grid))
    ours.set_params(decision_function_shape="ovo")
    with pytest.raises(ValueError, match="break_ties"):
        ours.predict(grid)


def as_list(X):
    return X.tolist()


def as_frame(X):
    pandas = pytest.importorskip("pandas")
    return pandas.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])


def as_csr(X):
    return scipy.sparse.csr_matrix(X)


@pytest.mark.parametrize("convert", [as_list, as_frame, as_csr])
@pytest.mark.parametrize("name", SVMS)
def test_svm_takes_the_reference_inputs(name, convert, client):
    """Lists, pandas frames and CSR matrices fit the model the reference fits on
    them (lists and frames failed on a missing .shape/astype, CSR in the store)."""
    X, y = three_classes()
    if name in ("SVR", "NuSVR"):
        y = np.sin(X[:, 0]) + 0.1 * X[:, 1]
    params = dict(gamma=0.5, tol=1e-6)
    Xc = convert(X)
    ref = getattr(reference, name)(**params).fit(Xc, y)
    ours = getattr(dask_svm, name)(
        **params, progress=False, address=client.scheduler.address
    ).fit(Xc, y)
    assert type(ours.support_vectors_) is type(ref.support_vectors_)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    Xt = convert(np.random.default_rng(2).normal(size=(50, 3)))
    np.testing.assert_allclose(
        ours.decision_function(Xt), ref.decision_function(Xt), atol=1e-5
    )


@pytest.mark.parametrize("solver", ["cholesky", "cg", "nystrom"])
def test_kernel_ridge_takes_sparse_x(solver, client):
    """CSR X fits the model of dense X (the Gram store refused it as a kernel that
    takes no sparse input, the fit stores failed on it): the reference's for the
    exact solvers, the backend's own on the same 40 centres for Nyström."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 6)) * (rng.uniform(size=(120, 6)) < 0.4)
    y = np.sin(X @ rng.normal(size=6))
    params = dict(lam=0.5, gamma=0.5)
    backend = dict(
        solver=solver, n_centres=40, progress=False, address=client.scheduler.address
    )
    ours = DaskKernelRidge(**params, **backend).fit(scipy.sparse.csr_matrix(X), y)
    if solver == "nystrom":
        ref = DaskKernelRidge(**params, **backend).fit(X, y)
        np.testing.assert_array_equal(ours.centre_indices_, ref.centre_indices_)
    else:
        ref = KernelRidge(**params).fit(X, y)
    assert scipy.sparse.issparse(ours.X_fit_)
    Xt = rng.normal(size=(40, 6)) * (rng.uniform(size=(40, 6)) < 0.4)
    for test in (Xt, scipy.sparse.csr_matrix(Xt)):
        np.testing.assert_allclose(ours.predict(test), ref.predict(Xt), atol=1e-8)


def test_kernel_pca_takes_sparse_x(client):
    """CSR X gives the reference's components (the fit store failed on it)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(150, 5)) * (rng.uniform(size=(150, 5)) < 0.5)
    ref = ReferenceKernelPCA(4, gamma=0.5, eigen_solver="dense").fit(X)
    ours = DaskKernelPCA(
        4, gamma=0.5, random_state=0, progress=False, address=client.scheduler.address
    ).fit(scipy.sparse.csr_matrix(X))
    assert scipy.sparse.issparse(ours.X_fit_)
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-6)
    Xt = scipy.sparse.csr_matrix(rng.normal(size=(30, 5)))
    scale = np.abs(ref.transform(Xt)).max()
    np.testing.assert_allclose(
        ours.transform(Xt), ref.transform(Xt), rtol=0, atol=1e-6 * scale
    )


def sparse_rows(n, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)) * (rng.uniform(size=(n, 4)) < 0.5)


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_gp_regressor_takes_sparse_x(solver, client):
    """CSR X and CSR test points give the dense fit's posterior (the backend
    refused CSR with 'sparse input is taken by the ... rbf ... kernels')."""
    X, Xt = sparse_rows(100, 6), sparse_rows(20, 7)
    y = np.sin(X[:, 0]) + X[:, 1]
    # CSR blocks are computed unshifted, dense ones shifted by the mean: they
    # round differently, so two CG solves stopped at the default relative
    # residual 1e-6 differ by about that much; solved to 1e-10 both are within
    # 1e-8 of the exact posterior (tol is unused by the Cholesky solver).
    params = dict(
        kernel=1.0 * RBF(0.5),
        noise=0.01,
        optimizer=None,
        solver=solver,
        tol=1e-10,
        progress=False,
        address=client.scheduler.address,
    )
    dense = DaskGaussianProcessRegressor(**params).fit(X, y)
    ours = DaskGaussianProcessRegressor(**params).fit(scipy.sparse.csr_matrix(X), y)
    mean, std = ours.predict(scipy.sparse.csr_matrix(Xt), return_std=True)
    mean_d, std_d = dense.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, mean_d, atol=1e-8)
    np.testing.assert_allclose(std, std_d, atol=1e-8)


def test_gp_classifier_takes_sparse_x(client):
    """CSR X and CSR test points give the reference's probabilities on CSR."""
    X, Xt = sparse_rows(80, 8), sparse_rows(20, 9)
    y = np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])
    kernel = Constant(1.0) * RBF(0.5)
    Xs, Xts = scipy.sparse.csr_matrix(X), scipy.sparse.csr_matrix(Xt)
    ref = ReferenceGaussianProcessClassifier(kernel=kernel, optimizer=None).fit(Xs, y)
    ours = DaskGaussianProcessClassifier(
        kernel=kernel,
        optimizer=None,
        progress=False,
        address=client.scheduler.address,
    ).fit(Xs, y)
    np.testing.assert_allclose(
        ours.predict_proba(Xts), ref.predict_proba(Xts), atol=1e-6
    )


@pytest.mark.parametrize("name", ["regressor", "classifier"])
def test_saved_gp_predicts_after_the_evidence_at_another_theta(name, client, tmp_path):
    """log_marginal_likelihood(θ') leaves the model's factor alone: it overwrote
    the store's one factor, so a saved model (which opens it read-only) failed
    with 'store was opened in read-only mode' and predicted nothing."""
    X = np.random.default_rng(10).normal(size=(60, 3))
    if name == "regressor":
        y, method = np.sin(X[:, 0]), "predict"
        params = dict(kernel=1.0 * RBF(0.5), noise=0.1, optimizer=None)
        ref = ReferenceGaussianProcessRegressor(**params).fit(X, y)
        model = DaskGaussianProcessRegressor
    else:
        y, method = (X[:, 0] > 0).astype(int), "predict_proba"
        params = dict(kernel=1.0 * RBF(0.5), optimizer=None)
        ref = ReferenceGaussianProcessClassifier(**params).fit(X, y)
        model = DaskGaussianProcessClassifier
    model = model(**params, progress=False, address=client.scheduler.address)
    before = getattr(model.fit(X, y), method)(X)
    model.save(tmp_path / "model.krm")
    theta = model.kernel_.theta + 0.3
    assert model.log_marginal_likelihood(theta) == pytest.approx(
        ref.log_marginal_likelihood(theta), rel=1e-10
    )
    loaded = kernelref.load(tmp_path / "model.krm")
    np.testing.assert_allclose(getattr(loaded, method)(X), before, rtol=0, atol=1e-12)
    np.testing.assert_allclose(getattr(model, method)(X), before, rtol=0, atol=1e-12)


def test_kernel_pca_inverse_transform_equals_the_reference(client):
    """fit_inverse_transform and alpha as in the reference (both were refused by
    __init__, so inverse_transform could not be fitted); alpha = 0 is refused."""
    X = np.random.default_rng(11).normal(size=(150, 3))
    params = dict(n_components=3, gamma=0.5, alpha=0.1, fit_inverse_transform=True)
    ref = ReferenceKernelPCA(eigen_solver="dense", **params).fit(X)
    ours = DaskKernelPCA(
        **params, random_state=0, progress=False, address=client.scheduler.address
    ).fit(X)
    assert {"alpha", "fit_inverse_transform"} <= set(ours.get_params())
    Y = ref.transform(X[:20])
    np.testing.assert_allclose(
        ours.inverse_transform(Y), ref.inverse_transform(Y), rtol=0, atol=1e-6
    )
    with pytest.raises(ValueError, match="alpha"):
        DaskKernelPCA(**{**params, "alpha": 0.0}, address=client.scheduler.address).fit(
            X
        )


@pytest.mark.parametrize("name", ["regressor", "classifier"])
def test_loaded_and_unpickled_gp_give_the_evidence_at_another_theta(
    name, client, tmp_path
):
    """A model from a file or a pickle carries no fit, and log_marginal_likelihood
    (theta) failed with AttributeError '_fit'; it now reopens the fit store."""
    X = np.random.default_rng(12).normal(size=(60, 3))
    if name == "regressor":
        y = np.sin(X[:, 0])
        params = dict(kernel=1.0 * RBF(0.5), noise=0.1, optimizer=None)
        ref = ReferenceGaussianProcessRegressor(**params).fit(X, y)
        model = DaskGaussianProcessRegressor
    else:
        y = np.digitize(X[:, 0], [-0.4, 0.4])
        params = dict(kernel=1.0 * RBF(0.5), optimizer=None)
        ref = ReferenceGaussianProcessClassifier(**params).fit(X, y)
        model = DaskGaussianProcessClassifier
    model = model(**params, progress=False, address=client.scheduler.address)
    model.fit(X, y).save(tmp_path / "model.krm")
    theta = ref.kernel_.theta + 0.3 if name == "regressor" else np.log([2.0, 0.3])
    value, gradient = ref.log_marginal_likelihood(theta, eval_gradient=True)
    for copy in (
        kernelref.load(tmp_path / "model.krm"),
        pickle.loads(pickle.dumps(model)),
    ):
        mine, mine_gradient = copy.log_marginal_likelihood(theta, eval_gradient=True)
        assert mine == pytest.approx(value, rel=1e-10)
        np.testing.assert_allclose(mine_gradient, gradient, rtol=1e-8, atol=1e-10)


def test_matrix_free_gp_saves_and_its_copies_give_evidence_and_variance(
    client, tmp_path
):
    """solver='cg': save refused the fit store handle ('cannot save
    model._fit_store'), and an unpickled model's log_marginal_likelihood(theta)
    failed with AttributeError '_record'. Copies now reopen the fit store."""
    X = np.random.default_rng(13).normal(size=(60, 3))
    y = np.sin(X[:, 0])
    params = dict(kernel=1.0 * RBF(0.5), noise=0.1, optimizer=None)
    ref = ReferenceGaussianProcessRegressor(**params).fit(X, y)
    model = DaskGaussianProcessRegressor(
        **params, solver="cg", progress=False, address=client.scheduler.address
    ).fit(X, y)
    model.save(tmp_path / "model.krm")
    theta = model.kernel_.theta + 0.3
    copies = [kernelref.load(tmp_path / "model.krm"), pickle.loads(pickle.dumps(model))]
    values = [c.log_marginal_likelihood(theta) for c in copies]
    # the estimate of the fitted model itself, computed afresh (probes are seeded)
    assert values == pytest.approx([model.log_marginal_likelihood(theta)] * 2, rel=1e-5)
    for c in copies:
        std = c.predict(X[:10], return_std=True)[1]
        np.testing.assert_allclose(
            std, ref.predict(X[:10], return_std=True)[1], atol=1e-8
        )


@pytest.mark.parametrize("convert", [as_list, as_csr])
def test_cluster_kkt_report_takes_the_reference_inputs(convert, client):
    """backends.dask.svm.kkt_report of a model fitted on CSR or a list certifies it
    from that input as from the dense array (it failed in the fit store)."""
    X, y = three_classes()
    model = dask_svm.SVC(
        gamma=0.5, progress=False, address=client.scheduler.address
    ).fit(convert(X), y)
    address = client.scheduler.address
    theirs = dask_svm.kkt_report(model, X, y, address=address)
    mine = dask_svm.kkt_report(model, convert(X), y, address=address)
    assert mine.max_violation == pytest.approx(theirs.max_violation, rel=1e-10)
    assert mine.max_violation < model.tol
    for a, b in zip(mine.pair_reports, theirs.pair_reports):
        assert a.dual_objective == pytest.approx(b.dual_objective, rel=1e-10)


@pytest.mark.parametrize(
    "backend, ref",
    [
        (DaskKernelRidge, KernelRidge),
        (DaskKernelPCA, ReferenceKernelPCA),
        (DaskGaussianProcessRegressor, ReferenceGaussianProcessRegressor),
        (DaskGaussianProcessClassifier, ReferenceGaussianProcessClassifier),
    ],
)
def test_estimator_takes_every_reference_argument(backend, ref):
    """KernelPCA lacked eigen_solver (and alpha, fit_inverse_transform)."""
    assert set(ref().get_params()) <= set(backend().get_params())


def test_kernel_pca_checks_eigen_solver_as_the_reference(client, tmp_path):
    X = np.random.default_rng(14).normal(size=(50, 3))
    address = client.scheduler.address
    model = DaskKernelPCA(2, eigen_solver="arpack", progress=False, address=address)
    ref = ReferenceKernelPCA(2, eigen_solver="arpack").fit(X)
    np.testing.assert_allclose(model.fit(X).eigenvalues_, ref.eigenvalues_, rtol=1e-6)
    store = tmp_path / "fit.zarr"
    with pytest.raises(ValueError, match="eigen_solver"):
        DaskKernelPCA(2, eigen_solver="lobpcg", store=store, address=address).fit(X)
    assert not store.exists()
