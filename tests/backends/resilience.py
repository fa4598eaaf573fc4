"""Progress callbacks that interrupt a backend fit or kill one of its workers,
shared by the backend tests of interruption and resilience."""

import os
import signal


class Interrupted(Exception):
    """What an interrupting callback raises (a user's Ctrl-C, say)."""


class StopInRun:
    """A progress callback raising `Interrupted` at ``iteration`` of the
    ``run``-th run of a fit made of several loops (an RVM's Gaussian
    approximations or β phases), each numbering its iterations from 1.

    ``calls`` keeps every iteration number seen, so a test can tell which
    records came before the stop (`runs_before_stop`).
    """

    def __init__(self, run, iteration):
        self.run, self.iteration = run, iteration
        self.calls = []

    def __call__(self, record):
        self.calls.append(record.iteration)
        if self.calls.count(1) == self.run and record.iteration == self.iteration:
            raise Interrupted

    def records_before_stopped_run(self):
        """How many records the runs finished before the stopped one gave."""
        starts = [i for i, n in enumerate(self.calls) if n == 1]
        return starts[self.run - 1]


def kill_a_worker(client):
    """SIGKILL one worker process of `client`'s cluster by its pid; the pid."""
    pids = client.run(os.getpid)
    pid = pids[sorted(pids)[0]]
    os.kill(pid, signal.SIGKILL)
    return pid
