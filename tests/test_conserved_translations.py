"""Conserved quantities of translations by fixed directions (``TranslationCharge``): Q_k(θ) =
⟨θ, w_k⟩ for the key-bias and embedding-sum translations of a Hugging Face GPT-2, and the
refusal of the absorbed translations whose directions depend on parameters they read.

Oracles (float64): ⟨∇L, w_k⟩ = 0 for every generator (the derivative of Q along the flow);
Q before and after 200 gradient-descent steps that move θ and lower the loss (GD conserves
a linear Q exactly, so to rounding); Q's closed forms (the key bias itself; the column sums
of the token table minus the position table's).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.conserved import TranslationCharge
from paramsym.conserved.moment import MomentMap
from paramsym.core.params import first_output, functional_call, params_of
from paramsym.symmetry.absorption import ParameterTranslation

F64 = torch.float64
transformers = pytest.importorskip("transformers")


def _gpt2() -> tuple[nn.Module, Any, torch.Tensor]:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8,
                        bos_token_id=15, eos_token_id=15)  # fmt: skip
    model = GPT2Model(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    generator = torch.Generator().manual_seed(3)
    x = {"input_ids": torch.randint(0, 16, (2, 8), generator=generator)}
    target = torch.randn(2, 8, 8, generator=generator, dtype=F64)
    return model, x, target


def _loss(model: nn.Module, x: Any, target: torch.Tensor, params: dict) -> torch.Tensor:
    return ((first_output(functional_call(model, params, x)) - target) ** 2).mean()


def _gradient(model: nn.Module, x: Any, target: torch.Tensor, params: dict) -> dict:
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    loss = _loss(model, x, target, leaves)
    return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))


@pytest.fixture(scope="module")
def gpt2() -> tuple[nn.Module, Any, torch.Tensor, list[ps.Symmetry]]:
    model, x, target = _gpt2()
    found = ps.symmetries(model, example_input=x)
    return model, x, target, found


def _family(s: ps.Symmetry) -> str:
    return s.name.split("[")[0]


def _translations(found: list[ps.Symmetry]) -> list[ps.Symmetry]:
    chosen = [s for s in found if _family(s) in ("key_bias", "embedding_sum")]
    assert {_family(s) for s in chosen} == {"key_bias", "embedding_sum"}
    return chosen


def test_the_gradient_is_orthogonal_to_every_generator(gpt2):
    """dQ_k/dt = −⟨∇L, w_k⟩ = 0 for each generator w_k = tangent(θ, e_k), to 1e-13 of
    ‖∇L_p‖‖w_k‖ on the tensors p it moves; the same ∇L is far from orthogonal to a random
    direction on those tensors (control)."""
    model, x, target, found = gpt2
    theta = params_of(model)
    gradient = _gradient(model, x, target, theta)
    generator = torch.Generator().manual_seed(1)
    for s in _translations(found):
        size = sum(float((gradient[n] ** 2).sum()) for n in s.parameter_names) ** 0.5
        assert size > 1e-3, s.name  # the loss does read these tensors
        for e in torch.eye(s.dim, dtype=F64):
            w = s.tangent(theta, e)
            pairing = sum(float((gradient[n] * w[n]).sum()) for n in s.parameter_names)
            norm = sum(float((w[n] ** 2).sum()) for n in s.parameter_names) ** 0.5
            assert abs(pairing) <= 1e-13 * size * norm, s.name
        random = {
            n: torch.randn(theta[n].shape, generator=generator, dtype=F64)
            for n in s.parameter_names
        }
        pairing = sum(float((gradient[n] * random[n]).sum()) for n in s.parameter_names)
        assert abs(pairing) > 1e-3 * size


def test_gradient_descent_conserves_the_charges(gpt2):
    """200 GD steps of size 0.5 lower the loss and move θ (the translated tensors too), and
    keep every Q_k = ⟨θ, w_k⟩ to 1e-12 of its magnitude (GD conserves a linear Q exactly)."""
    model, x, target, found = gpt2
    chosen = _translations(found)
    charges = [TranslationCharge(s) for s in chosen]
    theta = params_of(model)
    before = [q(theta) for q in charges]
    point = dict(theta)
    for _ in range(200):
        gradient = _gradient(model, x, target, point)
        point = {k: v - 0.5 * gradient[k] for k, v in point.items()}
    assert float(_loss(model, x, target, point)) < 0.9 * float(_loss(model, x, target, theta))
    moved = {n for s in chosen for n in s.parameter_names}
    assert all(
        float((point[n] - theta[n]).abs().max()) > 1e-3 for n in moved - {"h.0.attn.c_attn.bias"}
    )
    for q, start in zip(charges, before, strict=True):
        assert float(start.abs().max()) > 1e-2, q.name  # not a vacuous zero
        scale = float(q.magnitude(theta))
        assert float((q(point) - start).abs().max()) <= 1e-12 * scale, q.name


def test_charges_have_their_closed_forms(gpt2):
    """The key bias's Q is the key bias; the embedding sum's is Σ_rows E_tok − Σ_rows E_pos.
    ``ps.conserved_quantities`` returns the same, and the contributions sum to Q."""
    model, _, _, found = gpt2
    theta = params_of(model)
    for s in _translations(found):
        q = TranslationCharge(s)
        value = q(theta)
        torch.testing.assert_close(ps.conserved_quantities(model, s), value, rtol=0, atol=0)
        torch.testing.assert_close(torch.stack(q.contributions(theta)).sum(0), value)
        if _family(s) == "embedding_sum":
            expected = theta["wte.weight"].sum(0) - theta["wpe.weight"].sum(0)
        else:
            assert isinstance(s, ParameterTranslation)
            (part,) = s.parts
            expected = theta[part.name].narrow(0, part.offset, part.length)
        torch.testing.assert_close(value, expected, rtol=1e-13, atol=1e-14)


def test_reading_translations_have_no_noether_charge(gpt2):
    """The absorbed translations whose directions depend on parameters they read are refused,
    saying that their generator field is not a gradient field; a fixed translation asks for
    TranslationCharge instead of a quadratic moment map."""
    model, _, _, found = gpt2
    reading = [s for s in found if _family(s) in ("norm_reader", "norm_shift", "value_bias")]
    assert {_family(s) for s in reading} == {"norm_reader", "norm_shift", "value_bias"}
    assert all(s.reads for s in reading)
    for s in reading:
        with pytest.raises(ps.InvalidArgumentError, match="not a gradient field"):
            ps.conserved_quantities(model, s)
        with pytest.raises(ps.InvalidArgumentError, match="reads"):
            TranslationCharge(s)
    fixed = _translations(found)[0]
    with pytest.raises(ps.InvalidArgumentError, match="TranslationCharge"):
        MomentMap(fixed)
