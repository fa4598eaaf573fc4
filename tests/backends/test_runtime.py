"""The shared runtime of long fits: the fit store, checkpoints, the loop, progress."""

import hashlib
import json

import numpy as np
import pytest

pytest.importorskip("zarr")

from backends.dask.runtime import FitStore, Progress, Record, read_chunk, run_loop


def store_for(path, X, identity=None, **arrays):
    return FitStore.prepare(
        path,
        X,
        identity=identity or {"fit": "test"},
        chunk_size=64,
        client=None,
        arrays=arrays,
    )


def test_data_is_written_once_in_row_chunks_and_read_back(tmp_path):
    X = np.random.default_rng(0).normal(size=(300, 3))
    y = np.arange(300.0)
    store = store_for(tmp_path / "s", X, y=y)
    assert store.n_chunks == 5 and store.rows(4) == slice(256, 300)
    np.testing.assert_array_equal(
        np.concatenate([read_chunk(store.x_ref, i) for i in range(5)]), X
    )
    np.testing.assert_array_equal(store.read("y"), y)
    again = store_for(tmp_path / "s", X, y=y)
    assert again.x_ref == store.x_ref, "the same data is not written again"


def test_store_of_other_data_or_another_fit_is_refused(tmp_path):
    X = np.ones((100, 2))
    store_for(tmp_path / "s", X, {"fit": "svc", "C": 1.0})
    with pytest.raises(ValueError, match=r"holds other data.*\['X'\]"):
        store_for(tmp_path / "s", X + 1, {"fit": "svc", "C": 1.0})
    with pytest.raises(ValueError, match=r"holds another fit.*\['C'\]"):
        store_for(tmp_path / "s", X, {"fit": "svc", "C": 2.0})
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a kernelref fit store"):
        store_for(tmp_path / "other", X)


def test_overwrite_replaces_a_fit_store_for_another_fit_and_nothing_else(tmp_path):
    """Without ``overwrite`` a store for other data, another fit or another chunk
    size is refused, naming ``overwrite=True``, and left as it was; with it, it is
    replaced (data and checkpoints), while a store for this very fit is opened
    with its checkpoint, a fit store whose zarr.json is unreadable is replaced,
    and a directory that is not a fit store is never cleared (as
    ``GramStore.build``'s ``overwrite``)."""

    def prepare(path, X, identity, chunk_size=64, overwrite=False):
        return FitStore.prepare(
            path,
            X,
            identity=identity,
            chunk_size=chunk_size,
            client=None,
            arrays={"y": X[:, 0] * 2},
            overwrite=overwrite,
        )

    X = np.random.default_rng(1).normal(size=(100, 2))
    path = tmp_path / "s"
    first = prepare(path, X, {"fit": "svc", "C": 1.0})
    first.save_state({"alpha": np.arange(3.0)}, 4)
    for other, identity, chunk_size, match in [
        (X + 1, {"fit": "svc", "C": 1.0}, 64, r"other data.*\['X', 'y'\]"),
        (X, {"fit": "svc", "C": 2.0}, 64, r"another fit.*\['C'\]"),
        (X, {"fit": "svc", "C": 1.0}, 32, r"other data.*\['chunk_size'\]"),
    ]:
        with pytest.raises(ValueError, match=match + ".*overwrite=True"):
            prepare(path, other, identity, chunk_size)
    same = prepare(path, X, {"fit": "svc", "C": 1.0}, overwrite=True)
    assert same.x_ref == first.x_ref, "this fit's own store is not rewritten"
    assert same.load_state()[1] == 4, "and keeps its checkpoint"

    replaced = prepare(path, X + 1, {"fit": "svc", "C": 2.0}, 32, overwrite=True)
    assert replaced.x_ref.token != first.x_ref.token and replaced.chunk_size == 32
    assert replaced.attrs["identity"] == {"fit": "svc", "C": 2.0}
    assert replaced.load_state() is None, "the other fit's checkpoint is gone"
    assert not list(path.glob("state*"))
    np.testing.assert_array_equal(
        np.concatenate([read_chunk(replaced.x_ref, i) for i in range(4)]), X + 1
    )
    np.testing.assert_array_equal(replaced.read("y"), (X + 1)[:, 0] * 2)
    again = prepare(path, X + 1, {"fit": "svc", "C": 2.0}, 32)
    assert again.x_ref == replaced.x_ref, "the replacement is a complete store"

    (path / "zarr.json").write_text('{"attributes": {"form')  # a write cut short
    with pytest.raises(ValueError, match="unreadable zarr.json"):
        prepare(path, X, {"fit": "svc"})
    mended = prepare(path, X, {"fit": "svc"}, overwrite=True)
    np.testing.assert_array_equal(mended.read("y"), X[:, 0] * 2)

    import zarr

    zarr.open_group(store=str(tmp_path / "zarr"), mode="w", attributes={"a": 1})
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    (tmp_path / "broken").mkdir()  # unreadable, and neither X nor a checkpoint
    (tmp_path / "broken" / "zarr.json").write_text("{")
    (tmp_path / "broken" / "notes.txt").write_text("mine")
    for directory, match in [
        ("other", "not a kernelref fit store.*never cleared"),
        ("zarr", "Zarr group but not a kernelref fit store"),
        ("broken", "unreadable zarr.json"),
    ]:
        kept = sorted((tmp_path / directory).rglob("*"))
        with pytest.raises(ValueError, match=match):
            prepare(tmp_path / directory, X, {"fit": "svc"}, overwrite=True)
        assert sorted((tmp_path / directory).rglob("*")) == kept


