"""What SymO needs to know about an MLP: its widths, parameter names and hidden-layer groups.

Seed 002 (Eq. 5) studies the MLP ``h_ℓ = W_ℓ σ(h_{ℓ−1}) + b_ℓ`` (ℓ = 1..L, σ_1 the identity)
with ``W_ℓ`` of shape ``(d_ℓ, d_{ℓ−1})`` and optional biases ``b_ℓ`` of shape ``(d_ℓ,)``. The
group acting on hidden layer ℓ = 1..L−1 (Eqs. 6–7: ``W_ℓ ↦ V_ℓ W_ℓ V_{ℓ−1}ᵀ``, ``b_ℓ ↦ V_ℓ b_ℓ``;
the input and output sides have no symmetry) depends on the activation after it:

=======================  ==========================================  =========================
activation               group of the hidden layer                   name here
=======================  ==========================================  =========================
identity, radial         orthogonal matrices O(d_ℓ)                  ``"orthogonal"``
odd pointwise (tanh)     signed permutations B(d_ℓ)                  ``"signed_permutation"``
other pointwise (ReLU)   permutations S(d_ℓ)                         ``"permutation"``
=======================  ==========================================  =========================

The groups are nested, O(d) ⊃ B(d) ⊃ S(d); a smaller group than the activation allows may be
asked for (its curvature structure has more factors), a larger one is refused. Hidden layers
may have different activations (the group is then a product of different factors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal, cast

from torch import nn

from paramsym.errors import InvalidArgumentError, UnsupportedModuleError
from paramsym.nn.activations import ActivationSpec
from paramsym.symmetry.chain import Node, flatten_sequential

GroupName = Literal["orthogonal", "signed_permutation", "permutation"]
"""The symmetry group of one hidden layer (module docstring)."""

GROUP_NAMES: tuple[GroupName, ...] = ("orthogonal", "signed_permutation", "permutation")
"""From largest to smallest: each group contains the ones after it."""

GroupChoice = Literal["auto", "orthogonal", "signed_permutation", "permutation"]


def largest_group(spec: ActivationSpec) -> GroupName | None:
    """The largest of the three groups under which ``σ`` is equivariant, or ``None``.

    >>> from paramsym.nn import get_activation
    >>> [largest_group(get_activation(a)) for a in ("identity", "tanh", "relu", "radial")]
    ['orthogonal', 'signed_permutation', 'permutation', 'orthogonal']
    """
    if spec.linear or spec.radial:
        return "orthogonal"
    if not spec.pointwise:
        return None
    return "signed_permutation" if spec.odd else "permutation"


def _check_group(choice: str, allowed: GroupName, where: str) -> GroupName:
    if choice == "auto":
        return allowed
    if choice not in GROUP_NAMES:
        raise InvalidArgumentError(
            f"{where}: group must be 'auto' or one of {', '.join(GROUP_NAMES)}, got {choice!r}"
        )
    if GROUP_NAMES.index(choice) < GROUP_NAMES.index(allowed):
        raise InvalidArgumentError(
            f"{where}: the activation is only equivariant under the {allowed} group, so "
            f"group={choice!r} is not a symmetry; pass group='auto' or a smaller group"
        )
    return choice


@dataclass(frozen=True)
class MLPLayout:
    """An MLP as SymO sees it.

    Attributes:
        widths: ``(d_0, d_1, ..., d_L)``; ``L = len(widths) - 1`` layers.
        weight_names: the ``L`` weight parameter names, e.g. ``("0.weight", "2.weight")``.
        bias_names: for each layer its bias parameter name, or ``None`` if it has none.
        groups: the group of each hidden layer 1..L−1 (``L − 1`` entries).
        activations: a readable name of each hidden layer's activation (for messages).
    """

    widths: tuple[int, ...]
    weight_names: tuple[str, ...]
    bias_names: tuple[str | None, ...]
    groups: tuple[GroupName, ...]
    activations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        layers = len(self.widths) - 1
        if layers < 1 or any(int(d) != d or d < 1 for d in self.widths):
            raise InvalidArgumentError(
                f"MLPLayout: widths must be at least two positive integers, got {self.widths}"
            )
        if len(self.weight_names) != layers or len(self.bias_names) != layers:
            raise InvalidArgumentError(
                f"MLPLayout: {layers} layers need {layers} weight and bias names, got "
                f"{len(self.weight_names)} and {len(self.bias_names)}"
            )
        if len(self.groups) != layers - 1:
            raise InvalidArgumentError(
                f"MLPLayout: {layers - 1} hidden layers need {layers - 1} groups, got "
                f"{len(self.groups)}"
            )
        for g in self.groups:
            if g not in GROUP_NAMES:
                raise InvalidArgumentError(
                    f"MLPLayout: unknown group {g!r}; use one of {', '.join(GROUP_NAMES)}"
                )

    @property
    def num_layers(self) -> int:
        """L, the number of linear layers."""
        return len(self.widths) - 1

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """All parameter names in model order: ``W_1, b_1, W_2, b_2, ...`` (absent biases
        skipped), the order of ``model.named_parameters()`` and of :func:`paramsym.flatten`."""
        names: list[str] = []
        for w, b in zip(self.weight_names, self.bias_names, strict=True):
            names.append(w)
            if b is not None:
                names.append(b)
        return tuple(names)

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of parameter ``name``: ``(d_ℓ, d_{ℓ−1})`` or ``(d_ℓ,)``."""
        for layer, (w, b) in enumerate(zip(self.weight_names, self.bias_names, strict=True), 1):
            if name == w:
                return (self.widths[layer], self.widths[layer - 1])
            if name == b:
                return (self.widths[layer],)
        raise InvalidArgumentError(f"MLPLayout: no parameter named {name!r}")

    @property
    def num_params(self) -> int:
        """P, the number of scalar parameters."""
        total = 0
        for name in self.parameter_names:
            size = 1
            for n in self.shape(name):
                size *= n
            total += size
        return total

    def with_hidden_widths(self, hidden: Sequence[int]) -> MLPLayout:
        """The same layout with the hidden widths ``d_1..d_{L−1}`` replaced."""
        hidden = tuple(int(h) for h in hidden)
        if len(hidden) != self.num_layers - 1:
            raise InvalidArgumentError(
                f"with_hidden_widths: expected {self.num_layers - 1} widths, got {len(hidden)}"
            )
        widths = (self.widths[0], *hidden, self.widths[-1])
        return MLPLayout(widths, self.weight_names, self.bias_names, self.groups, self.activations)

    @classmethod
    def from_widths(
        cls,
        widths: Sequence[int],
        group: GroupName | Sequence[GroupName],
        *,
        bias: bool | Sequence[bool] = True,
    ) -> MLPLayout:
        """The layout of ``ps.mlp(widths, bias=bias)``: weights named ``"0.weight"``,
        ``"2.weight"``, ... (linear layers at even positions of the ``nn.Sequential``).

        >>> MLPLayout.from_widths([3, 4, 2], "permutation", bias=False).parameter_names
        ('0.weight', '2.weight')
        """
        widths = tuple(int(d) for d in widths)
        layers = len(widths) - 1
        groups = (group,) * (layers - 1) if isinstance(group, str) else tuple(group)
        biases = (bias,) * layers if isinstance(bias, bool) else tuple(bias)
        if len(biases) != layers:
            raise InvalidArgumentError(
                f"MLPLayout.from_widths: bias needs {layers} flags, got {len(biases)}"
            )
        return cls(
            widths=widths,
            weight_names=tuple(f"{2 * i}.weight" for i in range(layers)),
            bias_names=tuple(f"{2 * i}.bias" if b else None for i, b in enumerate(biases)),
            groups=groups,
            activations=tuple(groups),
        )

    @classmethod
    def from_model(
        cls, model: nn.Module, group: GroupChoice | Sequence[GroupChoice] = "auto"
    ) -> MLPLayout:
        """Read the layout of an MLP: an ``nn.Sequential`` (nested ones are flattened) of
        ``nn.Linear`` / :class:`~paramsym.nn.NTKLinear` layers with one activation module
        (or none, which means the identity) between consecutive linear layers. A leading
        ``nn.Flatten`` and activation/softmax modules after the last linear layer are allowed:
        they do not touch the hidden layers. Anything else raises
        :class:`~paramsym.errors.UnsupportedModuleError` naming the module.

        Args:
            model: the MLP.
            group: ``"auto"`` (the largest group each activation allows, see the module
                docstring), one group name for every hidden layer, or one per hidden layer.
        """
        if not isinstance(model, nn.Sequential):
            raise UnsupportedModuleError(
                f"SymO structure: the model must be an nn.Sequential MLP of Linear layers and "
                f"activations, got {type(model).__name__}; rebuild it with ps.mlp(...) or an "
                "nn.Sequential"
            )
        nodes = list(flatten_sequential(model, ""))
        linear_positions = [i for i, n in enumerate(nodes) if n.kind == "linear"]
        if not linear_positions:
            raise UnsupportedModuleError("SymO structure: the model has no nn.Linear layer")
        first, last = linear_positions[0], linear_positions[-1]
        for node in nodes[:first]:
            if node.kind != "flatten":
                raise UnsupportedModuleError(
                    f"SymO structure: module {node.label} comes before the first Linear layer; "
                    "only nn.Flatten is supported there"
                )
        for node in nodes[last + 1 :]:
            if node.kind not in ("activation", "softmax") or _has_parameters(node):
                raise UnsupportedModuleError(
                    f"SymO structure: module {node.label} after the last Linear layer is not "
                    "supported (only parameter-free activations and softmax are)"
                )
        specs: list[ActivationSpec | None] = []
        labels: list[str] = []
        for start, stop in pairwise(linear_positions):
            between = nodes[start + 1 : stop]
            spec, label = _hidden_activation(between)
            specs.append(spec)
            labels.append(label)
        widths: list[int] = []
        weight_names: list[str] = []
        bias_names: list[str | None] = []
        for k, pos in enumerate(linear_positions):
            module = cast(nn.Linear, nodes[pos].module)
            n_in, n_out = int(module.in_features), int(module.out_features)
            if k == 0:
                widths.append(n_in)
            elif widths[-1] != n_in:
                raise UnsupportedModuleError(
                    f"SymO structure: {nodes[pos].label} expects {n_in} inputs but the layer "
                    f"before it has {widths[-1]} outputs"
                )
            widths.append(n_out)
            weight_names.append(nodes[pos].param("weight"))
            bias_names.append(nodes[pos].param("bias") if module.bias is not None else None)
        _check_no_other_parameters(model, weight_names, bias_names)
        choices = _group_choices(group, len(specs))
        groups = tuple(
            _check_group(choice, _allowed(spec, label), f"SymO structure, hidden layer {i + 1}")
            for i, (choice, spec, label) in enumerate(zip(choices, specs, labels, strict=True))
        )
        return cls(tuple(widths), tuple(weight_names), tuple(bias_names), groups, tuple(labels))


