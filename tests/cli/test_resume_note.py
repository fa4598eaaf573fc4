"""The note an interrupted ``kernelref fit`` prints: a calibration with random
folds is not resumed by running the command again, and says so."""

import argparse

import pytest

from kernelref.cli import commands
from kernelref.svm import SVC
from kernelref.svm.platt import PlattCalibrated


def interrupted(estimator, store="m.krm.store"):
    args = argparse.Namespace(quiet=False)
    with pytest.raises(KeyboardInterrupt):
        with commands._resume_note(args, store, estimator):
            raise KeyboardInterrupt


@pytest.mark.parametrize("estimator", [SVC(), PlattCalibrated(SVC(), random_state=0)])
def test_a_resumable_fit_names_its_checkpoint(estimator, capsys):
    interrupted(estimator)
    err = capsys.readouterr().err
    assert "last checkpoint is in m.krm.store: run the same command again" in err


def test_random_folds_say_they_are_drawn_again(capsys):
    interrupted(PlattCalibrated(SVC(), random_state=None))
    err = capsys.readouterr().err
    assert "run the same command again to resume" not in err
    assert "drawn afresh at each run (random_state=None)" in err
    assert "--param random_state=0" in err


def test_no_store_no_note(capsys):
    interrupted(SVC(), store=None)
    assert capsys.readouterr().err == ""
