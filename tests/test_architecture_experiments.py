"""The architecture experiments (architecture-catalogue, teleport-cnn, cnn-weight-matching) at
reduced sizes, and oracles for their helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import paramsym as ps
from helpers import csv_rows, run_quick
from paramsym.errors import InvalidArgumentError
from paramsym.experiments import cnn_matching, registry
from paramsym.experiments.architectures import (
    ArchitectureCatalogueConfig,
    attention_heads,
    flat_output,
    orbit_formula,
    run_architecture_catalogue,
)
from paramsym.experiments.cnn_matching import (
    CnnMatchingConfig,
    image_data,
    measure_pair,
    model_state,
    reset_batchnorm_statistics,
    train_resnet,
)
from paramsym.experiments.registry import SilentProgress
from paramsym.experiments.teleport_cnn import full_gradient_norm_sq
from paramsym.nn.zoo import ZOO, ZooModel, zoo_model

F64 = torch.float64
NAMES = ("architecture-catalogue", "teleport-cnn", "cnn-weight-matching")


def _run(tmp_path: Path, name: str, overrides: dict[str, str]) -> tuple[Path, dict, dict]:
    """:func:`helpers.run_quick`, and every claim says what it measured and whether it holds
    (``None``: not evaluated)."""
    directory, metrics, claims = run_quick(tmp_path, name, overrides)
    assert all(c["holds"] is None or isinstance(c["holds"], bool) for c in claims.values())
    assert all(c["measured"] for c in claims.values())
    return directory, metrics, claims


def _claim(claims: dict, start: str) -> dict:
    (found,) = [c for text, c in claims.items() if text.startswith(start)]
    return found


# -- registration ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_presets_claims_and_a_plot(name):
    experiment = registry.get(name)
    assert set(experiment.presets) >= {"quick", "paper"}
    assert experiment.claims
    assert experiment.plot is not None
    assert experiment.module.startswith("paramsym.experiments.")
    assert experiment.module in registry.LIBRARY_MODULES


def test_paper_presets():
    teleport = registry.get("teleport-cnn").presets["paper"]
    assert (teleport.dataset, teleport.batch_size, teleport.lr) == ("mnist", 20, 2e-3)
    assert (teleport.teleport_batches, teleport.teleport_steps) == (4, 10)  # Fig 4.6's teleport
    assert teleport.data_dir is None
    matching = registry.get("cnn-weight-matching").presets["paper"]
    assert matching.dataset == "mnist"
    assert registry.get("cnn-weight-matching").presets["quick"].dataset == "digits"
    assert registry.get("architecture-catalogue").presets["quick"].models == ()  # every model


# -- architecture-catalogue -----------------------------------------------------------------------


def test_architecture_catalogue_reduced(tmp_path):
    overrides = {"models": "cnn-bn,residual-mlp,gpt,lstm-raw", "elements": "1"}
    directory, metrics, claims = _run(tmp_path, "architecture-catalogue", overrides)
    for name in ("symmetries.csv", "models.csv", "family_counts.csv", "architecture_catalogue.png"):
        assert (directory / name).exists(), name
    assert metrics["models"] == ["cnn-bn", "residual-mlp", "gpt", "lstm-raw"]
    assert metrics["max_change_exact"] < 1e-12
    assert metrics["approximate_symmetries"] > 0  # BatchNorm / LayerNorm scalings, eps > 0
    assert metrics["orbit_matching"] == metrics["orbit_checked"] > 0
    assert metrics["models_with_hidden_units"] == 3  # lstm-raw returns its hidden state
    assert metrics["attention_models"] == ["gpt"]
    assert metrics["attention_QK"] == metrics["attention_VO"] == [4]  # 2 layers x 2 heads
    assert all(c["holds"] for c in claims.values()), claims
    rows = csv_rows(directory / "symmetries.csv")
    gl = [r for r in rows if r["model"] == "residual-mlp" and r["family"] == "GL"]
    assert [(r["group"], r["orbit_dimension"], r["orbit_formula"]) for r in gl] == [
        ("GL(8)", "64", "64")
    ]
    counts = csv_rows(directory / "family_counts.csv")
    assert {(r["model"], r["family"], r["count"]) for r in counts} >= {
        ("gpt", "attention_QK", "4"),
        ("cnn-bn", "norm_scaling", "2"),
        ("lstm-raw", "permutation", "0"),
    }


def test_architecture_catalogue_skips_missing_packages_and_unknown_models(monkeypatch):
    entry = ZOO["cnn"]
    fake = ZooModel("needs-x", entry.build, entry.example_input, "cnn", ("no_such_package_x",))
    monkeypatch.setitem(ZOO, "needs-x", fake)
    config = ArchitectureCatalogueConfig(models=("cnn", "needs-x"), elements=1)
    result = run_architecture_catalogue(config, SilentProgress())
    assert result.metrics["models"] == ["cnn"]
    assert result.metrics["skipped"] == ["needs-x"]
    assert any("needs-x: skipped, needs no_such_package_x" in n for n in result.notes)
    with pytest.raises(InvalidArgumentError, match="unknown zoo models"):
        run_architecture_catalogue(ArchitectureCatalogueConfig(models=("nope",)), SilentProgress())


def test_orbit_formula_when_the_hidden_layer_is_wider_than_its_neighbours():
    # GL(6) between 3 entries in (2 weights + bias) and 3 out: 36 − 3·3 = 27 (Prop A.2.9)
    model = ps.mlp([2, 6, 3], "identity", dtype=F64, seed=0)
    (gl,) = [s for s in ps.symmetries(model) if s.group == "GL(6)"]
    expected, formula = orbit_formula(gl, ps.params_of(model))
    assert expected == 27 == ps.orbit_dimension(model, gl)
    assert "h=6, n=3, m=3" in formula
    rescaling = next(s for s in ps.symmetries(ps.mlp([2, 5, 3], "relu", seed=0)))
    assert orbit_formula(rescaling, ps.params_of(ps.mlp([2, 5, 3], "relu", seed=0)))[0] == 5


def test_small_catalogue_helpers():
    value = ({"a": torch.ones(2), "ids": torch.ones(3, dtype=torch.long)}, [torch.zeros(1, 2)])
    assert flat_output(value).tolist() == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(InvalidArgumentError):
        flat_output((torch.ones(2, dtype=torch.long),))
    assert attention_heads(zoo_model("gpt").build()) == (4, 8)
    assert attention_heads(zoo_model("cnn").build()) == (0, 0)


# -- teleport-cnn ---------------------------------------------------------------------------------


def test_teleport_cnn_reduced(tmp_path):
    overrides = {"runs": "2", "epochs": "3", "channels": "4,4", "teleport_batches": "2"}
    directory, metrics, claims = _run(tmp_path, "teleport-cnn", overrides)
    for name in ("curves.csv", "gradients.csv", "teleport_cnn.png"):
        assert (directory / name).exists(), name
    # both arms of a run share the initialisation and the batch order up to the teleport
    assert metrics["same_point_before_teleport"] == 0.0
    # rescalings and the softmax translation are exact: the training loss does not move
    assert metrics["loss_change_at_teleport"] < 1e-4
    assert metrics["batch_grad_gain"] >= 1.0  # the ascent never ends below its start
    assert {s.split("[")[0] for s in metrics["teleport_symmetries"]} >= {"rescaling"}
    assert len(metrics["grad_gain_per_run"]) == 2
    assert len(csv_rows(directory / "curves.csv")) == 2 * 2 * 4  # arms × runs × epochs 0…3
    assert len(csv_rows(directory / "gradients.csv")) == 2 * 2 * 3
    assert "teleportation increases the gradient norm" in claims


def test_teleport_cnn_on_mnist1d_uses_conv1d():
    experiment = registry.get("teleport-cnn")
    config = experiment.config(
        "quick", {"dataset": "mnist1d", "runs": "1", "epochs": "2", "channels": "4,4"}
    )
    result = experiment.run(config, SilentProgress())
    assert result.metrics["dataset"] == "mnist1d"
    assert "1-D" in result.notes[0]
    with pytest.raises(InvalidArgumentError, match="teleport_epoch"):
        experiment.run(experiment.config("quick", {"teleport_epoch": "5", "epochs": "3"}), None)


def test_full_gradient_norm_is_the_whole_batch_gradient():
    model = ps.mlp([3, 4, 2], "tanh", seed=1)
    x, y = (
        torch.randn(9, 3, generator=torch.Generator().manual_seed(2)),
        torch.tensor([0, 1] * 4 + [0]),
    )
    loss = nn.CrossEntropyLoss()(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    expected = float(sum(g.pow(2).sum() for g in grads))
    assert full_gradient_norm_sq(model, nn.CrossEntropyLoss(), x, y) == pytest.approx(expected)


# -- cnn-weight-matching --------------------------------------------------------------------------


def test_cnn_weight_matching_reduced(tmp_path):
    overrides = {"pairs": "1", "epochs": "2", "widths": "8,8", "alphas": "5", "bn_samples": "256"}
    directory, metrics, claims = _run(tmp_path, "cnn-weight-matching", overrides)
    assert (directory / "cnn_weight_matching.png").exists()
    rows = csv_rows(directory / "chords.csv")
    assert len(rows) == 5
    assert {"loss_naive", "loss_matched", "loss_naive_raw", "loss_matched_raw"} <= set(rows[0])
    assert metrics["max_function_change"] < 1e-4
    assert metrics["distance_after"][0] < metrics["distance_before"][0]
    assert _claim(claims, "the aligned network computes the same function")["holds"]
    peer = _claim(claims, "paramsym's weight matching")
    if cnn_matching.rebasin_peer() is None:  # not evaluated: neither holds nor fails
        assert metrics["rebasin"] == "not installed"
        assert peer["measured"].startswith("not evaluated: rebasin not installed")
        assert peer["holds"] is None
        report = (directory / "report.md").read_text()
        assert "| *not evaluated* |" in report


@pytest.fixture(scope="module")
def trained_pair():
    config = CnnMatchingConfig(epochs=1, widths=(8, 8), alphas=3, bn_samples=128, pairs=1)
    train, test = image_data(config)
    test = (test[0][:100], test[1][:100])
    return config, train_resnet(config, train, 0), train_resnet(config, train, 1), train, test


class _IdentityPeer:
    """A stand-in for rebasin's PermutationCoordinateDescent that leaves model_b as it is."""

    def __init__(self, model_a: nn.Module, model_b: nn.Module, input_data: torch.Tensor) -> None:
        self.inputs = input_data

    def rebasin(self) -> None:
        pass


