"""A practitioner's audit of the backend's estimators given ``address=``: a
malformed or unreachable scheduler address is refused naming ``address=`` and
the fix (distributed said only 'missing port number in address ...' or 'Timed
out trying to connect to ... after 30 s'), and a reachable one is used."""

import numpy as np
import pytest

import kernelref
from backends.dask import RVR, KernelRidge

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
pytestmark = pytest.mark.slow

rng = np.random.default_rng(24)
X = rng.normal(size=(40, 2))
t = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)


def test_a_malformed_address_names_the_argument():
    with pytest.raises(ValueError, match="address='tcp://head' is not a scheduler"):
        KernelRidge(lam=0.1, address="tcp://head").fit(X, t)
    with pytest.raises(ValueError, match="'tcp://HOST:PORT'"):
        RVR(gamma=0.5, address="http://head:8786").fit(X, t)


def test_an_unreachable_address_names_the_argument_and_the_fix():
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "1s"}),
        pytest.raises(OSError) as refused,
    ):
        KernelRidge(lam=0.1, address="tcp://127.0.0.1:9").fit(X, t)
    message = str(refused.value)
    assert "address='tcp://127.0.0.1:9': no Dask scheduler answered" in message
    assert "`dask scheduler`" in message and "leave address= out" in message


def test_a_scheduler_address_is_used(client, tmp_path):
    model = KernelRidge(
        lam=0.1, gamma=0.5, address=client.scheduler.address, store=tmp_path / "g"
    ).fit(X, t)
    reference = kernelref.KernelRidge(lam=0.1, gamma=0.5).fit(X, t)
    np.testing.assert_allclose(model.dual_coef_, reference.dual_coef_, atol=1e-10)


def test_a_moved_store_is_named_not_called_a_damaged_model_file(client, tmp_path):
    """A model fitted with store=pathlib.Path could not be saved; a Dask GP's
    model file refers to its Cholesky factor in the store by its absolute path,
    and with the store moved, load said the file 'was not written by
    kernelref.save'."""
    from backends.dask import GaussianProcessRegressor
    from kernelref.io import ModelFileError
    from kernelref.kernels import RBF

    model = GaussianProcessRegressor(
        RBF(0.5), noise=0.01, optimizer=None, store=tmp_path / "gp.store"
    ).fit(X, t)
    model.save(tmp_path / "gp.krm")  # refused store=pathlib.Path(...) before
    loaded = kernelref.load(tmp_path / "gp.krm")
    assert loaded.store == str(tmp_path / "gp.store")
    np.testing.assert_allclose(loaded.predict(X), model.predict(X), rtol=1e-12)
    (tmp_path / "gp.store").rename(tmp_path / "moved.store")
    with pytest.raises(ModelFileError) as refused:
        kernelref.load(tmp_path / "gp.krm")
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'gp.krm'}: the model's store ")
    assert "gp.store" in message and "move the store back" in message
    assert "not written by kernelref.save" not in message


def test_a_model_fitted_with_a_progress_callback_is_saved(client, tmp_path):
    """progress= takes a callback; saving the fitted model then failed with
    'cannot save model.progress: a builtins.function ... refit with a named
    kernel', and a one-vs-rest RVC's binary models held it too."""
    from backends.dask import RVC

    records = []
    address = client.scheduler.address
    model = KernelRidge(
        lam=0.1, gamma=0.5, solver="cg", progress=records.append, address=address
    ).fit(X, t)
    labels = np.digitize(X[:, 0], [-0.5, 0.5])
    ovr = RVC(
        gamma=0.5, multi_class="ovr", progress=records.append, address=address
    ).fit(X, labels)
    assert records  # the callbacks ran
    for name, fitted in (("ridge", model), ("rvc", ovr)):
        fitted.save(tmp_path / f"{name}.krm")
        loaded = kernelref.load(tmp_path / f"{name}.krm")
        assert loaded.progress is None and fitted.progress is not None
        np.testing.assert_array_equal(loaded.predict(X), fitted.predict(X))
    assert all(
        e.progress is None for e in kernelref.load(tmp_path / "rvc.krm").estimators_
    )


def test_a_streamed_rvm_pass_sends_no_large_graph(
    client, tmp_path, recwarn, monkeypatch
):
    """distributed warned 'Sending large graph of size 16.91 MiB' on the Dask
    RVR at N = 6500: every pass put its (r, N) argument into the task graph.
    Arguments above ``GRAPH_ARRAY_BYTES`` (1 MiB) now go through the fit
    store, once per pass. Here at N = 2000, both scaled down: the warning's
    threshold to 64 kB, which every pass of this fit passed before (44
    warnings), and ``GRAPH_ARRAY_BYTES`` to 16 kB; the model is the
    reference's."""
    from backends.dask import runtime

    monkeypatch.setattr(runtime, "GRAPH_ARRAY_BYTES", 2**14)
    stored, keep = [], runtime.RoundArguments._keep

    def counted(arguments, a):
        value = keep(arguments, a)
        stored.extend([value] if isinstance(value, runtime.StoredArgument) else [])
        return value

    monkeypatch.setattr(runtime.RoundArguments, "_keep", counted)
    rng = np.random.default_rng(3)
    x = rng.uniform(-10, 10, size=(2000, 1))
    y = np.sinc(x[:, 0] / np.pi) + 0.1 * rng.normal(size=2000)
    store = tmp_path / "rvr"
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "64kB"}):
        model = RVR(gamma=1.0, chunk_size=500, store=store, progress=False)
        model.set_params(address=client.scheduler.address).fit(x, y)
    large = [w for w in recwarn if "Sending large graph" in str(w.message)]
    assert large == []
    # the passes' arguments went through the store, and were removed after each
    # (the directory too: it was left empty)
    assert stored and not (store / "round-arguments").exists()
    reference = kernelref.RVR(gamma=1.0).fit(x, y)
    np.testing.assert_array_equal(model.relevance_, reference.relevance_)
    np.testing.assert_allclose(model.log_evidence_, reference.log_evidence_, rtol=1e-9)
