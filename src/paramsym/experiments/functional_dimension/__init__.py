"""Experiments of seed 004 ("Empirical NTK tracks task complexity"): the batch functional
dimension (FD, the rank of the parameter Jacobian on the whole training set, equal to the rank
of the empirical NTK Gram matrix) of (n0, 10, 10, 10, 10 | 1) ReLU networks during training.

* :mod:`~paramsym.experiments.functional_dimension.univariate`: ``fd-univariate`` (Figs 1, 2, 5, 7);
* :mod:`~paramsym.experiments.functional_dimension.bivariate`: ``fd-bivariate`` (Figs 8, 9);
* :mod:`~paramsym.experiments.functional_dimension.weight_decay`: ``fd-weight-decay`` (Fig 4);
* :mod:`~paramsym.experiments.functional_dimension.energy`: ``fd-energy`` (Figs 3, 6);
* shared: :mod:`~paramsym.experiments.functional_dimension.training` (training and tracking)
  and :mod:`~paramsym.experiments.functional_dimension.summaries` (summaries and plots).

Common setup (seed 004 §5; notes 004 §3): the "He variant" initialisation draws *all* weights
and biases of a layer from N(0, 2/fan_in); Adam (lr 0.01, coupled L2 weight decay 1e-4 as in
``torch.optim.Adam``), MSE loss, shuffled minibatches of 16, float32 training. FD is measured
at epoch 0, every ``every`` epochs and at the last epoch, in float32 with
``torch.linalg.matrix_rank``'s default tolerance (the paper's rule) and in float64 (recorded,
not used by the claims), together with the number of linear regions (distinct activation
patterns) the data set samples. A run is *successful* when r² > 0.9 on the training data after
training; averages of final FDs are over successful runs (Figs 2, 4). The paper does not state
the number of epochs: each config sets it (see the presets).

Speed: the independent runs of one experiment are trained together as one batch of networks
(stacked weights, ``torch.baddbmm``). Adam and coupled weight decay act elementwise and the
loss is a sum of the runs' own mean-squared errors, so every run follows the updates it would
get alone (up to float rounding; tested); its initialisation and minibatch order come from its
own generator, seeded ``seed·1000 + run``. The gradient of a step is backpropagation written
out for the ReLU MLP, the same operations autograd would run (the same values bit for bit;
tested) without its graph, which at these sizes costs more than the arithmetic. At each
checkpoint the Jacobians of all networks are computed together (backpropagation written out
again) and their ranks come from one batched SVD, by ``ps.functional_dimension``'s rule (the
same ranks; tested).
"""
