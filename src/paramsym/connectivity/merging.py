"""Merging aligned models: weighted averages of parameters, with BatchNorm statistics reset.

:func:`merge` returns Σ_i w_i θ_i for models of one architecture (two models and one α:
(1 − α) θ_A + α θ_B, the point α of the linear path). Averaging the running statistics of
BatchNorm layers does not give the statistics of the averaged network (its activations shrink
toward their mean: the variance collapse that Jordan et al. 2023, "REPAIR", measure), so where
the model has BatchNorm layers they are recomputed on inputs the caller gives
(:func:`reset_batchnorm_statistics`, the "reset BN" step of Git Re-Basin). LayerNorm and RMSNorm
keep no statistics: a merged transformer needs no reset.

>>> import torch, paramsym as ps
>>> a, b = ps.mlp([2, 3, 1], seed=0), ps.mlp([2, 3, 1], seed=1)
>>> mid = ps.merge([a, b], 0.5)
>>> bool(torch.allclose(mid[0].weight, (a[0].weight + b[0].weight) / 2))
True
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.calls import call_arguments
from paramsym.core.model_checks import check_same_architecture, require_module
from paramsym.errors import InvalidArgumentError, ParamsymWarning, ShapeError

BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def merge_weights(count: int, weights: float | Sequence[float] | None) -> list[float]:
    """The weights of ``count`` models: uniform for ``None``, (1 − α, α) for a float α and two
    models, else the given ones (each in [0, 1], summing to 1)."""
    if weights is None:
        return [1.0 / count] * count
    if isinstance(weights, int | float):
        if count != 2:
            raise InvalidArgumentError(
                f"merge: a single α merges two models, got {count}; give one weight per model"
            )
        weights = [1.0 - float(weights), float(weights)]
    out = [float(w) for w in weights]
    if len(out) != count:
        raise InvalidArgumentError(f"merge: {count} models but {len(out)} weights")
    if not all(0.0 <= w <= 1.0 for w in out) or abs(math.fsum(out) - 1.0) > 1e-9:
        raise InvalidArgumentError(
            f"merge: the weights must lie in [0, 1] and sum to 1 (α in [0, 1] for two models), "
            f"got {out}"
        )
    return out


def merge(
    models: Sequence[nn.Module],
    weights: float | Sequence[float] | None = None,
    *,
    batchnorm_inputs: Any = None,
    batch_size: int = 256,
) -> nn.Module:
    """Σ_i w_i θ_i as a new model (module docstring); no model is changed.

    Args:
        models: two or more models of one architecture, aligned first (:func:`paramsym.align`,
            :func:`paramsym.weight_matching`) for a merge that keeps their accuracy.
        weights: ``None`` (uniform), α for two models ((1 − α, α)), or one weight per model,
            each in [0, 1], summing to 1.
        batchnorm_inputs: inputs on which the merged model's BatchNorm statistics are
            recomputed (a tensor, split into batches of ``batch_size``; or an iterable of
            inputs the model takes). Without them a model with BatchNorm keeps the averaged
            statistics, with a :class:`~paramsym.ParamsymWarning`.
        batch_size: batch size when ``batchnorm_inputs`` is one tensor.

    Returns:
        A deep copy of ``models[0]`` holding the weighted parameters and floating buffers (the
        integer ones, e.g. ``num_batches_tracked``, are the first model's), in eval mode.
    """
    if isinstance(models, nn.Module) or len(models) < 2:
        raise InvalidArgumentError("merge: give a sequence of two or more models")
    for i, m in enumerate(models):
        require_module(m, f"merge: models[{i}]")
    for i, m in enumerate(models[1:], start=1):
        check_same_architecture(models[0], m, f"merge (models[0] and models[{i}])")
    w = merge_weights(len(models), weights)
    merged = copy.deepcopy(models[0])
    states = [dict(m.state_dict()) for m in models]
    with torch.no_grad():
        for name, target in merged.state_dict().items():
            values = [s[name] for s in states]
            if any(v.shape != target.shape for v in values):
                raise ShapeError(f"merge: '{name}' has different shapes in the models")
            if target.is_floating_point():
                target.copy_(sum(wi * v.to(target.dtype) for wi, v in zip(w, values, strict=True)))
    if any(isinstance(m, BATCH_NORMS) for m in merged.modules()):
        if batchnorm_inputs is None:
            warnings.warn(
                "merge: the model has BatchNorm layers and no batchnorm_inputs were given, so "
                "it keeps the averaged running statistics, which are not the merged network's "
                "(pass batchnorm_inputs=training inputs to recompute them)",
                ParamsymWarning,
                stacklevel=2,
            )
        else:
            return reset_batchnorm_statistics(merged, None, batchnorm_inputs, batch_size)
    return merged.eval()


def _batches(inputs: Any, batch_size: int) -> Iterable[Any]:
    if isinstance(inputs, Tensor):
        return (inputs[i : i + batch_size] for i in range(0, inputs.shape[0], batch_size))
    if isinstance(inputs, Mapping):
        return [inputs]
    return inputs


def reset_batchnorm_statistics(
    model: nn.Module,
    state: Mapping[str, Tensor] | None,
    inputs: Any,
    batch_size: int = 256,
) -> nn.Module:
    """A copy of ``model`` (with ``state`` loaded, if given) whose BatchNorm running statistics
    are recomputed on ``inputs``, in eval mode: the "reset BN statistics" step used to evaluate
    interpolated or re-permuted networks with BatchNorm (Git Re-Basin; Jordan et al. 2022).

    The statistics of every BatchNorm layer are reset and re-estimated by forward passes in
    training mode over ``inputs`` (a tensor in batches of ``batch_size``, a dict input, or an
    iterable of inputs), without gradients, as the cumulative average over the batches
    (``momentum=None``); then each layer's momentum is restored. Nothing but the running
    statistics changes, and ``model`` itself is untouched. A model without BatchNorm comes
    back as an eval-mode copy.
    """
    fresh = copy.deepcopy(model)
    if state is not None:
        fresh.load_state_dict(dict(state), strict=False)
    norms = [m for m in fresh.modules() if isinstance(m, BATCH_NORMS)]
    momenta = [m.momentum for m in norms]
    for module in norms:
        module.reset_running_stats()
        module.momentum = None
    if norms:
        fresh.train()
        with torch.no_grad():
            for batch in _batches(inputs, batch_size):
                args, kwargs = call_arguments(fresh, batch)
                fresh(*args, **kwargs)
    for module, momentum in zip(norms, momenta, strict=True):
        module.momentum = momentum
    return fresh.eval()
