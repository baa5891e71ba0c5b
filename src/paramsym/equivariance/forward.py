"""One forward pass at θ with its graph kept, and the products the identity checks take from it.

The identity checks differentiate the model only here, with ``torch.autograd``: the gradient
∇L(θ) is computed once with ``create_graph=True`` and every Hessian-vector product H v is one
more backward pass through that graph (reverse-over-reverse, as in
:class:`paramsym.curvature.HessianOperator`); the output-side terms of item 2a are one VJP
``Fᵀu`` through the same forward graph. So the model runs forward once per check.

It also watches the forward for activations evaluated exactly at a kink (ReLU at 0, ...): f is
not C² there and the second-order identities need not hold (notes 003 §8.9), which is reported
as a :class:`~paramsym.errors.NonSmoothWarning`.

**Models that return more than a tensor.** f(θ) is one tensor: the model's output, or the
tensor ``output=`` picks from a tuple or a Hugging Face ``ModelOutput``
(:data:`~paramsym.tangent_kernel.outputs.OutputSelector`). By default a mapping output with a
single field that is a tensor gives that tensor: the ``last_hidden_state`` or ``logits`` of a
decoder called with ``use_cache=False`` (a ``ModelOutput`` lists only the fields set).
``loss_fn`` still receives what the model returns: the same tuple or ``ModelOutput``, with f
in the place it was selected from and every other tensor field held at its value at θ
(detached), so that L = ℓ∘f exactly, with ℓ(y) = ``loss_fn(output with y in place, target)``
(:func:`loss_input`). An ``output`` callable that computes a new tensor
(``lambda o: o.logits[:, -1]``) has no place in the output: ``loss_fn`` then receives f itself.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch convention)
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from paramsym.core.backends import differentiable_attention
from paramsym.core.model_checks import check_deterministic, check_input_dtype, require_module
from paramsym.core.params import (
    Params,
    check_finite,
    flatten,
    functional_call,
    resolve_trainable,
)
from paramsym.errors import InvalidArgumentError, NonFiniteError, NonSmoothWarning
from paramsym.tangent_kernel.outputs import OutputSelector, select_output

LossFn = Callable[[Any, Tensor], Tensor]
"""``loss_fn(output, target) -> scalar``, ``output`` what the model returns (module docstring)."""


def _kinks_of(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[float, ...]:
    """Points where ``func`` (a piecewise activation) is not C², for its given arguments."""
    if func in (F.relu, torch.relu, F.leaky_relu, torch.abs, F.elu, F.selu, F.celu):
        return (0.0,)
    if func is F.relu6:
        return (0.0, 6.0)
    if func in (F.hardswish, F.hardsigmoid):
        return (-3.0, 3.0)
    if func is F.hardtanh:
        low = kwargs.get("min_val", args[1] if len(args) > 1 else -1.0)
        high = kwargs.get("max_val", args[2] if len(args) > 2 else 1.0)
        return (float(low), float(high))
    return ()


class KinkDetector(TorchFunctionMode):
    """Counts inputs of piecewise-linear activations that sit exactly on a kink.

    Watched: ``relu``, ``leaky_relu``, ``abs``, ``elu``/``selu``/``celu`` (not C² at 0),
    ``relu6``, ``hardtanh``, ``hardswish``, ``hardsigmoid``, whether called as modules or as
    functions. Max-pooling ties and ``torch.clamp`` are not watched.
    """

    def __init__(self) -> None:
        super().__init__()
        self.hits = 0
        self.where: list[str] = []

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        kinks = _kinks_of(func, args, kwargs)
        if kinks and args and isinstance(args[0], Tensor):
            z = args[0].detach()
            count = sum(int((z == k).sum()) for k in kinks)
            if count:
                self.hits += count
                self.where.append(f"{getattr(func, '__name__', func)} ({count} entries)")
        return func(*args, **kwargs)


def unpack_batch(batch: Any, where: str) -> tuple[Any, Tensor]:
    """``(x, y)`` from a batch, or an :class:`~paramsym.errors.InvalidArgumentError`."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise InvalidArgumentError(
            f"{where}: batch must be an (inputs, targets) tuple, got {type(batch).__name__}"
        )
    return batch[0], batch[1]


def scalar_loss(loss_fn: LossFn, output: Any, target: Tensor, where: str) -> Tensor:
    """``loss_fn(output, target)`` as a 0-d tensor, or an error saying how to make it one."""
    loss = loss_fn(output, target)
    if not isinstance(loss, Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, Tensor) else type(loss).__name__
        raise InvalidArgumentError(
            f"{where}: loss_fn must return a scalar tensor, got {shape}; use reduction='mean' "
            "or 'sum'"
        )
    return loss.reshape(())