class _FailingPeer(_IdentityPeer):
    def rebasin(self) -> None:
        raise RuntimeError("boom")


def test_peer_path_with_a_stand_in(monkeypatch, trained_pair):
    config, model_a, model_b, train, test = trained_pair
    monkeypatch.setattr(cnn_matching, "rebasin_peer", lambda: _IdentityPeer)
    pair = measure_pair(config, model_a, model_b, train, test)
    assert pair.rebasin_status == "measured"
    assert pair.rebasin_function_change == 0.0  # nothing permuted, statistics untouched
    assert pair.rebasin is not None
    # with every point's statistics recomputed, the identity "alignment" is the naive chord
    assert pair.rebasin.losses == pytest.approx(pair.naive.losses, rel=1e-5)
    summary = cnn_matching._summarise(config, [pair], 10, 10)
    assert summary.metrics["rebasin"] == "measured"
    assert "loss_rebasin" in summary.series["chords"]
    measured, _ = cnn_matching._peer_claim(summary)
    assert "rebasin / paramsym" in measured
    monkeypatch.setattr(cnn_matching, "rebasin_peer", lambda: _FailingPeer)
    failed = measure_pair(config, model_a, model_b, train, test)
    assert failed.rebasin_status == "failed: RuntimeError: boom"
    measured, holds = cnn_matching._peer_claim(cnn_matching._summarise(config, [failed], 10, 10))
    assert measured.startswith("not evaluated: rebasin failed")
    assert holds is None


def test_reset_batchnorm_statistics_recomputes_running_statistics():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten()).eval()
    model[1].momentum = 0.3
    x = torch.randn(40, 1, 6, 6)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fresh = reset_batchnorm_statistics(model, None, x, batch_size=64)  # one batch
    with torch.no_grad():
        features = model[0](x)
    norm = fresh[1]
    torch.testing.assert_close(norm.running_mean, features.mean(dim=(0, 2, 3)))
    torch.testing.assert_close(norm.running_var, features.var(dim=(0, 2, 3), unbiased=True))
    assert norm.momentum == 0.3
    assert not fresh.training
    for key, value in model.state_dict().items():  # the original is untouched
        assert torch.equal(value, before[key]), key
    # loading a state first: parameters come from it, statistics are recomputed for it
    state = {k: v * 2 if k.endswith("weight") else v for k, v in model_state(model).items()}
    loaded = reset_batchnorm_statistics(model, state, x)
    torch.testing.assert_close(loaded[0].weight, 2 * model[0].weight.detach())
    assert not torch.allclose(loaded[1].running_mean, norm.running_mean)
    assert "1.num_batches_tracked" not in model_state(model)
