"""A linear layer with a low-rank (LoRA-style) update, Hu et al. 2021."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError


class LoRALinear(nn.Module):
    """``y = x (W + (α/r) B A)ᵀ + b`` with ``A`` (r, in), ``B`` (out, r).

    The base ``weight``/``bias`` are frozen by default (``requires_grad=False``), as in LoRA;
    ``A`` starts Kaiming-uniform and ``B`` at zero, so the update starts at zero. The
    factorisation has the GL(r) symmetry ``(B, A) ↦ (B g⁻¹, g A)`` (Ex. 1.2.13).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rank: int,
        alpha: float | None = None,
        *,
        bias: bool = True,
        freeze_base: bool = True,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= rank <= min(in_features, out_features):
            raise InvalidArgumentError(
                "LoRALinear: rank must be between 1 and min(in_features, out_features) = "
                f"{min(in_features, out_features)}, got {rank}"
            )
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.scaling = (alpha if alpha is not None else rank) / rank
        base = nn.Linear(in_features, out_features, bias=bias, dtype=dtype, device=device)
        self.weight = nn.Parameter(base.weight.detach(), requires_grad=not freeze_base)
        self.bias = (
            nn.Parameter(base.bias.detach(), requires_grad=not freeze_base) if bias else None
        )
        self.lora_A = nn.Parameter(torch.empty(rank, in_features, dtype=dtype, device=device))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank, dtype=dtype, device=device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias) + self.scaling * F.linear(
            F.linear(x, self.lora_A), self.lora_B
        )

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"rank={self.rank}, scaling={self.scaling:g}"
        )
