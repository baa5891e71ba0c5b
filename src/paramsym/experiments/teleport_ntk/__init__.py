"""Seed 000 (NTK perspective on parameter-space symmetries): teleportation experiments.

* :mod:`~paramsym.experiments.teleport_ntk.linearization`: ``ntk-linearization`` (Figs 1, 3);
* :mod:`~paramsym.experiments.teleport_ntk.alignment`: ``teleport-alignment`` (§5, Prop 5.1);
* :mod:`~paramsym.experiments.teleport_ntk.common`: their shared helpers.

Choices where the paper is silent (also in the experiments' descriptions and notes):
cross-entropy loss for both experiments (with ½‖F − onehot‖² and lr 1, momentum 0.9 the
digits runs diverge: the loss reaches ~10⁵ within the first epoch); features standardised
with the training set's mean and standard deviation (constant features left at 0); batch
size 128; the RMSE is taken over the test inputs and all ten outputs; the scales are fitted
on the first ``teleport_samples`` training points with 100 Adam steps and gradient clipping
at norm 1 (the library's defaults); the genuine-symmetry teleport is normalised gradient
ascent on the log-scales u of the 2n hidden neurons, every step of norm ‖ξ‖ = s
(``max_step_norm``), so after K steps ‖u‖ ≤ K·s and ‖Γ‖ ≤ exp(√2·K·s)
(:func:`~paramsym.experiments.teleport_ntk.alignment.distortion_bound`), a bound independent
of the width as Thm 4.1 requires (a bound that grew with √(2n) let a 1024-wide net's few
steepest neurons move by a factor 28).
"""
