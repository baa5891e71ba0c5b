"""Symmetry discovery experiments (seed 001, dissertation ch. 6-7), one module per figure or
question.

Learned discovery (§6.5, :class:`paramsym.LearnedSymmetry`):

* :mod:`~paramsym.experiments.discovery.rescaling`: ``discovery-rescaling`` (Fig 6.3);
* :mod:`~paramsym.experiments.discovery.data_dependent`: ``discovery-data-dependent``
  (Figs 6.4, 6.5);
* :mod:`~paramsym.experiments.discovery.curves`: ``discovery-curves`` (Fig 6.6);
* :mod:`~paramsym.experiments.discovery.transformer`: ``discovery-transformer`` (Fig 6.7).

Exact linear discovery (:func:`paramsym.discover_symmetries`):

* :mod:`~paramsym.experiments.discovery.zoo`: ``linear-discovery`` (the dimensions of a zoo
  of models);
* :mod:`~paramsym.experiments.discovery.count`: ``symmetry-count`` (ch. 7: the data-dependent
  algebra along training and as the batch grows).

Shared: :mod:`~paramsym.experiments.discovery.plotting` (generator heat maps),
:mod:`~paramsym.experiments.discovery.learned_common` (the learned experiments' networks,
samples and measures), :mod:`~paramsym.experiments.discovery.transformer_model` (the tiny
transformer and its known algebras) and :mod:`~paramsym.experiments.discovery.zoo_models`
(the zoo's models).
"""
