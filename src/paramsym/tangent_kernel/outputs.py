"""Choosing the tensor to analyse when a model's forward returns more than one thing.

Models people train often return a tuple (a bare ``nn.LSTM`` returns ``(output, (h_n, c_n))``)
or a Hugging Face ``ModelOutput`` (``last_hidden_state``, ``pooler_output``, ...). The kernel,
the functional dimension and the loss alignment need one tensor ``(batch, ...)``, so they take an
``output=`` argument (:data:`OutputSelector`):

* ``None`` (default): the forward must return a tensor; anything else raises
  :class:`~paramsym.errors.InvalidArgumentError` saying what was returned and what to pass;
* an ``int``: an index into a returned tuple or list (or a ``ModelOutput``'s fields, in order);
* a ``str``: a key of a returned mapping or ``ModelOutput``, or an attribute name;
* a callable: ``output(raw)`` of the raw return value, which must give a tensor.

The selected tensor must keep the batch axis first (sample i in row i).

>>> import torch
>>> lstm = torch.nn.LSTM(4, 8, batch_first=True)
>>> select_output(lstm(torch.zeros(2, 5, 4)), 0, lstm, "ntk").shape
torch.Size([2, 5, 8])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from torch import Tensor, nn

from paramsym.core.batches import Inputs, batch_length
from paramsym.core.calls import call_arguments
from paramsym.core.params import buffer_copies, stateless_call
from paramsym.errors import InvalidArgumentError, ShapeError

OutputSelector: TypeAlias = int | str | Callable[[Any], Tensor] | None
"""``None``, a tuple index, a key or attribute name, or a function of the raw output."""

_HOW = (
    "pass output=0 (an index into a tuple), output='last_hidden_state' (an attribute or key "
    "name) or output=callable (a function of the raw output returning a tensor)"
)


def check_output_selector(output: Any, where: str) -> None:
    """Raise :class:`InvalidArgumentError` unless ``output`` is a valid :data:`OutputSelector`."""
    if output is None or callable(output) or isinstance(output, str):
        return
    if isinstance(output, int) and not isinstance(output, bool):
        return
    raise InvalidArgumentError(
        f"{where}: output must be None, an int, a str or a callable, got "
        f"{type(output).__name__} {output!r}"
    )


def _describe(raw: Any) -> str:
    """A short description of a forward's return value, for error messages."""
    kind = type(raw).__name__
    if isinstance(raw, Tensor):
        return f"a tensor of shape {tuple(raw.shape)}"
    if isinstance(raw, Mapping):
        return f"a {kind} with keys {list(raw.keys())}"
    if isinstance(raw, tuple | list):
        parts = [
            f"tensor {tuple(item.shape)}" if isinstance(item, Tensor) else type(item).__name__
            for item in raw[:4]
        ]
        more = ", ..." if len(raw) > 4 else ""
        return f"a {kind} of {len(raw)} ({', '.join(parts)}{more})"
    return f"a {kind}"


def _label(output: Any) -> str:
    if callable(output) and not isinstance(output, str):
        return f"output={getattr(output, '__name__', type(output).__name__)}"
    return f"output={output!r}"


def select_output(raw: Any, output: OutputSelector, model: nn.Module, where: str) -> Tensor:
    """The tensor ``output`` picks from ``raw``, the return value of ``model``'s forward.

    With ``output=None``: ``raw`` itself when it is a tensor, or the field of a mapping with
    one field (a ``ModelOutput`` lists only the fields that are set, so a Hugging Face base
    model called without extras gives its ``last_hidden_state``) when that is a tensor. With
    several fields which one to analyse is not for paramsym to guess.

    Raises :class:`InvalidArgumentError` (naming ``where``, the model and what it returned)
    when nothing selects a tensor; never an ``AttributeError`` or ``IndexError``.
    """
    name = type(model).__name__
    if output is None:
        if isinstance(raw, Tensor):
            return raw
        if isinstance(raw, Mapping) and len(raw) == 1:
            (only,) = raw.values()
            if isinstance(only, Tensor):
                return only
        raise InvalidArgumentError(
            f"{where}: {name} returned {_describe(raw)}, not a tensor; choose the tensor to "
            f"analyse: {_HOW}"
        )
    if isinstance(raw, Tensor) and not callable(output):
        raise InvalidArgumentError(
            f"{where}: {name} returned a tensor, so {_label(output)} would index its batch "
            "axis; leave output=None (or pass a callable)"
        )
    if callable(output) and not isinstance(output, str):
        selected = output(raw)
    elif isinstance(output, str):
        if isinstance(raw, Mapping) and output in raw:
            selected = raw[output]
        elif not isinstance(raw, Mapping) and hasattr(raw, output):
            selected = getattr(raw, output)
        else:
            raise InvalidArgumentError(
                f"{where}: {_label(output)} names no field of {name}'s output, which is "
                f"{_describe(raw)}; {_HOW}"
            )
    else:
        try:
            selected = raw[output]
        except (IndexError, KeyError, TypeError):
            raise InvalidArgumentError(
                f"{where}: {_label(output)} does not index {name}'s output, which is "
                f"{_describe(raw)}; {_HOW}"
            ) from None
    if not isinstance(selected, Tensor):
        raise InvalidArgumentError(
            f"{where}: {_label(output)} selected {_describe(selected)} from {name}'s output, not "
            f"a tensor; {_HOW}"
        )
    return selected


def check_batch_axis(out: Tensor, batch: int, output: OutputSelector, where: str) -> None:
    """Raise :class:`ShapeError` unless the selected tensor has ``batch`` rows."""
    if out.ndim == 0 or out.shape[0] != batch:
        hint = (
            "; select a tensor whose first axis is the batch (a callable can move it there)"
            if output is not None
            else "; the model's output must have the batch axis first"
        )
        raise ShapeError(
            f"{where}: the model's output{'' if output is None else f' ({_label(output)})'} has "
            f"shape {tuple(out.shape)} for a batch of {batch} inputs{hint}"
        )


def flat_outputs(
    model: nn.Module,
    params: Mapping[str, Tensor],
    x: Inputs,
    output: OutputSelector,
    where: str,
) -> Tensor:
    """``(b, O)``: the selected output of ``model`` at ``params`` on ``x`` (``(b, ...)``, or
    named tensors passed as keyword inputs), flattened after the batch axis. Buffers are
    copied, so the model's state never changes."""
    args, kwargs = call_arguments(model, x, where)
    raw = stateless_call(model, {**buffer_copies(model, params), **params}, args, kwargs)
    out = select_output(raw, output, model, where)
    b = batch_length(x, where, "x")
    check_batch_axis(out, b, output, where)
    return out.reshape(b, -1)


__all__ = [
    "OutputSelector",
    "check_batch_axis",
    "check_output_selector",
    "flat_outputs",
    "select_output",
]
