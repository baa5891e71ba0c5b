"""Every analysis takes a Hugging Face model as users hand it over (issue 28, part 1): default
settings (cache on, default attention kernel), a dict input, a ``ModelOutput``, float64.

Each analysis on the dict input is compared with an oracle that does not go through the
keyword-input path: the same model wrapped to take the token ids as a tensor, or dense
autograd. The default teleport moves along exact symmetries only and keeps the loss to
rounding on every architecture of the zoo.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import paramsym as ps
from hf_models import KINDS, build, example_input
from paramsym.core.backends import differentiable_attention

transformers = pytest.importorskip("transformers")

F64 = torch.float64


class TokensToTensor(torch.nn.Module):
    """The oracle's model: the same weights, called with ``input_ids`` as a tensor, returning
    the first field of the output (``last_hidden_state`` or ``logits``) sliced to ``width``."""

    def __init__(self, model: torch.nn.Module, width: int) -> None:
        super().__init__()
        self.model, self.width = model, width

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False)[0][..., : self.width]


def _first(width: int):
    def select(output):
        return output[0][..., :width]

    return select


def _regression(kind: str):
    model, x = build(kind), example_input(kind)
    with torch.no_grad():
        out = ps.functional_call(model, ps.params_of(model), x)[0]
    target = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype)

    def loss(output, y: torch.Tensor) -> torch.Tensor:
        return ((output[0] - y) ** 2).mean()

    return model, x, target, loss


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_teleport_moves_along_exact_symmetries_and_keeps_the_loss(kind: str) -> None:
    """``ps.teleport(model, loss, (x, y))`` with nothing else: exact symmetries only (none
    named approximate), by gradient transport, the loss kept to rounding, ‖∇L‖ raised."""
    model, x, target, loss = _regression(kind)
    result = ps.teleport(model, loss, (x, target), update_model=False)
    assert result.approximate == []
    assert result.method == "transport"
    assert abs(result.loss_after - result.loss_before) <= 1e-12 * result.loss_before
    assert result.grad_norm_after > result.grad_norm_before


def test_approximate_symmetries_are_opt_in_and_named() -> None:
    """A LayerNorm's input scale invariance holds only for eps = 0: left out by default,
    moved along with ``allow_approximate=True`` and then named in the result."""
    torch.manual_seed(0)  # the weights: the test must not depend on the tests run before it
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.LayerNorm(6), torch.nn.Linear(6, 2)
    ).to(F64)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0), dtype=F64)
    y = torch.randn(8, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    loss = torch.nn.functional.mse_loss
    found = ps.symmetries(net, example_input=x)
    approximate = [s.name for s in found if not s.exact and s.dim]
    assert approximate, "the LayerNorm's input scaling is approximate for eps > 0"
    exact_only = ps.teleport(net, loss, (x, y), update_model=False)
    assert exact_only.approximate == []
    assert not set(approximate) & set(exact_only.symmetries)
    both = ps.teleport(net, loss, (x, y), update_model=False, allow_approximate=True)
    assert set(approximate) <= set(both.approximate) <= set(both.symmetries)


@pytest.mark.parametrize("kind", ["llama", "gpt2-lm", "opt", "bloom"])
def test_ntk_and_functional_dimension_take_keyword_inputs(kind: str) -> None:
    model, x = build(kind), example_input(kind)
    kernel = ps.ntk(model, x, output=_first(3))
    oracle = ps.ntk(TokensToTensor(model, 3), x["input_ids"], method="jacobian")
    assert kernel.shape == oracle.shape == (2, 2, 8 * 3, 8 * 3)
    assert torch.allclose(kernel, oracle, rtol=1e-12, atol=1e-12 * oracle.abs().max())
    dimension = ps.functional_dimension(model, x, output=_first(3))
    assert dimension.rank == ps.functional_dimension(TokensToTensor(model, 3), x["input_ids"]).rank
    assert dimension.shape[0] == 2 * 8 * 3


def test_ntk_by_vector_products_runs_through_the_attention_kernel() -> None:
    """NTK-vector products need forward-mode AD, which the fused CPU attention kernels lack:
    the math kernel is used, and the result equals the Jacobian contraction."""
    model, x = build("gpt2-lm"), example_input("gpt2-lm")
    by_vp = ps.ntk(model, x, output=_first(2), method="vp", mode="trace")
    by_jacobian = ps.ntk(model, x, output=_first(2), method="jacobian", mode="trace")
    assert torch.allclose(by_vp, by_jacobian, rtol=1e-10)


def test_bloom_kernel_equals_dense_autograd() -> None:
    """BLOOM's GELU is a custom ``autograd.Function`` that ``torch.func`` refuses: the kernel
    falls back to plain autograd, checked against a dense Jacobian of the whole batch."""
    model, x = build("bloom"), example_input("bloom")
    kernel = ps.ntk(model, x, output=_first(2), mode="trace")
    names = list(ps.params_of(model))

    def flat(*values: torch.Tensor) -> torch.Tensor:
        params = dict(zip(names, values, strict=True))
        return ps.functional_call(model, params, x)[0][..., :2].reshape(2, -1)

    jac = torch.autograd.functional.jacobian(flat, tuple(ps.params_of(model).values()))
    dense = torch.cat([j.reshape(2, 8 * 2, -1) for j in jac], dim=-1)
    oracle = torch.einsum("aoq,boq->ab", dense, dense)
    assert torch.allclose(kernel, oracle, rtol=1e-10)
    with pytest.raises(ps.AutodiffError, match="method='jacobian'"):
        ps.ntk(model, x, output=_first(2), method="vp")


def test_a_one_field_model_output_is_its_field_and_two_fields_need_output() -> None:
    """``output=None`` on a base model's ``ModelOutput`` (only ``last_hidden_state`` set) is
    that field, in the NTK as in the identities; with two fields set it is refused by name."""
    model, x = build("gpt2"), example_input("gpt2")
    small = {"input_ids": x["input_ids"][:, :3]}
    default = ps.ntk(model, small, mode="trace")
    named = ps.ntk(model, small, output="last_hidden_state", mode="trace")
    assert torch.equal(default, named)
    model.config.output_hidden_states = True  # now the output has two fields
    with pytest.raises(ps.InvalidArgumentError, match="choose the tensor"):
        ps.ntk(model, small, mode="trace")


def test_keyword_batches_are_checked() -> None:
    model, x = build("llama"), example_input("llama")
    with pytest.raises(ps.InvalidArgumentError, match="mapping of tensors"):
        ps.ntk(model, {"input_ids": x["input_ids"].tolist()}, output=_first(2))
    with pytest.raises(ps.ShapeError, match="same length"):
        ps.ntk(model, {**x, "attention_mask": torch.ones(3, 8, dtype=torch.long)}, output=0)
    with pytest.raises(ps.InvalidArgumentError, match="keyword inputs"):
        ps.ntk(model, x, output=_first(2), method="structured")


def test_second_order_and_weight_matching_take_keyword_inputs() -> None:
    """On GPT-2 with its LM head (float64 throughout, so the oracle agrees to rounding)."""
    model, x, target, loss = _regression("gpt2-lm")
    params = ps.params_of(model)
    v = {k: torch.randn(p.shape, generator=torch.Generator().manual_seed(5), dtype=F64)
         for k, p in params.items()}  # fmt: skip
    product = ps.hvp(model, loss, (x, target), v)
    names = list(params)

    def objective(*values: torch.Tensor) -> torch.Tensor:
        return loss(ps.functional_call(model, dict(zip(names, values, strict=True)), x), target)

    with differentiable_attention():  # the fused CPU kernel has no double backward
        _, oracle = torch.autograd.functional.hvp(
            objective, tuple(params.values()), tuple(v[k] for k in names)
        )
    for name, expected in zip(names, oracle, strict=True):
        assert torch.allclose(product[name], expected, rtol=1e-10, atol=1e-12), name
    top = ps.top_eigenvalues(model, loss, (x, target), k=1, generator=0).eigenvalues[0]
    assert top > 0
    other = build("gpt2-lm", seed=1)
    matched = ps.weight_matching(model, other, example_input=x)
    assert matched.distance_after < matched.distance_before
    reference = ps.functional_call(other, ps.params_of(other), x)[0]
    aligned = ps.functional_call(other, matched.params, x)[0]
    assert torch.allclose(aligned, reference, atol=1e-12 * reference.abs().max())


@pytest.mark.parametrize("family", ["Llama", "GPT2"])
def test_sequence_classification_heads(family: str) -> None:
    """``*ForSequenceClassification`` with padding: the head reads the last real token (an
    index computed from the ids), and every group of the base model is found and exact."""
    torch.manual_seed(0)
    if family == "GPT2":
        config = transformers.GPT2Config(
            n_embd=32, n_layer=1, n_head=4, vocab_size=64, n_positions=16, num_labels=3,
            pad_token_id=0, bos_token_id=63, eos_token_id=63,
        )  # fmt: skip
    else:
        config = transformers.LlamaConfig(
            hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=64, num_labels=3, pad_token_id=0,
        )  # fmt: skip
    model = getattr(transformers, f"{family}ForSequenceClassification")(config).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ids = torch.randint(1, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    ids[0, -2:] = 0  # padded
    x = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    found = ps.symmetries(model, example_input=x)
    kinds = {type(s).__name__ for s in found}
    assert {"HeadPermutation", "ValueOutputGL", "NeuronPermutation"} <= kinds
    assert ("RotaryQueryKey" if family == "Llama" else "QueryKeyGL") in kinds
    state = ps.params_of(model)
    reference = ps.functional_call(model, state, x).logits
    generator = torch.Generator().manual_seed(2)
    for s in (s for s in found if s.exact and s.preserves == "function"):
        g = s.sample(scale=0.5, generator=generator, dtype=F64, non_identity=True)
        moved = ps.functional_call(model, s.act(state, g), x).logits
        # Llama's RMSNorm and rotary tables compute in float32 inside the float64 model
        tolerance = 1e-6 if family == "Llama" else 1e-10
        assert (moved - reference).norm() <= tolerance * reference.norm(), s.name
    labels = torch.tensor([0, 2])
    result = ps.teleport(
        model, lambda out, y: torch.nn.functional.cross_entropy(out.logits, y), (x, labels),
        update_model=False,
    )  # fmt: skip
    assert result.grad_norm_after > result.grad_norm_before
    assert abs(result.loss_after - result.loss_before) <= 1e-12 * result.loss_before


@pytest.mark.parametrize("kind", ["opt", "bloom"])
def test_ntk_on_token_ids_equals_the_keyword_path(kind: str) -> None:
    """Token ids as a tensor go through the per-layer factorisation where it applies: OPT's
    position embedding computes its positions from the mask (its own forward: not a
    candidate), BLOOM's forward cannot be transformed by ``torch.func`` (no layer verifies),
    and both kernels equal the keyword path's."""
    model, x = build(kind), example_input(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.tangent_kernel.StructuredFallbackWarning)
        by_ids = ps.ntk(model, x["input_ids"], output=_first(2), mode="trace")
    by_keywords = ps.ntk(model, x, output=_first(2), mode="trace")
    assert torch.allclose(by_ids, by_keywords, rtol=1e-10)


def test_teleport_on_a_sequential_cnn_sees_what_symmetries_sees() -> None:
    """One detector: the default teleport of an ``nn.Sequential`` of convs traces its batch,
    as ``ps.symmetries(model, example_input=x)`` does, so it moves the conv rescalings."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3),
    ).to(F64)  # fmt: skip
    x = torch.randn(5, 3, 8, 8, generator=torch.Generator().manual_seed(1), dtype=F64)
    y = torch.tensor([0, 1, 2, 0, 1])
    loss = torch.nn.functional.cross_entropy
    found = ps.symmetries(net, example_input=x, loss_fn=loss)
    expected = [s.name for s in found if s.exact and s.dim]
    result = ps.teleport(net, loss, (x, y), update_model=False)
    assert result.symmetries == expected
    assert any(name.startswith("rescaling[0->") for name in result.symmetries)
    assert result.grad_norm_after > result.grad_norm_before
