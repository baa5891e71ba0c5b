"""The completeness audit (``ps.audit``) and the absorbed-translation families it found.

Oracles: the audit's counts against families removed from the catalogue by hand (the audit must
report exactly their dimension on exactly their tensors); each new family's action against the
model's output (float64, several draws), its closed-form tangent against the generic
forward-mode tangent of its own action, and its covector transport against the gradient
recomputed at the moved point.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.core.params import first_output, functional_call, params_of
from paramsym.core.precision import KeepFloat64
from paramsym.core.ranks import decide_rank
from paramsym.symmetry.absorption import BiasAbsorption, NormReaderTranslation, ParameterTranslation
from paramsym.symmetry.base import Symmetry
from paramsym.tangent_kernel.completeness import AuditPrecisionWarning, AuditSizeError
from paramsym.teleportation.orbit import Orbit

FAMILIES = (NormReaderTranslation, BiasAbsorption, ParameterTranslation)


def _gpt2(layers: int = 1) -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=8, n_head=2, vocab_size=16, n_positions=8,
                        bos_token_id=15, eos_token_id=15)  # fmt: skip
    model = GPT2Model(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(1)
    config = BertConfig(num_hidden_layers=1, hidden_size=8, num_attention_heads=2,
                        intermediate_size=12, vocab_size=16, max_position_embeddings=8,
                        type_vocab_size=2)  # fmt: skip
    model = BertModel(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _ids(batch: int = 2, seed: int = 3) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(0, 16, (batch, 8), generator=generator)}


@pytest.fixture(scope="module")
def gpt2() -> tuple[nn.Module, list[Symmetry]]:
    model = _gpt2()
    return model, ps.symmetries(model, example_input=_ids())


@pytest.fixture(scope="module")
def gpt2_audit(gpt2: tuple[nn.Module, list[Symmetry]]) -> ps.AuditReport:
    model, catalogue = gpt2
    return ps.audit(model, _ids(), catalogue=catalogue)


def test_decide_rank_says_when_there_is_no_clean_gap() -> None:
    eps = torch.finfo(torch.float64).eps
    clean = decide_rank(torch.tensor([1.0, 0.3, 1e-9, 1e-15]), eps=eps)
    assert (clean.rank, clean.determined) == (2, True)
    smooth = decide_rank(torch.logspace(0, -14, 15), eps=eps)  # one decade at every step
    assert not smooth.determined
    two = decide_rank(torch.tensor([1.0, 1e-5, 1e-10, 1e-15]), eps=eps)  # two equal gaps
    assert not two.determined
    assert decide_rank(torch.zeros(3), eps=eps).rank == 0


def test_keep_float64_keeps_casts_and_dtype_arguments() -> None:
    x = torch.randn(3, dtype=torch.float64)
    with KeepFloat64() as kept:
        a = x.to(torch.float32)
        b = torch.softmax(x, 0, dtype=torch.float32)
        c = x.float()
        d = torch.zeros(2, dtype=torch.float32)  # no float64 tensor in: left alone
    assert (a.dtype, b.dtype, c.dtype, d.dtype) == (torch.float64,) * 3 + (torch.float32,)
    assert kept.count == 3
    assert x.to(torch.float32).dtype == torch.float32  # only inside the block


def test_audit_finds_what_the_catalogue_missed_before_the_families(
    gpt2: tuple[nn.Module, list[Symmetry]],
) -> None:
    """Notes 006 §3 on a one-block GPT-2 of width 8: without the absorbed translations the
    catalogue misses the norm-reader (3d + 4d), β (2d), key- and value-bias (d each) and
    embedding-sum (d − 1) directions, 95 in all."""
    model, catalogue = gpt2
    before = [s for s in catalogue if not isinstance(s, FAMILIES)]
    report = ps.audit(model, _ids(), catalogue=before, points=1)
    assert report.missing == 95
    assert not report.complete
    assert report.carriers["h.0.mlp.c_fc.weight"] > 10


def test_gpt2_catalogue_names_every_flat_direction(gpt2_audit: ps.AuditReport) -> None:
    report = gpt2_audit
    assert report.flat > 0
    assert report.flat == report.parameters - report.functional_dimension
    assert (report.missing, report.unreached, report.not_flat) == (0, 0, [])
    assert report.named == report.flat
    assert report.complete
    assert report.data_stable
    assert report.missing_elsewhere == 0
    assert report.point_degenerate == 0
    assert report.ranks["jacobian"]["gap_decades"] > 6  # flat values at rounding, genuine not
    assert "missing 0" in str(report)
    assert report.to_dict()["parameters"] == report.parameters


@pytest.mark.parametrize(
    ("family", "tensors"),
    [
        ("key_bias", {"h.0.attn.c_attn.bias"}),
        ("norm_reader", {"h.0.attn.c_attn.weight", "h.0.mlp.c_fc.weight", "h.0.attn.c_attn.bias",
                         "h.0.mlp.c_fc.bias", "h.0.ln_1.bias", "h.0.ln_2.bias"}),
        ("embedding_sum", {"wte.weight", "wpe.weight"}),
    ],
)  # fmt: skip
def test_audit_reports_a_removed_family_on_its_tensors(
    gpt2: tuple[nn.Module, list[Symmetry]], family: str, tensors: set[str]
) -> None:
    """The audit can fail: without one family it reports that family's flat dimensions as
    missing (for families overlapping no other, exactly their dimension), carried by their
    tensors."""
    model, catalogue = gpt2
    removed = [s for s in catalogue if s.name.startswith(family + "[")]
    assert removed
    kept = [s for s in catalogue if s not in removed]
    report = ps.audit(model, _ids(), catalogue=kept, points=1)
    full = sum(s.dim for s in removed)
    if family == "embedding_sum":  # one of its d directions is the stream's mean translation
        assert report.missing == full - 1
    else:
        assert report.missing == full
    assert not report.complete
    assert sum(report.carriers.values()) == pytest.approx(report.missing, abs=0.05 * full)
    # the family's own tensors carry most of it (the rest: overlap with named directions)
    assert sum(report.carriers.get(t, 0.0) for t in tensors) >= 0.75 * report.missing
    assert max(report.carriers, key=report.carriers.__getitem__) in tensors


@pytest.mark.parametrize("build", [_gpt2, _bert], ids=["gpt2", "bert"])
def test_new_families_keep_the_function_and_their_tangents(build) -> None:  # type: ignore[no-untyped-def]
    model = build()
    x = _ids()
    found = [s for s in ps.symmetries(model, example_input=x) if isinstance(s, FAMILIES)]
    kinds = {type(s) for s in found}
    assert kinds == set(FAMILIES)
    params = params_of(model)
    before = first_output(functional_call(model, params, x))
    generator = torch.Generator().manual_seed(0)
    for s in found:
        assert s.exact
        for _ in range(3):
            g = s.sample(scale=0.5, generator=generator, dtype=torch.float64)
            after = first_output(functional_call(model, s.act(params, g), x))
            assert (after - before).abs().max() <= 1e-12 * before.abs().max(), s.name
            back = s.act(s.act(params, g), s.inverse(g))
            assert all(torch.allclose(back[k], params[k], atol=1e-13) for k in params)
        xi = torch.randn(s.dim, generator=generator, dtype=torch.float64)
        closed, generic = s.tangent(params, xi), Symmetry.tangent(s, params, xi)
        assert all(torch.allclose(closed[k], generic[k], atol=1e-13) for k in params), s.name


def test_bert_families_include_token_type_sums_and_absorbed_shifts() -> None:
    model = _bert()
    names = [s.name for s in ps.symmetries(model, example_input=_ids())]
    sums = [n for n in names if n.startswith("embedding_sum[")]
    assert len(sums) == 2  # word + token type + position: two translations
    assert any(n.startswith("value_bias[") for n in names)
    assert any(n.startswith("key_bias[") for n in names)


def test_transport_along_an_absorption_is_the_gradient_at_the_moved_point() -> None:
    """A covector carried along a β absorption changes on the weights it reads: against the
    gradient recomputed at the moved point."""
    model = _gpt2()
    x = _ids()
    found = ps.symmetries(model, example_input=x)
    absorbed = next(s for s in found if s.name.startswith("norm_shift"))
    assert isinstance(absorbed, BiasAbsorption)
    params = params_of(model)
    target = torch.randn_like(first_output(functional_call(model, params, x)))

    def gradient(point: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        leaves = {k: v.clone().requires_grad_(True) for k, v in point.items()}
        loss = ((first_output(functional_call(model, leaves, x)) - target) ** 2).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        return dict(zip(leaves, grads, strict=True))

    orbit = Orbit([absorbed], x, "exp", params)
    g = absorbed.sample(scale=0.5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    moved, moves = orbit.move(params, [absorbed.check_element(g)])
    carried, direct = orbit.transport(gradient(params), moves), gradient(moved)
    assert set(absorbed.reads)
    assert any(not torch.allclose(direct[k], gradient(params)[k]) for k in absorbed.reads)
    for k in params:
        assert torch.allclose(carried[k], direct[k], atol=1e-10), k


def test_mlp_audit_is_complete_and_counts_rescalings() -> None:
    torch.manual_seed(0)
    model = ps.mlp([3, 5, 2], activation="leaky_relu", dtype=torch.float64, seed=0)
    report = ps.audit(model, torch.randn(4, 3, dtype=torch.float64))
    assert (report.flat, report.named, report.missing) == (5, 5, 0)  # (R>0)^5
    assert "permutation[0->2]" in report.left_out


def test_audit_refuses_large_models_and_warns_in_float32() -> None:
    model = ps.mlp([40, 40, 40], activation="tanh", dtype=torch.float64, seed=0)
    with pytest.raises(AuditSizeError, match="max_parameters"):
        ps.audit(model, torch.randn(2, 40, dtype=torch.float64), max_parameters=1000)
    small = ps.mlp([3, 4, 2], activation="tanh", seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ps.audit(small, torch.randn(2, 3), dtype=torch.float32, points=1)
    assert any(issubclass(w.category, AuditPrecisionWarning) for w in caught)
    with pytest.raises(ps.InvalidArgumentError, match="points"):
        ps.audit(small, torch.randn(2, 3), points=3)
