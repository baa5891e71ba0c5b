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

A user's own module often calls a Hugging Face model inside its ``forward``
(``self.backbone(input_ids=x).last_hidden_state``), where no keyword of the outer call reaches
it and the backbone's cache stays on. The function the user reads is the same, but the trace
is not: the cache's writes (keys and values concatenated onto an empty tensor, which the
attention then reads) stand between the projections and the attention. Detection therefore
traces with those inner caches off (:func:`caches_off`: each inner model's
``config.use_cache`` set to ``False`` for the call and put back after), so a wrapped model
gets the graph, and the symmetries, of the direct call, and says so (:func:`call_notes`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError

CACHE_NOTE = (
    "called with use_cache=False: the key/value cache a decoder returns by default is state for "
    "the next call, not part of the function of the parameters"
)

INNER_CACHE_NOTE = (
    "called with use_cache=False inside {modules} (config.use_cache turned off for the call and "
    "restored after): the key/value cache a decoder inside the model keeps by default is state "
    "for the next call, not part of the function of the parameters; the model's output is the "
    "same"
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


def _gives_cache_flag(example_input: Any) -> bool:
    return isinstance(example_input, Mapping) and "use_cache" in example_input


def inner_caches(model: nn.Module, example_input: Any = None) -> list[tuple[str, Any]]:
    """The models inside ``model`` whose key/value cache is on by default and that no keyword of
    the call reaches, as (module name, config), outermost first, one per config: every
    submodule that takes ``use_cache`` (:func:`takes_cache_flag`) with ``config.use_cache``
    true, except those sharing the root's config when the root takes ``use_cache`` itself (the
    call's ``use_cache=False`` reaches them). Empty when ``example_input`` sets ``use_cache``
    (the user chose).

    >>> from torch import nn
    >>> inner_caches(nn.Sequential(nn.Linear(2, 2)))
    []
    """
    if _gives_cache_flag(example_input):
        return []
    root_config = getattr(model, "config", None) if takes_cache_flag(model) else None
    seen = {id(root_config)} if root_config is not None else set()
    found = []
    for name, module in model.named_modules():
        config = getattr(module, "config", None)
        if not name or id(config) in seen or getattr(config, "use_cache", None) is not True:
            continue
        if takes_cache_flag(module):
            seen.add(id(config))
            found.append((name, config))
    return found


@contextmanager
def caches_off(model: nn.Module, example_input: Any = None) -> Iterator[list[str]]:
    """For the duration, ``config.use_cache = False`` on every model of :func:`inner_caches`
    (put back after, also on error); yields their module names."""
    found = inner_caches(model, example_input)
    for _, config in found:
        config.use_cache = False
    try:
        yield [name for name, _ in found]
    finally:
        for _, config in found:
            config.use_cache = True


def call_notes(model: nn.Module, example_input: Any) -> list[str]:
    """What :func:`call_arguments` and :func:`caches_off` change in the user's call (empty when
    nothing)."""
    notes = [CACHE_NOTE] if not _gives_cache_flag(example_input) and takes_cache_flag(model) else []
    inner = [name for name, _ in inner_caches(model, example_input)]
    if inner:
        listing = ", ".join(f"'{name}'" for name in inner)
        notes.append(INNER_CACHE_NOTE.format(modules=listing))
    return notes
