"""The fast algorithm's loop on the shared runtime: checkpoints, progress, resume.

``kernelref.rvm.fast.FastLoop`` is the reference's loop as ``start``/``step``/
``done``; the β schedules call a *driver* for each run of it
(``fast_schedule(..., drive=)``). ``checkpointed_driver`` is the backend's
driver: each run goes through ``runtime.run_loop`` under its own checkpoint
name, and its state — the model (active set, α, β, the coordinates U and Ψ,
S, Q, H⁻¹ …), the iteration's logs and the record of a held phase's stall rule
(``FastState.peak``) — is stored as arrays and scalars (``encode``, ``decode``),
so that an interrupted fit resumes where it stopped and ends with the model of an
uninterrupted one.
"""

import numpy as np

from backends.dask.runtime import run_loop
from kernelref.rvm.fast import FastState
from kernelref.rvm.fast_steps import FastModel

__all__ = ["checkpointed_driver", "decode", "encode"]


def _plain(value):
    """A numpy scalar as the Python scalar JSON can hold."""
    return value.item() if isinstance(value, np.generic) else value


def encode(state):
    """A ``FastState`` as the numpy arrays and JSON scalars of a checkpoint."""
    out = {}
    for field, value in zip(FastModel._fields, state.model):
        out[f"model_{field}"] = (
            value if isinstance(value, np.ndarray) else _plain(value)
        )
    n = state.n_iter  # a step appends to the logs last: longer logs are not yet kept
    actions = state.actions[:n]
    names = sorted({a for a, _ in actions})  # "add", "delete", …
    peak, peak_at = state.peak if state.peak is not None else (None, None)
    out.update(
        peak=_plain(peak),  # JSON keeps a float exactly (its shortest repr)
        peak_at=peak_at,
        n_iter=n,
        since_beta=state.since_beta,
        converged=bool(state.converged),
        evidence=np.asarray(state.evidence[:n], dtype=float),
        action_names=names,
        action_kind=np.array([names.index(a) for a, _ in actions], dtype=np.int64),
        action_column=np.array([j for _, j in actions], dtype=np.int64),
    )
    return out


def decode(arrays):
    """The ``FastState`` of a checkpoint written by `encode`."""
    model = FastModel(*(arrays[f"model_{field}"] for field in FastModel._fields))
    actions = [
        (arrays["action_names"][k], int(j))
        for k, j in zip(arrays["action_kind"], arrays["action_column"])
    ]
    peak = arrays.get("peak")
    return FastState(
        model,
        int(arrays["n_iter"]),
        int(arrays["since_beta"]),
        bool(arrays["converged"]),
        list(arrays["evidence"]),
        actions,
        None if peak is None else (float(peak), int(arrays["peak_at"])),
    )


class _EncodedStore:
    """The fit store, saving and loading ``FastState`` through `encode`/`decode`."""

    def __init__(self, store):
        self.store = store

    def save_state(self, state, iteration, name):
        self.store.save_state(encode(state), iteration, name)

    def load_state(self, name):
        loaded = self.store.load_state(name)
        return None if loaded is None else (decode(loaded[0]), loaded[1])

    def discard_state(self, name):
        self.store.discard_state(name)


class _RuntimeFit:
    """A ``FastLoop`` with what ``run_loop`` reports: the log evidence and the
    number of basis functions in the model."""

    measure_name, size_name = "log evidence", "basis functions"

    def __init__(self, loop):
        self.loop = loop
        self.start, self.step, self.done = loop.start, loop.step, loop.done

    def measure(self, state):
        return state.model.log_evidence, len(state.model.active)


def checkpointed_driver(store, *, progress, resume, prefix, checkpoint_seconds=5.0):
    """A driver for ``fast_schedule``: each run of the schedule through
    ``run_loop`` with the checkpoint ``<prefix><run name>`` in ``store``."""

    def drive(loop, name):
        state, _ = run_loop(
            _RuntimeFit(loop),
            _EncodedStore(store),
            progress=progress,
            resume=resume,
            checkpoint_seconds=checkpoint_seconds,
            description=f"{prefix}{name}",
            name=f"{prefix}{name}",
        )
        return loop.result(state)

    return drive
