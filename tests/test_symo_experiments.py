"""Seed 002 experiments (``global-curvature-structure``, ``surrogate-spectrum``,
``factor-estimation``, ``symo-training``) at sizes the test suite can afford, and their helpers
against slow, obviously-correct references."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import paramsym as ps
from paramsym.data import teacher_student
from paramsym.experiments import registry
from paramsym.experiments import symo_training as st
from paramsym.experiments.global_curvature import networks, spectrum
from paramsym.sweep import run_experiment
from paramsym.symo import (
    TABLE2,
    CurvatureStructure,
    act,
    correlation,
    ensemble_gradients,
    global_hessian,
    make_optimizer,
    random_element,
    train_ensemble,
)

F64 = torch.float64
NAMES = ("global-curvature-structure", "surrogate-spectrum", "factor-estimation", "symo-training")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _small_setting(name: str = "tanh2", points: int = 40, n: int = 64):
    setting = networks.SETTINGS[name]
    structure = setting.structure()
    batch = setting.data(points, seed=3)
    params = setting.ensemble(n, seed=4)
    model = ps.mlp(list(setting.widths), setting.activation, bias=setting.bias, dtype=F64)
    return setting, structure, batch, params, model


# -- registration ----------------------------------------------------------------------------------


def test_registered_with_the_papers_settings():
    experiments = {name: registry.get(name) for name in NAMES}
    assert all(e.seed_ref.startswith("seed 002") for e in experiments.values())
    structure = experiments["global-curvature-structure"].presets["paper"]
    assert (structure.models, structure.hessian_models, structure.points, structure.steps) == (
        10000,
        10000,
        500,
        20,
    )
    assert structure.relu_models == 100000
    assert structure.settings == ("tanh2", "tanh3", "relu3")
    assert networks.SETTINGS["tanh2"].widths == (5, 5, 5)
    assert networks.SETTINGS["tanh2"].bias
    assert networks.SETTINGS["relu3"].weight_power == 1.0
    assert not networks.SETTINGS["relu3"].bias
    factors = experiments["factor-estimation"].presets["paper"]
    assert factors.hidden_widths == (10, 100, 1000, 10000)
    assert (factors.input_dim, factors.output_dim, factors.ensemble) == (100, 100, 10000)
    assert (factors.ema_widths, factors.ema_models, factors.iterations, factors.lr) == (
        (100, 70, 40),
        10,
        1000,
        0.8,
    )
    assert factors.betas == (0.0, 0.9, 0.95, 0.98)
    training = experiments["symo-training"].presets["paper"]
    assert (training.widths, training.n_train, training.n_test, training.iterations) == (
        (100, 70, 40),
        5000,
        5000,
        100,
    )
    assert training.optimizers == ("gd", "adam", "kfac", "shampoo", "symo")
    assert TABLE2["linear"]["symo"] == {"lr": 0.05, "lr_decay": 0.95, "beta_h": 0.95}
    assert experiments["surrogate-spectrum"].presets["paper"].models == 10000


# -- helpers against references --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tanh3", "relu3"])
def test_stacked_gradients_and_gd_match_the_library_vmap(name):
    setting, structure, batch, params, model = _small_setting(name)
    ours = networks.stacked_gradients(structure, setting.activation, params, batch)
    reference = ensemble_gradients(model, st.half_mse, batch, params, structure=structure)
    for key in reference:
        torch.testing.assert_close(ours[key], reference[key], rtol=1e-10, atol=1e-12)
    small = {k: v[:8] for k, v in params.items()}
    trained = networks.stacked_gd(
        structure, setting.activation, small, batch, steps=3, lr=setting.lr
    )
    expected = train_ensemble(
        model, st.half_mse, batch, small, steps=3, lr=setting.lr, structure=structure
    )
    for key in expected:
        torch.testing.assert_close(trained[key], expected[key], rtol=1e-10, atol=1e-12)
        assert not torch.equal(trained[key], small[key])


def test_mean_hessians_match_the_library_double_backprop():
    _setting, structure, batch, params, model = _small_setting("tanh2", n=12)
    prefix, full = networks.mean_hessians(structure, "tanh", params, batch, [5, 12], chunk=4)
    head = {k: v[:5] for k, v in params.items()}
    torch.testing.assert_close(
        prefix, global_hessian(model, st.half_mse, batch, head, structure=structure)
    )
    torch.testing.assert_close(
        full, global_hessian(model, st.half_mse, batch, params, structure=structure)
    )
    torch.testing.assert_close(full, full.T)


@pytest.mark.parametrize("name", ["tanh2", "tanh3", "relu3"])
def test_the_loss_is_invariant_under_the_group(name):
    """L(Gθ) = L(θ) for a random element of the setting's group (Eq. 8), so the ensemble's
    distribution, and its curvature, are invariant; a sign flip is not a ReLU symmetry."""
    setting, structure, batch, params, _ = _small_setting(name, n=6)
    g = torch.Generator().manual_seed(5)
    moved = act(structure, params, random_element(structure, g))
    before = networks.stacked_losses(structure, setting.activation, params, batch)
    after = networks.stacked_losses(structure, setting.activation, moved, batch)
    torch.testing.assert_close(after, before, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(structure.flatten(moved), structure.flatten(params))
    if setting.activation == "relu":
        flipped = act(structure, params, random_element(structure, g, group="signed_permutation"))
        changed = networks.stacked_losses(structure, "relu", flipped, batch)
        assert not torch.allclose(changed, before)


def test_single_model_factors_are_the_corrected_equations_37_to_39():
    structure = st.two_layer_tanh((6, 4, 3))
    g = torch.Generator().manual_seed(0)
    grads = {
        "0.weight": torch.randn(2, 4, 6, generator=g, dtype=F64),
        "2.weight": torch.randn(2, 3, 4, generator=g, dtype=F64),
    }
    blocks = st.factor_blocks(structure, st.single_model_factors(structure, grads))
    for n in range(2):
        g1, g2 = grads["0.weight"][n], grads["2.weight"][n]
        torch.testing.assert_close(blocks["Phi1"][n], g1.T @ g1 / 4)
        torch.testing.assert_close(blocks["Phi2"][n], g2 @ g2.T / 4)
        torch.testing.assert_close(blocks["Psi1"][n], g1.T @ g2.T / 4)


def test_mean_pairwise_correlation_is_the_average_over_pairs():
    vectors = torch.randn(5, 30, generator=torch.Generator().manual_seed(1), dtype=F64)
    vectors[1] += 2 * vectors[0]
    pairs = [correlation(a, b) for a, b in itertools.combinations(vectors, 2)]
    assert st.mean_pairwise_correlation(vectors) == pytest.approx(np.mean(pairs), abs=1e-12)


def test_small_helpers():
    assert networks.loglog_slope([10, 100, 1000], [1.0, 10**-0.5, 0.1]) == pytest.approx(-0.5)
    assert networks.prefix_sizes(1000, smallest=10, count=3) == [10, 100, 1000]
    full = torch.tensor([1.0, 1.0, 2.0, 2.0, 3.0], dtype=F64)
    assert spectrum.spectrum_match(full, torch.tensor([1.0, 2.0, 3.0], dtype=F64)) == (0.0, 0.0)
    assert spectrum.spectrum_match(full, torch.tensor([1.0, 3.0], dtype=F64))[0] == pytest.approx(
        1 / 3
    )
    structure = CurvatureStructure.from_widths((2, 2, 2, 2), "signed_permutation", bias=False)
    block_diagonal = torch.block_diag(*[torch.eye(4, dtype=F64)] * 3)
    assert networks.cross_layer_fraction(structure, block_diagonal) == 0.0
    assert networks.cross_layer_fraction(structure, torch.ones(12, 12, dtype=F64)) == pytest.approx(
        (6 / 9) ** 0.5
    )
    with pytest.raises(ps.InvalidArgumentError, match="unknown setting"):
        networks.settings(["tanh9"])


def test_student_linear_fit_and_training_trace():
    model = st.student((30, 20, 5), "tanh", seed=2)
    again = st.student((30, 20, 5), "tanh", seed=2)
    w = model[0].weight.detach()
    assert torch.equal(w, again[0].weight)
    assert w.dtype == F64
    assert 0.8 < float(w.std() * 30**0.5) < 1.2
    data = teacher_student((30, 20, 5), "identity", 200, 100, seed=1, dtype=F64)
    assert st.linear_fit_loss(data) < 1e-20  # a linear teacher is fitted exactly
    data = teacher_student((30, 20, 5), "tanh", 200, 100, seed=1, dtype=F64)
    trace = st.train("symo", model, data, 4, TABLE2["tanh"]["symo"])
    assert len(trace.test_loss) == len(trace.seconds) == 5
    assert trace.seconds[0] == 0
    assert all(b > a for a, b in itertools.pairwise(trace.seconds))
    # oracle: the same steps by hand
    optimizer = make_optimizer("symo", again, TABLE2["tanh"]["symo"])
    for _ in range(4):
        optimizer.zero_grad()
        st.half_mse(again(data.x_train), data.y_train).backward()
        optimizer.step()
    with torch.no_grad():
        expected = float(st.half_mse(again(data.x_test), data.y_test))
    assert trace.test_loss[-1] == pytest.approx(expected, rel=1e-12)
    assert trace.test_loss[-1] < trace.test_loss[0]


# -- reduced runs ----------------------------------------------------------------------------------


def _run(tmp_path: Path, name: str, overrides: dict[str, str]):
    experiment = registry.get(name)
    out = tmp_path / name
    outcome = run_experiment(experiment, experiment.config("quick", overrides), out, workers=1)
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert (out / "report.md").exists()
    assert (out / "config.json").exists()
    return out, metrics, outcome


def test_structure_small_run(tmp_path):
    out, metrics, outcome = _run(
        tmp_path,
        "global-curvature-structure",
        {
            "settings": "tanh2",
            "models": "300",
            "hessian_models": "40",
            "points": "30",
            "steps": "3",
        },
    )
    for file in (
        "fig2_covariance_tanh2.png",
        "fig7_hessian_tanh2.png",
        "residual_vs_models.png",
        "matrices_tanh2.csv",
        "residuals.csv",
    ):
        assert (out / file).exists(), file
    matrices = _rows(out / "matrices_tanh2.csv")
    assert len(matrices) == 60 * 60
    assert set(matrices[0]) == {
        "row", "col", "covariance_t0", "covariance_t3", "hessian_t0", "hessian_t3", "theory"
    }  # fmt: skip
    assert metrics["tanh2_parameters"] == 60
    assert metrics["tanh2_models"] == 300
    for key in ("covariance_t0", "covariance_t3", "hessian_t0", "hessian_t3"):
        assert 0 < metrics[f"tanh2_residual_{key}"] < 0.6
    assert metrics["tanh2_slope_covariance_t0"] < -0.2  # Monte-Carlo noise falls with N
    assert outcome.outcomes[0].holds is not None
    assert len(outcome.outcomes) == 3


def test_spectrum_small_run(tmp_path):
    out, metrics, outcome = _run(tmp_path, "surrogate-spectrum", {"models": "100", "points": "30"})
    for name, fig in (("tanh2", 11), ("tanh3", 12), ("relu3", 13)):
        assert (out / f"fig{fig}_surrogate_{name}.png").exists()
        assert metrics[f"{name}_full_to_surrogate"] < 1e-10
        assert metrics[f"{name}_multiplicity_error"] < 1e-10
    assert metrics["relu3_surrogate_widths"] == [2, 2]
    assert metrics["tanh2_surrogate_size"] == 16
    assert len(_rows(out / "eigenvalues_tanh3.csv")) == 90
    assert outcome.outcomes[0].holds


def test_factor_estimation_small_run(tmp_path):
    out, metrics, outcome = _run(
        tmp_path,
        "factor-estimation",
        {
            "input_dim": "12",
            "output_dim": "8",
            "hidden_widths": "(4, 64)",
            "teacher_hidden": "6",
            "points": "40",
            "ensemble": "40",
            "singles": "4",
            "ema_widths": "(12, 10, 6)",
            "ema_points": "60",
            "iterations": "30",
        },
    )
    assert (out / "table1_correlation_vs_width.png").exists()
    assert (out / "fig10_ema_correlation.png").exists()
    assert len(_rows(out / "fig10.csv")) == 30
    assert [r["width"] for r in _rows(out / "table1.csv")] == ["4", "64"]
    assert metrics["Phi1_d64"] > metrics["Phi1_d4"]  # wider: a better single estimate
    for key, value in metrics.items():
        if key.startswith(("Phi", "Psi")) and not key.endswith("std"):
            assert -1 <= value <= 1
    assert len(outcome.outcomes) == 3


def test_training_small_run(tmp_path):
    out, metrics, outcome = _run(
        tmp_path,
        "symo-training",
        {"widths": "(12, 10, 6)", "n_train": "200", "n_test": "100", "iterations": "25"},
    )
    assert (out / "fig5_identity.png").exists()
    assert (out / "fig6_tanh.png").exists()
    rows = _rows(out / "tanh_symo.csv")
    assert len(rows) == 26
    assert float(rows[0]["seconds"]) == 0.0
    for activation in ("identity", "tanh"):
        for name in ("gd", "adam", "kfac", "shampoo", "symo"):
            assert metrics[f"{activation}_{name}_final"] < metrics[f"{activation}_{name}_at20"] * 2
            assert metrics[f"{activation}_{name}_seconds_per_iteration"] > 0
        assert metrics[f"{activation}_symo_over_adam_time"] > 0
    assert metrics["identity_symo_final"] < metrics["identity_gd_final"]
    assert metrics["tanh_linear_fit"] > 0
    assert len(outcome.outcomes) == 5
