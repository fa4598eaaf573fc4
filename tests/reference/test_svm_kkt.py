"""kkt_report certifies SMO's stop: every KKT violation below tol, the gap near 0."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from kernelref.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM, kkt_report


def data(seed=0, n=60):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1, 0)
    z = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, y, z


X, Y, Z = data()
Xm, Ym = make_blobs(n_samples=60, centers=3, cluster_std=1.5, random_state=0)
CASES = {
    "svc": (SVC(C=2.0, tol=1e-5), X, Y),
    "svc-weighted": (SVC(C=2.0, tol=1e-5, class_weight="balanced"), X, Y),
    "nusvc": (NuSVC(nu=0.4, tol=1e-5), X, Y),
    "svc-3-classes": (SVC(C=2.0, tol=1e-5), Xm, Ym),
    "svr": (SVR(C=2.0, epsilon=0.1, tol=1e-5), X, Z),
    "nusvr": (NuSVR(C=2.0, nu=0.4, tol=1e-5), X, Z),
    "one-class": (OneClassSVM(nu=0.3, tol=1e-5), X, None),
}


@pytest.mark.parametrize("name", CASES)
def test_kkt_holds_at_smo_solution(name):
    model, Xd, yd = CASES[name]
    model.fit(Xd, yd)
    report = kkt_report(model, Xd, yd)
    assert report.max_violation < model.tol
    assert report.primal_feasibility.max() < model.tol
    assert report.complementary_slackness.max() < model.tol
    assert report.stationarity.max() < 1e-8 * max(1.0, np.abs(report.dual_objective))
    assert report.duality_gap >= -1e-9 * abs(report.dual_objective)
    assert report.duality_gap <= 1e-4 * max(1.0, abs(report.dual_objective))


def test_kkt_report_sees_a_perturbed_solution():
    model = SVC(C=2.0, tol=1e-5).fit(X, Y)
    exact = kkt_report(model, X, Y)
    model.intercept_ = model.intercept_ + 0.05
    moved = kkt_report(model, X, Y)
    assert moved.max_violation > 0.04 > exact.max_violation
    assert moved.duality_gap > exact.duality_gap + 1e-3
