"""The SMO solver: generic-QP strong duality, monotone objective, shrinking, the cap."""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

from kernelref.kernels import RBF, Sigmoid
from kernelref.svm import problems
from kernelref.svm.solver import ConvergenceWarning, solve


def data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(
        X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.4 * rng.normal(size=n) > 0.3, 1.0, -1.0
    )
    z = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, y, z


def formulations(n=30):
    X, y, z = data(n)
    w = np.ones(n)
    return X, {
        "c-svc": problems.c_svc(y, 2.0 * w),
        "nu-svc": problems.nu_svc(y, 0.4, w),
        "one-class": problems.one_class(0.3, w),
        "eps-svr": problems.epsilon_svr(z, 2.0 * w, 0.1),
        "nu-svr": problems.nu_svr(z, 2.0 * w, 0.4),
    }


X30, FORMS = formulations()
K30 = RBF(0.7)(X30)


def generic_qp(qp, K):
    """min f(α) by SLSQP with the same equalities and box: an independent solver."""
    Q = np.outer(qp.y, qp.y) * K[np.ix_(qp.src, qp.src)]
    cons = [
        {
            "type": "eq",
            "fun": lambda a: qp.y @ a - qp.y @ qp.alpha0,
            "jac": lambda a: qp.y,
        }
    ]
    if qp.nu:
        cons.append(
            {
                "type": "eq",
                "fun": lambda a: a.sum() - qp.alpha0.sum(),
                "jac": lambda a: np.ones_like(a),
            }
        )
    res = minimize(
        lambda a: 0.5 * a @ Q @ a + qp.p @ a,
        qp.alpha0,
        jac=lambda a: Q @ a + qp.p,
        bounds=list(zip(np.zeros(len(qp.C)), qp.C)),
        constraints=cons,
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert res.success, res.message
    return res.fun


@pytest.mark.parametrize("name", FORMS)
def test_smo_objective_equals_a_generic_qp_solver(name):
    qp = FORMS[name]
    s = solve(qp, problems.KernelRows(RBF(0.7), X30), tol=1e-8)
    reference = generic_qp(qp, K30)
    assert s.converged
    assert abs(s.objective - reference) <= 1e-7 * max(1.0, abs(reference))
    assert s.objective <= reference + 1e-9 * max(1.0, abs(reference))
    assert s.objective == pytest.approx(
        problems.dual_objective(qp, K30, s.alpha), rel=1e-12
    )


@pytest.mark.parametrize("name", FORMS)
def test_smo_objective_never_increases(name):
    qp = FORMS[name]
    values = [problems.dual_objective(qp, K30, qp.alpha0)]
    solve(
        qp,
        problems.KernelRows(RBF(0.7), X30),
        tol=1e-8,
        callback=lambda info: values.append(
            problems.dual_objective(qp, K30, info.alpha)
        ),
    )
    steps = np.diff(values)
    assert len(steps) > 5
    assert np.all(steps <= 1e-12 * np.abs(values[1:]).max())
    assert steps.min() < 0


@pytest.mark.parametrize("name", FORMS)
def test_shrinking_on_and_off_give_the_same_solution(name):
    qp = FORMS[name]
    on = solve(qp, problems.KernelRows(RBF(0.7), X30), tol=1e-8, shrinking=True)
    off = solve(qp, problems.KernelRows(RBF(0.7), X30), tol=1e-8, shrinking=False)
    assert on.objective == pytest.approx(off.objective, rel=1e-10)
    np.testing.assert_allclose(on.alpha, off.alpha, atol=1e-6)
    assert on.rho == pytest.approx(off.rho, abs=1e-6)


def test_shrinking_runs_on_a_problem_larger_than_its_interval():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1500, 3))
    y = np.where(X[:, 0] * X[:, 1] + 0.5 * rng.normal(size=1500) > 0, 1.0, -1.0)
    qp = problems.c_svc(y, np.ones(1500))
    on = solve(qp, problems.KernelRows(RBF(0.5), X), tol=1e-5, shrinking=True)
    off = solve(qp, problems.KernelRows(RBF(0.5), X), tol=1e-5, shrinking=False)
    assert on.n_iter > 1000
    assert on.objective == pytest.approx(off.objective, rel=1e-7)


def test_tau_keeps_a_non_psd_kernel_and_duplicates_finite():
    X, y, _ = data(30, seed=2)
    X = np.vstack([X, X[:5]])
    y = np.concatenate([y, y[:5]])
    s = solve(
        problems.c_svc(y, np.ones(35)),
        problems.KernelRows(Sigmoid(2.0, -1.0), X),
        tol=1e-4,
        max_iter=20000,
    )
    assert np.all(np.isfinite(s.alpha)) and np.isfinite(s.rho)
    assert np.all((s.alpha >= 0) & (s.alpha <= 1))


def test_iteration_cap_warns():
    qp = FORMS["c-svc"]
    with pytest.warns(ConvergenceWarning, match="max_iter=3"):
        s = solve(qp, problems.KernelRows(RBF(0.7), X30), tol=1e-8, max_iter=3)
    assert s.n_iter == 3 and not s.converged
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        solve(qp, problems.KernelRows(RBF(0.7), X30), tol=1e-8)
