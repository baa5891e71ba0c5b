"""The conserved quantity of an elementwise activation with whitened input (Eq. 2.17).

For ``F = U σ(V X)`` with X = I (whitened input: the training inputs are the rows of the
identity, in any order), any pointwise σ with σ′ ≠ 0 where the flow moves, and any loss of F,

    Q = ½ Tr[UᵀU] − Σ_{a,j} ∫_0^{V_aj} σ(x)/σ′(x) dx                       (Eq. 2.17)

is constant along gradient flow, and so is each hidden neuron's share
``Q_a = ½ ‖U_{:,a}‖² − Σ_j F_σ(V_aj)`` with ``F_σ(v) = ∫_0^v σ/σ′`` [derived: dQ_a/dt =
−Σ_j σ(V_aj)(UᵀG)_aj + Σ_j (σ/σ′)(V_aj) σ′(V_aj)(UᵀG)_aj = 0 with G = ∂L/∂F]. The layers after
U may be anything (L depends on U and V only through Uσ(V)). Closed forms of F_σ (notes 001a
§3, checked by ODE integration in the tests):

==============  =============================  =========================================
σ               σ/σ′                           F_σ(v) = ∫_0^v σ/σ′
==============  =============================  =========================================
identity        x                              v²/2
leaky_relu      x (any slope s ≠ 0)            v²/2
relu            x for x > 0 (0/0 below)        ½ max(v, 0)²  (implementer's choice: entries
                                               below 0 have zero gradient and stay put)
sigmoid         1 + eˣ                         v + eᵛ − 1
tanh            ½ sinh 2x                      (cosh 2v − 1)/4 = ½ sinh² v
==============  =============================  =========================================

For σ = identity (and leaky_relu) Q_a = −½ μ_aa, minus half the diagonal of the imbalance of
:mod:`~paramsym.conserved.moment`: this module keeps the paper's sign (U-term minus V-term).

:func:`gaussian_moments` gives E and Var of F_σ(v) for v ~ N(0, s²), which the Xavier
statistics and the variance-based initialisation use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from paramsym.conserved.base import ConservedQuantity
from paramsym.core.params import check_finite
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.nn.activations import ActivationSpec
from paramsym.symmetry.chain import flatten_sequential

Antiderivative = Callable[[Tensor], Tensor]
"""F_σ: the antiderivative of σ/σ′ with F_σ(0) = 0, applied entrywise."""

CLOSED_FORM_ACTIVATIONS = ("identity", "leaky_relu", "relu", "sigmoid", "tanh")
"""Activations (by :class:`~paramsym.nn.ActivationSpec` name) with a closed-form F_σ."""


def _half_square(v: Tensor) -> Tensor:
    return 0.5 * v * v


def _half_positive_square(v: Tensor) -> Tensor:
    return 0.5 * torch.clamp(v, min=0.0) ** 2


def _sigmoid_antiderivative(v: Tensor) -> Tensor:
    return v + torch.expm1(v)


def _tanh_antiderivative(v: Tensor) -> Tensor:
    return 0.5 * torch.sinh(v) ** 2


def _slope(spec: ActivationSpec) -> float:
    return float(dict(spec.arguments).get("negative_slope", 0.01))


def antiderivative_kind(spec: ActivationSpec) -> str:
    """The closed-form family of F_σ: ``quadratic`` (identity, leaky_relu: F(cv) = c²F(v)),
    ``relu`` (also of degree 2 for c > 0), ``sigmoid`` or ``tanh``; raises for others."""
    if spec.name == "identity" or (spec.name == "leaky_relu" and _slope(spec) != 0.0):
        return "quadratic"
    if spec.name in ("relu", "leaky_relu"):  # leaky_relu with slope 0 is relu
        return "relu"
    if spec.name in ("sigmoid", "tanh"):
        return spec.name
    raise InvalidArgumentError(
        f"ElementwiseQ: no closed form of ∫σ/σ′ for activation {spec.describe()!r}; supported: "
        f"{', '.join(CLOSED_FORM_ACTIVATIONS)}. Pass antiderivative=<F with F′ = σ/σ′, F(0) = 0> "
        "for another activation"
    )


def closed_form_antiderivative(spec: ActivationSpec) -> Antiderivative:
    """F_σ(v) = ∫_0^v σ(x)/σ′(x) dx in closed form (table in the module docstring).

    >>> import torch, paramsym as ps
    >>> closed_form_antiderivative(ps.nn.get_activation("sigmoid"))(torch.tensor([0.0, 1.0]))
    tensor([0.0000, 2.7183])
    """
    return {
        "quadratic": _half_square,
        "relu": _half_positive_square,
        "sigmoid": _sigmoid_antiderivative,
        "tanh": _tanh_antiderivative,
    }[antiderivative_kind(spec)]


def gaussian_moments(spec: ActivationSpec, std: float) -> tuple[float, float]:
    """(E, Var) of F_σ(v) for v ~ N(0, std²), in closed form [derived]:

    * v²/2: (s²/2, s⁴/2); ½ max(v, 0)²: (s²/4, 5s⁴/16);
    * v + eᵛ − 1: (e^{s²/2} − 1, s² + e^{2s²} − e^{s²} + 2s² e^{s²/2}),
      by Stein's lemma E[v eᵛ] = s² e^{s²/2};
    * ½ sinh² v: ((e^{2s²} − 1)/4, (e^{4s²} − 1)²/32).
    """
    s2 = float(std) ** 2
    kind = antiderivative_kind(spec)
    if kind == "quadratic":
        return s2 / 2, s2 * s2 / 2
    if kind == "relu":
        return s2 / 4, 5 * s2 * s2 / 16
    if kind == "sigmoid":
        return (
            math.expm1(s2 / 2),
            s2 + math.exp(2 * s2) - math.exp(s2) + 2 * s2 * math.exp(s2 / 2),
        )
    return math.expm1(2 * s2) / 4, math.expm1(4 * s2) ** 2 / 32


@dataclass(frozen=True)
class TwoLayerNames:
    """Where ``U σ(V x)`` sits in a model: the parameter names of V (no bias) and U, σ."""

    incoming: str
    outgoing: str
    activation: ActivationSpec
    inputs: int
    hidden: int
    outputs: int


def two_layer_names(model: nn.Module) -> TwoLayerNames:
    """Find ``Linear(n, h, bias=False) → σ → Linear(h, m) → ...`` at the start of ``model``.

    Raises :class:`~paramsym.errors.InvalidArgumentError` saying what is missing: Eq. 2.17
    holds for the first hidden layer of a chain whose input is whitened, with no bias on the
    incoming layer (a bias adds a non-whitened constant input).
    """
    if not isinstance(model, nn.Sequential):
        raise InvalidArgumentError(
            f"ElementwiseQ: expected an nn.Sequential starting Linear(n, h, bias=False), σ, "
            f"Linear(h, m), got {type(model).__name__}"
        )
    nodes = list(flatten_sequential(model, ""))
    kinds = [n.kind for n in nodes[:3]]
    if kinds != ["linear", "activation", "linear"] or type(nodes[0].module) is not nn.Linear:
        raise InvalidArgumentError(
            "ElementwiseQ: the model must start nn.Linear(n, h, bias=False), one pointwise "
            f"activation, a linear layer; it starts {[type(n.module).__name__ for n in nodes[:3]]}"
        )
    first, act, second = nodes[:3]
    spec = act.spec
    assert spec is not None
    if first.module.bias is not None:
        raise InvalidArgumentError(
            f"ElementwiseQ: layer '{first.name}' has a bias; Eq. 2.17 needs U σ(V X) with "
            "whitened X and no bias (build the model with bias=False)"
        )
    if not spec.pointwise:
        raise InvalidArgumentError(
            f"ElementwiseQ: activation '{act.name}' ({spec.name}) is not pointwise"
        )
    return TwoLayerNames(
        incoming=first.param("weight"),
        outgoing=second.param("weight"),
        activation=spec,
        inputs=int(first.module.in_features),
        hidden=int(first.module.out_features),
        outputs=int(second.module.out_features),
    )


class ElementwiseQ(ConservedQuantity):
    """Eq. 2.17's Q of ``U σ(V X)`` with whitened input X = I, per neuron or summed.

    Args:
        model: an ``nn.Sequential`` starting ``Linear(n, h, bias=False)``, a pointwise σ,
            ``Linear(h, m)`` (more layers may follow); see :func:`two_layer_names`.
        per_neuron: return the h values Q_a (each conserved) instead of their sum Q.
        antiderivative: F_σ for an activation without a closed form (F′ = σ/σ′, F(0) = 0).

    Conserved only when the training inputs are whitened (X = I, rows in any order):
    :meth:`check_inputs` verifies a batch. ``quadratic`` is true for identity and leaky_relu,
    where Q is −½ diag of the imbalance and one GD step changes it by exactly η²Q(∇L).

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([4, 3, 2], activation="tanh", bias=False, seed=0)
    >>> q = ElementwiseQ(model)
    >>> theta = ps.params_of(model)
    >>> U, V = theta["2.weight"], theta["0.weight"]
    >>> expected = 0.5 * (U**2).sum() - ((torch.cosh(2 * V) - 1) / 4).sum()
    >>> torch.allclose(q(theta), expected)
    True
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        per_neuron: bool = False,
        antiderivative: Antiderivative | None = None,
    ) -> None:
        self.names = two_layer_names(model)
        spec = self.names.activation
        self.per_neuron = bool(per_neuron)
        self.custom = antiderivative is not None
        self.function: Antiderivative = (
            antiderivative if antiderivative is not None else closed_form_antiderivative(spec)
        )
        self.quadratic = not self.custom and antiderivative_kind(spec) == "quadratic"
        self.name = f"elementwise[{spec.describe()}]"

    @property
    def activation(self) -> ActivationSpec:
        return self.names.activation

    def terms(self, params: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(½‖U_{:,a}‖², Σ_j F_σ(V_aj)) per neuron, shapes ``(h,)``; Q_a is their difference."""
        u, v = params[self.names.outgoing], params[self.names.incoming]
        check_finite([(self.names.outgoing, u), (self.names.incoming, v)], self.name)
        return 0.5 * (u * u).sum(dim=0), self.function(v).sum(dim=1)

    def __call__(self, params: Mapping[str, Tensor]) -> Tensor:
        outgoing, incoming = self.terms(params)
        per_neuron = outgoing - incoming
        return per_neuron if self.per_neuron else per_neuron.sum()

    def magnitude(self, params: Mapping[str, Tensor]) -> Tensor:
        outgoing, incoming = self.terms(params)
        if not self.per_neuron:
            outgoing, incoming = outgoing.sum(), incoming.sum()
        return torch.linalg.vector_norm(outgoing) + torch.linalg.vector_norm(incoming)

    def check_inputs(self, x: Tensor) -> None:
        """Raise unless ``x`` is whitened: the n×n identity with its rows in any order."""
        n = self.names.inputs
        if x.shape != (n, n):
            raise ShapeError(
                f"{self.name}: Eq. 2.17 is conserved only for whitened inputs X = I; the batch "
                f"has shape {tuple(x.shape)}, expected ({n}, {n})"
            )
        eye = torch.eye(n, dtype=x.dtype, device=x.device)
        if not torch.equal(x[:, x.argmax(dim=1)], eye) or not torch.equal(
            torch.sort(x.argmax(dim=1)).values, torch.arange(n, device=x.device)
        ):
            raise InvalidArgumentError(
                f"{self.name}: Eq. 2.17 is conserved only for whitened inputs X = I (rows of the "
                "identity in any order); this batch is not"
            )
