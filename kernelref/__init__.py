"""kernelref: the reference implementation of the kernelref book.

numpy and scipy only; each function names the book's equation labels it implements.
"""

from kernelref import kernels
from kernelref.nadaraya_watson import NadarayaWatson
from kernelref.ridge import KernelRidge

__version__ = "0.1.0"
__all__ = ["KernelRidge", "NadarayaWatson", "kernels"]
