"""Seed 002 ("Global curvature for second-order optimization"): the structure of the global
gradient covariance and Hessian, the surrogate matrix, and estimating the factors.

* :mod:`~paramsym.experiments.global_curvature.structure`: ``global-curvature-structure``
  (Figs 2–4, 7–9);
* :mod:`~paramsym.experiments.global_curvature.spectrum`: ``surrogate-spectrum`` (Figs 11–13);
* :mod:`~paramsym.experiments.global_curvature.networks`: the stacked networks and settings
  they share.

``factor-estimation`` and ``symo-training`` (the 100-70-40 net) are in
:mod:`paramsym.experiments.symo_training`; they reuse the stacked-network helpers here.
"""
