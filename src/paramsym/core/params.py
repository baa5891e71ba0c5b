"""Parameters as ``dict[str, Tensor]``: the algebra every analysis in paramsym works in.

Parameters are keyed like ``model.named_parameters()`` so that any ``nn.Module`` can be
evaluated at any point of its parameter space with :func:`functional_call`, without the user
rewriting the model. The vector-space operations below (inner product, norm, ``axpy``) treat a
params dict as one vector of length ``P = sum(t.numel())``; :func:`flatten` and
:func:`unflatten` convert between the two views in a fixed key order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.calls import call_arguments
from paramsym.errors import MissingParameterError, NonFiniteError, ShapeError

Params = dict[str, Tensor]
"""A point (or tangent vector) in parameter space, keyed like ``model.named_parameters()``."""


def params_of(model: nn.Module, *, detach: bool = True) -> Params:
    """Return the parameters of ``model`` as a dict keyed like ``named_parameters()``.

    With ``detach=True`` (default) the tensors are detached views sharing storage with the
    model, so analyses do not build autograd graphs through the module's own leaves.

    >>> import torch
    >>> p = params_of(torch.nn.Linear(3, 2))
    >>> {k: tuple(v.shape) for k, v in p.items()}
    {'weight': (2, 3), 'bias': (2,)}
    """
    return {name: (t.detach() if detach else t) for name, t in model.named_parameters()}


def resolve_params(model: nn.Module, params: Mapping[str, Tensor] | None) -> Params:
    """``params`` as a plain dict, or the model's own (detached) parameters when ``None``."""
    return params_of(model) if params is None else dict(params)


def resolve_trainable(model: nn.Module, params: Mapping[str, Tensor] | None) -> Params:
    """``params`` as a plain dict, or the model's trainable parameters when ``None``: a frozen
    parameter (``requires_grad=False``) stays where it is unless ``params`` names it."""
    if params is not None:
        return dict(params)
    return {name: t.detach() for name, t in model.named_parameters() if t.requires_grad}


def stateless_call(
    model: nn.Module,
    tensors: Mapping[str, Tensor],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None = None,
) -> Any:
    """``torch.func.functional_call(model, tensors, args, kwargs)`` that always gives the model
    its own parameters and buffers back.

    torch's call swaps ``tensors`` into the modules and back. A module that appears under two
    names (one ``Linear`` placed twice in a ``Sequential``) is swapped twice and restored with
    the *swapped-in* tensor (torch 2.13): the user's model would keep the analysis's
    parameters, or fake tensors after a trace. Every module's own entries are restored here by
    identity.
    """
    saved = [
        (module, dict(module._parameters), dict(module._buffers))
        for module in model.modules()  # each module once, however many names it has
    ]
    try:
        return torch.func.functional_call(model, dict(tensors), args, dict(kwargs or {}))
    finally:
        for module, parameters, buffers in saved:
            for entries, own in ((module._parameters, parameters), (module._buffers, buffers)):
                for name, tensor in own.items():
                    if entries.get(name) is not tensor:
                        entries[name] = tensor  # type: ignore[assignment]


def functional_call(
    model: nn.Module,
    params: Mapping[str, Tensor],
    x: Tensor | tuple[Any, ...] | Mapping[str, Any],
) -> Any:
    """Evaluate ``model`` at ``params`` on input ``x``: a tensor, a tuple of positional inputs,
    or a mapping of keyword inputs (``{"input_ids": ids}``, a ``BatchEncoding``; a model that
    takes ``use_cache`` is called with ``use_cache=False``, see :mod:`paramsym.core.calls`).

    Parameters missing from ``params`` are taken from the module. Buffers are taken from the
    module as *copies* (:func:`buffer_copies`, in the dtype of ``params``): analyses never
    change a model's state (e.g. the running statistics a training-mode BatchNorm would update),
    and the call works inside ``torch.func`` transforms, which reject in-place updates of
    captured tensors.
    """
    args, kwargs = call_arguments(model, x, "functional_call", strict=False)
    return stateless_call(model, {**buffer_copies(model, params), **params}, args, kwargs)


def buffer_copies(model: nn.Module, params: Mapping[str, Tensor]) -> Params:
    """Copies of ``model``'s buffers for a call at ``params``: floating buffers (running
    statistics) in the floating dtype of ``params``, so that an analysis in float64 of a float32
    model with BatchNorm runs; integer buffers (``num_batches_tracked``) as they are."""
    dtype = next((t.dtype for t in params.values() if t.is_floating_point()), None)
    return {
        name: b.to(dtype).clone() if dtype is not None and b.is_floating_point() else b.clone()
        for name, b in model.named_buffers()
    }


def flatten(params: Mapping[str, Tensor]) -> Tensor:
    """Concatenate all tensors of ``params`` (in key order) into one vector of shape ``(P,)``."""
    if not params:
        return torch.zeros(0)
    return torch.cat([t.reshape(-1) for t in params.values()])


