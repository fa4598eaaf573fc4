"""Support vector machines: one SMO for C-SVC, ν-SVC, one-class, ε-SVR and ν-SVR.

``problems`` states each formulation as data of one quadratic program, ``solver``
solves it, ``kkt`` measures its optimality conditions, ``estimators`` wraps it in
scikit-learn's interface and ``multiclass`` combines binary machines.
"""

from kernelref.svm.estimators import SVC, SVR, NuSVC, NuSVR, OneClassSVM
from kernelref.svm.kkt import KKTReport, kkt_report
from kernelref.svm.multiclass import OneVsRestClassifier
from kernelref.svm.platt import PlattCalibrated, pairwise_coupling, sigmoid_train
from kernelref.svm.solver import ConvergenceWarning, solve

__all__ = [
    "SVC",
    "SVR",
    "ConvergenceWarning",
    "KKTReport",
    "NuSVC",
    "NuSVR",
    "OneClassSVM",
    "OneVsRestClassifier",
    "PlattCalibrated",
    "kkt_report",
    "pairwise_coupling",
    "sigmoid_train",
    "solve",
]
