"""The relevance vector machine: sparse Bayesian kernel regression.

``design`` builds Φ and the Gaussian posterior and evidence every path shares;
``reestimate`` maximises the evidence by re-estimation or EM; ``fast`` by
Tipping & Faul's sequential algorithm; ``regression`` holds the estimator.
"""

from kernelref.rvm.regression import RVR

__all__ = ["RVR"]
