"""BatchNorm in evaluation mode: an affine map per channel that its producer's rows and bias
trade with γ and β.

In evaluation mode a BatchNorm computes, channel by channel, with its running statistics μ and
σ² (buffers, fixed) and σ̂ = sqrt(σ² + eps),

    y = γ (z − μ)/σ̂ + β,        z = W x + b     (a convolution's or linear map's output channel),

an affine function of z. Two exact symmetries follow, one dimension per channel each, for
every input (no eps approximation: the statistics do not move):

* :class:`BatchNormScaling` — scale channel c of the producer by s > 0 and give the norm back
  1/s: ``(W_c, b_c, γ_c, β_c) ↦ (s W_c, s b_c, γ_c/s, β_c + (μ_c/σ̂_c) γ_c (1/s − 1))``. Then
  ``(γ/s)(s z − μ)/σ̂ + β'`` equals y. Group (R>0)^C, linear in the parameters for fixed s.
* :class:`BatchNormShift` — a producer bias is absorbed into β:
  ``(b_c, β_c) ↦ (b_c + δ_c, β_c − (γ_c/σ̂_c) δ_c)``. Group (R^C, +), a shift by amounts that
  depend on γ, which it reads and leaves fixed (gradient transport is exact along it, as along
  the absorbed translations of :mod:`paramsym.symmetry.absorption`).

Neither holds in training mode (the batch statistics follow the scale and the shift: there the
producer's rescaling alone is the symmetry, ``norm_scaling``). The running statistics are read,
never moved: from ``params`` where it holds them (keys of ``model.named_buffers()``), else from
the model's own buffers as detection found them (the tensors themselves, so a model whose
statistics are updated in place is read as it is now).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import MissingParameterError, ShapeError
from paramsym.symmetry.absorption import _Shifts
from paramsym.symmetry.base import GroupElement, Region, Symmetry, scale_along
from paramsym.symmetry.scaling import PositiveScaling, PositiveVectorGroup


class Statistics:
    """A BatchNorm's running mean and variance (buffer names and the model's tensors) and its
    eps: what both families read."""

    def __init__(
        self, mean: str, var: str, eps: float, tensors: Mapping[str, Tensor] | None = None
    ) -> None:
        self.mean, self.var, self.eps = mean, var, float(eps)
        self.tensors = dict(tensors or {})

    def read(self, params: Mapping[str, Tensor], name: str, like: Tensor, owner: str) -> Tensor:
        """The buffer ``name`` from ``params`` if there, else the model's; as ``like``'s dtype."""
        t = params.get(name, self.tensors.get(name))
        if t is None:
            raise MissingParameterError(
                f"{owner} reads the running statistic '{name}' (BatchNorm in evaluation mode) "
                "and neither params nor the model it was found on holds it; pass the buffers "
                "with the parameters: {**ps.params_of(model), **dict(model.named_buffers())}"
            )
        return t.detach().to(dtype=like.dtype, device=like.device)

    def scale(self, params: Mapping[str, Tensor], like: Tensor, owner: str) -> Tensor:
        """σ̂ = sqrt(σ² + eps) per channel."""
        return torch.sqrt(self.read(params, self.var, like, owner) + self.eps)


class BatchNormScaling(PositiveVectorGroup, Symmetry):
    """Scale each output channel of the map feeding an evaluation-mode BatchNorm by s_c > 0 and
    the norm's γ_c by 1/s_c, β_c taking back ``(μ_c/σ̂_c) γ_c (1/s_c − 1)`` (module docstring).

    Args:
        weight: the producer's weight, output channels on axis 0 (a convolution's
            ``(out, in, k…)``, a linear map's ``(out, in)``).
        bias: the producer's bias, or ``None``.
        gamma, beta: the norm's affine parameters.
        statistics: its running mean and variance, and eps.
        width: the number of channels C.
        site: label used in the name.

    Elements are positive vectors of shape ``(C,)``; Lie-algebra coordinates ξ = log s.
    """

    def __init__(
        self,
        weight: str,
        bias: str | None,
        gamma: str,
        beta: str,
        statistics: Statistics,
        *,
        width: int,
        site: str,
    ) -> None:
        super().__init__(
            name=f"batchnorm_scaling[{site}]",
            group=f"(R>0)^{width}",
            dim=width,
            linear=True,
        )
        self.weight, self.bias, self.gamma, self.beta = weight, bias, gamma, beta
        self.statistics = statistics
        self.width = int(width)

    check_element = PositiveScaling.check_element

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.weight, self.bias, self.gamma, self.beta) if n is not None)

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset((n, 0, 0, None) for n in self.parameter_names)

    def _tensors(self, params: Mapping[str, Tensor]) -> dict[str, Tensor]:
        found = {}
        for name in self.parameter_names:
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{name}', which is not in params"
                )
            t = params[name]
            if t.ndim < 1 or t.shape[0] != self.width:
                raise ShapeError(
                    f"{self.name}: parameter '{name}' has shape {tuple(t.shape)}, expected "
                    f"{self.width} channels on axis 0"
                )
            found[name] = t
        check_finite(found.items(), self.name)
        return found

    def _offset_rate(self, params: Mapping[str, Tensor], gamma: Tensor) -> Tensor:
        """(μ/σ̂) γ: what β gains per unit of (1/s − 1)."""
        stats = self.statistics
        mean = stats.read(params, stats.mean, gamma, self.name)
        return mean / stats.scale(params, gamma, self.name) * gamma

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        own = self._tensors(params)
        gamma = own[self.gamma]
        s = self.check_element(g).to(dtype=gamma.dtype, device=gamma.device)  # type: ignore[misc]
        out = dict(params)
        out[self.weight] = scale_along(own[self.weight], 0, s)
        if self.bias is not None:
            out[self.bias] = own[self.bias] * s
        out[self.gamma] = gamma / s
        out[self.beta] = own[self.beta] + self._offset_rate(params, gamma) * (1.0 / s - 1.0)
        return out

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        own = self._tensors(params)
        gamma = own[self.gamma]
        xi = self.check_xi(xi).to(dtype=gamma.dtype, device=gamma.device)
        rates = {
            self.weight: scale_along(own[self.weight], 0, xi),
            self.gamma: -gamma * xi,
            self.beta: -self._offset_rate(params, gamma) * xi,
        }
        if self.bias is not None:
            rates[self.bias] = own[self.bias] * xi
        return {k: rates[k] if k in rates else torch.zeros_like(t) for k, t in params.items()}


class BatchNormShift(_Shifts):
    """``(b, β) ↦ (b + δ, β − (γ/σ̂) ⊙ δ)``: the bias of the map feeding an evaluation-mode
    BatchNorm absorbed into its shift (module docstring).

    Args:
        bias: the producer's bias (C entries).
        gamma: the norm's scale (``None``: no affine scale, γ = 1), read.
        beta: the norm's shift.
        statistics: its running statistics (the variance is read).
        width: C.
        site: label used in the name.
    """

    translation = False

    def __init__(
        self,
        bias: str,
        gamma: str | None,
        beta: str,
        statistics: Statistics,
        *,
        width: int,
        site: str,
    ) -> None:
        super().__init__(
            name=f"batchnorm_shift[{site}]",
            group=f"R^{width}",
            dim=width,
            linear=False,
            affine=gamma is None,
        )
        self.bias, self.gamma, self.beta = bias, gamma, beta
        self.statistics = statistics
        self.translation = gamma is None  # then a translation by fixed amounts

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return (self.bias, self.beta)

    @property
    def reads(self) -> tuple[str, ...]:
        return () if self.gamma is None else (self.gamma,)

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset({(self.bias, 0, 0, None), (self.beta, 0, 0, None)})

    def _changes(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        for name in (*self.parameter_names, *self.reads):
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{name}', which is not in params"
                )
            if params[name].shape != (self.dim,):
                raise ShapeError(
                    f"{self.name}: parameter '{name}' has shape {tuple(params[name].shape)}, "
                    f"expected ({self.dim},)"
                )
        beta = params[self.beta]
        v = v.to(dtype=beta.dtype, device=beta.device)
        factor = 1.0 / self.statistics.scale(params, beta, self.name)
        if self.gamma is not None:
            factor = params[self.gamma] * factor
        return {self.bias: v, self.beta: -factor * v}
