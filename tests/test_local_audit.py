"""The block-local audit (``ps.local_audit``): units audited on their recorded inputs.

Oracles: a linear unit's fast path (the rank of its recorded inputs [a, 1]) against the dense
Jacobian of the same layer on the same inputs; a dense unit's count against the catalogue's
families removed by hand (the local audit must report exactly their dimension in exactly their
unit); the GPT-2 block units against the full dense audit of the same model.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.symmetry.absorption import NormReaderTranslation
from paramsym.tangent_kernel.completeness import AuditSizeError
from paramsym.tangent_kernel.local_completeness import units_of

F64 = torch.float64


def _gpt2(layers: int = 2, width: int = 8) -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=2, vocab_size=32, n_positions=8,
                        bos_token_id=31, eos_token_id=31)  # fmt: skip
    model = GPT2Model(config).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _ids() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(1))}


@pytest.fixture(scope="module")
def gpt2_catalogue():
    pytest.importorskip("transformers")
    model = _gpt2()
    return model, ps.symmetries(model, example_input=_ids())


def test_units_are_the_coarsest_submodules_that_fit(gpt2_catalogue):
    model, _ = gpt2_catalogue
    blocks = {n: m for n, _, m in units_of(model, 1000)}
    assert blocks == {"wte": "dense", "wpe": "dense", "h.0": "dense", "h.1": "dense",
                      "ln_f": "dense"}  # fmt: skip
    leaves = {n: m for n, _, m in units_of(model, 150)}
    assert leaves["h.0.attn.c_attn"] == leaves["h.0.mlp.c_fc"] == "linear"
    assert leaves["wte"] == "embedding"
    assert leaves["h.0.ln_1"] == "dense"


def test_blocks_complete_and_the_stream_not_visible(gpt2_catalogue):
    """Each GPT-2 block, on its recorded inputs, is flat exactly along what the catalogue names
    inside it (the block's share of the all-ones shift included); what spans blocks (the
    embedding sum, the stream's shift) is listed as not visible."""
    model, catalogue = gpt2_catalogue
    report = ps.local_audit(model, _ids(), catalogue=catalogue, max_parameters=1000)
    by_name = {u.name: u for u in report.units}
    for block in ("h.0", "h.1"):
        unit = by_name[block]
        assert unit.flat > 100, unit
        assert unit.missing == 0, unit
        assert unit.determined, unit
    assert report.complete
    assert report.missing == 0
    assert "embedding_sum[wte,wpe]" in report.not_visible
    assert any(k.startswith("mean_translation") for k in report.not_visible)


def test_removing_norm_reader_shows_exactly_its_dimension(gpt2_catalogue):
    """The local audit can fail: without norm_reader, each block reports its readers' output
    width (c_attn 3·8 + c_fc 4·8 = 56) missing, in that block only."""
    model, catalogue = gpt2_catalogue
    kept = [s for s in catalogue if not isinstance(s, NormReaderTranslation)]
    assert len(kept) < len(catalogue)
    report = ps.local_audit(model, _ids(), catalogue=kept, max_parameters=1000)
    missing = {u.name: u.missing for u in report.units}
    assert missing == {"wte": 0, "wpe": 0, "h.0": 56, "h.1": 56, "ln_f": 0}


def test_linear_unit_against_the_dense_jacobian_of_the_layer():
    """The fast path (rank of the recorded inputs, a norm reader's null vector named by
    norm_reader) against the dense audit of the same layer: a LayerNorm then a Linear, audited
    as two units, and the Linear's count equal to out × (in + 1 − rank)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 5)).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(4, 6, dtype=F64)
    local = ps.local_audit(model, x, max_parameters=20)
    linear = {u.name: u for u in local.units}["1"]
    assert linear.method == "linear"
    assert linear.flat == 5
    assert linear.named == 5
    assert linear.symmetries == ["norm_reader[0]"]
    dense = ps.local_audit(model, x, max_parameters=100)  # the whole model is one dense unit
    assert [u.method for u in dense.units] == ["dense"]
    assert dense.units[0].missing == 0
    assert dense.units[0].flat == ps.audit(model, x, points=1).flat


def test_degenerate_inputs_are_missing_with_a_note():
    """A feature that never varies makes a Linear's flat space larger than any symmetry: the
    audit reports out × 1 missing directions on that unit and says what they are."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).to(F64).eval()

    class Constant(nn.Module):  # feeds a constant last feature
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(torch.cat([x[:, :3], torch.ones_like(x[:, :1])], dim=1))

    report = ps.local_audit(Constant(), torch.randn(2, 4, dtype=F64), max_parameters=5)
    first = {u.name: u for u in report.units}["inner.0"]
    assert first.method == "linear"
    assert first.missing == 3
    assert "degenerate input" in first.note
    assert not report.complete


def test_bad_input_and_the_dense_refusal_names_the_local_mode():
    model = ps.mlp([3, 4, 2], activation="tanh", dtype=F64, seed=0)
    with pytest.raises(ps.InvalidArgumentError, match="max_parameters"):
        ps.local_audit(model, torch.randn(2, 3, dtype=F64), max_parameters=0)
    with pytest.raises(AuditSizeError, match="local_audit"):
        ps.audit(model, torch.randn(2, 3, dtype=F64), max_parameters=10)


def test_the_norm_readers_closed_form_equals_their_formed_tangents(monkeypatch):
    """The linear units count a norm's reader translation from v = [γ⁻¹, −Σβ/γ] (basis vector
    i adds v to row i) instead of forming 2,304 weight-sized tangents on GPT-2-small's c_attn:
    the same units, counts and names as with the tangents formed."""
    import transformers

    import paramsym.tangent_kernel.local_completeness as lc

    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=16,
                                     n_positions=8, bos_token_id=15, eos_token_id=15)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2Model(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = {"input_ids": torch.randint(0, 16, (2, 8))}
    used = []
    closed_form = lc._reader_rows
    monkeypatch.setattr(lc, "_reader_rows", lambda *a: used.append(closed_form(*a)) or used[-1])
    fast = ps.local_audit(model, x, max_parameters=150)
    assert sum(r is not None for r in used) == 4  # ln_1 and ln_2 of both blocks
    monkeypatch.setattr(lc, "_reader_rows", lambda *a: None)
    formed = ps.local_audit(model, x, max_parameters=150)

    def summary(report: ps.LocalAuditReport) -> list[tuple]:
        return [(u.name, u.rows, u.flat, u.named, u.missing, sorted(u.symmetries),
                 sorted(u.not_flat)) for u in report.units]  # fmt: skip

    assert summary(fast) == summary(formed)
    assert all(isinstance(u.rows, int) and u.rows > 0 for u in fast.units if u.method == "linear")
    assert fast.missing == 0
