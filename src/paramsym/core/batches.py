"""Batches of inputs whose samples analyses take apart: a tensor, or named tensors.

Per-sample analyses (the NTK, the parameter Jacobian and functional dimension, per-example
discovery) split a batch into tiles and single samples. A batch is either a tensor ``(b, ...)``
or a mapping of keyword inputs whose tensors all have the batch axis first, as Hugging Face
models take them: ``{"input_ids": ids, "attention_mask": mask}`` or a tokenizer's
``BatchEncoding``. The model is then called with the mapping as keyword arguments
(:func:`paramsym.core.calls.call_arguments`). Mappings become plain dicts, which
``torch.func.vmap`` maps over like tensors.

>>> import torch
>>> x = {"input_ids": torch.arange(6).reshape(3, 2), "attention_mask": torch.ones(3, 2)}
>>> batch_length(x, "ntk", "x1"), take(x, slice(1, 3))["input_ids"].tolist()
(3, [[2, 3], [4, 5]])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError, ShapeError

Inputs = Tensor | dict[str, Tensor]
"""A batch: a tensor ``(b, ...)`` or named tensors, each ``(b, ...)``."""


def as_inputs(x: Any, where: str, name: str) -> Inputs:
    """``x`` checked as a batch (a mapping becomes a plain dict): a tensor or a mapping of
    tensors with one batch length of at least one sample."""
    if isinstance(x, Mapping):
        x = dict(x)
        bad = [k for k, v in x.items() if not isinstance(v, Tensor)]
        if bad or not x:
            raise InvalidArgumentError(
                f"{where}: {name} must be a tensor or a mapping of tensors (keyword inputs), "
                f"got {'an empty mapping' if not x else f'{bad[0]!r} = {type(x[bad[0]]).__name__}'}"
            )
    elif not isinstance(x, Tensor):
        raise InvalidArgumentError(
            f"{where}: {name} must be a tensor or a mapping of tensors (keyword inputs such as "
            f"{{'input_ids': ids}}), got {type(x).__name__}"
        )
    batch_length(x, where, name)
    return x


def tensors(x: Inputs) -> list[Tensor]:
    """The tensors of a batch."""
    return list(x.values()) if isinstance(x, dict) else [x]


def batch_length(x: Inputs, where: str, name: str) -> int:
    """The number of samples: the common length of the first axis."""
    lengths = {tuple(t.shape[:1]) for t in tensors(x)}
    if len(lengths) != 1 or () in lengths or (0,) in lengths:
        shapes = {k: tuple(v.shape) for k, v in x.items()} if isinstance(x, dict) else x.shape
        raise ShapeError(
            f"{where}: {name} must have a batch axis with at least one sample, the same length "
            f"in every tensor; got {shapes}"
        )
    return int(next(iter(lengths))[0])


def trailing_shapes(x: Inputs) -> Any:
    """What must agree between two batches of one model: shapes after the batch axis (and
    the names of a mapping's tensors)."""
    if isinstance(x, dict):
        return {k: tuple(v.shape[1:]) for k, v in x.items()}
    return tuple(x.shape[1:])


def apply(x: Inputs, fn: Callable[[Tensor], Tensor]) -> Inputs:
    """``fn`` applied to every tensor of the batch."""
    return {k: fn(v) for k, v in x.items()} if isinstance(x, dict) else fn(x)


def take(x: Inputs, index: int | slice | list[int] | Tensor) -> Inputs:
    """The samples ``index`` of the batch (a slice, indices or a mask along the batch axis; an
    int gives one sample without its batch axis, as ``vmap`` hands it over)."""
    return apply(x, lambda t: t[index])


def one_sample_batch(sample: Inputs) -> Inputs:
    """A single sample (batch axis removed, as ``vmap`` hands it over) as a batch of one."""
    return apply(sample, lambda t: t.unsqueeze(0))


def floats_to(x: Inputs, dtype: torch.dtype) -> Inputs:
    """The floating tensors of the batch in ``dtype``; integer ones (token ids) as they are."""
    return apply(x, lambda t: t.to(dtype) if t.is_floating_point() else t)


def samples(x: Inputs) -> list[Inputs]:
    """The samples one by one, each a batch of one."""
    return [take(x, slice(i, i + 1)) for i in range(batch_length(x, "samples", "x"))]


__all__ = [
    "Inputs",
    "apply",
    "as_inputs",
    "batch_length",
    "floats_to",
    "one_sample_batch",
    "samples",
    "take",
    "tensors",
    "trailing_shapes",
]
