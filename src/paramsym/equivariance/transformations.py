"""Continuous equivariances (T, S) of a model: the objects seed 003's Theorem 1 is about.

A model f admits a (T, S)-equivariance if ``f(T(θ, g)) = S(f(θ), g)`` for all θ and g
(seed 003, Def. 1 / eq. (1); notes 003 §2). Here

* θ is a params dict (keyed like ``model.named_parameters()``) and the model's output on the
  batch is the stacked output ``y = f(θ)`` (input data are absorbed into f);
* ``transform(params, g) -> params`` is T, with g a tensor of shape ``(dim,)``;
* ``output_transform(y, g) -> y`` is S, or ``None`` for a *symmetry* (S = id);
* ``identity`` is g₀ with ``T(θ, g₀) = θ`` (and ``S(y, g₀) = y``); default zeros.

T and S must be pure functions of their arguments written with torch operations, so that
``torch.func.jvp``/``vjp`` can differentiate them (no in-place updates of the inputs, no
``.item()`` on values that depend on g). ``transform`` may return only the entries it changes:
the others are passed through.

:meth:`Equivariance.from_symmetry` turns every continuous symmetry of the catalogue into an
equivariance through its exponential map: ``T(θ, ξ) = sym.act(θ, sym.exp(ξ))`` with g₀ = 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.autograd import forward_ad

from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError, MissingParameterError, ShapeError
from paramsym.symmetry.base import Symmetry

Transform = Callable[[Params, Tensor], Mapping[str, Tensor]]
"""T(θ, g): a params dict and a group coordinate of shape ``(dim,)`` to a params dict."""

OutputTransform = Callable[[Tensor, Tensor], Tensor]
"""S(y, g): the model's output (any shape) and g to a tensor of the same shape."""


