"""decoder-catalogue (issue 28) at reduced size, its run without transformers, and the
builders of :mod:`paramsym.nn.hf` it uses."""

from __future__ import annotations

import pytest
import torch

from helpers import csv_rows, run_quick
from paramsym.errors import InvalidArgumentError
from paramsym.experiments import decoders, registry
from paramsym.experiments.decoders import DecoderCatalogueConfig, run_decoder_catalogue
from paramsym.experiments.registry import SilentProgress
from paramsym.nn.hf import HF_KINDS, hf_example_input, hf_tiny, hf_tiny_config


def test_registered_with_presets_claims_and_a_plot():
    experiment = registry.get("decoder-catalogue")
    assert experiment.module in registry.LIBRARY_MODULES
    assert len(experiment.claims) == 4
    assert experiment.plot is not None
    quick, paper = experiment.presets["quick"], experiment.presets["paper"]
    assert (quick.kinds, quick.width, quick.layers) == ((), 32, 1)  # all 11 architectures
    assert (paper.width, paper.layers) == (64, 2)
    assert "transformers" in experiment.data


def test_decoder_catalogue_reduced(tmp_path):
    pytest.importorskip("transformers")
    overrides = {"kinds": "llama,phi,bloom,t5", "elements": "1"}
    directory, metrics, claims = run_quick(tmp_path, "decoder-catalogue", overrides)
    for name in ("symmetries.csv", "models.csv", "families.csv", "decoder_catalogue.png"):
        assert (directory / name).exists(), name
    assert metrics["kinds"] == ["llama", "phi", "bloom", "t5"]
    assert metrics["max_change_exact"] < 1e-12
    assert all(c["holds"] is True for c in claims.values()), claims
    families = {(r["kind"], r["family"]): (r["count"], r["dim"]) for r in csv_rows(
        directory / "families.csv")}  # fmt: skip
    assert families[("llama", "attention_QK_rotary")] == ("2", "16")  # one (C*)^4 per kv head
    assert families[("llama", "attention_QK")] == ("0", "0")  # no GL on rotated coordinates
    assert families[("phi", "attention_QK_rotary")] == ("4", "16")  # 4 rotated of 8 per head
    assert families[("phi", "attention_QK")] == ("4", "64")  # GL(4) on the unrotated half
    assert families[("bloom", "head_permutation")] == ("0", "0")  # ALiBi slopes
    assert families[("t5", "head_permutation")] == ("1", "0")
    models = {r["kind"]: r for r in csv_rows(directory / "models.csv")}
    assert models["t5"]["tables_moved"] == models["t5"]["tables"] == "1"
    assert float(models["t5"]["change_without_tables"]) > 1e-3


def test_without_transformers_every_claim_is_not_evaluated(monkeypatch):
    monkeypatch.setattr(decoders.importlib.util, "find_spec", lambda name: None)
    result = run_decoder_catalogue(DecoderCatalogueConfig(), SilentProgress())
    assert result.metrics["transformers"] == "not installed"
    assert any("pip install transformers" in note for note in result.notes)
    outcomes = registry.get("decoder-catalogue").evaluate(result)
    assert [o.holds for o in outcomes] == [None] * 4
    assert all(o.measured.startswith("not evaluated") for o in outcomes)
    assert decoders.plot_decoder_catalogue(result) == {}
    with pytest.raises(InvalidArgumentError, match="unknown kinds"):
        run_decoder_catalogue(DecoderCatalogueConfig(kinds=("nope",)), SilentProgress())


def test_hf_tiny_sizes_inputs_and_random_state():
    pytest.importorskip("transformers")
    torch.manual_seed(5)
    before = torch.get_rng_state()
    model = hf_tiny("qwen2", width=64, layers=2, seed=3)
    assert torch.equal(torch.get_rng_state(), before)  # the global random state is untouched
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_key_value_heads) == (64, 2, 2)
    assert not model.training
    assert all(p.dtype == torch.float64 for p in model.parameters())
    again = hf_tiny("qwen2", width=64, layers=2, seed=3)
    pairs = zip(model.parameters(), again.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert hf_example_input("swin")["pixel_values"].shape == (2, 3, 16, 16)
    assert hf_tiny_config("swin", width=64, layers=2)[2]["depths"] == [2]
    assert len(HF_KINDS) == 11
    with pytest.raises(InvalidArgumentError, match="unknown kind"):
        hf_tiny("nope")
    with pytest.raises(InvalidArgumentError, match="split into"):
        hf_tiny_config("llama", width=30)
    with pytest.raises(InvalidArgumentError, match="key/value groups"):
        hf_tiny_config("llama", kv_heads=3)
