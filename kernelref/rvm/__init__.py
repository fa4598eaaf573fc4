"""The relevance vector machine: sparse Bayesian kernel regression and classification.

``design`` builds Φ and the Gaussian posterior and evidence every path shares;
``reestimate`` maximises the evidence by re-estimation or EM; ``fast`` by
Tipping & Faul's sequential algorithm, run on the β schedules of ``schedules``;
``regression`` holds the estimator.
``classification`` is the Laplace classifier RVC, binary and, with ``softmax``,
multiclass.
"""

from kernelref.rvm.classification import RVC
from kernelref.rvm.regression import RVR

__all__ = ["RVC", "RVR"]