def unflatten(vector: Tensor, like: Mapping[str, Tensor]) -> Params:
    """Split a vector of shape ``(P,)`` into a params dict shaped like ``like`` (same key order)."""
    total = sum(t.numel() for t in like.values())
    if vector.ndim != 1 or vector.numel() != total:
        raise ShapeError(
            f"unflatten: vector has shape {tuple(vector.shape)}, expected ({total},) to match "
            f"the {len(like)} parameters given in `like`"
        )
    out: Params = {}
    offset = 0
    for name, t in like.items():
        out[name] = vector[offset : offset + t.numel()].view_as(t)
        offset += t.numel()
    return out


def check_same_keys(a: Mapping[str, Tensor], b: Mapping[str, Tensor], what: str) -> None:
    """Raise :class:`MissingParameterError` unless ``a`` and ``b`` have the same keys."""
    if a.keys() != b.keys():
        only_a = sorted(set(a) - set(b))
        only_b = sorted(set(b) - set(a))
        raise MissingParameterError(
            f"{what}: the two parameter dicts have different keys "
            f"(only in the first: {only_a}; only in the second: {only_b})"
        )


def inner(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Tensor:
    """Euclidean inner product ``<a, b> = sum_k sum(a[k] * b[k])`` as a 0-d tensor."""
    check_same_keys(a, b, "inner")
    terms = [torch.sum(a[k] * b[k]) for k in a]
    return torch.stack(terms).sum() if terms else torch.zeros(())


def norm(a: Mapping[str, Tensor]) -> Tensor:
    """Euclidean norm of a params dict seen as one vector."""
    return torch.sqrt(inner(a, a))


def axpy(alpha: float | Tensor, x: Mapping[str, Tensor], y: Mapping[str, Tensor]) -> Params:
    """Return ``alpha * x + y`` (BLAS naming) as a new params dict."""
    check_same_keys(x, y, "axpy")
    return {k: alpha * x[k] + y[k] for k in y}


def scale(alpha: float | Tensor, x: Mapping[str, Tensor]) -> Params:
    """Return ``alpha * x``."""
    return {k: alpha * t for k, t in x.items()}


def add(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Params:
    """Return ``a + b``."""
    return axpy(1.0, a, b)


def sub(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Params:
    """Return ``a - b``."""
    return axpy(-1.0, b, a)


def zeros_like(params: Mapping[str, Tensor]) -> Params:
    """A params dict of zeros with the shapes, dtypes and devices of ``params``."""
    return {k: torch.zeros_like(t) for k, t in params.items()}


def randn_like(params: Mapping[str, Tensor], generator: torch.Generator | None = None) -> Params:
    """Standard-normal params dict shaped like ``params`` (drawn from ``generator``)."""
    return {
        k: torch.randn(t.shape, generator=generator, dtype=t.dtype).to(t.device)
        for k, t in params.items()
    }


def to_dtype(params: Mapping[str, Tensor], dtype: torch.dtype) -> Params:
    """Cast every floating tensor of ``params`` to ``dtype``."""
    return {k: t.to(dtype) if t.is_floating_point() else t for k, t in params.items()}


def check_finite(tensors: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]], what: str) -> None:
    """Raise :class:`NonFiniteError` naming the first tensor that has NaN or inf entries."""
    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    for name, t in items:
        if not t.is_floating_point():
            continue
        with torch.no_grad():
            if bool(torch.isfinite(t.sum())):
                continue  # a NaN or inf entry makes the sum NaN or inf: one cheap pass
            if bool(torch.isfinite(t).all()):
                continue  # the sum overflowed, every entry is finite
            bad = int((~torch.isfinite(t)).sum())
            raise NonFiniteError(
                f"{what}: parameter '{name}' has {bad} NaN or infinite entries; "
                "paramsym needs finite parameters (check the training run that produced them)"
            )


def first_output(raw: Any) -> Tensor:
    """The first tensor of a model's output: the tensor itself, a ``ModelOutput``'s ``logits``
    (else its first field), a mapping's first value, or a tuple's first element."""
    if isinstance(raw, Tensor):
        return raw
    if hasattr(raw, "logits"):
        return raw.logits
    if isinstance(raw, Mapping):
        return next(iter(raw.values()))
    return raw[0]


def output_change(before: nn.Module, after: nn.Module, example_input: Any) -> float:
    """``max |f_after(x) − f_before(x)| / max |f_before(x)|`` on the first output tensor of two
    models (same architecture, other weights) on ``example_input``, without gradients: how far a
    rewrite meant to keep the function (alignment, equalization) moved it."""
    args, kwargs = call_arguments(before, example_input)
    with torch.no_grad():
        out = []
        for m in (before, after):
            state = {k: v.detach() for k, v in m.named_parameters()}
            out.append(first_output(stateless_call(m, state, args, kwargs)))
    scale = float(out[0].abs().max())
    return float((out[1] - out[0]).abs().max()) / max(scale, 1e-300)
