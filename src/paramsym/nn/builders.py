"""Multi-layer perceptrons in the standard or the NTK parameterisation."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Literal

import torch
from torch import nn

from paramsym.errors import InvalidArgumentError
from paramsym.nn.activations import ActivationSpec, activation_spec, get_activation
from paramsym.nn.layers import NTKLinear

Parameterization = Literal["standard", "ntk"]


def mlp(
    widths: Sequence[int],
    activation: str | ActivationSpec | nn.Module = "relu",
    bias: bool = True,
    parameterization: Parameterization = "standard",
    *,
    seed: int | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> nn.Sequential:
    """Build the MLP ``Linear(n0, n1), σ, Linear(n1, n2), σ, ..., Linear(n_{L-1}, n_L)``.

    Args:
        widths: layer widths ``[n0, n1, ..., nL]`` (input, hidden..., output); at least two.
        activation: a registry name (see :func:`paramsym.nn.available_activations`), an
            :class:`~paramsym.nn.ActivationSpec`, or an activation module (``nn.Tanh()``,
            ``ps.nn.Monomial(3)``, ...) that :func:`~paramsym.nn.activation_spec` recognises.
        bias: whether the linear layers have biases.
        parameterization: ``"standard"`` (``nn.Linear`` with PyTorch's default initialisation)
            or ``"ntk"`` (:class:`~paramsym.nn.NTKLinear`: N(0, 1) parameters and a
            1/sqrt(fan_in) factor in the forward, seed 000 App. A.6).
        seed: if given, the initialisation is drawn from ``torch.manual_seed(seed)`` without
            touching the global random state.
        dtype, device: of the parameters.

    Returns:
        ``nn.Sequential`` whose modules are named ``"0"``, ``"1"``, ...: linear layers at even
        positions, activations between them, no activation after the last layer.

    >>> model = mlp([4, 8, 3], activation="tanh", seed=0)
    >>> [type(m).__name__ for m in model]
    ['Linear', 'Tanh', 'Linear']
    """
    widths = list(widths)
    if len(widths) < 2 or any(int(w) != w or w < 1 for w in widths):
        raise InvalidArgumentError(
            f"mlp: widths must be at least two positive integers [n_in, ..., n_out], got {widths}"
        )
    if parameterization not in ("standard", "ntk"):
        raise InvalidArgumentError(
            f"mlp: parameterization must be 'standard' or 'ntk', got {parameterization!r}"
        )
    spec = _resolve_activation(activation)
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(pairwise(widths)):
            if parameterization == "ntk":
                layers.append(NTKLinear(n_in, n_out, bias=bias, dtype=dtype, device=device))
            else:
                layers.append(nn.Linear(n_in, n_out, bias=bias, dtype=dtype, device=device))
            if i < len(widths) - 2:
                layers.append(spec.make_module())
    return nn.Sequential(*layers)


def _resolve_activation(activation: str | ActivationSpec | nn.Module) -> ActivationSpec:
    if isinstance(activation, nn.Module):
        spec = activation_spec(activation)
        if spec is None:
            raise InvalidArgumentError(
                f"mlp: activation module {type(activation).__name__} is not recognised; pass a "
                "registry name, an ActivationSpec, or give the module a `paramsym_activation` "
                "attribute"
            )
        return spec
    return get_activation(activation)
