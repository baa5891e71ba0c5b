"""The seed 003 training experiments (progressive-sharpening, gradient-subspace,
last-layer-curvature): registration, presets, oracles of their helpers, and reduced runs whose
exact-identity claims must hold."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import paramsym as ps
import paramsym.experiments.equivariance.last_layer as last_layer
import paramsym.experiments.equivariance.sharpening as sharpening
import paramsym.experiments.equivariance.subspace as subspace
from paramsym.equivariance.homogeneous_spectrum import sharpness_bound
from paramsym.equivariance.last_layer import last_layer_curvature
from paramsym.experiments import registry
from paramsym.experiments.registry import SilentProgress
from paramsym.sweep import run_experiment

F64 = torch.float64
NAMES = ("progressive-sharpening", "gradient-subspace", "last-layer-curvature")


def _header(path: Path) -> list[str]:
    with path.open() as handle:
        return next(csv.reader(handle))


def _outcomes(name: str, config: object) -> tuple[registry.Result, list[registry.ClaimOutcome]]:
    experiment = registry.get(name)
    result = experiment.run(config, SilentProgress())
    return result, experiment.evaluate(result)


# -- registration and presets ---------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_registered_under_seed_003_with_claims_and_a_figure(name):
    experiment = registry.get(name)
    assert experiment.seed_ref.startswith("seed 003, ")
    assert registry.paper_of(experiment) == "seed 003"
    assert all(c.source.startswith("seed 003") for c in experiment.claims)
    assert experiment.plot is not None
    quick, paper = experiment.presets["quick"], experiment.presets["paper"]
    assert dataclasses.is_dataclass(quick)
    assert type(quick) is type(paper)
    assert quick.seed == paper.seed == 0
    assert quick.samples <= paper.samples
    assert quick.steps <= paper.steps


def test_paper_presets_have_the_documented_settings():
    ps_paper = registry.get("progressive-sharpening").presets["paper"]
    assert (ps_paper.samples, ps_paper.hidden, ps_paper.steps, ps_paper.every) == (
        1347,
        (128, 128),
        1000,
        4,
    )
    assert (ps_paper.loss, ps_paper.lr, ps_paper.early_steps) == ("exponential", 0.5, 20)
    assert (ps_paper.lanczos_tol, ps_paper.identity_tol) == (1e-8, 1e-10)
    gs_paper = registry.get("gradient-subspace").presets["paper"]
    assert (gs_paper.hidden, gs_paper.steps, gs_paper.every, gs_paper.warmup_steps) == (
        (64, 64),
        4000,
        100,
        1000,
    )
    assert (gs_paper.batch_sizes, gs_paper.k, gs_paper.lr, gs_paper.threshold) == (
        (0, 64),
        10,
        0.1,
        0.8,
    )
    assert not gs_paper.standardize
    ll_paper = registry.get("last-layer-curvature").presets["paper"]
    assert (ll_paper.hidden, ll_paper.steps, ll_paper.every, ll_paper.random_directions) == (
        (128, 128),
        4000,
        20,
        32,
    )
    assert (ll_paper.lr, ll_paper.bias, ll_paper.identity_tol) == (0.2, True, 1e-10)


# -- helpers against oracles ----------------------------------------------------------------------


def test_margin_losses_and_the_closed_form_bound_of_the_exponential_loss():
    """The eq. (4) bound for the exponential loss on margins is
    (1/(n‖θ‖²)) Σ_i e^{−q_i}(m²q_i² − m(m−1)q_i) (note 003 §3)."""
    x, digit = sharpening.digits_inputs(40, standardize=True)
    z = torch.where(digit % 2 == 0, 1.0, -1.0).to(F64)
    model = ps.mlp([64, 6, 5, 1], activation="relu", bias=False, seed=1, dtype=F64)
    q = z * model(x).detach().reshape(-1)
    exponential, logistic = sharpening.MarginLoss("exponential"), sharpening.MarginLoss("logistic")
    torch.testing.assert_close(exponential(model(x), z), torch.exp(-q).mean())
    torch.testing.assert_close(logistic(model(x), z), torch.log1p(torch.exp(-q)).mean())
    theta_sq = sum(float((p.detach() ** 2).sum()) for p in model.parameters())
    m = 3
    expected = float((torch.exp(-q) * (m * m * q**2 - m * (m - 1) * q)).mean()) / theta_sq
    result = sharpness_bound(model, exponential, (x, z), lr=0.5)
    assert result.degree == m
    assert result.bound == pytest.approx(expected, rel=1e-12)
    assert result.bound <= result.lambda_max + result.lambda_max_error
    assert result.two_over_lr == 4.0
    with pytest.raises(ps.InvalidArgumentError):
        sharpening.MarginLoss("hinge")


def test_digits_inputs_standardise_and_descend_tracks_and_steps():
    x, y = sharpening.digits_inputs(100, standardize=True)
    assert x.shape == (100, 64)
    assert x.dtype == F64
    assert y.shape == (100,)
    torch.testing.assert_close(x.mean(dim=0), torch.zeros(64, dtype=F64), atol=1e-12, rtol=0)
    raw, _ = sharpening.digits_inputs(100, standardize=False)
    assert float(raw.min()) >= 0.0
    assert float(raw.max()) <= 1.0
    with pytest.raises(ps.InvalidArgumentError):
        sharpening.digits_inputs(0, standardize=False)
    model = ps.mlp([64, 4, 10], bias=False, seed=0, dtype=F64)
    reference = ps.mlp([64, 4, 10], bias=False, seed=0, dtype=F64)
    loss_fn = nn.CrossEntropyLoss()
    seen: list[int] = []
    sharpening.descend(model, loss_fn, (x, y), 0.1, 5, 2, seen.append, SilentProgress(), "")
    assert seen == [0, 2, 4, 5]
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(5):
        optimizer.zero_grad()
        loss_fn(reference(x), y).backward()
        optimizer.step()
    for p, r in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, r, rtol=1e-12, atol=1e-14)


def test_per_class_sharpness_matches_hessian_vector_products():
    """The per-predicted-class top-vs-rest curvature equals, by eq. (7), the |S_c|/n-weighted
    J_EᵀHJ_E of E = e_c e_cᵀ on each class's samples, measured with an HVP."""
    x, y = sharpening.digits_inputs(120, standardize=True)
    model = ps.mlp([64, 12, 10], activation="relu", seed=2, dtype=F64)
    loss_fn = nn.CrossEntropyLoss()
    story = last_layer.per_class_sharpness(model, loss_fn, x, y)
    predicted = model(x).argmax(dim=1)
    expected = 0.0
    for c in predicted.unique().tolist():
        members = predicted == c
        E = torch.zeros(10, 10, dtype=F64)
        E[c, c] = 1.0
        check = last_layer_curvature(model, loss_fn, (x[members], y[members]), E)
        expected += float(members.double().mean()) * check.sharpness
    assert story["top_curvature"] == pytest.approx(expected, rel=1e-10)
    assert story["ratio"] == pytest.approx(story["top_sharpness"] / story["rest_sharpness"])
    assert 0.1 <= story["mean_top_probability"] <= 1.0


