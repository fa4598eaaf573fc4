"""The README's Dask example copied into a script without the
``if __name__ == "__main__":`` guard: each worker process of the embedded
cluster imports the script and reached the fit again; the user got 475 lines
of tracebacks ending in 'RuntimeError: Nanny failed to start.'. Now the last
line names the fix, and the workers say it in one line each instead of
multiprocessing's page."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow

SCRIPT = """\
import numpy as np
from backends.dask import KernelRidge

rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, size=(50, 1))
t = np.sin(X[:, 0])
KernelRidge(lam=0.1, gamma=0.5, solver="cg").fit(X, t)
print("fitted")
"""


def test_an_unguarded_script_is_told_to_guard_its_fit(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "script.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )
    assert done.returncode != 0 and "fitted" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: the embedded Dask cluster's worker")
    assert 'put the code that fits under `if __name__ == "__main__":`' in last
    assert "An attempt has been made to start a new process" not in done.stderr