def prepare(
    model: nn.Module, batch: Any, params: Mapping[str, Tensor] | None, where: str
) -> tuple[Params, Any, Tensor]:
    """Validate the model (a deterministic ``nn.Module``) and return (θ, x, target)."""
    require_module(model, where)
    check_deterministic(model, where)
    x, target = unpack_batch(batch, where)
    point = {k: t.detach() for k, t in resolve_trainable(model, params).items()}
    if not point:
        raise InvalidArgumentError(f"{where}: the model has no trainable parameters")
    sums = [t.sum() for t in point.values() if t.is_floating_point()]
    if sums and not bool(torch.isfinite(torch.stack(sums)).all()):  # one sync, not one per tensor
        check_finite(point, f"{where}: params")  # names the offending tensor (or sums overflowed)
    floating = next((t.dtype for t in point.values() if t.is_floating_point()), None)
    check_input_dtype(x, floating, where, "the batch's inputs")
    return point, x, target


def _held(value: Any) -> Any:
    """A field of the model's output held fixed: tensors (also in a tuple or list) detached."""
    if isinstance(value, Tensor):
        return value.detach()
    if type(value) in (tuple, list):
        return type(value)(_held(item) for item in value)
    return value


def loss_input(raw: Any, selected: Tensor) -> Callable[[Tensor], Any]:
    """``y ↦`` what ``loss_fn`` receives for the output value y: ``raw`` (a tuple, list, mapping
    or ``ModelOutput``) with y in the place of ``selected`` and every other field held
    (:func:`_held`); y itself when ``raw`` is that tensor or ``selected`` is not one of its
    fields (a callable ``output`` that computes a new tensor)."""
    if isinstance(raw, tuple | list):
        slot = next((i for i, item in enumerate(raw) if item is selected), None)
        if slot is not None:
            held = [_held(item) for item in raw]

            def into_sequence(y: Tensor) -> Any:
                items = [y if i == slot else item for i, item in enumerate(held)]
                return type(raw)(*items) if hasattr(raw, "_fields") else type(raw)(items)

            return into_sequence
    elif isinstance(raw, Mapping):
        key = next((k for k, item in raw.items() if item is selected), None)
        if key is not None:
            template = copy.copy(raw) if isinstance(raw, MutableMapping) else dict(raw)
            for k, item in raw.items():
                template[k] = _held(item)

            def into_mapping(y: Tensor) -> Any:
                filled = copy.copy(template)
                filled[key] = y
                return filled

            return into_mapping
    return lambda y: y


def evaluate(
    model: nn.Module,
    params: Mapping[str, Tensor],
    x: Any,
    where: str,
    output: OutputSelector = None,
) -> tuple[Tensor, Callable[[Tensor], Any]]:
    """f(θ) on the batch (:func:`~paramsym.tangent_kernel.outputs.select_output`; it must be
    finite) and :func:`loss_input` of the model's return value. ``x`` is a tensor, a tuple of
    positional inputs or a mapping of keyword inputs
    (:func:`paramsym.core.calls.call_arguments`)."""
    with differentiable_attention(model):
        raw = functional_call(model, params, x)
    y = select_output(raw, output, model, where)
    if not bool(torch.isfinite(y).all()):
        raise NonFiniteError(
            f"{where}: f(θ) has NaN or infinite entries at these parameters, so no identity can "
            "be checked there (e.g. a normalisation layer with eps = 0 over a group whose "
            "features are all equal)"
        )
    return y, loss_input(raw, y)


def model_output(
    model: nn.Module,
    params: Mapping[str, Tensor],
    x: Any,
    where: str,
    output: OutputSelector = None,
) -> Tensor:
    """f(θ): the model's output on the batch, or the tensor ``output`` selects from it."""
    return evaluate(model, params, x, where, output)[0]


