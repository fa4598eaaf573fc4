"""The command line's cost, side by side.

Targets (issue 13): ``kernelref svm-train`` adds less than 0.5 s to the fit it
runs — measured against the Python API's ``SVC.fit`` on the same libsvm file
and against scikit-learn's libsvm (the stand-in for libsvm's ``svm-train``) —
and loading a model file of 100 000 support vectors takes under a second.
The timings alternate so that load from other processes falls on all alike.
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import kernelref
from kernelref.cli.data import read_libsvm
from kernelref.svm import SVC


def write_libsvm(path, X, y):
    with open(path, "w") as f:
        for row, label in zip(X, y):
            f.write(
                f"{label:+d} "
                + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(row))
                + "\n"
            )


def timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def command_overhead(directory, n, d, repeats):
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(n, d)), 6)
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1, -1)
    data = os.path.join(directory, "train.svm")
    write_libsvm(data, X, y)
    command = [
        shutil.which("kernelref", path=os.path.dirname(sys.executable)),
        "svm-train",
        "-q",
        "-s",
        "0",
        "-t",
        "2",
        "-g",
        "0.1",
        "-c",
        "1",
        data,
        os.path.join(directory, "m.krm"),
    ]
    from sklearn.svm import SVC as LibsvmSVC

    def python_api():
        X_read, y_read = read_libsvm(data)
        SVC(C=1, gamma=0.1).fit(X_read, y_read.astype(int)).save(
            os.path.join(directory, "p.krm")
        )

    times = {
        "kernelref svm-train (command)": [],
        "kernelref SVC.fit (Python, read+fit+save)": [],
        "scikit-learn libsvm SVC.fit (in memory)": [],
    }
    for _ in range(repeats):
        times["kernelref svm-train (command)"].append(
            timed(lambda: subprocess.run(command, check=True))
        )
        times["kernelref SVC.fit (Python, read+fit+save)"].append(timed(python_api))
        times["scikit-learn libsvm SVC.fit (in memory)"].append(
            timed(lambda: LibsvmSVC(C=1, gamma=0.1).fit(X, y))
        )
    best = {name: min(values) for name, values in times.items()}
    cpu = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    start = time.process_time()
    python_api()
    cpu_python = time.process_time() - start
    cpu_import = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import kernelref.svm"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_import.append(
            after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        )
    print(f"svm-train, RBF C-SVC, N={n}, D={d} (best of {repeats})")
    for name, value in best.items():
        print(f"  {name:44s} {value:8.3f} s")
    overhead = (
        best["kernelref svm-train (command)"]
        - best["kernelref SVC.fit (Python, read+fit+save)"]
    )
    print(f"  command-line overhead = {overhead:.3f} s wall (target < 0.5 s)")
    print(
        f"  CPU time: command {min(cpu):.3f} s, Python API {cpu_python:.3f} s, "
        f"overhead {min(cpu) - cpu_python:.3f} s "
        "(less sensitive to other processes' load)"
    )
    print(
        "  of which starting Python and importing kernelref.svm: "
        f"{min(cpu_import):.3f} s CPU"
    )
    ratio = (
        best["kernelref svm-train (command)"]
        / best["scikit-learn libsvm SVC.fit (in memory)"]
    )
    print(f"  ratio kernelref command / scikit-learn libsvm = {ratio:.2f}")


def load_time(directory, n_support, d, repeats):
    """A fitted SVC's state with `n_support` support vectors, saved and loaded."""
    rng = np.random.default_rng(1)
    model = SVC(C=1, gamma=0.1).fit(rng.normal(size=(40, d)), np.arange(40) % 2)
    model.support_vectors_ = rng.normal(size=(n_support, d))
    model.support_ = np.arange(n_support, dtype=np.int32)
    model.dual_coef_ = rng.normal(size=(1, n_support))
    model.n_support_ = np.array(
        [n_support // 2, n_support - n_support // 2], dtype=np.int32
    )
    path = os.path.join(directory, "big.krm")
    save = min(timed(lambda: model.save(path)) for _ in range(repeats))
    load = min(timed(lambda: kernelref.load(path)) for _ in range(repeats))
    loaded = kernelref.load(path)
    assert np.array_equal(loaded.support_vectors_, model.support_vectors_)
    size = os.path.getsize(path) / 2**20
    print(
        f"model file with {n_support} support vectors × {d} features ({size:.0f} MiB), "
        f"best of {repeats}"
    )
    print(f"  save {save:8.3f} s")
    print(f"  load {load:8.3f} s (target < 1 s)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--support", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print("(timings on a shared machine are noisy; compare the rows of one run)")
    with tempfile.TemporaryDirectory() as directory:
        command_overhead(directory, args.n, args.d, args.repeats)
        load_time(directory, args.support, args.d, args.repeats)


if __name__ == "__main__":
    main()
