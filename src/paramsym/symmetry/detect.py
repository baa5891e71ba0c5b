"""``symmetries(model)``: find the parameter-space symmetries of a model from its layers.

How it works. A model is read as chains of modules: an ``nn.Sequential`` (nested Sequentials
flattened in order), or, for any other model, each of its top-most ``nn.Sequential``
submodules. In a chain, every linear layer A (``nn.Linear``, :class:`~paramsym.nn.NTKLinear`)
starts a *hidden layer*: the modules after it up to the next linear layer B. A candidate group
acting on A's output neurons is propagated through those modules one by one, using the
equivariance σ(g z) = π(g) σ(z) each module satisfies (Prop. 1.2.3, A.2.3):

==================  =========  ==================  =========================  ===============
module              GL(h)      O(h)                (R>0)^h scaling            S_h / (Z_2)^h
==================  =========  ==================  =========================  ===============
identity, Dropout   passes     passes              passes                     passes
pointwise σ         linear σ   linear σ            homogeneous σ: c -> c^α    any σ / odd σ
radial σ            blocks     passes              blocks                     passes / passes
BatchNorm1d         blocks     blocks              absorbed (invariance)      passes (+ its
                                                                              affine params)
LayerNorm           blocks     blocks              one common scale absorbed  S_h passes
==================  =========  ==================  =========================  ===============

What reaches B is undone by B's columns (W_B g⁻¹, W_B diag(c)^{−α}, W_B Pᵀ); what a
normalisation layer absorbs needs no compensation. Groups also start at the affine
parameters of a normalisation layer (its output γ ⊙ n + β scales per feature), which gives
the rescaling of a ReLU that follows a BatchNorm. For each start the largest continuous group
is reported (GL > O > per-neuron scaling > one common scale), plus neuron permutations and,
for odd activations, sign flips. At the end of the model, a softmax (module, or a
cross-entropy ``loss_fn``) adds the translation of the last layer.

Nothing is silently dropped: modules that cannot be analysed are reported in an
:class:`~paramsym.errors.UnanalysedModuleWarning` (or an
:class:`~paramsym.errors.UnsupportedModuleError` with ``strict=True``), and symmetries whose
hidden layer contains one are not reported.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch.nn.functional as F  # noqa: N812
from torch import nn

from paramsym.core.params import check_finite
from paramsym.errors import InvalidArgumentError, UnanalysedModuleWarning, UnsupportedModuleError
from paramsym.nn.activations import ActivationSpec, activation_spec
from paramsym.nn.layers import NTKLinear
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.discrete import NeuronPermutation, SignFlip
from paramsym.symmetry.gl import HiddenGL
from paramsym.symmetry.orthogonal import HiddenOrthogonal
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.symmetry.translation import SoftmaxTranslation

LINEAR_TYPES: tuple[type[nn.Module], ...] = (nn.Linear, NTKLinear)
"""Module types treated as affine maps ``x ↦ W x + b`` with ``weight`` (out, in) and ``bias``."""

_CONTINUOUS = ("gl", "orthogonal", "scaling", "scalar")


@dataclass(frozen=True)
class _Node:
    """One module of a chain, classified."""

    name: str
    module: nn.Module
    kind: str  # linear | activation | batchnorm | layernorm | dropout | flatten | softmax | unknown
    spec: ActivationSpec | None = None

    def attribute(self, attr: str) -> Any:
        """A plain attribute of the module (``eps``, ``in_features``, ...)."""
        return getattr(self.module, attr)

    def param(self, attr: str) -> str:
        return f"{self.name}.{attr}" if self.name else attr

    @property
    def label(self) -> str:
        return f"'{self.name}' ({type(self.module).__name__})"


@dataclass
class _Route:
    """A candidate group on the way from its source to the module that absorbs it."""

    family: str
    slots: list[Slot]
    exponent: float = 1.0
    exact: bool = True
    notes: list[str] = field(default_factory=list)
    end: _Node | None = None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def symmetries(
    model: nn.Module,
    strict: bool = False,
    data_dependent: bool = False,
    *,
    loss_fn: Callable[..., Any] | None = None,
) -> list[Symmetry]:
    """Find the parameter-space symmetries of ``model`` from its layers.

    Args:
        model: an ``nn.Sequential`` of ``nn.Linear``/:class:`~paramsym.nn.NTKLinear`,
            activations (see :func:`~paramsym.nn.activation_spec`), ``BatchNorm1d``,
            ``LayerNorm``, ``Dropout``, ``Flatten``, ``Softmax``/``LogSoftmax`` (nested
            Sequentials allowed); or any module, whose ``nn.Sequential`` submodules are then
            analysed.
        strict: raise :class:`~paramsym.errors.UnsupportedModuleError` naming every module that
            cannot be analysed, instead of warning.
        data_dependent: also return data-dependent actions (whose ``act`` needs the batch).
            The families found from layers here are all data-independent, so this changes
            nothing yet for these models.
        loss_fn: the training loss; a softmax cross-entropy (``nn.CrossEntropyLoss`` or
            ``F.cross_entropy``) adds the last layer's translation as a loss symmetry.

    Returns:
        The symmetries, hidden layer by hidden layer in model order (continuous groups first,
        then permutations and sign flips), then the last layer's translation. Each knows
        the parameter names it acts on (``parameter_names``), so it works on any params dict of
        this model, e.g. from ``functional_call``.

    >>> import paramsym as ps
    >>> for s in ps.symmetries(ps.mlp([4, 8, 8, 3], activation="relu")):
    ...     print(s.name, s.group)
    rescaling[0->2] (R>0)^8
    permutation[0->2] S_8
    rescaling[2->4] (R>0)^8
    permutation[2->4] S_8
    """
    if not isinstance(model, nn.Module):
        raise InvalidArgumentError(
            f"symmetries: expected a torch.nn.Module, got {type(model).__name__}"
        )
    check_finite(model.named_parameters(), f"symmetries({type(model).__name__})")
    found: list[Symmetry] = []
    unanalysed: list[str] = []
    for chain, at_output in _chains(model, unanalysed):
        unanalysed.extend(
            f"{n.label}: not a module type paramsym can analyse"
            for n in chain
            if n.kind == "unknown"
        )
        found.extend(_chain_symmetries(chain, at_output, loss_fn))
    if unanalysed:
        _report(unanalysed, strict)
    if not data_dependent:
        found = [s for s in found if not s.data_dependent]
    return found


def _report(unanalysed: list[str], strict: bool) -> None:
    listing = "; ".join(unanalysed[:10])
    more = f"; and {len(unanalysed) - 10} more" if len(unanalysed) > 10 else ""
    if strict:
        raise UnsupportedModuleError(
            f"symmetries(strict=True): cannot analyse {len(unanalysed)} module(s): {listing}{more}"
        )
    warnings.warn(
        f"symmetries: {len(unanalysed)} module(s) were not analysed, so symmetries passing "
        f"through them are not reported: {listing}{more}. Pass strict=True to make this an "
        "error.",
        UnanalysedModuleWarning,
        stacklevel=3,
    )


# -- reading a model as chains -----------------------------------------------------------------


def _classify(name: str, module: nn.Module) -> _Node:
    if isinstance(module, LINEAR_TYPES):
        return _Node(name, module, "linear")
    spec = activation_spec(module)
    if spec is not None:
        return _Node(name, module, "activation", spec)
    if isinstance(module, nn.BatchNorm1d):
        return _Node(name, module, "batchnorm")
    if isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1:
        return _Node(name, module, "layernorm")
    if type(module) is nn.Dropout:
        return _Node(name, module, "dropout")
    if isinstance(module, nn.Flatten):
        return _Node(name, module, "flatten")
    if isinstance(module, (nn.Softmax, nn.LogSoftmax)) and module.dim in (None, -1, 1):
        return _Node(name, module, "softmax")
    return _Node(name, module, "unknown")


def _flatten(seq: nn.Sequential, prefix: str) -> Iterator[_Node]:
    for child_name, child in seq.named_children():
        name = f"{prefix}.{child_name}" if prefix else child_name
        if isinstance(child, nn.Sequential):
            yield from _flatten(child, name)
        else:
            yield _classify(name, child)


def _chains(model: nn.Module, unanalysed: list[str]) -> list[tuple[list[_Node], bool]]:
    """The chains to analyse, each with whether its output is the model's output."""
    if isinstance(model, nn.Sequential):
        return [(list(_flatten(model, "")), True)]
    chains: list[tuple[list[_Node], bool]] = []
    covered: list[str] = []
    for name, module in model.named_modules():
        if name and isinstance(module, nn.Sequential) and not _inside(name, covered):
            covered.append(name)
            chains.append((list(_flatten(module, name)), False))
    where = f"only its nn.Sequential submodules {covered}" if covered else "nothing"
    unanalysed.append(
        f"'{type(model).__name__}' (the model): its forward is not an nn.Sequential, so "
        f"paramsym cannot see how its layers connect and analysed {where}"
    )
    for name, module in model.named_modules():
        if name and not _inside(name, covered) and any(True for _ in module.parameters(False)):
            unanalysed.append(f"'{name}' ({type(module).__name__}): outside any nn.Sequential")
    return chains