# -- reduced runs ---------------------------------------------------------------------------------


def test_progressive_sharpening_reduced(tmp_path):
    experiment = registry.get("progressive-sharpening")
    config = experiment.config(
        "quick",
        {"samples": "200", "hidden": "(16, 16)", "steps": "40", "every": "2", "early_steps": "10"},
    )
    outcome = run_experiment(experiment, config, tmp_path / "run", workers=1)
    assert outcome is not None
    run = tmp_path / "run"
    data = json.loads((run / "metrics.json").read_text())
    claims = data["claims"]
    assert [c["holds"] for c in claims[:2]] == [True, True], claims
    assert all(isinstance(c["holds"], bool) for c in claims[2:]), claims
    assert _header(run / "trajectory.csv") == sharpening.COLUMNS.split()
    assert (run / "sharpening.png").stat().st_size > 0
    metrics = data["metrics"]
    assert metrics["degree"] == 3
    assert metrics["tracked_steps"] == 21
    assert metrics["max_euler_residual"] <= 1e-10
    assert metrics["max_formula_residual"] <= 1e-10
    assert metrics["early_window"] == [0, 10]
    assert metrics["early_bound_intervals"] == 5
    assert metrics["two_over_lr"] == 4.0


def test_progressive_sharpening_bound_below_lambda_at_every_row():
    config = dataclasses.replace(
        registry.get("progressive-sharpening").presets["quick"],
        samples=120,
        hidden=(8, 8, 8),
        loss="logistic",
        steps=12,
        every=3,
        early_steps=6,
    )
    result, outcomes = _outcomes("progressive-sharpening", config)
    table = result.series["trajectory"]
    for lam, err, bound in zip(
        table["lambda_max"], table["lambda_max_error"], table["bound"], strict=True
    ):
        assert bound <= lam + err + 1e-12
    assert result.metrics["degree"] == 4
    assert outcomes[0].holds is True
    assert outcomes[1].holds is True
    with pytest.raises(ps.InvalidArgumentError):
        registry.get("progressive-sharpening").run(
            dataclasses.replace(config, early_steps=13), SilentProgress()
        )


