"""kernelref: the reference implementation of the kernelref book.

numpy and scipy only; each function names the book's equation labels it implements.
"""

from kernelref import kernels
from kernelref.gp import GaussianProcessClassifier, GaussianProcessRegressor
from kernelref.kpca import KernelPCA
from kernelref.nadaraya_watson import NadarayaWatson
from kernelref.ridge import KernelRidge
from kernelref.rvm import RVC, RVR

__version__ = "0.1.0"
__all__ = ["GaussianProcessClassifier", "GaussianProcessRegressor", "KernelPCA", "KernelRidge",
           "NadarayaWatson", "RVC", "RVR", "kernels"]