def _inside(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# -- propagating a group through a hidden layer ------------------------------------------------


def _linear_slots(node: _Node) -> list[Slot]:
    slots = [Slot(node.param("weight"), 0, 1.0)]
    if node.module.bias is not None:
        slots.append(Slot(node.param("bias"), 0, 1.0))
    return slots


def _affine_slots(node: _Node, *, weight: bool = True) -> list[Slot]:
    """Slots of a normalisation layer's per-feature weight (γ) and bias (β), where present."""
    m = node.module
    names = (["weight"] if weight else []) + ["bias"]
    return [Slot(node.param(a), 0, 1.0) for a in names if getattr(m, a, None) is not None]


def _is_affine_norm(node: _Node) -> bool:
    return (
        node.kind in ("batchnorm", "layernorm") and getattr(node.module, "weight", None) is not None
    )


def _batch_statistics_note(route: _Route, node: _Node) -> None:
    if node.attribute("track_running_stats"):
        route.note(
            f"BatchNorm {node.label} is assumed to use batch statistics (training mode); "
            "its running statistics are buffers and are not transformed"
        )


def _absorb_by_norm(route: _Route, node: _Node) -> str:
    eps = float(node.attribute("eps"))
    if eps != 0.0:
        route.exact = False
        route.note(
            f"approximate: {node.label} has eps={eps:g} > 0, so scaling its input changes its "
            "output by O(eps / variance); exact for eps = 0"
        )
    if node.kind == "batchnorm":
        _batch_statistics_note(route, node)
    route.end = node
    return "absorb"


def _step(route: _Route, node: _Node) -> str:
    """Move ``route`` through ``node``: ``"pass"``, ``"absorb"`` or ``"block"``."""
    family, kind = route.family, node.kind
    if kind == "dropout":
        if family in ("gl", "orthogonal", "permutation"):
            route.note(f"Dropout {node.label} is treated as the identity (evaluation mode)")
        return "pass"
    if kind == "flatten":
        route.note(f"Flatten {node.label} is assumed to see (batch, features) inputs")
        return "pass"
    if kind == "activation":
        spec = node.spec
        assert spec is not None
        if family in ("scaling", "scalar") and spec.pointwise and spec.degree is not None:
            route.exponent *= spec.degree
            return "pass"
        passes = {
            "gl": spec.linear,
            "orthogonal": spec.linear or spec.radial,
            "permutation": True,
            "sign": spec.odd,
        }.get(family, False)
        return "pass" if passes else "block"
    if kind == "batchnorm":
        if family in ("scaling", "scalar"):
            return _absorb_by_norm(route, node)
        if family in ("permutation", "sign"):
            # BN(P z) = P BN(z) with γ, β permuted; BN(S z) = S BN(z) with β flipped.
            route.slots.extend(_affine_slots(node, weight=family == "permutation"))
            _batch_statistics_note(route, node)
            return "pass"
        return "block"
    if kind == "layernorm":
        if family == "scalar":
            return _absorb_by_norm(route, node)
        if family == "permutation":
            route.slots.extend(_affine_slots(node))
            return "pass"
        return "block"
    return "block"  # linear (never downstream), softmax mid-chain, unknown


def _propagate(
    family: str, slots: list[Slot], downstream: list[_Node], terminal: _Node | None
) -> _Route | None:
    route = _Route(family, list(slots))
    for node in downstream:
        outcome = _step(route, node)
        if outcome == "block":
            return None
        if outcome == "absorb":
            return route
    if terminal is None:
        return None  # the change would reach the chain's output
    route.end = terminal
    return route


def _build(route: _Route, source: _Node, width: int) -> Symmetry:
    end = route.end
    assert end is not None
    site = f"{source.name}->{end.name}"
    common: dict[str, Any] = {"site": site, "exact": route.exact, "notes": route.notes}
    if end.kind != "linear":  # absorbed by a normalisation layer: nothing downstream changes
        return PositiveScaling(
            width,
            route.slots,
            (),
            per_neuron=route.family == "scaling",
            family="norm_scaling",
            **common,
        )
    outgoing = [Slot(end.param("weight"), 1, -1.0)]
    if route.family == "gl":
        return HiddenGL(width, route.slots, outgoing, **common)
    if route.family == "orthogonal":
        return HiddenOrthogonal(width, route.slots, outgoing, **common)
    if route.family in ("scaling", "scalar"):
        return PositiveScaling(
            width,
            route.slots,
            [Slot(end.param("weight"), 1, -route.exponent)],
            degree=route.exponent,
            per_neuron=route.family == "scaling",
            **common,
        )
    if route.family == "permutation":
        return NeuronPermutation(width, route.slots, outgoing, **common)
    return SignFlip(width, route.slots, outgoing, **common)


def _hidden_layer_symmetries(
    source: _Node, downstream: list[_Node], terminal: _Node | None
) -> list[Symmetry]:
    width = int(source.attribute("out_features"))
    starts: list[tuple[_Node, list[Slot], list[_Node], tuple[str, ...]]] = [
        (source, _linear_slots(source), downstream, _CONTINUOUS)
    ]
    starts += [
        (node, _affine_slots(node), downstream[i + 1 :], ("scaling",))
        for i, node in enumerate(downstream)
        if _is_affine_norm(node)
    ]
    found: list[Symmetry] = []
    for start, slots, rest, families in starts:
        for family in families:
            route = _propagate(family, slots, rest, terminal)
            if route is not None:
                found.append(_build(route, start, width))
                break
    route = _propagate("permutation", _linear_slots(source), downstream, terminal)
    if route is not None:
        found.append(_build(route, source, width))
    for start, slots, rest, _ in starts:
        route = _propagate("sign", slots, rest, terminal)
        if route is not None:
            found.append(_build(route, start, width))
            break
    return found


def _is_passthrough(node: _Node) -> bool:
    return node.kind in ("dropout", "flatten") or (
        node.kind == "activation" and node.spec is not None and node.spec.linear
    )


def _is_softmax_cross_entropy(loss_fn: Callable[..., Any] | None) -> bool:
    return isinstance(loss_fn, nn.CrossEntropyLoss) or loss_fn is F.cross_entropy


def _chain_symmetries(
    chain: list[_Node], at_output: bool, loss_fn: Callable[..., Any] | None
) -> list[Symmetry]:
    found: list[Symmetry] = []
    linear_positions = [i for i, n in enumerate(chain) if n.kind == "linear"]
    for k, i in enumerate(linear_positions):
        j = linear_positions[k + 1] if k + 1 < len(linear_positions) else len(chain)
        downstream = chain[i + 1 : j]
        if any(n.kind == "unknown" for n in downstream):
            continue
        terminal = chain[j] if j < len(chain) else None
        found.extend(_hidden_layer_symmetries(chain[i], downstream, terminal))
    if at_output and linear_positions:
        last = chain[linear_positions[-1]]
        tail = chain[linear_positions[-1] + 1 :]
        ends_in_softmax = bool(tail) and tail[-1].kind == "softmax"
        body = tail[:-1] if ends_in_softmax else tail
        if all(_is_passthrough(n) for n in body) and (
            ends_in_softmax or _is_softmax_cross_entropy(loss_fn)
        ):
            bias = last.param("bias") if last.module.bias is not None else None
            found.append(
                SoftmaxTranslation(
                    last.param("weight"),
                    bias,
                    int(last.attribute("in_features")),
                    preserves="function" if ends_in_softmax else "loss",
                    site=last.name,
                )
            )
    return found
