"""The softmax RVC of ``backends.dask`` equals the reference's, takes one pass per
Gaussian approximation for its norms, Φ̃ᵀt̃ and warm start, resumes after an
interruption and survives a lost worker with the same model.

The backend runs the reference's fast path on ``KroneckerDesign`` over its
streamed design (``backends.dask.rvm.softmax``): the same relevance vectors and
kept weights, α to 1e-8 relative, the Laplace evidence to 1e-8 relative.
"""

import os
import re
import sys
import textwrap

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("zarr")

from resilience import Interrupted, StopInRun, kill_a_worker  # noqa: E402
from terminal import stderr_on_a_terminal as terminal_run  # noqa: E402

from backends.dask import rvm as dask_rvm  # noqa: E402
from backends.dask.runtime import FitStore  # noqa: E402
from backends.dask.rvm.design import StreamedDesign  # noqa: E402
from backends.dask.rvm.softmax import streamed_softmax_approximation  # noqa: E402
from kernelref import rvm as reference  # noqa: E402
from kernelref.kernels import RBF  # noqa: E402
from kernelref.rvm.coordinates import orthonormal_coordinates  # noqa: E402
from kernelref.rvm.design import design_matrix  # noqa: E402
from kernelref.rvm.softmax import Softmax, one_hot  # noqa: E402
from kernelref.rvm.softmax_design import KroneckerDesign  # noqa: E402

pytestmark = pytest.mark.slow

#: The classes and kernel of the approximations checked alone.
K, KERNEL = 3, RBF(0.5)


def three_classes(n, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]])
    y = rng.integers(0, 3, n)
    return centres[y] + rng.normal(size=(n, 2)), y


def whitening_problem(seed):
    """Three classes, 120 points, and activations a to whiten them at."""
    X, y = three_classes(120, seed=seed)
    rng = np.random.default_rng(seed + 1)
    return X, 2 * rng.normal(size=len(X) * K), one_hot(y, K)


def streamed_base(X, client):
    """A fit store of X and the StreamedDesign Φ on it (c = 1), the softmax
    designs' base."""
    store = FitStore.prepare(None, X, identity={"t": 1}, chunk_size=50, client=client)
    return store, StreamedDesign(X, X.mean(axis=0), KERNEL, True, store, client, False)


