"""Experiments of seed 001, chapter 3 (Zhao et al., "Understanding Mode Connectivity via
Parameter Space Symmetry", ICML 2025): mode connectivity through parameter-space symmetry, one
module per figure.

* :mod:`~paramsym.experiments.connectivity.components`: ``minimum-components`` (Fig 3.1);
* :mod:`~paramsym.experiments.connectivity.barrier`: ``lmc-barrier`` (Fig 3.2);
* :mod:`~paramsym.experiments.connectivity.curves`: ``symmetry-curves`` (Fig 3.3a-c);
* :mod:`~paramsym.experiments.connectivity.alignment`: ``permutation-alignment`` (§3.3.1);
* :mod:`~paramsym.experiments.connectivity.common`: their shared helpers.

Everything that checks an identity runs in float64; classification training in float32.
"""
