"""Conserved quantities of constant translations: Q_k(θ) = ⟨θ, w_k⟩, linear Noether charges.

A symmetry that translates the parameters by fixed directions, θ ↦ θ + Σ_k t_k w_k with the
w_k independent of θ (:attr:`~paramsym.symmetry.Symmetry.translation`: the key-bias and
embedding-sum translations of :class:`~paramsym.symmetry.absorption.ParameterTranslation`,
the residual stream's mean translation, a classifier's softmax translation), keeps every loss
it preserves constant along each w_k, so ⟨∇L(θ), w_k⟩ = 0 at every θ, and gradient flow
θ̇ = −∇L conserves

    Q_k(θ) = ⟨θ, w_k⟩,        dQ_k/dt = ⟨θ̇, w_k⟩ = −⟨∇L, w_k⟩ = 0:

the Noether charge of a translation, whose gradient ∇Q_k = w_k is the generator field itself.
Q is linear, so gradient descent conserves it exactly as well, at any step size:
Q_k(θ − η∇L) = Q_k(θ) − η⟨∇L, w_k⟩ = Q_k(θ) (so does any update that is a combination of
gradients, such as momentum; not a coordinate-wise rescaled one, such as Adam's). A key
bias's w_k are its own coordinates, so Q is the key bias, which no loss moves; the token and
position tables' Q is the difference of their column sums, Σ_rows E_tok − Σ_rows E_pos.

The absorbed translations whose directions depend on parameters they read and leave fixed
(:attr:`~paramsym.symmetry.Symmetry.reads`: a LayerNorm's β into its readers' biases, a
value bias into the output projection's, a LayerNorm reader's rows along γ⁻¹) have no such
charge. Q is conserved by the flow of every loss the action keeps iff ∇Q(θ) lies in the span
of the generator fields X_k(θ) (the gradients of invariant losses span the orthogonal
complement of the orbit). X_k = e_k(θ_r) on the moved parameters and 0 on the read ones, so
∇Q = Σ a_k(θ) X_k makes Q independent of θ_r, and then Σ a_k e_k(θ_r) must not depend on θ_r
either: for β absorption e_k = (δ_k, −W δ_k), so W a is constant in W and a = 0; for the
norm readers a ⊗ γ⁻¹ is constant in γ, so a = 0 (width ≥ 2). The generator field is not a
gradient field, nor is any combination of it, and ``ps.conserved_quantities`` refuses them
saying so (:func:`~paramsym.conserved.moment.family_of`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch
from torch import Tensor

from paramsym.conserved.base import ConservedQuantity
from paramsym.core.params import check_finite
from paramsym.errors import ApproximateConservationWarning, InvalidArgumentError
from paramsym.symmetry.base import Symmetry


class TranslationCharge(ConservedQuantity):
    """Q(θ) = (⟨θ, w_k⟩)_k, shape ``(dim,)``: the conserved quantities of a constant
    translation, one per generator w_k = ``symmetry.tangent(θ, e_k)`` (module docstring).

    Args:
        symmetry: a translation by fixed directions (``symmetry.translation``; data-free,
            reading no parameter). Others raise, naming the reason.

    An approximate translation gives an approximately conserved Q: construction warns
    (:class:`~paramsym.errors.ApproximateConservationWarning`) and ``exact`` is false.

    >>> import torch, paramsym as ps
    >>> from paramsym.symmetry.absorption import ParameterTranslation, Part
    >>> s = ParameterTranslation([Part("a", 1, 0, 2), Part("b", 1, 0, 2, sign=-1.0)],
    ...                          family="sum", site="a,b")
    >>> theta = {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": torch.ones(3, 2)}
    >>> TranslationCharge(s)(theta)  # column sums of a minus those of b
    tensor([1., 3.])
    """

    quadratic = False

    def __init__(self, symmetry: Symmetry) -> None:
        what = f"TranslationCharge({symmetry.name})"
        if symmetry.reads:
            raise InvalidArgumentError(
                f"{what}: its directions depend on parameters it reads and leaves fixed "
                f"({', '.join(symmetry.reads)}), so its generator field is not a gradient field "
                "and gradient flow has no Noether charge for it"
            )
        if not symmetry.translation or symmetry.dim == 0 or symmetry.data_dependent:
            raise InvalidArgumentError(
                f"{what}: needs a continuous, data-free translation by fixed directions "
                "(symmetry.translation); linear symmetries have the quadratic moment map "
                "(MomentMap, ps.conserved_quantities)"
            )
        if symmetry.preserves == "distribution":
            raise InvalidArgumentError(
                f"{what}: a distribution symmetry preserves an expectation over the data, not "
                "the training loss, so gradient flow does not conserve its charge"
            )
        self.symmetry = symmetry
        self.name = f"charge[{symmetry.name}]"
        self.exact = symmetry.exact
        if not self.exact:
            warnings.warn(
                f"{symmetry.name} is an approximate symmetry, so gradient flow conserves its "
                "charge ⟨θ, w⟩ only approximately",
                ApproximateConservationWarning,
                stacklevel=2,
            )

    def _pairings(self, params: Mapping[str, Tensor], split: bool) -> list[Tensor]:
        """∇_ξ ⟨θ_p, T(ξ)_p⟩ of the tangent T(ξ) = Σ_k ξ_k w_k: summed over the moved tensors
        p (one backward pass), or one per tensor (``split``)."""
        names = self.symmetry.parameter_names
        check_finite(((n, params[n]) for n in names if n in params), self.name)
        ref = params[names[0]]
        xi = torch.zeros(self.symmetry.dim, dtype=ref.dtype, device=ref.device)
        xi.requires_grad_(True)
        with torch.enable_grad():
            tangent = self.symmetry.tangent(dict(params), xi)
            terms = [(params[n].detach() * tangent[n]).sum() for n in names]
            if not split:
                terms = [torch.stack(terms).sum()]
            out = []
            for index, term in enumerate(terms):
                (part,) = torch.autograd.grad(
                    term, xi, retain_graph=index + 1 < len(terms), allow_unused=True
                )
                out.append(torch.zeros_like(xi) if part is None else part.detach())
        return out

    def contributions(self, params: Mapping[str, Tensor]) -> list[Tensor]:
        """Q split by the parameter tensors the translation moves: (⟨θ_p, w_{k,p}⟩)_k for each
        p in ``symmetry.parameter_names``; they sum to Q."""
        return self._pairings(params, split=True)

    def __call__(self, params: Mapping[str, Tensor]) -> Tensor:
        """(⟨θ, w_k⟩)_k, shape ``(dim,)``."""
        return self._pairings(params, split=False)[0]

    def magnitude(self, params: Mapping[str, Tensor]) -> Tensor:
        return torch.stack([torch.linalg.vector_norm(p) for p in self.contributions(params)]).sum()
