"""The fast algorithm's loop on the shared runtime: checkpoints, progress, resume.

``kernelref.rvm.fast.FastLoop`` is the reference's loop as ``start``/``step``/
``done``; the β schedules call a *driver* for each run of it
(``fast_schedule(..., drive=)``). ``checkpointed_driver`` is the backend's
driver: each run goes through ``runtime.run_loop`` under its own checkpoint
name, and its state — the model (active set, α, β, the coordinates U and Ψ,
S, Q, H⁻¹ …), the iteration's logs and the record of a held phase's stall rule
(``FastState.peak``) — is stored as arrays and scalars (``encode``, ``decode``),
so that an interrupted fit resumes where it stopped and ends with the model of an
uninterrupted one. All runs of one driver share one progress bar, which names
the run in words (`describe`) and counts the iterations of them all.
"""

import re

import numpy as np

from backends.dask.runtime import Progress, run_loop
from kernelref.rvm.fast import FastState
from kernelref.rvm.fast_steps import FastModel

__all__ = ["CheckpointedDriver", "checkpointed_driver", "decode", "describe", "encode"]


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


#: The words of the runs' names (``kernelref.rvm.schedules``, ``rvc_fast``).
_WORDS = {
    "held": "β held",
    "released": "β learnt",
    "final": "final pass",
    "swap": "swap pass",
    "update": "β updated",
}


def describe(name):
    """A run's name in words for the bar: 'empty-approximation-13' → 'empty
    start, approximation 13', 'swap-approximation' → 'swap pass',
    'hold-released' → 'hold, β learnt'."""
    match = re.fullmatch(r"(\w+)-approximation-(\d+)", name)
    if match:
        start, n = match.groups()
        where = "after swaps" if start == "swapped" else f"{start} start"
        return f"{where}, approximation {n}"
    if name == "swap-approximation":
        return _WORDS["swap"]
    return ", ".join(_WORDS.get(part, part) for part in name.split("-"))


class CheckpointedDriver:
    """A driver for ``fast_schedule`` and ``fast_classifier``: each run through
    ``run_loop`` with the checkpoint ``<prefix><run name>`` in ``store``, all
    on one progress bar labelled `label` (``runtime.Progress``), opened by the
    first run and closed by `close` (or when the driver is dropped)."""

    def __init__(self, store, *, progress, resume, prefix, label, checkpoint_seconds):
        self.store, self.progress, self.resume = store, progress, resume
        self.prefix, self.label = prefix, label
        self.checkpoint_seconds = checkpoint_seconds
        self.bar = None

    def __call__(self, loop, name):
        fit = _RuntimeFit(loop)
        if self.bar is None:
            self.bar = Progress(
                self.progress, self.label, fit.measure_name, fit.size_name
            )
        state, _ = run_loop(
            fit,
            _EncodedStore(self.store),
            progress=self.bar,
            resume=self.resume,
            checkpoint_seconds=self.checkpoint_seconds,
            description=describe(name),
            name=f"{self.prefix}{name}",
        )
        return loop.result(state)

    def close(self):
        """Close the bar (the next run opens a new one)."""
        bar, self.bar = self.bar, None
        if bar is not None:
            bar.close()

    def __del__(self):
        self.close()


def checkpointed_driver(
    store, *, progress, resume, prefix, label=None, checkpoint_seconds=5.0
):
    """A `CheckpointedDriver`: the runs' checkpoints are ``<prefix><run name>``
    in ``store``; their bar is labelled `label` (default: the prefix's first
    word in capitals, 'RVR' for 'rvr-')."""
    if label is None:
        label = prefix.split("-")[0].upper()
    return CheckpointedDriver(
        store,
        progress=progress,
        resume=resume,
        prefix=prefix,
        label=label,
        checkpoint_seconds=checkpoint_seconds,
    )
