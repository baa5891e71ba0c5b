"""Test helpers: relative errors and generic parameter points."""

from __future__ import annotations

import torch

import paramsym as ps


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / max(‖b‖, tiny)."""
    a, b = a.detach(), b.detach()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-300))


def params_relative_error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return relative_error(ps.flatten(a), ps.flatten(b))


def randomize_(model: torch.nn.Module, generator: torch.Generator, std: float = 0.7) -> None:
    """Overwrite every parameter with N(0, std²): a generic point, not an initialisation."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(std * torch.randn(p.shape, generator=generator, dtype=p.dtype))
