"""The synthetic teleportation experiments of seed 001 ch. 4 (teleport-testfunctions,
teleport-regression, teleport-sweep, teleport-runtime): their helpers against hand-written
oracles, the invariance of the loss through a teleport in these settings, and reduced runs."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import paramsym as ps
from paramsym.experiments import registry
from paramsym.experiments.teleport import (
    convergence,
    regression,
    regression_training,
    runtime,
    testfunctions,
)
from paramsym.experiments.threads import torch_threads
from paramsym.landscapes import Booth, Rosenbrock, value_loss
from paramsym.sweep import run_experiment

F64 = torch.float64
NAMES = ("teleport-testfunctions", "teleport-regression", "teleport-sweep", "teleport-runtime")


def _table(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _metrics(run: Path) -> dict[str, Any]:
    return json.loads((run / "metrics.json").read_text())


# -- registration and the paper's settings ---------------------------------------------------


def test_registered_with_the_papers_settings():
    experiments = {name: registry.get(name) for name in NAMES}
    assert all(e.seed_ref.startswith("seed 001") for e in experiments.values())
    assert all(e.claims for e in experiments.values())

    f = experiments["teleport-testfunctions"].presets["paper"]
    assert (f.rosenbrock_start, f.rosenbrock_steps, f.rosenbrock_lr) == ((-1.0, -1.0), 1000, 1e-3)
    assert (f.rosenbrock_every, f.rosenbrock_teleport_steps, f.rosenbrock_teleport_lr) == (
        100,
        10,
        0.1,
    )
    assert (f.booth_start, f.booth_steps, f.booth_lr, f.booth_teleport_at) == (
        (5.0, -5.0),
        10,
        0.08,
        4,
    )
    assert (f.booth_teleport_steps, f.booth_teleport_lr, f.booth_theta0) == (10, 1e-3, "random")

    r = experiments["teleport-regression"].presets["paper"]
    assert (r.runs, r.steps, r.gd_lr, r.adagrad_lr, r.teleport_at) == (5, 300, 1e-4, 1e-1, 5)
    assert (r.gd_teleport_steps, r.gd_teleport_lr) == (8, 1e-7)
    assert (r.adagrad_teleport_steps, r.adagrad_teleport_lr) == (2, 1e-5)
    assert (r.action, r.parameterization) == ("inverse_GL", "first_order")

    s = experiments["teleport-sweep"].presets["paper"]
    assert s.teleport_lrs == (1e-9, 1e-8, 1e-7, 1e-6, 1e-5)
    assert s.teleport_steps == (1, 2, 4, 8, 16, 32)
    assert (s.max_steps, s.tol, s.teleport_at, s.optimizers) == (2000, 1e-3, 5, ("gd", "adagrad"))

    t = experiments["teleport-runtime"].presets["paper"]
    assert (t.epochs, t.every, t.teleport_steps, t.dimension_layers, t.depth_width) == (
        300,
        10,
        10,
        3,
        128,
    )
    problem = regression_training.make_regression_problem(0)
    shapes = [tuple(p.shape) for p in problem.model.parameters()]
    assert shapes == [(6, 5), (7, 6), (8, 7)]  # W₁ 6×5, W₂ 7×6, W₃ 8×7
    assert tuple(problem.x.shape) == (4, 5)
    assert tuple(problem.y.shape) == (4, 8)


# -- helpers against oracles -------------------------------------------------------------------


def test_convergence_step_is_the_first_small_change():
    losses = [10.0, 5.0, 4.0, 3.9995, 3.9994, 1.0]
    assert convergence.convergence_step(losses, tol=1e-3) == 3
    assert convergence.convergence_step(losses, tol=1e-5) is None
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        sequence = torch.rand(30, generator=generator).cumsum(0).flip(0).tolist()
        tol = float(torch.rand(1, generator=generator)) * 0.5
        expected = None
        for t in range(1, len(sequence)):  # hand loop: |L_{t-1} - L_t| < tol
            if abs(sequence[t - 1] - sequence[t]) < tol:
                expected = t
                break
        assert convergence.convergence_step(sequence, tol) == expected


def test_equal_loss_comparison_uses_first_passage():
    base = ([100.0, 10.0, 1.0, 0.1], [50.0, 5.0, 0.5, 0.05])
    faster = ([100.0, 10.0, 1.0, 0.1], [100.0, 10.0, 1.0, 0.1])  # twice the rate at each loss
    comparison = convergence.compare_at_equal_loss(base, faster, below=100.0, points=7)
    assert len(comparison.levels) == 7
    assert all(0.1 < level < 100.0 for level in comparison.levels)
    assert comparison.fraction_larger == 1.0
    assert comparison.median_ratio == pytest.approx(2.0)
    level = comparison.levels[3]
    step = next(t for t, v in enumerate(base[0]) if v <= level)
    assert comparison.rate_baseline[3] == base[1][step]
    swapped = convergence.compare_at_equal_loss(faster, base, below=100.0, points=7)
    assert swapped.fraction_larger == 0.0
    assert (
        convergence.compare_at_equal_loss(base, faster, below=0.05).levels == []
    )  # no common range


def test_fits_recover_exact_laws():
    x = [2.0, 4.0, 8.0, 16.0]
    slope, r2 = runtime.power_law_fit(x, [3 * v**2.5 for v in x])
    assert slope == pytest.approx(2.5)
    assert r2 == pytest.approx(1.0)
    slope, r2 = runtime.linear_fit([1, 2, 3, 4], [1.5, 3.5, 5.5, 7.5])
    assert slope == pytest.approx(2.0)
    assert r2 == pytest.approx(1.0)
    _, noisy = runtime.linear_fit([1, 2, 3, 4], [1.0, 4.0, 2.0, 3.0])
    assert noisy < 0.9


def test_loss_at_time_and_speedup():
    run = regression_training.TrainingRun(
        "gd", [8.0, 4.0, 2.0, 1.9995], [1.0] * 4, [0.1, 0.2, 0.3, 0.4]
    )
    assert [regression.loss_at_time(run, t) for t in (0.0, 0.1, 0.25, 9.0)] == [
        8.0,
        8.0,
        4.0,
        1.9995,
    ]
    run.converged_step = 3
    assert run.time_to_convergence == 0.4
    faster = regression_training.TrainingRun("gd", [8.0, 2.0, 1.9999], [1.0] * 3, [0.05, 0.15, 0.2])
    faster.converged_step = 2
    wall, steps = regression_training.speedup(run, faster)
    assert wall == pytest.approx(2.0)
    assert steps == pytest.approx(1.5)
    faster.diverged = True
    assert all(math.isnan(v) for v in regression_training.speedup(run, faster))


def test_log_grad_norm_objective_is_the_log_of_the_squared_gradient():
    f = Rosenbrock(torch.tensor([-0.5, 0.7], dtype=F64))
    params = {"w": f.w.detach().clone().requires_grad_(True)}
    value = testfunctions.log_grad_norm(f, params, value_loss, (None, None), None)
    (gradient,) = torch.autograd.grad(f.value(params["w"]), params["w"])
    assert float(value.detach()) == pytest.approx(math.log(float(gradient.pow(2).sum())), rel=1e-12)
    (slope,) = torch.autograd.grad(value, params["w"])  # differentiable, for the ascent
    assert torch.isfinite(slope).all()


def test_booth_teleport_keeps_the_loss_and_reaches_the_level_set_maximum():
    """On Booth ‖∇L‖² = 4 hᵀAAᵀh ≤ 36 L on its level set (eigenvalues of AAᵀ: 9, 1)."""
    options = testfunctions.LandscapeTeleport(
        steps=40, lr=1e-3, theta0="random", max_step_norm=None
    )
    with torch_threads(1):
        run = testfunctions.run_landscape(
            Booth(torch.tensor([5.0, -5.0], dtype=F64)), 6, 0.08, [4], options
        )
    (record,) = run.teleports
    assert record.loss_after == pytest.approx(record.loss_before, rel=1e-12)
    assert run.losses[4] == pytest.approx(record.loss_before, rel=1e-12)
    assert record.rate_after == pytest.approx(36 * record.loss_before, rel=1e-6)
    assert run.rates[4] == pytest.approx(record.rate_after, rel=1e-12)
    assert record.rate_after > record.rate_before
    baseline = testfunctions.run_landscape(Booth(torch.tensor([5.0, -5.0], dtype=F64)), 6, 0.08)
    assert baseline.losses[:4] == run.losses[:4]  # identical until the teleport
    assert run.losses[-1] < baseline.losses[-1]
    with pytest.raises(ps.InvalidArgumentError, match="theta0"):
        testfunctions.run_landscape(
            Booth(torch.tensor([5.0, -5.0], dtype=F64)),
            2,
            0.08,
            [0],
            testfunctions.LandscapeTeleport(theta0="sideways"),
        )


def _hand_training(
    problem: regression_training.RegressionProblem, optimizer: str, lr: float, steps: int
):
    """GD / AdaGrad on W₃σ(W₂σ(W₁X)) written out by hand (rows are samples)."""
    weights = [p.detach().clone().requires_grad_(True) for p in problem.model.parameters()]
    accumulators = [torch.zeros_like(w) for w in weights]
    losses = []
    for _ in range(steps):
        h = problem.x
        for w in weights[:-1]:
            h = torch.nn.functional.leaky_relu(h @ w.T, 0.1)
        loss = 0.5 * ((h @ weights[-1].T - problem.y) ** 2).sum()
        gradients = torch.autograd.grad(loss, weights)
        losses.append(float(loss.detach()))
        with torch.no_grad():
            for w, g, a in zip(weights, gradients, accumulators, strict=True):
                if optimizer == "gd":
                    w -= lr * g
                else:
                    a += g * g
                    w -= lr * g / (a.sqrt() + 1e-10)
    return losses


@pytest.mark.parametrize(("optimizer", "lr"), [("gd", 1e-4), ("adagrad", 1e-1)])
def test_training_matches_a_hand_loop(optimizer, lr):
    problem = regression_training.make_regression_problem(3)
    run = regression_training.train_regression(problem, optimizer, lr, 25, threads=None)
    assert run.losses == pytest.approx(_hand_training(problem, optimizer, lr, 25), rel=1e-10)
    assert len(run.seconds) == 25
    assert run.seconds == sorted(run.seconds)
    assert run.teleport is None
    assert run.teleport_seconds == 0.0
    fresh = regression_training.make_regression_problem(
        3
    )  # the problem's model was not trained in place
    for p, q in zip(problem.model.parameters(), fresh.model.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize("optimizer", ["gd", "adagrad"])
def test_regression_teleport_keeps_the_loss_and_raises_the_gradient(optimizer):
    problem = regression_training.make_regression_problem(1)
    lr = 1e-4 if optimizer == "gd" else 1e-1
    plan = regression_training.RegressionTeleport(
        at=5, steps=4, lr=1e-7 if optimizer == "gd" else 1e-5
    )
    base = regression_training.train_regression(problem, optimizer, lr, 8, threads=None)
    tele = regression_training.train_regression(problem, optimizer, lr, 8, plan, threads=None)
    assert tele.losses[:5] == base.losses[:5]
    # Eq. 4.13 is exact on this batch (4 samples ≤ 5, 6 input features): the teleport keeps L
    assert tele.losses[5] == pytest.approx(base.losses[5], rel=1e-10)
    assert tele.teleport is not None
    assert tele.teleport["step"] == 5
    assert tele.teleport["steps"] == 4
    assert tele.teleport["loss_after"] == pytest.approx(tele.teleport["loss_before"], rel=1e-10)
    assert tele.rates[5] > base.rates[5]
    assert tele.rates[5] == pytest.approx(tele.teleport["grad_norm_after"] ** 2, rel=1e-9)
    assert tele.teleport_steps_taken == [5]
    assert tele.teleport_seconds > 0
    assert tele.step_seconds > 0


def test_layer_pair_actions_and_bad_input():
    problem = regression_training.make_regression_problem(0)
    names = [s.name for s in regression_training.layer_pair_actions(problem.model, "pinv_GL")]
    assert names == ["pinv_GL[0->2]", "pinv_GL[2->4]"]
    with pytest.raises(ps.InvalidArgumentError, match="no conv_GL action"):
        regression_training.layer_pair_actions(problem.model, "conv_GL")
    with pytest.raises(ps.InvalidArgumentError, match="optimizer must be"):
        regression_training.train_regression(problem, "adam", 1e-3, 2)  # type: ignore[arg-type]


# -- reduced runs --------------------------------------------------------------------------------


def test_testfunctions_reduced(tmp_path):
    experiment = registry.get("teleport-testfunctions")
    config = experiment.config("quick", {"rosenbrock_steps": "150", "booth_draws": "2"})
    outcome = run_experiment(experiment, config, tmp_path, workers=1)
    for name in (
        "metrics.json",
        "report.md",
        "trajectories.csv",
        "teleports.csv",
        "final_point.csv",
        "trajectories.png",
        "rate_vs_loss.png",
    ):
        assert (tmp_path / name).exists(), name
    metrics = _metrics(tmp_path)["metrics"]
    assert metrics["rosenbrock_teleports"] == 1  # before step 99
    assert metrics["rosenbrock_teleports_with_gain"] == 1
    assert metrics["rosenbrock_max_teleport_loss_drift"] < 1e-9
    assert metrics["rosenbrock_final_loss_teleport"] < metrics["rosenbrock_final_loss_gd"]
    assert metrics["booth_draws"] == 2
    teleports = [r for r in _table(tmp_path / "teleports.csv") if r["function"] == "booth"]
    assert len(teleports) == 2
    for row in teleports:
        assert float(row["loss_after"]) == pytest.approx(float(row["loss_before"]), rel=1e-9)
        assert float(row["dL_dt_after"]) <= 36 * float(row["loss_before"]) * (1 + 1e-9)
    assert len(outcome.outcomes) == len(experiment.claims)


def test_regression_reduced(tmp_path):
    experiment = registry.get("teleport-regression")
    config = experiment.config("quick", {"runs": "2", "steps": "20"})
    outcome = run_experiment(experiment, config, tmp_path, workers=1)
    for name in ("metrics.json", "report.md", "curves.csv", "regression.png"):
        assert (tmp_path / name).exists(), name
    rows = _table(tmp_path / "curves.csv")
    assert len(rows) == 2 * 2 * 2 * 20  # optimizers × with/without × runs × steps
    metrics = _metrics(tmp_path)["metrics"]
    for optimizer in ("gd", "adagrad"):
        assert metrics[f"{optimizer}_diverged_teleport"] == 0
        assert metrics[f"{optimizer}_gain_mean"] > 1
        assert metrics[f"{optimizer}_teleport_seconds"] > 0
        assert 0 <= metrics[f"{optimizer}_epoch_fraction_lower"] <= 1
    first = [r for r in rows if r["optimizer"] == "gd" and r["run"] == "0"]
    base = [float(r["loss"]) for r in first if r["teleport"] == "False"]
    tele = [float(r["loss"]) for r in first if r["teleport"] == "True"]
    assert tele[5] == pytest.approx(base[5], rel=1e-9)  # loss kept through the teleport
    assert len(outcome.outcomes) == 4


def test_sweep_reduced(tmp_path):
    experiment = registry.get("teleport-sweep")
    config = experiment.config(
        "quick",
        {
            "runs": "1",
            "optimizers": "adagrad",
            "teleport_lrs": "1e-7",
            "teleport_steps": "1,2",
            "tol": "0.05",
        },
    )
    outcome = run_experiment(experiment, config, tmp_path, workers=1)
    for name in ("metrics.json", "runs.csv", "points.csv", "speedup_wall.png", "speedup_steps.png"):
        assert (tmp_path / name).exists(), name
    runs = _table(tmp_path / "runs.csv")
    assert [int(r["teleport_steps"]) for r in runs] == [1, 2]
    for row in runs:
        assert row["status"] == "converged"
        base, tele = int(row["steps_to_convergence"]), int(row["steps_to_convergence_teleport"])
        assert float(row["speedup_steps"]) == pytest.approx(base / tele)
        wall = float(row["seconds_to_convergence"]) / float(row["seconds_to_convergence_teleport"])
        assert float(row["speedup_wall"]) == pytest.approx(wall)
        assert float(row["teleport_seconds"]) < float(row["seconds_to_convergence_teleport"])
    metrics = _metrics(tmp_path)["metrics"]
    assert metrics["adagrad_points"] == 2
    assert metrics["adagrad_points_converged"] == 2
    assert "gd_points" not in metrics
    assert len(outcome.outcomes) == 2


def test_runtime_reduced(tmp_path):
    experiment = registry.get("teleport-runtime")
    config = experiment.config(
        "quick",
        {
            "epochs": "20",
            "teleport_steps": "2",
            "dimensions": "2,4,8",
            "depths": "2,3,4",
            "depth_width": "4",
        },
    )
    run_experiment(experiment, config, tmp_path, workers=1)
    for name in ("metrics.json", "report.md", "runtime.csv", "runtime.png"):
        assert (tmp_path / name).exists(), name
    rows = _table(tmp_path / "runtime.csv")
    assert [(r["panel"], int(r["width"]), int(r["layers"])) for r in rows] == [
        ("a", 2, 3),
        ("a", 4, 3),
        ("a", 8, 3),
        ("b", 4, 2),
        ("b", 4, 3),
        ("b", 4, 4),
    ]
    for row in rows:
        assert int(row["teleports"]) == 2  # before steps 9 and 19
        assert row["diverged"] == "False"
        assert 0 < float(row["teleport_seconds"]) < float(row["seconds_with_teleport"])
    metrics = _metrics(tmp_path)["metrics"]
    assert 0 < metrics["teleport_share_min"] <= metrics["teleport_share_median"] < 1
    with pytest.raises(ps.InvalidArgumentError, match="at least 3"):
        runtime.run_runtime(runtime.RuntimeConfig(dimensions=(2, 4)), registry.SilentProgress())
