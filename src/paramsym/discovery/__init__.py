"""Discovering parameter-space symmetries (dissertation ch. 6).

Exact linear discovery (:func:`discover_symmetries`): the symmetry algebra within an ansatz of
linear generators, as the null space of the infinitesimal invariance constraint
⟨∇_θ ℓ(θ; x), A θ⟩ = 0 stacked over sampled parameters and data; its dimension with the
singular-value gap that decides it, checked for stability as the samples double.
:func:`compare_to_catalogue` sets it against the symmetries :func:`paramsym.symmetries` knows.

Learned discovery (:class:`LearnedSymmetry`, §6.5): generators h₁…h_k ∈ gl(P) and an action
network a(g, θ, X) trained on random (θ, data) samples with the six terms of objective (6.3).
"""

from paramsym.discovery.ansatz import Ansatz, FullAnsatz, LayerPairAnsatz
from paramsym.discovery.basis import BasisAnsatz, make_ansatz
from paramsym.discovery.channels import ChannelAnsatz
from paramsym.discovery.compare import (
    CatalogueComparison,
    ClosureReport,
    compare_to_catalogue,
    lie_closure,
)
from paramsym.discovery.learned import LearnedSymmetry
from paramsym.discovery.learned_config import (
    DATA_DEPENDENT_WEIGHTS,
    FitHistory,
    LearnedSymmetryConfig,
)
from paramsym.discovery.learned_losses import (
    FlatLoss,
    flat_loss,
    gaussian_sampler,
    trivial_dimension,
)
from paramsym.discovery.linear import discover_symmetries
from paramsym.discovery.result import DiscoveredGenerator, DiscoveryResult, decide

__all__ = [
    "DATA_DEPENDENT_WEIGHTS",
    "Ansatz",
    "BasisAnsatz",
    "CatalogueComparison",
    "ChannelAnsatz",
    "ClosureReport",
    "DiscoveredGenerator",
    "DiscoveryResult",
    "FitHistory",
    "FlatLoss",
    "FullAnsatz",
    "LayerPairAnsatz",
    "LearnedSymmetry",
    "LearnedSymmetryConfig",
    "compare_to_catalogue",
    "decide",
    "discover_symmetries",
    "flat_loss",
    "gaussian_sampler",
    "lie_closure",
    "make_ansatz",
    "trivial_dimension",
]