def test_softmax_approximation_takes_one_pass_and_equals_the_reference(client):
    X, a, t = whitening_problem(1)
    active = np.array([0, 5, 22, 100, 301])
    rng = np.random.default_rng(3)
    store, base = streamed_base(X, client)
    try:
        passes = base.counts["passes"]
        unit, scales, t_tilde = streamed_softmax_approximation(
            KroneckerDesign(base, K), a, t, Softmax(K), active
        )
        U, Psi = orthonormal_coordinates(unit, active)
        PhiT_t = t_tilde @ unit
        assert base.counts["passes"] == passes + 1, "norms, Φ̃ᵀt̃ and Ψ: one pass"
        assert unit.coordinates(active[:3]) is None  # another model: not kept
        V = rng.normal(size=(2, len(t)))
        product = V @ unit  # any other product: one pass more
        assert base.counts["passes"] == passes + 2
    finally:
        store.remove_if_temporary()
    Phi = KroneckerDesign(design_matrix(KERNEL, X, X, True), K)
    dense, dense_scales, dense_t = Phi.whitened(a, t, Softmax(K))
    np.testing.assert_allclose(scales, dense_scales, rtol=1e-12)
    np.testing.assert_array_equal(t_tilde, dense_t)
    np.testing.assert_allclose(PhiT_t, t_tilde @ dense, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(product, V @ dense, rtol=1e-12, atol=1e-12)
    columns = dense[:, active]
    np.testing.assert_allclose(U.T @ U, np.eye(len(active)), atol=1e-13)
    np.testing.assert_allclose(U @ (U.T @ columns), columns, atol=1e-12)
    np.testing.assert_allclose(Psi, U.T @ dense, atol=1e-12)


def softmax_params(client):
    return dict(
        gamma=0.5,
        multi_class="softmax",
        chunk_size=50,
        address=client.scheduler.address,
    )


def test_gram_rows_are_those_of_the_whitened_design_and_independent_of_batch(
    client,
):
    X, a, t = whitening_problem(5)
    store, base = streamed_base(X, client)
    try:
        designs = [
            streamed_softmax_approximation(KroneckerDesign(base, K), a, t, Softmax(K))[
                0
            ]
            for _ in range(2)
        ]
        designs[0].expect([9, 3, 200, 12, 301])  # row 3 shares its pass with 4
        passes = base.counts["passes"]
        batched = designs[0].gram_row(3)
        assert base.counts["passes"] == passes + 1
        assert len(designs[0]._rows) == 5
        kept = designs[0].gram_row(301)  # formed in the same pass
        assert base.counts["passes"] == passes + 1
        alone = designs[1].gram_row(3)
        assert len(designs[1]._rows) == 1
        kept_alone = designs[1].gram_row(301)  # at rows 0-2, not 12-14, of a pass
    finally:
        store.remove_if_temporary()
    np.testing.assert_array_equal(batched, alone)  # bit for bit: resumes agree
    np.testing.assert_array_equal(kept, kept_alone)
    dense = KroneckerDesign(design_matrix(KERNEL, X, X, True), K)
    dense = dense.whitened(a, t, Softmax(K))[0]
    np.testing.assert_allclose(alone, dense[:, 3] @ dense, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(kept, dense[:, 301] @ dense, rtol=1e-12, atol=1e-13)


def assert_same_softmax(backend, ref, X):
    np.testing.assert_array_equal(backend.relevance_, ref.relevance_)
    np.testing.assert_array_equal(backend.kept_weights_, ref.kept_weights_)
    assert backend.bias_used_ == ref.bias_used_
    assert backend.n_iter_ == ref.n_iter_
    assert backend.n_loop_iter_ == ref.n_loop_iter_
    np.testing.assert_allclose(backend.alpha_, ref.alpha_, rtol=1e-8)
    np.testing.assert_allclose(backend.mu_, ref.mu_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(backend.log_evidence_, ref.log_evidence_, rtol=1e-8)
    np.testing.assert_allclose(
        backend.predict_proba(X), ref.predict_proba(X), rtol=1e-6, atol=1e-12
    )


def test_softmax_rvc_equals_reference(client):
    X, y = three_classes(150)
    ref = reference.RVC(gamma=0.5, multi_class="softmax").fit(X, y)
    backend = dask_rvm.RVC(progress=False, **softmax_params(client)).fit(X, y)
    assert_same_softmax(backend, ref, X)
    assert len(ref.classes_) == 3 and 0 < len(ref.relevance_) < len(X) / 4


def test_interrupted_softmax_rvc_resumes_to_the_same_model(client, tmp_path):
    X, y = three_classes(150, seed=3)
    params = softmax_params(client)
    clean_records = []
    clean = dask_rvm.RVC(progress=clean_records.append, **params).fit(X, y)
    stop = StopInRun(run=3, iteration=2)  # in the third approximation
    store = tmp_path / "fit.zarr"
    with pytest.raises(Interrupted):
        dask_rvm.RVC(store=store, progress=stop, **params).fit(X, y)
    records = []
    resumed = dask_rvm.RVC(store=store, progress=records.append, **params).fit(X, y)
    # the two approximations run before the stop are not run again
    finished = stop.records_before_stopped_run()
    assert finished > 0 and len(records) <= len(clean_records) - finished
    assert resumed.n_iter_ == clean.n_iter_
    np.testing.assert_array_equal(resumed.relevance_, clean.relevance_)
    np.testing.assert_array_equal(resumed.kept_weights_, clean.kept_weights_)
    np.testing.assert_array_equal(resumed.alpha_, clean.alpha_)
    np.testing.assert_array_equal(resumed.evidence_, clean.evidence_)


def test_killed_worker_gives_the_same_softmax_model(client):
    X, y = three_classes(150, seed=4)
    params = softmax_params(client)
    clean = dask_rvm.RVC(progress=False, **params).fit(X, y)
    killed, calls = [], []

    def kill_one(record):
        calls.append(record.iteration)
        if calls.count(1) == 2 and not killed:
            killed.append(kill_a_worker(client))

    survivor = dask_rvm.RVC(progress=kill_one, **params).fit(X, y)
    assert killed
    np.testing.assert_array_equal(survivor.relevance_, clean.relevance_)
    np.testing.assert_array_equal(survivor.kept_weights_, clean.kept_weights_)
    np.testing.assert_array_equal(survivor.alpha_, clean.alpha_)
    np.testing.assert_array_equal(survivor.evidence_, clean.evidence_)
    client.wait_for_workers(2, timeout=60)
    assert killed[0] not in client.run(os.getpid).values()  # gone, and replaced


# -- progress ----------------------------------------------------------------------
BAR_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from backends.dask import RVC
    rng = np.random.default_rng(5)
    centres = np.array([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]])
    y = rng.integers(0, 3, 60)
    X = centres[y] + rng.normal(size=(60, 2))
    for multi_class in ("softmax", "ovr"):
        model = RVC(gamma=0.5, multi_class=multi_class, address=sys.argv[1]).fit(X, y)
        print(np.sum(model.n_loop_iter_))
""")


def stderr_on_a_terminal(command):
    """Run `command` with stderr on a pseudo-terminal of 24 × 200; (stdout,
    what it wrote on the terminal)."""
    out, terminal, status = terminal_run(command, columns=200)
    assert status == 0, out
    return out, terminal


def final_lines(terminal):
    """The lines a closed tqdm bar leaves: the last redraw before each newline."""
    return [line.rstrip("\r").split("\r")[-1] for line in terminal.split("\n")[:-1]]


def test_progress_bar_names_the_machine_and_the_approximation(client):
    """One bar per fit (softmax) or per class (one-vs-rest, as the SVMs' 'SVC
    2/3'), named in words ('RVC softmax: empty start, approximation 4'), never
    by checkpoint ('rvc-empty-approximation-4'), counting the iterations of
    all its Gaussian approximations; before, each approximation drew a bar of
    its own labelled by its checkpoint."""
    pytest.importorskip("tqdm")
    command = [sys.executable, "-c", BAR_SCRIPT, client.scheduler.address]
    out, terminal = stderr_on_a_terminal(command)  # a softmax fit, then one-vs-rest
    assert "rvc-" not in terminal and "approximation-" not in terminal
    assert "start, approximation 2" in terminal and "log evidence=" in terminal
    lines = final_lines(terminal)
    labels = ["RVC softmax", "RVC 1/3", "RVC 2/3", "RVC 3/3"]
    assert [line.split(":")[0] for line in lines] == labels
    counted = [int(re.search(r"(\d+)it ", line).group(1)) for line in lines]
    softmax_iterations, ovr_iterations = map(int, out.split())
    # every approximation's loop iterations, on the fit's or the class's bar
    assert counted[0] == softmax_iterations and sum(counted[1:]) == ovr_iterations