def _has_parameters(node: Node) -> bool:
    return any(True for _ in node.module.parameters())


def _hidden_activation(between: list[Node]) -> tuple[ActivationSpec | None, str]:
    """The activation between two linear layers (``None`` for none, the identity)."""
    if not between:
        return None, "identity"
    if len(between) > 1:
        names = ", ".join(n.label for n in between)
        raise UnsupportedModuleError(
            f"SymO structure: between two Linear layers there must be at most one activation "
            f"module, found {names}"
        )
    node = between[0]
    if node.kind != "activation" or node.spec is None:
        raise UnsupportedModuleError(
            f"SymO structure: module {node.label} between two Linear layers is not a known "
            "activation (normalisation, dropout and custom layers are not supported; give a "
            "custom activation a `paramsym_activation` ActivationSpec)"
        )
    if _has_parameters(node):
        raise UnsupportedModuleError(
            f"SymO structure: activation {node.label} has parameters, which SymO does not support"
        )
    return node.spec, node.spec.describe()


def _allowed(spec: ActivationSpec | None, label: str) -> GroupName:
    if spec is None:
        return "orthogonal"
    group = largest_group(spec)
    if group is None:
        raise UnsupportedModuleError(
            f"SymO structure: activation {label} is neither pointwise nor radial, so no "
            "permutation group acts on its layer"
        )
    return group


def _group_choices(group: GroupChoice | Sequence[GroupChoice], hidden: int) -> list[str]:
    if isinstance(group, str):
        return [group] * hidden
    choices: list[str] = list(group)
    if len(choices) != hidden:
        raise InvalidArgumentError(
            f"SymO structure: group lists {len(choices)} entries for {hidden} hidden layers"
        )
    return choices


def _check_no_other_parameters(
    model: nn.Module, weight_names: list[str], bias_names: list[str | None]
) -> None:
    known = set(weight_names) | {b for b in bias_names if b is not None}
    others = [name for name, _ in model.named_parameters() if name not in known]
    if others:
        raise UnsupportedModuleError(
            f"SymO structure: parameters {others[:5]} are outside the Linear layers; SymO "
            "supports MLPs of Linear layers and parameter-free activations only"
        )
    order = [name for name, _ in model.named_parameters()]
    expected = [n for pair in zip(weight_names, bias_names, strict=True) for n in pair if n]
    if order != expected:
        raise UnsupportedModuleError(
            f"SymO structure: the model's parameters are registered in the order {order}, "
            f"expected the layer order {expected}"
        )
