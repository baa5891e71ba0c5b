"""Conserved quantities of gradient flow, their drift under GD, initialising with a chosen Q,
and flat minima (dissertation ch. 2, App. A; Zhao et al., ICLR 2023).

* :mod:`~paramsym.conserved.moment`: Q_M(θ) = ⟨θ, M·θ⟩ of any linear symmetry, all at once
  (the moment map; the imbalance W_iW_iᵀ + b_ib_iᵀ − W_{i+1}ᵀW_{i+1}), Prop 2.5.1.
* :mod:`~paramsym.conserved.translation`: Q_k(θ) = ⟨θ, w_k⟩ of a translation by fixed
  directions w_k (key biases, embedding sums, the stream's mean), conserved by GF and GD
  alike; the absorbed translations whose directions depend on parameters they read have none.
* :mod:`~paramsym.conserved.elementwise`: Eq. 2.17 for elementwise activations, whitened input.
* :mod:`~paramsym.conserved.radial`: the angular-momentum identity of radial nets, Thm 2.5.6.
* :mod:`~paramsym.conserved.drift`: the exact one-step GD drift η²Q(∇L), a training tracker.
* :mod:`~paramsym.conserved.initialization`: Xavier statistics of Q, ``init_with_q``.
* :mod:`~paramsym.conserved.flat`: Hessian nullity vs orbit dimension, Q and sharpness.
* :mod:`~paramsym.conserved.spectral`: the radial network with spectral initialisation whose
  conserved λ_i set the convergence rate, Props 2.7.1-2.7.3.
"""

from paramsym.conserved.base import ConservedQuantity
from paramsym.conserved.drift import (
    ConservedTracker,
    DriftPrediction,
    gd_drift,
    predicted_drift,
)
from paramsym.conserved.elementwise import (
    CLOSED_FORM_ACTIVATIONS,
    ElementwiseQ,
    closed_form_antiderivative,
    gaussian_moments,
)
from paramsym.conserved.flat import (
    FlatMinimum,
    flat_minimum,
    joint_orbit_dimension,
    scalar_linear_minimum,
    scalar_linear_sharpness,
)
from paramsym.conserved.initialization import (
    InitWithQResult,
    QStatistics,
    init_with_q,
    q_init_scales,
    sample_xavier_q,
    xavier_q_statistics,
)
from paramsym.conserved.moment import (
    MomentMap,
    conservation_residual,
    conserved_quantities,
    imbalance,
    moment_map,
    noether_charge,
)
from paramsym.conserved.radial import AngularMomentum, angular_momentum
from paramsym.conserved.spectral import (
    RadialReparameterization,
    spectral_init,
    spectral_rate_bound,
    spectral_sigma,
)
from paramsym.conserved.translation import TranslationCharge
from paramsym.errors import ApproximateConservationWarning

__all__ = [
    "CLOSED_FORM_ACTIVATIONS",
    "AngularMomentum",
    "ApproximateConservationWarning",
    "ConservedQuantity",
    "ConservedTracker",
    "DriftPrediction",
    "ElementwiseQ",
    "FlatMinimum",
    "InitWithQResult",
    "MomentMap",
    "QStatistics",
    "RadialReparameterization",
    "TranslationCharge",
    "angular_momentum",
    "closed_form_antiderivative",
    "conservation_residual",
    "conserved_quantities",
    "flat_minimum",
    "gaussian_moments",
    "gd_drift",
    "imbalance",
    "init_with_q",
    "joint_orbit_dimension",
    "moment_map",
    "noether_charge",
    "predicted_drift",
    "q_init_scales",
    "sample_xavier_q",
    "scalar_linear_minimum",
    "scalar_linear_sharpness",
    "spectral_init",
    "spectral_rate_bound",
    "spectral_sigma",
    "xavier_q_statistics",
]
