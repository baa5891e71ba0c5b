"""Translation of the last layer before a softmax (dissertation Ex. 1.2.8; Kunin et al. 2021).

softmax(z + c·1) = softmax(z) for every scalar c, and the logits of a final linear layer are
``z = W x + b``. Adding one vector v to every row of W and one scalar β to every bias,
``(W, b) ↦ (W + 1 vᵀ, b + β 1)``, shifts every logit of sample x by the same ``vᵀx + β``, so
the softmax output, and any loss of it (cross-entropy with or without label smoothing or class
weights), is unchanged. The text's "applies on the rows" is ambiguous; the normalisation must
run over the output classes of each sample (notes 001a §9.7), which is what this does.

If the model ends in ``nn.Softmax``/``nn.LogSoftmax`` this is a symmetry of the function;
otherwise it is a *loss symmetry* of softmax cross-entropy (``preserves="loss"``).

Group (R^{n+1}, +) (R^n without bias), dim = n(+1); exp is the identity map, the action is
affine (not linear) in the parameters, and the tangent ``(1 ξ_Wᵀ, ξ_b 1)`` does not depend on θ.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import (
    InvalidArgumentError,
    InvalidGroupElementError,
    MissingParameterError,
    ShapeError,
)
from paramsym.symmetry.base import GroupElement, Preserves, Region, Symmetry


class TranslationGroup(Symmetry):
    """The group (ℝ^dim, +) shared by the translations: elements are vectors of shape
    ``(dim,)``, ``exp`` and the first-order element are the identity map (the exponential map
    of a translation group is linear), composition is addition."""

    translation = True

    def _identity(self, dtype: torch.dtype) -> Tensor:
        return torch.zeros(self.dim, dtype=dtype)

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> Tensor:
        """A translation with i.i.d. N(0, scale²) entries."""
        return scale * torch.randn(self.dim, generator=generator, dtype=dtype)

    def exp(self, xi: Tensor) -> Tensor:
        return self.check_xi(xi)

    def linear_element(self, xi: Tensor) -> Tensor:
        return self.check_xi(xi)  # the exponential map of a translation group is linear

    def compose(self, g1: GroupElement, g2: GroupElement) -> Tensor:
        return self.check_element(g1) + self.check_element(g2)

    def inverse(self, g: GroupElement) -> Tensor:
        return -self.check_element(g)

    def check_element(self, g: GroupElement) -> Tensor:
        g = self._element_tensor(g, (self.dim,), "a translation vector")
        if not bool(torch.isfinite(g).all()):
            raise InvalidGroupElementError(f"{self.name}: the translation has NaN or inf entries")
        return g


class SoftmaxTranslation(TranslationGroup):
    """Shift all rows of the last weight by one vector and all biases by one scalar.

    Args:
        weight: name of the final layer's weight, shape ``(classes, n)``.
        bias: name of its bias (shape ``(classes,)``), or ``None``.
        in_features: n.
        preserves: ``"function"`` if a softmax follows in the model, ``"loss"`` otherwise.
        site: label used in the name (default: the module name).

    Elements are vectors of shape ``(n + 1,)`` (``(n,)`` without bias): ``g[:n]`` is added to
    every row of the weight and ``g[n]`` to every bias.
    """

    def __init__(
        self,
        weight: str,
        bias: str | None,
        in_features: int,
        *,
        preserves: Preserves = "loss",
        site: str | None = None,
    ) -> None:
        site = site or weight.rsplit(".", 1)[0]
        dim = in_features + (1 if bias is not None else 0)
        notes = (
            ()
            if preserves == "function"
            else ("preserves softmax cross-entropy losses, not the logits themselves",)
        )
        super().__init__(
            name=f"translation[{site}]",
            group=f"R^{dim}",
            dim=dim,
            preserves=preserves,
            linear=False,
            affine=True,
            notes=notes,
        )
        self.weight = weight
        self.bias = bias
        self.in_features = int(in_features)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return (self.weight,) if self.bias is None else (self.weight, self.bias)

    @property
    def touched_regions(self) -> frozenset[Region]:
        regions: set[Region] = {(self.weight, 0, 0, None), (self.weight, 1, 0, None)}
        if self.bias is not None:
            regions.add((self.bias, 0, 0, None))
        return frozenset(regions)

    def _check_params(self, params: Mapping[str, Tensor]) -> None:
        for name in self.parameter_names:
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{name}', which is not in params"
                )
        w = params[self.weight]
        if w.ndim != 2 or w.shape[1] != self.in_features:
            raise ShapeError(
                f"{self.name}: parameter '{self.weight}' has shape {tuple(w.shape)}, expected "
                f"(classes, {self.in_features})"
            )
        check_finite(((n, params[n]) for n in self.parameter_names), self.name)

    def _shifted(self, params: Mapping[str, Tensor], v: Tensor, base: Params) -> Params:
        """``base`` with ``v[:n]`` added to every weight row and ``v[n]`` to every bias."""
        v = v.to(dtype=params[self.weight].dtype, device=params[self.weight].device)
        out = dict(base)
        out[self.weight] = base[self.weight] + v[: self.in_features].unsqueeze(0)
        if self.bias is not None:
            out[self.bias] = base[self.bias] + v[self.in_features]
        return out

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        v = self.check_element(g)
        self._check_params(params)
        return self._shifted(params, v, dict(params))

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        xi = self.check_xi(xi)
        self._check_params(params)
        return self._shifted(params, xi, {k: torch.zeros_like(t) for k, t in params.items()})


class StreamTranslation(TranslationGroup):
    """Translations of a residual stream along the all-ones direction that every reader removes
    (notes 005 §4): where every reader of a stream is a mean-subtracting norm (LayerNorm), any
    write into it may add a multiple of 1 per input coordinate, ``LN(x + t·1) = LN(x)``
    exactly (eps included).

    Args:
        writers: ``(parameter, feature axis)`` of each parameter that writes into the stream:
            a linear map's weight (out, in) with feature axis 0 takes ``W + 1 uᵀ`` (u ∈ ℝ^in:
            adds ``uᵀx`` to every feature), a Hugging Face ``Conv1D`` weight (in, out) or an
            embedding table (num, d) with feature axis 1 takes ``W + u 1ᵀ``, a bias (axis 0)
            takes ``b + t·1``; in general a tensor takes one translation per entry of its
            other axes, the same along the feature axis (a convolution's weight (out, in, k…)
            on axis 0, a class token (1, 1, d) or a position table (1, n, d) on axis 2).
        sizes: for each writer, the length of its translation vector (the number of entries
            off its feature axis, 1 for a bias).
        site: label used in the name.
        readers: the norm modules that read the stream.
        closed: every write into the stream is one of ``writers`` (nothing else, such as a
            tied embedding or a constant, adds to it): then :meth:`centering` makes the
            readers' inputs mean-free.

    Group (ℝ^dim, +) with dim = Σ sizes; elements are vectors, split in writer order. The action
    is affine and its tangent does not depend on θ.
    """

    def __init__(
        self,
        writers: list[tuple[str, int]],
        sizes: list[int],
        *,
        site: str = "stream",
        readers: tuple[str, ...] = (),
        closed: bool = False,
    ) -> None:
        if len(writers) != len(sizes) or not writers:
            raise InvalidArgumentError("StreamTranslation: one size per writer, at least one")
        dim = int(sum(sizes))
        super().__init__(
            name=f"mean_translation[{site}]", group=f"R^{dim}", dim=dim, linear=False, affine=True
        )
        self.writers = [(str(n), int(a)) for n, a in writers]
        self.sizes = [int(s) for s in sizes]
        self.readers = tuple(readers)
        self.closed = bool(closed)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for name, _ in self.writers))

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset((name, axis, 0, None) for name, axis in self.writers)

    def _shifts(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        """Each writer's change under the translation vector ``v``."""
        shifts: dict[str, Tensor] = {}
        offset = 0
        for (name, axis), size in zip(self.writers, self.sizes, strict=True):
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{name}', which is not in params"
                )
            t = params[name]
            part = v[offset : offset + size].to(dtype=t.dtype, device=t.device)
            offset += size
            rest = t.shape[:axis] + t.shape[axis + 1 :]
            if t.ndim <= axis or rest.numel() != size:
                raise ShapeError(
                    f"{self.name}: parameter '{name}' has shape {tuple(t.shape)}, expected "
                    f"{size} entries off its feature axis {axis}"
                )
            shift = part.reshape(rest).unsqueeze(axis).expand(t.shape)
            shifts[name] = shifts[name] + shift if name in shifts else shift
        return shifts

    def centering(self, params: Mapping[str, Tensor]) -> Tensor:
        """The element that makes every write into the stream mean-free over the features
        (SliceGPT's computational-invariance projection ``(I − 11ᵀ/d)``, notes 005 §4): minus
        each writer's mean along its feature axis, in writer order. Acting with it keeps the
        function (it is a group element); afterwards the stream's readers see zero-mean inputs,
        so each LayerNorm on it computes an RMSNorm. Only for a ``closed`` stream."""
        if not self.closed:
            raise InvalidArgumentError(
                f"{self.name}: something other than its writers adds to this stream (a tied "
                "embedding, a constant), so no translation of the writers makes it mean-free"
            )
        parts = []
        for name, axis in self.writers:
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{name}', which is not in params"
                )
            t = params[name].detach()
            parts.append(-t.mean(dim=axis).reshape(-1))
        return torch.cat([p.to(parts[0].dtype) for p in parts])

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        shifts = self._shifts(params, self.check_element(g))
        check_finite(((n, params[n]) for n in shifts), self.name)
        return {k: t + shifts[k] if k in shifts else t for k, t in params.items()}

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        shifts = self._shifts(params, self.check_xi(xi))
        return {k: shifts[k] if k in shifts else torch.zeros_like(t) for k, t in params.items()}
