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
from paramsym.errors import InvalidGroupElementError, MissingParameterError, ShapeError
from paramsym.symmetry.base import GroupElement, Preserves, Region, Symmetry


class SoftmaxTranslation(Symmetry):
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
