"""The β schedules' choice among runs tied to rounding (`best_run`); the Dask
backend's parity tests (tests/backends/test_dask_rvm.py) depend on it."""

from kernelref.rvm.schedules import best_run


class Run:
    def __init__(self, log_evidence):
        self.log_evidence = log_evidence


def test_best_run_keeps_the_last_of_runs_tied_to_rounding():
    runs = [Run(-684.1121546969865), Run(-684.1121546969864), Run(-690.0)]
    assert best_run(runs) is runs[1]
    runs = [Run(-684.1121546969864), Run(-684.1121546969865)]
    assert best_run(runs) is runs[1]  # the later, though a ulp lower
    runs = [Run(-684.0), Run(-684.001)]
    assert best_run(runs) is runs[0]  # a real difference decides
    runs = [Run(0.0), Run(-5e-11), Run(-2e-10)]
    assert best_run(runs) is runs[1]  # at least 1e-10 nats near L = 0
