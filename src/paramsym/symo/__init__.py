"""Global curvature from permutation symmetry and the SymO optimizer (seed 002).

* :mod:`~paramsym.symo.layout`, :mod:`~paramsym.symo.structure`: which matrices commute with an
  MLP's symmetry group (O(d), signed permutations or permutations per hidden layer; Lemma 2.4,
  Theorems 3.1–3.2 with the notes' corrections), as one small factor matrix per block type.
* :mod:`~paramsym.symo.factors`: :class:`Factors` — project, expand, multiply, surrogate,
  matrix functions, Kronecker matvec.
* :mod:`~paramsym.symo.estimation`: single-model factors (Eqs. 37–39), EMA, ensembles.
* :mod:`~paramsym.symo.optimizer`: :class:`SymO`, a ``torch.optim.Optimizer``.
* :mod:`~paramsym.symo.ensemble`: Monte-Carlo gradient covariance and global Hessian over N
  models, projection residuals.
* :mod:`~paramsym.symo.group`: the group as dense matrices, and the numerical commutant.
* :mod:`~paramsym.symo.baselines`: GD, Adam, simplified K-FAC and Shampoo, Table 2.
"""

from paramsym.symo.baselines import (
    OPTIMIZERS,
    TABLE2,
    SimpleKFAC,
    SimpleShampoo,
    make_optimizer,
)
from paramsym.symo.ensemble import (
    GaussianInit,
    MonteCarloMoments,
    covariance_of,
    ensemble_gradients,
    global_hessian,
    global_hessian_prefixes,
    gradient_covariance,
    init_ensemble,
    projection_residual,
    projection_residuals,
    train_ensemble,
)
from paramsym.symo.estimation import (
    FactorTracker,
    GradientMoments,
    centered,
    correlation,
    ensemble_moments,
    gradient_mean,
    gradient_second_moment,
)
from paramsym.symo.factors import Factors, InverseRootConfig
from paramsym.symo.group import (
    act,
    dense_action,
    generators,
    group_elements,
    numerical_commutant,
    random_element,
    reynolds_projection,
)
from paramsym.symo.layout import GROUP_NAMES, GroupName, MLPLayout, largest_group
from paramsym.symo.optimizer import SymO
from paramsym.symo.structure import BlockType, Component, CurvatureStructure

__all__ = [
    "GROUP_NAMES",
    "OPTIMIZERS",
    "TABLE2",
    "BlockType",
    "Component",
    "CurvatureStructure",
    "FactorTracker",
    "Factors",
    "GaussianInit",
    "GradientMoments",
    "GroupName",
    "InverseRootConfig",
    "MLPLayout",
    "MonteCarloMoments",
    "SimpleKFAC",
    "SimpleShampoo",
    "SymO",
    "act",
    "centered",
    "correlation",
    "covariance_of",
    "dense_action",
    "ensemble_gradients",
    "ensemble_moments",
    "generators",
    "global_hessian",
    "global_hessian_prefixes",
    "gradient_covariance",
    "gradient_mean",
    "gradient_second_moment",
    "group_elements",
    "init_ensemble",
    "largest_group",
    "make_optimizer",
    "numerical_commutant",
    "projection_residual",
    "projection_residuals",
    "random_element",
    "reynolds_projection",
    "train_ensemble",
]
