"""Symmetry teleportation experiments (seed 001, dissertation ch. 4-5), one module per figure.

Synthetic problems (§4.6):

* :mod:`~paramsym.experiments.teleport.testfunctions`: ``teleport-testfunctions`` (Figs 4.3, 4.4);
* :mod:`~paramsym.experiments.teleport.regression`: ``teleport-regression`` (Fig 4.5);
* :mod:`~paramsym.experiments.teleport.sweep`: ``teleport-sweep`` (Fig 4.7);
* :mod:`~paramsym.experiments.teleport.runtime`: ``teleport-runtime`` (Fig 4.9);
* shared: :mod:`~paramsym.experiments.teleport.convergence` (convergence and table helpers) and
  :mod:`~paramsym.experiments.teleport.regression_training` (the regression and its training
  loop, exposed for benchmarks).

Teleportation inside training loops:

* :mod:`~paramsym.experiments.teleport.mnist`: ``teleport-mnist`` (Fig 4.6);
* :mod:`~paramsym.experiments.teleport.schedules`: ``teleport-schedules`` (Fig 4.8);
* :mod:`~paramsym.experiments.teleport.optimizers`: ``teleport-optimizers`` (Figs 5.9-5.11);
* shared: :mod:`~paramsym.experiments.teleport.training` (data, models, training loop) and
  :mod:`~paramsym.experiments.teleport.plotting`.
"""
