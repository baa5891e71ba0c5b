"""Activation functions with the metadata that parameter-space symmetries depend on.

Which symmetries a hidden layer has is decided by its activation σ (dissertation Table 1.1,
Prop 1.2.3): the group must be *equivariant* through σ, σ(g z) = π(g) σ(z). The metadata below
records exactly the properties the catalogue uses:

=====================  ==========================================================  ===========
field                  meaning                                                     used by
=====================  ==========================================================  ===========
``degree``             α with σ(c z) = c^α σ(z) for every c > 0 (pointwise)        rescaling
``odd``                σ(−z) = −σ(z)                                               sign flips
``inverse``            σ⁻¹ on the image of σ (``None`` if σ is not injective)     data-dependent GL
``nonzero_off_zero``   σ(z) ≠ 0 whenever z ≠ 0, i.e. σ⁻¹(0) ⊆ {0}                  data-dependent GL
``radial``             σ(z) = f(‖z‖) z acts on the whole feature vector            O(h)
=====================  ==========================================================  ===========

Every claim is checked numerically in ``tests/test_activations.py``, including that the
properties marked absent really fail (so the metadata is tight, not merely safe).

Activations are looked up by name (:func:`get_activation`) or recognised from a module
(:func:`activation_spec`): torch's own modules (``nn.ReLU``, ``nn.LeakyReLU``, ...), the
library's :class:`Monomial` and :class:`RadialRescaling`, and any module that carries an
``ActivationSpec`` in an attribute named ``paramsym_activation``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch convention)
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError

TensorFn = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class ActivationSpec:
    """An activation function σ together with its symmetry-relevant properties.

    Attributes:
        name: registry name, e.g. ``"leaky_relu"``.
        function: σ as a callable on tensors; pointwise unless ``radial``.
        make_module: builds an ``nn.Module`` computing σ (used by :func:`paramsym.mlp`).
        degree: positive-homogeneity degree α (σ(cz) = c^α σ(z) for c > 0), or ``None``.
        odd: whether σ(−z) = −σ(z).
        inverse: σ⁻¹ on the image of σ, or ``None`` when σ is not injective.
        nonzero_off_zero: whether σ(z) ≠ 0 for z ≠ 0 (σ⁻¹(0) ⊆ {0}).
        radial: whether σ(z) = f(‖z‖) z acts on the whole last axis (not pointwise).
        arguments: the constructor arguments, e.g. ``(("negative_slope", 0.01),)``.
    """

    name: str
    function: TensorFn = field(compare=False, repr=False)
    make_module: Callable[[], nn.Module] = field(compare=False, repr=False)
    degree: float | None = None
    odd: bool = False
    inverse: TensorFn | None = field(default=None, compare=False, repr=False)
    nonzero_off_zero: bool = False
    radial: bool = False
    arguments: tuple[tuple[str, Any], ...] = ()

    @property
    def pointwise(self) -> bool:
        """Whether σ acts coordinate by coordinate (then neuron permutations are symmetries)."""
        return not self.radial

    @property
    def invertible(self) -> bool:
        """Whether σ is injective with a known inverse."""
        return self.inverse is not None

    @property
    def homogeneous(self) -> bool:
        """Whether σ is positively homogeneous (of degree :attr:`degree`)."""
        return self.degree is not None

    @property
    def linear(self) -> bool:
        """Whether σ is the identity (then the whole GL(h) acts on the hidden layer)."""
        return self.name == "identity"

    def __call__(self, z: Tensor) -> Tensor:
        return self.function(z)

    def describe(self) -> str:
        """Short human-readable form, e.g. ``leaky_relu(negative_slope=0.1)``."""
        if not self.arguments:
            return self.name
        args = ", ".join(f"{k}={v}" for k, v in self.arguments)
        return f"{self.name}({args})"


class Monomial(nn.Module):
    """σ(z) = z^p for an integer p ≥ 1: positively homogeneous of degree p, odd when p is odd."""

    def __init__(self, power: int = 3) -> None:
        super().__init__()
        if int(power) != power or power < 1:
            raise InvalidArgumentError(f"Monomial: power must be an integer >= 1, got {power!r}")
        self.power = int(power)
        self.paramsym_activation = _monomial(self.power)

    def forward(self, z: Tensor) -> Tensor:
        return z**self.power

    def extra_repr(self) -> str:
        return f"power={self.power}"


class RadialRescaling(nn.Module):
    """Radial rescaling activation σ(z) = f(‖z‖) z on the last axis (Ganev et al.; Ex. 1.2.6).

    It commutes with every orthogonal g: σ(g z) = g σ(z), so O(h) acts on the hidden layer.
    The default ``f(r) = 1/sqrt(1 + r²)`` is smooth, maps R^h onto the open unit ball and is
    invertible (σ⁻¹(s) = s / sqrt(1 − ‖s‖²)). A custom ``f`` takes the norm ``r`` (shape
    ``(..., 1)``) and returns the factor; it has no known inverse.
    """

    def __init__(self, f: TensorFn | None = None) -> None:
        super().__init__()
        self.f = f
        self.paramsym_activation = _radial(f)

    def forward(self, z: Tensor) -> Tensor:
        return _radial_function(self.f)(z)


def _radial_function(f: TensorFn | None) -> TensorFn:
    if f is None:
        return lambda z: z * torch.rsqrt(1.0 + (z * z).sum(dim=-1, keepdim=True))
    return lambda z: f(torch.linalg.vector_norm(z, dim=-1, keepdim=True)) * z


def _radial_inverse(s: Tensor) -> Tensor:
    return s * torch.rsqrt(1.0 - (s * s).sum(dim=-1, keepdim=True))


def _radial(f: TensorFn | None) -> ActivationSpec:
    return ActivationSpec(
        name="radial",
        function=_radial_function(f),
        make_module=lambda: RadialRescaling(f),
        odd=True,
        inverse=_radial_inverse if f is None else None,
        # f(r) = 1/sqrt(1+r^2) never vanishes; a custom f may, so make no claim for it.
        nonzero_off_zero=f is None,
        radial=True,
        arguments=() if f is None else (("f", getattr(f, "__name__", "custom")),),
    )


def _monomial(power: int) -> ActivationSpec:
    odd = power % 2 == 1

    def inverse(s: Tensor) -> Tensor:
        return torch.sign(s) * s.abs() ** (1.0 / power)

    return ActivationSpec(
        name="monomial",
        function=lambda z: z**power,
        make_module=lambda: Monomial(power),
        degree=float(power),
        odd=odd,
        inverse=inverse if odd else None,
        nonzero_off_zero=True,
        arguments=(("power", power),),
    )


def _leaky_relu(negative_slope: float) -> ActivationSpec:
    # Any slope keeps positive homogeneity of degree 1; injectivity needs a positive slope,
    # and slope 1 is the identity (odd).
    slope = float(negative_slope)
    return ActivationSpec(
        name="leaky_relu",
        function=lambda z: F.leaky_relu(z, slope),
        make_module=lambda: nn.LeakyReLU(slope),
        degree=1.0,
        odd=slope == 1.0,
        inverse=(lambda s: torch.where(s >= 0, s, s / slope)) if slope > 0 else None,
        nonzero_off_zero=slope != 0.0,
        arguments=(("negative_slope", slope),),
    )


def _elu(alpha: float) -> ActivationSpec:
    if not alpha > 0:
        raise InvalidArgumentError(f"elu: alpha must be > 0, got {alpha!r}")
    return ActivationSpec(
        name="elu",
        function=lambda z: F.elu(z, alpha),
        make_module=lambda: nn.ELU(alpha),
        inverse=lambda s: torch.where(s >= 0, s, torch.log1p(s / alpha)),
        nonzero_off_zero=True,
        arguments=(("alpha", alpha),),
    )


def _softplus(beta: float, threshold: float) -> ActivationSpec:
    if not beta > 0:
        raise InvalidArgumentError(f"softplus: beta must be > 0, got {beta!r}")

    def inverse(s: Tensor) -> Tensor:
        # torch's softplus is the identity above threshold / beta.
        linear = s * beta > threshold
        safe = torch.where(linear, torch.ones_like(s), s)
        return torch.where(linear, s, torch.log(torch.expm1(beta * safe)) / beta)

    return ActivationSpec(
        name="softplus",
        function=lambda z: F.softplus(z, beta, threshold),
        make_module=lambda: nn.Softplus(beta, threshold),
        inverse=inverse,
        nonzero_off_zero=True,
        arguments=(("beta", beta), ("threshold", threshold)),
    )


def _gelu(approximate: str) -> ActivationSpec:
    return ActivationSpec(
        name="gelu",
        function=lambda z: F.gelu(z, approximate=approximate),
        make_module=lambda: nn.GELU(approximate=approximate),
        nonzero_off_zero=True,  # z Φ(z) vanishes only at 0
        arguments=(("approximate", approximate),) if approximate != "none" else (),
    )


_IDENTITY = ActivationSpec(
    name="identity",
    function=lambda z: z,
    make_module=nn.Identity,
    degree=1.0,
    odd=True,
    inverse=lambda s: s,
    nonzero_off_zero=True,
)
_RELU = ActivationSpec(name="relu", function=torch.relu, make_module=nn.ReLU, degree=1.0)
_TANH = ActivationSpec(
    name="tanh",
    function=torch.tanh,
    make_module=nn.Tanh,
    odd=True,
    inverse=torch.atanh,
    nonzero_off_zero=True,
)
_SIGMOID = ActivationSpec(
    name="sigmoid",
    function=torch.sigmoid,
    make_module=nn.Sigmoid,
    inverse=torch.logit,
    nonzero_off_zero=True,
)
_SILU = ActivationSpec(name="silu", function=F.silu, make_module=nn.SiLU, nonzero_off_zero=True)

_FACTORIES: dict[str, Callable[..., ActivationSpec]] = {
    "identity": lambda: _IDENTITY,
    "linear": lambda: _IDENTITY,
    "relu": lambda: _RELU,
    "leaky_relu": lambda negative_slope=0.01: _leaky_relu(float(negative_slope)),
    "tanh": lambda: _TANH,
    "sigmoid": lambda: _SIGMOID,
    "gelu": lambda approximate="none": _gelu(approximate),
    "silu": lambda: _SILU,
    "elu": lambda alpha=1.0: _elu(float(alpha)),
    "softplus": lambda beta=1.0, threshold=20.0: _softplus(float(beta), float(threshold)),
    "monomial": lambda power=3: Monomial(power).paramsym_activation,
    "radial": lambda f=None: _radial(f),
}


def available_activations() -> list[str]:
    """Names accepted by :func:`get_activation` (``"linear"`` is an alias of ``"identity"``)."""
    return sorted(_FACTORIES)


def get_activation(name: str | ActivationSpec, **arguments: Any) -> ActivationSpec:
    """Look up an activation by name, e.g. ``get_activation("leaky_relu", negative_slope=0.1)``.

    >>> get_activation("leaky_relu", negative_slope=0.1).describe()
    'leaky_relu(negative_slope=0.1)'
    >>> get_activation("relu").degree
    1.0
    """
    if isinstance(name, ActivationSpec):
        if arguments:
            raise InvalidArgumentError(
                "get_activation: arguments are only accepted with an activation name"
            )
        return name
    key = str(name).lower()
    if key not in _FACTORIES:
        raise InvalidArgumentError(
            f"unknown activation {name!r}; available: {', '.join(available_activations())}"
        )
    try:
        return _FACTORIES[key](**arguments)
    except TypeError as err:
        raise InvalidArgumentError(
            f"activation {name!r}: bad arguments {arguments}: {err}"
        ) from err


_TORCH_MODULES: dict[type[nn.Module], Callable[[Any], ActivationSpec]] = {
    nn.Identity: lambda m: _IDENTITY,
    nn.ReLU: lambda m: _RELU,
    nn.LeakyReLU: lambda m: _leaky_relu(float(m.negative_slope)),
    nn.Tanh: lambda m: _TANH,
    nn.Sigmoid: lambda m: _SIGMOID,
    nn.GELU: lambda m: _gelu(m.approximate),
    nn.SiLU: lambda m: _SILU,
    nn.ELU: lambda m: _elu(float(m.alpha)),
    nn.Softplus: lambda m: _softplus(float(m.beta), float(m.threshold)),
}


def activation_spec(module: nn.Module) -> ActivationSpec | None:
    """The :class:`ActivationSpec` of an activation module, or ``None`` if it is not one.

    Recognised: ``nn.Identity``, ``nn.ReLU``, ``nn.LeakyReLU``, ``nn.Tanh``, ``nn.Sigmoid``,
    ``nn.GELU``, ``nn.SiLU``, ``nn.ELU``, ``nn.Softplus``, the library's :class:`Monomial` and
    :class:`RadialRescaling`, and any module with a ``paramsym_activation`` attribute (the way
    to teach paramsym a custom activation).
    """
    spec = getattr(module, "paramsym_activation", None)
    if isinstance(spec, ActivationSpec):
        return spec
    factory = _TORCH_MODULES.get(type(module))
    return factory(module) if factory is not None else None
