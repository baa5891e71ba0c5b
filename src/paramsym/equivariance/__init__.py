"""Equivariance identities of learning dynamics (seed 003, notes 003).

A model f admits a (T, S)-equivariance if ``f(T(θ, g)) = S(f(θ), g)``; differentiating once and
twice constrains the gradient and the Hessian of L = ℓ∘f along the characteristic directions
J = A⁻¹B (Theorem 1), and a discrete symmetry constrains them at its fixed points (Theorem 2).

* :class:`Equivariance` (T, S, k, g₀), :meth:`Equivariance.from_symmetry` for the catalogue,
  and the built-ins :func:`homogeneity`, :func:`layer_homogeneity`, :func:`last_layer_gl`,
  :func:`softmax_translation`, :func:`normalization_scale`;
* :class:`DiscreteSymmetry` (matrix, function, permutation, sign flip, mirror) with the
  projection onto its fixed set;
* :func:`check_identities` -> :class:`IdentityResult`, matrix-free (HVPs and JVPs);
* the paper's applications: the Euler relation and eqs. (3)–(4) of homogeneous nets
  (:func:`euler_relation`, :func:`homogeneity_hessian`), the sharpness lower bound and
  Corollary 1 (:func:`sharpness_bound`, :func:`eigen_alignment`), eq. (7) of the last layer
  (:func:`last_layer_curvature`, :func:`top_versus_rest_sharpness`), null directions at
  stationarity (:func:`stationary_null_space`), the Noether flow under SGD
  (:func:`noether_drift`, :func:`measure_sgd_drift`) and Corollary 4 for mirrors
  (:func:`mirror_identities`);
* :class:`IdentityTracker`, a training callback for all of these.
"""

from paramsym.equivariance.builtins import (
    homogeneity,
    last_layer_gl,
    layer_homogeneity,
    normalization_scale,
    softmax_translation,
)
from paramsym.equivariance.discrete import DiscreteSymmetry
from paramsym.equivariance.homogeneous_nets import (
    EulerRelation,
    HomogeneityHessian,
    euler_relation,
    homogeneity_degree,
    homogeneity_hessian,
)
from paramsym.equivariance.homogeneous_spectrum import (
    EigenAlignment,
    SharpnessBound,
    eigen_alignment,
    sharpness_bound,
)
from paramsym.equivariance.identities import check_identities
from paramsym.equivariance.last_layer import (
    LastLayerCurvature,
    TopVersusRest,
    last_layer_curvature,
    last_linear_layer,
    top_versus_rest_sharpness,
)
from paramsym.equivariance.mirror import (
    MirrorIdentities,
    mirror_fixed_point,
    mirror_identities,
    neuron_swap_mirror,
    sign_flip_mirror,
)
from paramsym.equivariance.noether import (
    MeasuredDrift,
    NoetherDrift,
    QuadraticCharge,
    layer_rescaling_generator,
    measure_sgd_drift,
    noether_drift,
)
from paramsym.equivariance.result import THEOREM1, THEOREM2, IdentityResult
from paramsym.equivariance.stationarity import (
    StationaryNullSpace,
    generator_matrix,
    stationary_null_space,
)
from paramsym.equivariance.tracker import IdentityTracker
from paramsym.equivariance.transformations import Equivariance

__all__ = [
    "THEOREM1",
    "THEOREM2",
    "DiscreteSymmetry",
    "EigenAlignment",
    "Equivariance",
    "EulerRelation",
    "HomogeneityHessian",
    "IdentityResult",
    "IdentityTracker",
    "LastLayerCurvature",
    "MeasuredDrift",
    "MirrorIdentities",
    "NoetherDrift",
    "QuadraticCharge",
    "SharpnessBound",
    "StationaryNullSpace",
    "TopVersusRest",
    "check_identities",
    "eigen_alignment",
    "euler_relation",
    "generator_matrix",
    "homogeneity",
    "homogeneity_degree",
    "homogeneity_hessian",
    "last_layer_curvature",
    "last_layer_gl",
    "last_linear_layer",
    "layer_homogeneity",
    "layer_rescaling_generator",
    "measure_sgd_drift",
    "mirror_fixed_point",
    "mirror_identities",
    "neuron_swap_mirror",
    "noether_drift",
    "normalization_scale",
    "sharpness_bound",
    "sign_flip_mirror",
    "softmax_translation",
    "stationary_null_space",
    "top_versus_rest_sharpness",
]