@dataclass(frozen=True, eq=False)
class Equivariance:
    """A continuous (T, S)-equivariance ``f(T(θ, g)) = S(f(θ), g)`` (seed 003, eq. (1)).

    Attributes:
        transform: T(θ, g) -> params (entries not returned are unchanged).
        output_transform: S(y, g) -> y of the same shape, or ``None`` for a symmetry (S = id).
        dim: k, the number of coordinates of g.
        identity: g₀, shape ``(dim,)``, with T(θ, g₀) = θ and S(y, g₀) = y (default zeros,
            see :meth:`identity_element`).
        name: a readable label, used in messages and results.
        exact: ``False`` for transformations that are equivariances only approximately (e.g.
            normalisation-layer scale invariance with eps > 0); the identity checks then warn
            instead of raising when the sanity check fails.
        notes: caveats in words.
        data_dependent: whether T was built for one input batch (a data-dependent catalogue
            symmetry); it is then an equivariance of the model on that batch only.
        tangent: optional closed form of the generators at g₀, ``tangent(params, xi) ->
            params`` = ∂/∂t T(θ, g₀ + tξ) at t = 0 (entries left out are zero). At g = g₀ the
            identity checks then take J = tangent(θ, e_j) and the parameter-side term of item
            2a, −∇_θ⟨a, tangent(θ, e_j)⟩, from it instead of differentiating T (several times
            cheaper on large models); the sanity check compares it with the JVP of T.

    >>> import torch, paramsym as ps
    >>> eq = ps.Equivariance(lambda p, g: {k: g.exp() * t for k, t in p.items()},
    ...                      output_transform=lambda y, g: (2 * g).exp() * y, dim=1)
    >>> eq.symmetry, eq.identity_element(torch.float64)
    (False, tensor([0.], dtype=torch.float64))
    """

    transform: Transform
    output_transform: OutputTransform | None = None
    dim: int = 1
    identity: Tensor | None = None
    name: str = "equivariance"
    exact: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)
    data_dependent: bool = False
    tangent: Transform | None = None

    def __post_init__(self) -> None:
        if not callable(self.transform):
            raise InvalidArgumentError(
                f"Equivariance {self.name!r}: transform must be callable T(params, g) -> params, "
                f"got {type(self.transform).__name__}"
            )
        if self.tangent is not None and not callable(self.tangent):
            raise InvalidArgumentError(
                f"Equivariance {self.name!r}: tangent must be callable tangent(params, xi) -> "
                f"params or None, got {type(self.tangent).__name__}"
            )
        if self.output_transform is not None and not callable(self.output_transform):
            raise InvalidArgumentError(
                f"Equivariance {self.name!r}: output_transform must be callable S(y, g) -> y or "
                f"None (a symmetry), got {type(self.output_transform).__name__}"
            )
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise InvalidArgumentError(
                f"Equivariance {self.name!r}: dim must be a positive int (the number of "
                f"coordinates of g), got {self.dim!r}"
            )
        if self.identity is not None and (
            not isinstance(self.identity, Tensor) or tuple(self.identity.shape) != (self.dim,)
        ):
            shape = (
                tuple(self.identity.shape)
                if isinstance(self.identity, Tensor)
                else type(self.identity).__name__
            )
            raise ShapeError(
                f"Equivariance {self.name!r}: identity must be a tensor of shape ({self.dim},), "
                f"got {shape}"
            )
        object.__setattr__(self, "notes", tuple(self.notes))

    @property
    def symmetry(self) -> bool:
        """Whether S is the identity (a symmetry: K = 0 and no output-side terms)."""
        return self.output_transform is None

    def identity_element(
        self, dtype: torch.dtype | None = None, device: torch.device | str | None = None
    ) -> Tensor:
        """g₀ as a tensor of shape ``(dim,)`` in ``dtype`` (default: zeros)."""
        if self.identity is None:
            return torch.zeros(self.dim, dtype=dtype, device=device)
        return self.identity.to(dtype=dtype or self.identity.dtype, device=device)

    def sample(
        self,
        scale: float = 0.1,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> Tensor:
        """A random g = g₀ + scale · N(0, I), shape ``(dim,)`` (drawn on the CPU)."""
        noise = torch.randn(self.dim, generator=generator, dtype=torch.float64)
        g0 = self.identity_element(torch.float64)
        return (g0 + scale * noise).to(dtype=dtype, device=device)

    def apply(self, params: Mapping[str, Tensor], g: Tensor) -> Params:
        """T(θ, g) as a full params dict (entries T leaves out are passed through)."""
        out = self.transform(dict(params), g)
        if not isinstance(out, Mapping):
            raise InvalidArgumentError(
                f"Equivariance {self.name!r}: transform must return a params dict, got "
                f"{type(out).__name__}"
            )
        unknown = sorted(set(out) - set(params))
        if unknown:
            raise MissingParameterError(
                f"Equivariance {self.name!r}: transform returned entries {unknown[:5]} that are "
                f"not in params (got {sorted(params)[:8]}); T must map the analysed parameters "
                "to themselves (frozen parameters are left out unless params= names them)"
            )
        merged = dict(params)
        for name, tensor in out.items():
            if tensor.shape != params[name].shape:
                raise ShapeError(
                    f"Equivariance {self.name!r}: transform returned {name!r} with shape "
                    f"{tuple(tensor.shape)}, expected {tuple(params[name].shape)}"
                )
            merged[name] = tensor
        return merged

    def apply_tangent(self, params: Mapping[str, Tensor], xi: Tensor) -> Params:
        """``tangent(θ, ξ)`` as a full params dict (zeros where it leaves entries out); raises
        if no tangent was given."""
        if self.tangent is None:
            raise InvalidArgumentError(f"Equivariance {self.name!r} has no closed-form tangent")
        out = self.tangent(dict(params), xi)
        unknown = sorted(set(out) - set(params))
        if unknown:
            raise MissingParameterError(
                f"Equivariance {self.name!r}: tangent returned entries {unknown[:5]} that are "
                "not in params"
            )
        full: Params = {}
        for name, t in params.items():
            value = out.get(name)
            if value is None:
                full[name] = torch.zeros_like(t)
            elif value.shape != t.shape:
                raise ShapeError(
                    f"Equivariance {self.name!r}: tangent returned {name!r} with shape "
                    f"{tuple(value.shape)}, expected {tuple(t.shape)}"
                )
            else:
                full[name] = value
        return full

    def apply_output(self, y: Tensor, g: Tensor) -> Tensor:
        """S(y, g) (``y`` itself for a symmetry)."""
        if self.output_transform is None:
            return y
        out = self.output_transform(y, g)
        if not isinstance(out, Tensor) or out.shape != y.shape:
            shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ShapeError(
                f"Equivariance {self.name!r}: output_transform must return a tensor shaped like "
                f"the model's output {tuple(y.shape)}, got {shape}"
            )
        return out

    @classmethod
    def from_symmetry(cls, sym: Symmetry, x: Any = None) -> Equivariance:
        """The equivariance ``T(θ, ξ) = sym.act(θ, sym.exp(ξ), x)``, S = id, g₀ = 0, k = sym.dim.

        Works for every continuous catalogue symmetry that preserves the network function
        (``sym.preserves == "function"``). Data-dependent symmetries need the batch's input
        ``x`` (the equivariance then holds on that batch). Discrete symmetries (``dim == 0``)
        belong to :class:`~paramsym.equivariance.DiscreteSymmetry`; loss symmetries change f
        and need an output transform (:func:`~paramsym.equivariance.softmax_translation`);
        symmetries that move running statistics (BatchNorm in eval mode) are not maps of the
        parameters alone. Each of these raises :class:`~paramsym.errors.InvalidArgumentError`.
        """
        if not isinstance(sym, Symmetry):
            raise InvalidArgumentError(
                f"Equivariance.from_symmetry: expected a paramsym Symmetry, got "
                f"{type(sym).__name__}"
            )
        if sym.dim == 0:
            raise InvalidArgumentError(
                f"Equivariance.from_symmetry: {sym.name} is discrete (dim 0); use "
                "ps.DiscreteSymmetry.from_symmetry(sym, element) and check Theorem 2 at a fixed "
                "point"
            )
        if sym.preserves != "function":
            raise InvalidArgumentError(
                f"Equivariance.from_symmetry: {sym.name} preserves the {sym.preserves}, not the "
                "network function, so S = id is wrong; give the output transform it induces "
                "(for the softmax shift: ps.equivariance.softmax_translation(model))"
            )
        if sym.buffer_names:
            raise InvalidArgumentError(
                f"Equivariance.from_symmetry: {sym.name} also moves the buffers "
                f"{sorted(sym.buffer_names)} (running statistics in evaluation mode), so it is "
                "not a transformation of the parameters alone; analyse the model in training "
                "mode or leave this symmetry out"
            )
        if sym.data_dependent and x is None:
            raise InvalidArgumentError(
                f"Equivariance.from_symmetry: {sym.name} is data-dependent; pass the batch's "
                "input, from_symmetry(sym, x=x)"
            )

        cache: dict[str, Any] = {}

        def element(g: Tensor) -> Any:
            # The solvers and dense Jacobians differentiate T in θ only, at one g: reuse exp(g)
            # (a matrix exponential per product otherwise) while g is a plain tensor.
            if (
                g.requires_grad
                or torch._C._functorch.is_functorch_wrapped_tensor(g)
                or forward_ad.unpack_dual(g).tangent is not None
            ):
                return sym.exp(g)
            seen = cache.get("g")
            if not (
                isinstance(seen, Tensor)
                and seen.dtype == g.dtype
                and seen.device == g.device
                and torch.equal(seen, g)
            ):
                cache.update(g=g.detach().clone(), element=sym.exp(g))
            return cache["element"]

        def transform(params: Params, g: Tensor) -> Params:
            return sym.act(params, element(g), x)

        def tangent(params: Params, xi: Tensor) -> Params:
            return sym.tangent(params, xi, x)

        notes: Sequence[str] = (f"T(θ, ξ) = {sym.name}.act(θ, exp(ξ)); g₀ = 0", *sym.notes)
        return cls(
            transform=transform,
            output_transform=None,
            dim=sym.dim,
            identity=None,
            name=sym.name,
            exact=sym.exact,
            notes=tuple(notes),
            data_dependent=sym.data_dependent,
            tangent=tangent,
        )
