"""How paramsym calls a model on the batch a user hands over.

A model's input may be a tensor, a tuple of positional inputs, or a mapping of keyword inputs:
``{"input_ids": ids, "attention_mask": mask}``, a tokenizer's ``BatchEncoding`` (a mapping) or
``{"pixel_values": images}`` for a Hugging Face model. :func:`call_arguments` turns any of them
into ``(args, kwargs)``.

Hugging Face decoders default to ``use_cache=True``: their forward then also returns a
``DynamicCache`` of every layer's keys and values. That cache is state for the next call, not
part of the function of the parameters that the user reads (``last_hidden_state``,
``logits``); it cannot be traced, and keys and values flowing into it would look like outputs
that no symmetry may move. So every analysis calls such a model with ``use_cache=False``
(unless the user passed ``use_cache`` themselves) and says so: :func:`call_notes`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError

CACHE_NOTE = (
    "called with use_cache=False: the key/value cache a decoder returns by default is state for "
    "the next call, not part of the function of the parameters"
)


@functools.lru_cache(maxsize=256)
def _forward_keywords(forward: Any) -> tuple[bool, bool]:
    """(takes ``use_cache`` by name, takes ``**kwargs``) of a forward function."""
    try:
        parameters = inspect.signature(forward).parameters
    except (TypeError, ValueError):  # a builtin or a C-level forward: no keyword inputs
        return False, False
    variadic = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return "use_cache" in parameters, variadic


def takes_cache_flag(model: nn.Module) -> bool:
    """Whether ``model.forward`` accepts ``use_cache`` (by name, or through ``**kwargs`` on a
    model whose config has a ``use_cache`` setting, as Hugging Face models do). The
    signature is read once per forward function (analyses call models in tight loops)."""
    forward = getattr(type(model), "forward", None)
    if forward is not None and getattr(model.forward, "__func__", None) is forward:
        by_name, variadic = _forward_keywords(forward)
    else:  # an instance-level forward: read it as it is, not kept in the cache
        by_name, variadic = _forward_keywords.__wrapped__(model.forward)
    return by_name or (variadic and hasattr(getattr(model, "config", None), "use_cache"))


def call_arguments(
    model: nn.Module, example_input: Any, where: str = "symmetries", *, strict: bool = True
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``example_input`` as ``(args, kwargs)`` for ``model``: a tensor, a tuple of positional
    inputs, or a mapping of keyword inputs (a dict, a ``BatchEncoding``). A model that takes
    ``use_cache`` gets ``use_cache=False`` unless the mapping sets it (module docstring). Any
    other object raises naming ``where`` (``strict``) or is the one positional input.

    >>> from torch import nn
    >>> call_arguments(nn.Identity(), {"input": 1})
    ((), {'input': 1})
    """
    if isinstance(example_input, Tensor):
        args: tuple[Any, ...] = (example_input,)
        kwargs: dict[str, Any] = {}
    elif isinstance(example_input, tuple):
        args, kwargs = example_input, {}
    elif isinstance(example_input, Mapping):
        args, kwargs = (), dict(example_input.items())
    elif not strict:
        args, kwargs = (example_input,), {}
    else:
        raise InvalidArgumentError(
            f"{where}: example_input must be a tensor, a tuple of positional inputs or a mapping "
            f"of keyword inputs (a dict or a tokenizer's BatchEncoding), got "
            f"{type(example_input).__name__}"
        )
    if "use_cache" not in kwargs and takes_cache_flag(model):
        kwargs["use_cache"] = False
    return args, kwargs


def call_notes(model: nn.Module, example_input: Any) -> list[str]:
    """What :func:`call_arguments` changed in the user's call (empty when nothing)."""
    given = isinstance(example_input, Mapping) and "use_cache" in example_input
    return [CACHE_NOTE] if not given and takes_cache_flag(model) else []
