"""Kernels beyond vectors: sets, strings and sequences, generative models and graphs.

Each is a ``kernelref.kernels.Kernel``, so every estimator accepts it. The
kernels on objects (``takes_objects``) take a list of samples instead of a
float matrix; the generative kernels take vectors.
"""

from kernelref.structured.base import ObjectKernel
from kernelref.structured.generative import (
    DensityProductKernel,
    FisherKernel,
    GaussianMixture,
    MixtureKernel,
    empirical_fisher,
    fisher_scores,
)
from kernelref.structured.graphs import (
    DiffusionKernel,
    Graph,
    RandomWalkKernel,
    diffusion_matrix,
    negative_laplacian,
    product_graph,
)
from kernelref.structured.hmm import (
    DiscreteHMM,
    HMMFisherKernel,
    MarginalisedHMMKernel,
    hmm_fisher_scores,
    joint_forward,
    posterior_states,
)
from kernelref.structured.sets import (
    IntersectionKernel,
    MeanEmbeddingKernel,
    MMDGaussianKernel,
    SubsetKernel,
)
from kernelref.structured.strings import (
    BagOfWordsKernel,
    SmithWatermanScore,
    SpectrumKernel,
    ngram_counts,
)

__all__ = [
    "BagOfWordsKernel",
    "DensityProductKernel",
    "DiffusionKernel",
    "DiscreteHMM",
    "FisherKernel",
    "GaussianMixture",
    "Graph",
    "HMMFisherKernel",
    "IntersectionKernel",
    "MMDGaussianKernel",
    "MarginalisedHMMKernel",
    "MeanEmbeddingKernel",
    "MixtureKernel",
    "ObjectKernel",
    "RandomWalkKernel",
    "SmithWatermanScore",
    "SpectrumKernel",
    "SubsetKernel",
    "diffusion_matrix",
    "empirical_fisher",
    "fisher_scores",
    "hmm_fisher_scores",
    "joint_forward",
    "negative_laplacian",
    "ngram_counts",
    "posterior_states",
    "product_graph",
]
