"""GL(r) of a low-rank update ``W + B A`` (LoRA; dissertation Ex. 1.2.13, Putterman et al.).

``B A = (B g⁻¹)(g A)`` for every g ∈ GL(r): A (r, in) is transformed like an incoming weight
(rows by g) and B (out, r) like an outgoing one (columns by g⁻¹). Exact for any input.
"""

from __future__ import annotations

from torch import nn

from paramsym.nn.lowrank import LoRALinear
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.detect import BlockContext, register_block
from paramsym.symmetry.gl import HiddenGL


class LowRankGL(HiddenGL):
    """GL(r) acting on a low-rank factorisation ``B A``: ``(B, A) ↦ (B g⁻¹, g A)``."""

    family = "low_rank_GL"


def analyse_lora(module: nn.Module, prefix: str, context: BlockContext) -> list[Symmetry]:
    """:class:`~paramsym.nn.LoRALinear`."""
    assert isinstance(module, LoRALinear)
    return [
        LowRankGL(
            module.rank,
            [Slot(f"{prefix}lora_A", 0, 1.0)],
            [Slot(f"{prefix}lora_B", 1, -1.0)],
            site=prefix[:-1] if prefix else "lora",
        )
    ]


register_block(LoRALinear, analyse_lora)
