"""A backend estimator given a ``store=`` made for other data is refused with a
fix it can follow: another ``store=``, or removing the directory. The
estimators take no ``overwrite=`` (``runtime.replace_fix`` says why); the
message names ``overwrite=True`` only for callers of ``FitStore.prepare`` and
``GramStore.build`` themselves. Followed, each fix gives the model of a fresh
fit on the new data.
"""

import shutil

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("zarr")

from backends.dask import SVC, KernelRidge  # noqa: E402
from backends.dask.runtime import StoreMismatchError  # noqa: E402

pytestmark = pytest.mark.slow


def data(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 3))
    return X, np.where(X[:, 0] + 0.3 * rng.normal(size=120) > 0, 1, -1)


FITS = {  # each with a store= of its own kind: a fit store, a Gram store
    "SVC": (lambda **kw: SVC(gamma=0.5, chunk_size=50, **kw), "FitStore.prepare"),
    "KernelRidge cholesky": (
        lambda **kw: KernelRidge(gamma=0.5, solver="cholesky", chunk_size=50, **kw),
        "GramStore.build",
    ),
    "KernelRidge cg": (
        lambda **kw: KernelRidge(gamma=0.5, solver="cg", chunk_size=50, **kw),
        "FitStore.prepare",
    ),
}


@pytest.mark.parametrize("name", FITS)
def test_a_store_for_other_data_is_refused_with_fixes_that_work(name, client, tmp_path):
    make, maker = FITS[name]
    address = client.scheduler.address
    (X1, y1), (X2, y2) = data(1), data(2)
    store = tmp_path / "mine.zarr"
    make(store=store, address=address, progress=False).fit(X1, y1)
    with pytest.raises(ValueError) as refused:
        make(store=store, address=address, progress=False).fit(X2, y2)
    assert isinstance(refused.value, StoreMismatchError)
    message = str(refused.value)
    assert message.startswith(refused.value.mismatch)  # what the CLI rewords
    assert "other data" in message and str(store.resolve()) in message
    assert "another store=" in message and "shutil.rmtree" in message
    # overwrite=True is offered only to whoever calls the store's maker
    assert message.index(f"Calling {maker} yourself") < message.index("overwrite=True")
    with pytest.raises(TypeError, match="overwrite"):
        make(store=store, address=address, overwrite=True)
    assert store.is_dir(), "the refused store is left as it was"

    fresh = make(address=address, progress=False).fit(X2, y2)
    elsewhere = make(store=tmp_path / "other.zarr", address=address, progress=False)
    shutil.rmtree(store)  # the message's other fix
    again = make(store=store, address=address, progress=False)
    for fixed in (elsewhere, again):
        fixed.fit(X2, y2)
        np.testing.assert_allclose(
            fixed.predict(X2), fresh.predict(X2), rtol=1e-10, atol=1e-12
        )
