"""Run the installed ``kernelref`` console script on real files."""

import os
import shutil
import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def kernelref_command():
    """The console script installed next to this interpreter (pip install -e .)."""
    found = shutil.which("kernelref", path=os.path.dirname(sys.executable))
    if found is None:
        pytest.fail(
            "the kernelref console script is not installed next to "
            f"{sys.executable}; run pip install -e . (make test does)."
        )
    return found


@pytest.fixture
def run(kernelref_command, tmp_path):
    """``run(*args)`` runs ``kernelref args`` in tmp_path and returns the
    CompletedProcess (text stdout and stderr)."""

    def run(*args, timeout=120):
        return subprocess.run(
            [kernelref_command, *map(str, args)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment(),
        )

    return run


def environment():
    return {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """``cli(*args)`` runs ``kernelref.cli.main(args)`` in this process, in
    tmp_path, and returns (exit status, stdout, stderr): the console script's
    own code without a process start, for the many small cases."""
    from kernelref.cli import main

    monkeypatch.chdir(tmp_path)

    def cli(*args):
        capsys.readouterr()
        try:
            status = main([str(a) for a in args])
        except SystemExit as exit:  # argparse's --help
            status = exit.code
        out, err = capsys.readouterr()
        return status, out, err

    return cli
