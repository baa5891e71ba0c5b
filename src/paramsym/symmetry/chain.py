"""Symmetries of one chain of modules (an ``nn.Sequential``, nested ones flattened).

Every linear layer A (``nn.Linear``, :class:`~paramsym.nn.NTKLinear`) starts a *hidden layer*:
the modules after it up to the next linear layer B. A candidate group acting on A's output
neurons is propagated through those modules one by one, using the equivariance
σ(g z) = π(g) σ(z) each module satisfies (Prop. 1.2.3, A.2.3):

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

When the chain is the whole model (its input is the model's input), hidden layers
``A → σ → B`` with a nonlinear pointwise σ also get the data-dependent GL(h) actions of
:mod:`paramsym.symmetry.nonlinear`: the single-input and pseudo-inverse actions when σ is
nonzero off zero, the inverse-activation action when σ is invertible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from paramsym.core.params import buffer_copies, stateless_call
from paramsym.nn.activations import ActivationSpec, activation_spec
from paramsym.nn.layers import NTKLinear
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.discrete import NeuronPermutation, SignFlip
from paramsym.symmetry.gl import HiddenGL
from paramsym.symmetry.nonlinear import (
    InverseActivationGL,
    LayerPair,
    NonlinearGL,
    PseudoInverseGL,
)
from paramsym.symmetry.orthogonal import HiddenOrthogonal
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.symmetry.translation import SoftmaxTranslation

LINEAR_TYPES: tuple[type[nn.Module], ...] = (nn.Linear, NTKLinear)
"""Module types treated as affine maps ``x ↦ W x + b`` with ``weight`` (out, in) and ``bias``."""

_CONTINUOUS = ("gl", "orthogonal", "scaling", "scalar")


@dataclass(frozen=True)
class Node:
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
    end: Node | None = None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def classify(name: str, module: nn.Module) -> Node:
    """What role ``module`` plays in a chain (``kind``), with its activation spec if any."""
    if isinstance(module, LINEAR_TYPES):
        return Node(name, module, "linear")
    spec = activation_spec(module)
    if spec is not None:
        return Node(name, module, "activation", spec)
    if isinstance(module, nn.BatchNorm1d):
        return Node(name, module, "batchnorm")
    if isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1:
        return Node(name, module, "layernorm")
    if type(module) is nn.Dropout:
        return Node(name, module, "dropout")
    if isinstance(module, nn.Flatten):
        return Node(name, module, "flatten")
    if isinstance(module, (nn.Softmax, nn.LogSoftmax)) and module.dim in (None, -1, 1):
        return Node(name, module, "softmax")
    return Node(name, module, "unknown")


def flatten_sequential(seq: nn.Sequential, prefix: str) -> Iterator[Node]:
    """The modules of ``seq`` in call order, nested Sequentials flattened, classified."""
    for child_name, child in seq.named_children():
        name = f"{prefix}.{child_name}" if prefix else child_name
        if isinstance(child, nn.Sequential):
            yield from flatten_sequential(child, name)
        else:
            yield classify(name, child)


# -- propagating a group through a hidden layer ------------------------------------------------


def _linear_slots(node: Node) -> list[Slot]:
    slots = [Slot(node.param("weight"), 0, 1.0)]
    if node.module.bias is not None:
        slots.append(Slot(node.param("bias"), 0, 1.0))
    return slots


def _affine_slots(node: Node, *, weight: bool = True) -> list[Slot]:
    """Slots of a normalisation layer's per-feature weight (γ) and bias (β), where present."""
    m = node.module
    names = (["weight"] if weight else []) + ["bias"]
    return [Slot(node.param(a), 0, 1.0) for a in names if getattr(m, a, None) is not None]


def _is_affine_norm(node: Node) -> bool:
    return (
        node.kind in ("batchnorm", "layernorm") and getattr(node.module, "weight", None) is not None
    )


def _batch_statistics_note(route: _Route, node: Node) -> None:
    if node.attribute("track_running_stats"):
        route.note(
            f"BatchNorm {node.label} is assumed to use batch statistics (training mode); "
            "its running statistics are buffers and are not transformed"
        )


def _absorb_by_norm(route: _Route, node: Node) -> str:
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


def _step(route: _Route, node: Node) -> str:
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
    family: str, slots: list[Slot], downstream: list[Node], terminal: Node | None
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


def _build(route: _Route, source: Node, width: int) -> Symmetry:
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


