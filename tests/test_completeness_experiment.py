"""catalogue-completeness (issue 44) at reduced size, and its run without transformers."""

from __future__ import annotations

import pytest

from helpers import csv_rows, run_quick
from paramsym.errors import InvalidArgumentError
from paramsym.experiments import completeness, registry
from paramsym.experiments.completeness import CompletenessConfig, run_completeness
from paramsym.experiments.completeness_models import ARCHITECTURES, wrapped
from paramsym.experiments.registry import SilentProgress


def test_registered_with_presets_claims_and_a_plot():
    experiment = registry.get("catalogue-completeness")
    assert experiment.module in registry.LIBRARY_MODULES
    assert len(experiment.claims) == 3
    assert experiment.plot is not None
    quick, paper = experiment.presets["quick"], experiment.presets["paper"]
    assert (quick.models, quick.width, quick.points, quick.wrapped) == ((), 8, 2, True)
    assert paper.width == 16
    kinds = {a.kind for a in ARCHITECTURES.values()}
    assert kinds == {"decoder", "encoder", "vision", "cnn", "rnn", "mlp"}


def test_reduced_run_every_claim_holds(tmp_path):
    pytest.importorskip("transformers")
    overrides = {"models": "gpt2,llama-mqa,lstm,mlp-relu", "points": "2"}
    directory, metrics, claims = run_quick(tmp_path, "catalogue-completeness", overrides)
    assert (directory / "audits.csv").exists()
    assert (directory / "completeness.png").exists()
    rows = csv_rows(directory / "audits.csv")
    assert [(r["model"], r["call"]) for r in rows][:2] == [("gpt2", "direct"), ("gpt2", "wrapped")]
    assert metrics["audits"] == 6  # the Hugging Face models twice, the zoo's and MLPs once
    assert metrics["unexplained_total"] == 0
    assert all(c["holds"] is True for c in claims.values()), claims


def test_wrapped_models_call_the_backbone_as_users_do():
    model, x = ARCHITECTURES["gpt2"].build(8, 0)
    outer, ids = wrapped(model, x)
    assert ids is x["input_ids"]
    assert outer(ids).shape == (2, 8, 8)


def test_without_transformers_hf_models_are_skipped(monkeypatch):
    monkeypatch.setattr(completeness.importlib.util, "find_spec", lambda name: None)
    config = CompletenessConfig(models=("gpt2", "mlp-tanh"), points=1, wrapped=False)
    result = run_completeness(config, SilentProgress())
    assert result.metrics["models"] == ["mlp-tanh"]
    assert any("pip install transformers" in note for note in result.notes)
    with pytest.raises(InvalidArgumentError, match="unknown models"):
        run_completeness(CompletenessConfig(models=("nope",)), SilentProgress())
