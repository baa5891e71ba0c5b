"""Experiments of seed 001, chapter 2 (Zhao et al., ICLR 2023 [160]): conserved quantities of
gradient flow, what they do to convergence and sharpness; one module per figure.

* :mod:`~paramsym.experiments.conserved.q_distribution`: ``q-distribution`` (Figs 2.2, 2.3);
* :mod:`~paramsym.experiments.conserved.q_convergence`: ``q-convergence`` (Figs 2.4, 2.5);
* :mod:`~paramsym.experiments.conserved.q_sharpness`: ``q-sharpness`` (Fig 2.7, §2.8.1);
* :mod:`~paramsym.experiments.conserved.q_drift`: ``q-drift`` (Fig A.1);
* :mod:`~paramsym.experiments.conserved.gradient_descent`: their shared helpers.

(``group-ensemble``, Figs 2.8 and 2.9, is in :mod:`paramsym.experiments.group_ensemble`.)

Common setup of Figs 2.4, 2.7 and A.1: L = ‖Y − U σ(Vᵀ)‖²_F (no ½, as printed), whitened input
X = I, built as ``ps.mlp([n, h, m], σ, bias=False)`` evaluated on I_n (first weight Vᵀ, second
U), float64, full-batch gradient descent. Several initialisations are trained together as one
batch of networks (:func:`batched_gradient_descent`; each run gets exactly its own gradient,
tested against ``torch.optim.SGD`` on the model). Q is set through the initial variances at a
fixed product s_U·s_V = 1/√(hn) (``paramsym.conserved.q_init_scales``: E[Q] = target; the
paper only says "different variances"), so the achieved Q scatters around the target by the
Xavier standard deviation; every figure uses the achieved Q.
"""