def hidden_layer_symmetries(
    source: Node, downstream: Sequence[Node], terminal: Node | None
) -> list[Symmetry]:
    """The data-independent symmetries of the hidden layer between linear ``source`` and
    ``terminal`` (``None`` at the end of a chain), with ``downstream`` the modules between."""
    downstream = list(downstream)
    width = int(source.attribute("out_features"))
    starts: list[tuple[Node, list[Slot], list[Node], tuple[str, ...]]] = [
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


def _is_passthrough(node: Node) -> bool:
    return node.kind in ("dropout", "flatten") or (
        node.kind == "activation" and node.spec is not None and node.spec.linear
    )


def is_softmax_cross_entropy(loss_fn: Callable[..., Any] | None) -> bool:
    """Whether ``loss_fn`` is softmax cross-entropy (so it is invariant to logit translation)."""
    return isinstance(loss_fn, nn.CrossEntropyLoss) or loss_fn is F.cross_entropy


def chain_symmetries(
    chain: Sequence[Node], *, at_input: bool, at_output: bool, loss_fn: Callable[..., Any] | None
) -> list[Symmetry]:
    """All symmetries of a chain. ``at_input``: the chain's input is the model's input (then
    data-dependent actions are built); ``at_output``: its output is the model's output (then
    the last layer's softmax translation is considered)."""
    chain = list(chain)
    found: list[Symmetry] = []
    linear_positions = [i for i, n in enumerate(chain) if n.kind == "linear"]
    for k, i in enumerate(linear_positions):
        j = linear_positions[k + 1] if k + 1 < len(linear_positions) else len(chain)
        downstream = chain[i + 1 : j]
        if any(n.kind == "unknown" for n in downstream):
            continue
        terminal = chain[j] if j < len(chain) else None
        if terminal is not None and int(terminal.attribute("in_features")) != int(
            chain[i].attribute("out_features")
        ):
            continue  # e.g. a Flatten over positions between: not the (batch, features) layout
        found.extend(hidden_layer_symmetries(chain[i], downstream, terminal))
        if at_input and terminal is not None:
            found.extend(_data_dependent(chain[:i], chain[i], downstream, terminal))
    if at_output and linear_positions:
        last = chain[linear_positions[-1]]
        tail = chain[linear_positions[-1] + 1 :]
        ends_in_softmax = bool(tail) and tail[-1].kind == "softmax"
        body = tail[:-1] if ends_in_softmax else tail
        if all(_is_passthrough(n) for n in body) and (
            ends_in_softmax or is_softmax_cross_entropy(loss_fn)
        ):
            bias = last.param("bias") if last.module.bias is not None else None
            translation = SoftmaxTranslation(
                last.param("weight"),
                bias,
                int(last.attribute("in_features")),
                preserves="function" if ends_in_softmax else "loss",
                site=last.name,
            )
            if ends_in_softmax and tail[-1].attribute("dim") == 1:
                translation.notes = (
                    *translation.notes,
                    f"softmax {tail[-1].label} normalises dim 1, the features of (batch, "
                    "features) outputs as assumed here; for outputs with more axes pass "
                    "example_input",
                )
            found.append(translation)
    return found


# -- data-dependent actions ------------------------------------------------------------------


def prefix_features(prefix: Sequence[Node]) -> Callable[[Mapping[str, Tensor], Tensor], Tensor]:
    """``(params, x) -> h``: run the modules of ``prefix`` in order at the given parameters."""
    steps = [(node.name, node.module) for node in prefix]

    def features(params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        h = x
        for name, module in steps:
            head = name + "."
            local = {k[len(head) :]: v for k, v in params.items() if k.startswith(head)}
            h = stateless_call(module, {**buffer_copies(module, local), **local}, (h,))
        return h

    return features


def _data_dependent(
    prefix: Sequence[Node], source: Node, downstream: Sequence[Node], terminal: Node
) -> list[Symmetry]:
    """The data-dependent GL(h) actions of a hidden layer ``A → σ → B``, if it is one."""
    active = [n for n in downstream if n.kind != "dropout"]
    if len(active) != 1 or active[0].kind != "activation":
        return []
    spec = active[0].spec
    assert spec is not None
    if not spec.pointwise or spec.linear:
        return []  # radial σ is not pointwise; a linear σ already has the exact GL(h)
    module = source.module
    scales = (module.weight_scale, module.bias_std) if isinstance(module, NTKLinear) else (1.0, 1.0)
    pair = LayerPair(
        incoming_weight=source.param("weight"),
        incoming_bias=source.param("bias") if module.bias is not None else None,
        outgoing_weight=terminal.param("weight"),
        activation=spec,
        features=prefix_features(prefix),
        weight_scale=float(scales[0]),
        bias_scale=float(scales[1]),
    )
    width = int(source.attribute("out_features"))
    site = f"{source.name}->{terminal.name}"
    found: list[Symmetry] = []
    if spec.nonzero_off_zero:
        found += [NonlinearGL(pair, width, site=site), PseudoInverseGL(pair, width, site=site)]
    if spec.invertible:
        found.append(InverseActivationGL(pair, width, site=site))
    return found