def test_gradient_subspace_reduced(tmp_path):
    experiment = registry.get("gradient-subspace")
    config = experiment.config(
        "quick",
        {
            "samples": "300",
            "hidden": "(8, 8)",
            "steps": "60",
            "every": "20",
            "warmup_steps": "20",
            "batch_sizes": "(0, 32)",
        },
    )
    run = tmp_path / "run"
    run_experiment(experiment, config, run, workers=1)
    data = json.loads((run / "metrics.json").read_text())
    claims = data["claims"]
    assert claims[0]["holds"] is True, claims
    assert all(isinstance(c["holds"], bool) for c in claims[1:]), claims
    assert _header(run / "alignment.csv") == [
        "run",
        "batch_size",
        "step",
        "loss",
        "accuracy",
        "gradient_fraction",
        "top_energy",
        "lambda_1",
        "lambda_k",
        "max_pair_residual",
        "max_ritz_bound",
        "converged",
    ]
    assert _header(run / "eigenpairs.csv") == [
        "run",
        "batch_size",
        "step",
        "index",
        "eigenvalue",
        "energy",
        "pair_residual",
        "ritz_residual",
    ]
    assert (run / "gradient_subspace.png").stat().st_size > 0
    metrics = data["metrics"]
    assert metrics["batch_sizes"] == [0, 32]
    assert subspace.run_key(32) == "sgd_b32"
    assert metrics["gd_late_points"] == metrics["sgd_b32_late_points"] == 3
    assert metrics["pair_residuals_within_ritz_bound"] is True
    assert metrics["max_pair_residual"] <= 1e-9
    assert metrics["parameters"] == 64 * 8 + 8 * 8 + 8 * 10
    for key in ("gd", "sgd_b32"):
        low, high = metrics[f"{key}_late_min_fraction"], metrics[f"{key}_late_max_fraction"]
        assert 0.0 <= low <= metrics[f"{key}_late_mean_fraction"] <= high <= 1.0


def test_gradient_subspace_without_an_sgd_run_leaves_that_claim_unevaluated():
    config = dataclasses.replace(
        registry.get("gradient-subspace").presets["quick"],
        samples=100,
        hidden=(4,),
        steps=4,
        every=2,
        warmup_steps=2,
        batch_sizes=(0,),
        k=3,
    )
    result, outcomes = _outcomes("gradient-subspace", config)
    assert outcomes[0].holds is True
    assert outcomes[1].holds is None
    assert "not evaluated" in str(outcomes[1].measured)
    assert isinstance(outcomes[2].holds, bool)
    fractions = result.series["alignment"]["gradient_fraction"]
    energies = result.series["eigenpairs"]["energy"]
    assert len(energies) == 3 * len(fractions)
    for i, fraction in enumerate(fractions):  # the fraction is the sum of the pair energies
        assert fraction == pytest.approx(sum(energies[3 * i : 3 * i + 3]), rel=1e-12)


def test_last_layer_curvature_reduced(tmp_path):
    experiment = registry.get("last-layer-curvature")
    config = experiment.config(
        "quick",
        {
            "samples": "300",
            "hidden": "(16,)",
            "steps": "40",
            "every": "10",
            "random_directions": "3",
        },
    )
    run = tmp_path / "run"
    run_experiment(experiment, config, run, workers=1)
    data = json.loads((run / "metrics.json").read_text())
    claims = data["claims"]
    assert [c["holds"] for c in claims[:3]] == [True, True, True], claims
    assert isinstance(claims[3]["holds"], bool)
    identities = list(last_layer.IDENTITIES)
    assert _header(run / "trajectory.csv") == [
        "step",
        "loss",
        "accuracy",
        "mean_top_probability",
        "top_sharpness",
        "rest_sharpness",
        "ratio",
        "top_curvature",
        "rest_curvature",
        *identities,
    ]
    assert _header(run / "directions.csv") == [
        "draw",
        "sharpness",
        "output_sharpness",
        "variance_form",
        "direction_norm",
        *identities,
    ]
    assert (run / "last_layer.png").stat().st_size > 0
    metrics = data["metrics"]
    assert metrics["checked_directions"] == 5 + 3
    for name in identities:
        assert metrics[f"max_{name}"] <= 1e-10


def test_last_layer_without_biases_checks_the_papers_layer():
    config = dataclasses.replace(
        registry.get("last-layer-curvature").presets["quick"],
        samples=80,
        hidden=(6,),
        bias=False,
        steps=4,
        every=2,
        random_directions=2,
    )
    result, outcomes = _outcomes("last-layer-curvature", config)
    assert [o.holds for o in outcomes[:3]] == [True, True, True]
    directions = result.series["directions"]
    for value, variance in zip(directions["sharpness"], directions["variance_form"], strict=True):
        assert value == pytest.approx(variance, rel=1e-9)
    assert all(math.isfinite(r) for r in result.series["trajectory"]["ratio"])
