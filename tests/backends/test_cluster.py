"""The cluster helper: nothing at import, the active client reused, an address
honoured, and an embedded cluster sized to the machine."""

import subprocess
import sys
import textwrap

import pytest

distributed = pytest.importorskip("distributed")

from backends.dask.cluster import get_client, machine_size  # noqa: E402


def run_python(tmp_path, source):
    """Run `source` as a script in a fresh interpreter; return its stdout."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_starts_nothing(tmp_path):
    out = run_python(
        tmp_path,
        """
        import threading
        import psutil
        import backends.dask
        import backends.dask.cluster
        import backends.dask.gram_store
        import distributed
        try:
            distributed.get_client()
            print("client")
        except ValueError:
            print("no client")
        print(len(psutil.Process().children()), threading.active_count())
    """,
    )
    client_line, counts = out.split("\n")[:2]
    assert client_line == "no client"
    assert counts == "0 1", "importing the backend started processes or threads"


def test_active_client_is_reused(client):
    assert get_client() is client


def test_address_of_active_client_gives_it_back(client):
    assert get_client(client.scheduler.address) is client


def test_address_is_honoured(client):
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as other:
        other_client = get_client(other.scheduler_address)
        try:
            assert other_client.scheduler.address == other.scheduler_address
            assert other_client is not client
            assert get_client(other.scheduler_address) is other_client
            assert other_client.submit(sum, [1, 2, 3]).result() == 6
            # The session's client stays the default one.
            assert get_client() is client
        finally:
            other_client.close()


def test_address_must_be_a_string():
    with pytest.raises(TypeError, match="address must be a scheduler address"):
        get_client(8786)


def test_embedded_cluster_is_sized_to_machine_and_reused(tmp_path):
    from distributed.system import MEMORY_LIMIT

    n_workers, memory_limit = machine_size()
    assert memory_limit * n_workers == pytest.approx(0.8 * MEMORY_LIMIT, rel=1e-6)
    out = run_python(
        tmp_path,
        """
        from backends.dask.cluster import get_client

        if __name__ == "__main__":
            client = get_client()
            again = get_client()
            workers = client.scheduler_info()["workers"].values()
            print(again is client, len(workers),
                  sorted({w["nthreads"] for w in workers}),
                  sorted({w["memory_limit"] for w in workers}))
    """,
    )
    assert out.split() == ["True", str(n_workers), "[1]", f"[{memory_limit}]"]


@pytest.mark.slow
def test_embedded_cluster_closes_quietly_with_results_held(tmp_path):
    """A script (or `kernelref fit -q`) that exits holding results on the embedded
    cluster writes nothing to stderr: before, the scheduler warned that removing
    each worker lost computed tasks (every run of this script)."""
    script = tmp_path / "held.py"
    script.write_text(
        textwrap.dedent(
            """
            import numpy as np
            from backends.dask.cluster import get_client

            if __name__ == "__main__":
                client = get_client()
                held = client.map(np.ones, range(1, 20))
                print(sum(a.sum() for a in client.gather(held)))
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.split() == ["190.0"]
    assert result.stderr == ""