def test_checkpoints_round_trip_and_a_damaged_one_is_refused(tmp_path):
    store = store_for(tmp_path / "s", np.ones((10, 2)))
    assert store.load_state() is None
    state = {"alpha": np.arange(5.0), "previous": np.array([], np.int64), "gap": 0.5}
    store.save_state(state, 7)
    loaded, iteration = store.load_state()
    assert iteration == 7 and loaded["gap"] == 0.5
    np.testing.assert_array_equal(loaded["alpha"], state["alpha"])
    assert loaded["previous"].dtype == np.int64 and loaded["previous"].size == 0
    store.save_state({**state, "gap": 0.25}, 8)
    assert len(list(store.path.glob("state-*"))) == 1, "older checkpoints are removed"
    record = json.loads((store.path / "state.checkpoint.json").read_text())
    record["sha256"]["alpha"] = "0" * 64
    (store.path / "state.checkpoint.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="checkpoint.*damaged.*resume=False"):
        store.load_state()
    store.discard_state()
    assert store.load_state() is None
    assert not list(store.path.glob("state*")), "discard removes every file"


def test_a_state_key_may_be_any_name_and_an_earlier_zarr_checkpoint_loads(tmp_path):
    import zarr

    store = store_for(tmp_path / "s", np.ones((10, 2)))
    state = {"file": np.arange(3), "allow_pickle": np.eye(2), "n": 4}
    store.save_state(state, 2)
    loaded, _ = store.load_state()
    np.testing.assert_array_equal(loaded["file"], state["file"])
    np.testing.assert_array_equal(loaded["allow_pickle"], state["allow_pickle"])
    # A checkpoint as the version before wrote it: a Zarr group of arrays.
    group = zarr.open_group(store=str(store.path / "old-0"), mode="w")
    group.create_array("alpha", shape=(3,), chunks=(3,), dtype="<f8")[...] = [1, 2, 3]
    record = {
        "group": "old-0",
        "iteration": 5,
        "arrays": {"alpha": [[3], "<f8"]},
        "scalars": {"gap": 0.5},
        "sha256": {
            "alpha": hashlib.sha256(np.array([1.0, 2, 3]).tobytes()).hexdigest()
        },
    }
    (store.path / "old.checkpoint.json").write_text(json.dumps(record))
    loaded, iteration = store.load_state("old")
    assert iteration == 5 and loaded["gap"] == 0.5
    np.testing.assert_array_equal(loaded["alpha"], [1.0, 2, 3])
    store.save_state(loaded, 6, "old")  # the new format replaces the group
    assert [p.suffix for p in store.path.glob("old-*")] == [".npz"]


class Counter:
    """A fit that adds one per step and stops at `stop`."""

    measure_name, size_name = "left", "count"

    def __init__(self, stop, fail_at=None):
        self.stop, self.fail_at, self.starts = stop, fail_at, 0

    def start(self):
        self.starts += 1
        return {"x": np.zeros(3), "k": 0}

    def step(self, state):
        if state["k"] + 1 == self.fail_at:
            raise KeyboardInterrupt
        return {"x": state["x"] + 1, "k": state["k"] + 1}

    def done(self, state):
        return state["k"] >= self.stop

    def measure(self, state):
        return float(self.stop - state["k"]), int(state["k"])


def test_an_interrupted_loop_resumes_from_its_last_complete_state(tmp_path):
    store = store_for(tmp_path / "s", np.ones((10, 2)))
    with pytest.raises(KeyboardInterrupt):
        run_loop(Counter(10, fail_at=4), store, progress=False, checkpoint_seconds=1e9)
    assert store.load_state()[1] == 3, "the state before the failed step is saved"
    fit = Counter(10)
    records = []
    state, n_iter = run_loop(fit, store, progress=records.append)
    assert fit.starts == 0 and n_iter == 10 and state["k"] == 10
    assert [r.iteration for r in records] == list(range(4, 11))
    assert isinstance(records[0], Record) and records[-1].measure == 0.0
    fresh = Counter(10)
    run_loop(fresh, store, progress=False, resume=False)
    assert fresh.starts == 1


def test_progress_refuses_what_it_cannot_use():
    with pytest.raises(TypeError, match="progress must be"):
        Progress("yes", "fit")
    with Progress(False, "fit") as quiet:
        quiet.update(1, 0.5, 3)
        assert quiet.bar is None


def test_round_arguments_leave_no_directory_behind(tmp_path, monkeypatch):
    """A fit store kept an empty ``round-arguments/`` after every fit whose
    passes had large arguments. The directory now goes with the last round of
    the process that has it open, never while another round may write into it,
    and never with files in it that this round did not write."""
    from backends.dask import runtime

    monkeypatch.setattr(runtime, "GRAPH_ARRAY_BYTES", 1000)
    store = store_for(tmp_path / "s", np.ones((10, 2)))
    directory = tmp_path / "s" / "round-arguments"
    big, small = np.arange(200.0), np.arange(3.0)
    with runtime.RoundArguments(store, (big, small, "kernel")) as first:
        stored, kept, text = first.values
        assert kept is small and text == "kernel"
        np.testing.assert_array_equal(runtime.with_arguments(np.copy, stored), big)
        with runtime.RoundArguments(store, (2 * big,)):
            assert len(list(directory.iterdir())) == 2
        assert [p.name for p in directory.iterdir()] == [first.paths[0].name]
    assert not directory.exists()
    with runtime.RoundArguments(store, (big,)):  # made again by the next round
        (directory / "left-by-a-killed-fit.npy").write_bytes(b"")
    assert [p.name for p in directory.iterdir()] == ["left-by-a-killed-fit.npy"]
    assert not runtime.RoundArguments._open  # nothing counted as open
