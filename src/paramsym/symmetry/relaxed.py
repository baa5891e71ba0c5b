"""Relaxed symmetries (dissertation §1.3, notes 001c §1): worked examples of symmetries that
preserve the loss or an expectation, not the network function.

* **Loss symmetry of self-supervised learning** (Def. 1.3.1, Ex. 1.3.2, Ziyin et al.): if the
  loss depends on the embeddings f(x) = W x only through inner products f(x)ᵀf(x′), as
  :func:`spectral_contrastive_loss` does, every orthogonal g acting on the embedding layer
  alone, ``W ↦ g W``, preserves the loss while it changes f. :class:`OutputRotation`, O(m)
  with ``preserves="loss"``.
* **Distribution symmetry** (Def. 1.3.6, Ex. 1.3.7): for the residual F(W, (x, y)) = W x − y
  with y = W* x, the group {A ∈ GL(n) : A x̄ = x̄} acting by ``W ↦ W A⁻¹`` preserves
  E_x[F] = (W − W*) x̄, because A⁻¹ x̄ = x̄. It preserves the expected *residual*, not the
  expected squared loss (notes 001a §9.16): :class:`DistributionSymmetry`,
  ``preserves="distribution"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError, InvalidGroupElementError, ShapeError
from paramsym.symmetry.base import GroupElement, SlotLike
from paramsym.symmetry.gl import GeneralLinearGroup, MatrixNeuronSymmetry
from paramsym.symmetry.orthogonal import HiddenOrthogonal


def spectral_contrastive_loss(z: Tensor, z_positive: Tensor) -> Tensor:
    """HaoChen et al. (2021): ``−2 mean_i z_i·z⁺_i + mean_{i≠j} (z_i·z⁺_j)²``.

    Depends on the embeddings ``z``, ``z_positive`` (batch, m) only through inner products,
    so it is invariant to any common rotation of the embedding space.
    """
    if z.shape != z_positive.shape or z.ndim != 2:
        raise ShapeError(
            f"spectral_contrastive_loss: embeddings must be two (batch, m) tensors of one shape, "
            f"got {tuple(z.shape)} and {tuple(z_positive.shape)}"
        )
    gram = z @ z_positive.T
    k = z.shape[0]
    off_diagonal = gram[~torch.eye(k, dtype=torch.bool, device=z.device)]
    return -2.0 * torch.diagonal(gram).mean() + (off_diagonal**2).mean()


class OutputRotation(HiddenOrthogonal):
    """O(m) on the output (embedding) layer alone: a loss symmetry of inner-product losses.

    Args:
        width: embedding dimension m.
        incoming: the embedding layer's weight (and bias), rows by g.
        site: label used in the name.
    """

    family = "output_rotation"

    def __init__(
        self, width: int, incoming: Sequence[SlotLike], *, site: str | None = None
    ) -> None:
        super().__init__(
            width,
            incoming,
            (),
            site=site,
            notes=("preserves losses that depend on the embeddings only through inner products",),
        )
        self.preserves = "loss"


class DistributionSymmetry(GeneralLinearGroup, MatrixNeuronSymmetry):
    """{A ∈ GL(n) : A x̄ = x̄} acting by ``W ↦ W A⁻¹`` on a weight W (m, n) (Ex. 1.3.7).

    Args:
        weight: the weight's parameter name.
        mean: x̄, shape ``(n,)``, nonzero.

    Lie algebra {M : M x̄ = 0}, dim n(n−1): coordinates ξ of shape (n, n−1) give
    ``M = ξ Qᵀ`` with Q an orthonormal basis of x̄^⊥, so ``exp(M) x̄ = x̄``.
    """

    family = "distribution_GL"

    def __init__(self, weight: str, mean: Tensor) -> None:
        mean = torch.as_tensor(mean)
        if mean.ndim != 1 or float(torch.linalg.vector_norm(mean)) == 0.0:
            raise InvalidArgumentError(
                "DistributionSymmetry: mean must be a nonzero vector, "
                f"got shape {tuple(mean.shape)}"
            )
        n = mean.numel()
        self.mean = mean
        # Orthonormal basis of the complement of x̄: the last n − 1 columns of a QR of [x̄ I].
        basis, _ = torch.linalg.qr(torch.cat([mean[:, None], torch.eye(n, dtype=mean.dtype)], 1))
        self._complement = basis[:, 1:n]
        super().__init__(
            n,
            (),
            [(weight, 1, -1.0)],
            site=weight.rsplit(".", 1)[0],
            notes=("preserves E_x[W x − y] for data with mean x̄, not the squared loss",),
        )
        self.preserves = "distribution"

    group_symbol = "Stab_GL({})(x̄)"

    @staticmethod
    def _algebra_dimension(width: int) -> int:
        return width * (width - 1)

    def _algebra(self, xi: Tensor) -> Tensor:
        q = self._complement.to(dtype=xi.dtype, device=xi.device)
        return xi.reshape(self.width, self.width - 1) @ q.T

    def check_element(self, g: GroupElement) -> Tensor:
        g = super().check_element(g)
        mean = self.mean.to(dtype=g.dtype, device=g.device)
        error = float(torch.linalg.vector_norm(g @ mean - mean) / torch.linalg.vector_norm(mean))
        if error > self.width * torch.finfo(g.dtype).eps ** 0.5:
            raise InvalidGroupElementError(
                f"{self.name}: the element does not fix the data mean (‖A x̄ − x̄‖/‖x̄‖ = {error:.2e})"
            )
        return g