@dataclass
class GraphPoint:
    """θ as autograd leaves, f(θ) and L(θ) with their graph, and ∇L(θ) (with its graph when
    second-order products are wanted)."""

    leaves: Params
    output: Tensor
    loss: Tensor
    gradient: tuple[Tensor, ...]
    kinks: int

    @property
    def flat_gradient(self) -> Tensor:
        return flatten({k: g.detach() for k, g in zip(self.leaves, self.gradient, strict=True)})

    def hvp(self, v: Mapping[str, Tensor]) -> Tensor:
        """H v as a flat vector (one backward pass through the gradient's graph)."""
        names = list(self.leaves)
        curved = [(i, g) for i, g in enumerate(self.gradient) if g.requires_grad]
        if not curved:
            return torch.zeros_like(flatten(self.leaves))
        with torch.enable_grad():
            products = torch.autograd.grad(
                [g for _, g in curved],
                list(self.leaves.values()),
                grad_outputs=[v[names[i]].to(g.dtype) for i, g in curved],
                retain_graph=True,
                allow_unused=True,
                materialize_grads=True,
            )
        return flatten({k: p.detach() for k, p in zip(names, products, strict=True)})

    def hvp_minus_output_vjp(self, v: Mapping[str, Tensor], u: Tensor) -> Tensor:
        """H v − Fᵀu as a flat vector in one backward pass (the output-side VJP folded into the
        Hessian-vector product: the forward graph is traversed once, with both cotangents)."""
        names = list(self.leaves)
        curved = [(i, g) for i, g in enumerate(self.gradient) if g.requires_grad]
        outputs = [g for _, g in curved]
        cotangents = [v[names[i]].to(g.dtype) for i, g in curved]
        if self.output.requires_grad:
            outputs.append(self.output)
            cotangents.append(-u.to(self.output.dtype))
        if not outputs:
            return torch.zeros_like(flatten(self.leaves))
        with torch.enable_grad():
            products = torch.autograd.grad(
                outputs,
                list(self.leaves.values()),
                grad_outputs=cotangents,
                retain_graph=True,
                allow_unused=True,
                materialize_grads=True,
            )
        return flatten({k: p.detach() for k, p in zip(names, products, strict=True)})

    def output_vjp(self, u: Tensor) -> Tensor:
        """Fᵀu as a flat vector, u shaped like f(θ) (one backward pass through the forward)."""
        if not self.output.requires_grad:
            return torch.zeros_like(flatten(self.leaves))
        with torch.enable_grad():
            products = torch.autograd.grad(
                self.output,
                list(self.leaves.values()),
                grad_outputs=u.to(self.output.dtype),
                retain_graph=True,
                allow_unused=True,
                materialize_grads=True,
            )
        return flatten({k: p.detach() for k, p in zip(self.leaves, products, strict=True)})


def forward(
    model: nn.Module,
    loss_fn: LossFn,
    x: Any,
    target: Tensor,
    params: Mapping[str, Tensor],
    where: str,
    *,
    detect_kinks: bool = True,
    output: OutputSelector = None,
) -> tuple[Params, Tensor, Tensor, int, list[str], Callable[[Tensor], Tensor]]:
    """Leaves, f(θ) and L(θ) = ℓ(f(θ)) with their graph, the kink count of the forward at θ (0
    when ``detect_kinks`` is off: watching every operation of the forward costs about 0.1
    gradient evaluations on an MLP), and ℓ as a function of f (module docstring)."""
    leaves = {k: t.detach().requires_grad_(True) for k, t in params.items()}
    detector = KinkDetector()
    with torch.enable_grad():
        if detect_kinks:
            with detector:
                y, into = evaluate(model, leaves, x, where, output)
        else:
            y, into = evaluate(model, leaves, x, where, output)

        def ell(value: Tensor) -> Tensor:
            return scalar_loss(loss_fn, into(value), target, where)

        loss = ell(y)
    return leaves, y, loss, detector.hits, detector.where, ell


def warn_kinks(hits: int, where: list[str], name: str) -> None:
    if hits:
        listing = ", ".join(where[:4]) + (" ..." if len(where) > 4 else "")
        warnings.warn(
            f"check_identities({name}): {hits} activation inputs sit exactly on a kink "
            f"({listing}), so f is not C² at θ and the second-order identities need not hold "
            "(seed 003 assumes smoothness; notes 003 §8.9); move θ off the kink, e.g. by a "
            "small random perturbation",
            NonSmoothWarning,
            stacklevel=3,
        )


def gradient_point(
    leaves: Params, y: Tensor, loss: Tensor, kinks: int, *, create_graph: bool
) -> GraphPoint:
    """∇L(θ) from the forward's graph (kept, and differentiable, when ``create_graph``)."""
    with torch.enable_grad():
        grads = torch.autograd.grad(
            loss,
            list(leaves.values()),
            create_graph=create_graph,
            retain_graph=True,
            allow_unused=True,
            materialize_grads=True,
        )
    return GraphPoint(leaves, y, loss, tuple(grads), kinks)
