"""Teleportation's fast paths against their definitions, on models written the way people
write them (float64): ``Symmetry.cotangent_pullback`` (T_sᵀ c, the ascent direction) against
∂/∂ξ ⟨c, tangent(θ, ξ)⟩ with the full-size tangent dict, and ``act_in_place`` (one copy of
each touched tensor per move) against ``act``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps

F64 = torch.float64
transformers = pytest.importorskip("transformers")

from hf_models import build, example_input  # noqa: E402


def _definition(s: ps.Symmetry, params: dict, cotangent: dict, x=None) -> torch.Tensor:
    xi = torch.zeros(s.dim, dtype=F64, requires_grad=True)
    rate = s.tangent(params, xi, x)
    pairing = sum((rate[k] * cotangent[k]).sum() for k in params)
    (gradient,) = torch.autograd.grad(pairing, xi, allow_unused=True)
    return torch.zeros_like(xi) if gradient is None else gradient


def _cnn() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 5, 3), nn.ReLU(),
        nn.Flatten(), nn.Linear(5 * 2 * 2, 3),
    ).to(F64).eval()  # fmt: skip
    return model, torch.randn(2, 3, 6, 6, dtype=F64)


def _models():
    yield "cnn", *_cnn()
    for kind in ("llama", "gpt2-lm", "bloom"):
        yield kind, build(kind), example_input(kind)
    torch.manual_seed(1)
    tanh = ps.mlp([3, 5, 4, 2], activation="tanh").to(F64)  # data-dependent actions
    yield "tanh-mlp", tanh, torch.randn(6, 3, dtype=F64)


@pytest.mark.parametrize(("name", "model", "x"), list(_models()), ids=lambda v: str(v)[:12])
def test_cotangent_pullback_is_the_tangent_paired_with_the_covector(name, model, x) -> None:
    found = ps.symmetries(model, example_input=x, data_dependent=True)
    continuous = [s for s in found if s.dim]
    assert len(continuous) >= 3, name
    params = {k: v.detach() for k, v in ps.params_of(model).items()}
    generator = torch.Generator().manual_seed(2)
    cotangent = {k: torch.randn(v.shape, generator=generator, dtype=F64) for k, v in params.items()}
    for s in continuous:
        batch = (x[:1] if "nonlinear_GL" in s.name else x) if s.data_dependent else None
        fast = s.cotangent_pullback(params, cotangent, batch)
        oracle = _definition(s, params, cotangent, batch)
        assert fast.shape == (s.dim,)
        assert torch.allclose(fast, oracle, rtol=1e-12, atol=1e-12 * oracle.abs().max()), s.name


@pytest.mark.parametrize(("name", "model", "x"), list(_models())[:4], ids=lambda v: str(v)[:12])
def test_acting_in_place_is_acting(name, model, x) -> None:
    found = [s for s in ps.symmetries(model, example_input=x) if getattr(s, "acts_in_place", 0)]
    assert len(found) >= 5, name
    params = {**ps.params_of(model), **dict(model.named_buffers())}
    generator = torch.Generator().manual_seed(4)
    for s in found:
        g = s.sample(scale=0.5, generator=generator, dtype=F64)
        expected = s.act(params, g)
        work = {k: v.clone() for k, v in params.items()}
        s.act_in_place(work, g)
        assert all(torch.equal(work[k], expected[k]) for k in params), s.name
