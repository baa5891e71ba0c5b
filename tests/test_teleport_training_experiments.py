"""The dissertation's teleportation-in-training experiments (teleport-mnist, teleport-schedules,
teleport-optimizers; seed 001 Figs 4.6, 4.8, 5.9-5.11), at sizes the test suite can afford."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.errors import MissingDataError
from paramsym.experiments import registry
from paramsym.experiments.registry import Result
from paramsym.experiments.teleport.optimizers import (
    OptimizersConfig,
    RegressionArm,
    half_squared_error,
    regression_arms,
    regression_problem,
    run_regression_arm,
)
from paramsym.experiments.teleport.training import (
    Arm,
    ClassifierSetup,
    Curve,
    layer_pair_actions,
    load_split,
    log_area,
    log_ratio,
    run_arm,
    run_seeds,
    teleport_config,
    teleport_cost,
    teleporter,
)
from paramsym.experiments.threads import single_threaded, torch_threads
from paramsym.sweep import run_experiment

NAMES = ("teleport-mnist", "teleport-schedules", "teleport-optimizers")
SMALL = ClassifierSetup(
    hidden=(24, 24),
    slope=0.1,
    epochs=2,
    batch_size=20,
    teleport_steps=3,
    teleport_lr=1e-3,
    teleport_batch_size=20,
)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _metrics(run: Path) -> dict[str, object]:
    return json.loads((run / "metrics.json").read_text())


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits():
    return load_split("digits", None, 0, holdout="validation")


# -- registration ----------------------------------------------------------------------------------


def test_registered_with_claims_plots_and_quick_and_paper_presets():
    for name in NAMES:
        experiment = registry.get(name)
        assert experiment.seed_ref.startswith("seed 001")
        assert experiment.plot is not None
        assert experiment.claims
        assert all(c.source.startswith("seed 001") for c in experiment.claims)
        assert experiment.presets["quick"].dataset == "digits"
        assert experiment.presets["paper"].dataset == "mnist"
        assert experiment.presets["quick"].data_dir is None


def test_teleport_mnist_paper_preset_has_the_papers_settings():
    paper = registry.get("teleport-mnist").presets["paper"]
    assert paper.hidden == (512, 512)
    assert (paper.epochs, paper.batch_size, paper.sgd_lr) == (80, 20, 2e-3)
    assert (paper.teleport_epoch, paper.teleport_batches, paper.teleport_batch_size) == (1, 4, 20)
    assert (paper.teleport_steps, paper.teleport_lr, paper.slope) == (10, 1e-3, 0.1)
    assert paper.max_objective == 100.0


def test_teleport_schedules_paper_preset_has_the_papers_settings():
    paper = registry.get("teleport-schedules").presets["paper"]
    assert (paper.hidden, paper.batch_size, paper.lr, paper.teleport_steps) == (
        (512, 512),
        20,
        2e-3,
        10,
    )
    assert paper.once_batches == 4
    assert len(paper.intervals) == 5
    assert paper.interval_teleports == 4
    assert 0 in paper.once_epochs


def test_teleport_optimizers_paper_preset_has_the_papers_settings():
    paper = registry.get("teleport-optimizers").presets["paper"]
    assert (paper.hidden, paper.batch_size, paper.epochs, paper.runs) == ((16, 10), 20, 40, 5)
    assert (paper.teleport_batches, paper.teleport_batch_size) == (8, 200)
    assert (paper.teleport_steps, paper.teleport_lr) == (10, 5e-2)
    assert paper.optimizers == ("adagrad", "momentum", "rmsprop", "adam")
    assert paper.learning_rates == (1e-2, 1e-3, 1e-4, 1e-4)  # the authors' code (notes §9.9)
    assert (paper.regression_runs, paper.regression_steps, paper.teleport_step) == (5, 300, 5)
    assert (paper.grad_norm_teleport_lr, paper.preconditioned_teleport_lr) == (1.2e-5, 7.5e-3)
    assert (paper.adagrad_lr, paper.momentum_lr) == (1e-1, 1e-4)


# -- helpers ---------------------------------------------------------------------------------------


def test_log_area_and_ratio_match_a_hand_computation():
    losses = [2.0, 1.0, 0.1, 0.01]
    assert log_area(losses) == pytest.approx((0 - 1 - 2) / 3)
    assert log_area(losses, 2) == pytest.approx(-1.5)
    assert log_ratio([2.0, 0.5, 0.05], [2.0, 1.0, 0.1], 1, 2) == pytest.approx(math.log10(0.5))
    assert log_area([1.0, float("nan"), 0.5]) == math.inf  # a diverged run


def test_torch_threads_sets_and_restores_the_thread_count():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(0), torch_threads(None):  # leave the setting alone
        assert torch.get_num_threads() == before
    assert single_threaded(torch.get_num_threads)() == 1
    assert torch.get_num_threads() == before


def test_pinv_actions_are_found_on_every_layer_pair():
    model = ps.mlp([8, 6, 5, 3], nn.LeakyReLU(0.1), bias=False, seed=0)
    names = [s.name for s in layer_pair_actions(model, "pinv_GL")]
    assert names == ["pinv_GL[0->2]", "pinv_GL[2->4]"]


def test_train_classifier_without_teleport_is_plain_sgd(digits):
    """Oracle: the Teleporter-wrapped loop with Schedule.never() equals a hand SGD loop."""
    arm = Arm("SGD", "sgd", 0.05)
    curve = run_arm(digits, SMALL, arm, seed=3, run=1)
    init, order, _ = run_seeds(3, 1)
    model = ps.mlp([64, 24, 24, 10], nn.LeakyReLU(0.1), bias=False, seed=init)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    x, y = digits.x_train, digits.y_train
    expected = [float(loss_fn(model(x), y).detach())]
    for _ in range(SMALL.epochs):
        permutation = torch.randperm(x.shape[0], generator=order)
        for start in range(0, x.shape[0], 20):
            index = permutation[start : start + 20]
            optimizer.zero_grad()
            loss_fn(model(x[index]), y[index]).backward()
            optimizer.step()
        expected.append(float(loss_fn(model(x), y).detach()))
    assert curve.train_loss == pytest.approx(expected, rel=1e-5)
    assert len(curve.val_loss) == len(curve.seconds) == SMALL.epochs + 1
    assert len(curve.grad_norm_sq) == len(curve.epoch_seconds) == SMALL.epochs
    assert curve.events == []
    assert curve.seconds == sorted(curve.seconds)


def test_teleport_happens_after_the_first_epoch_and_keeps_the_batch_loss(digits):
    arm = Arm("SGD + teleport", "sgd", 0.05, (1,), 2)
    curve = run_arm(digits, SMALL, arm, seed=0, run=0)
    baseline = run_arm(digits, SMALL, Arm("SGD", "sgd", 0.05), seed=0, run=0)
    assert curve.train_loss[:2] == baseline.train_loss[:2]  # same run until the teleport
    assert curve.train_loss[2] != baseline.train_loss[2]
    (event,) = curve.events
    assert event["epoch"] == 1
    assert len(event["grad_norm_gain"]) == 2
    assert event["batch_loss_drift"] <= 1e-4 * 2.5  # the guard, relative to a loss ≈ 2.3
    assert event["train_loss_before"] == pytest.approx(curve.train_loss[1], rel=1e-6)
    event_cost, epoch_cost, ratio = teleport_cost([curve])
    assert event_cost == event["seconds"]
    assert ratio == pytest.approx(event_cost / epoch_cost)


def test_teleport_is_loss_invariant_on_its_batch_in_this_setting(digits):
    """One teleport step of the experiments' configuration keeps the batch loss (float64)."""
    model = ps.mlp([64, 24, 24, 10], nn.LeakyReLU(0.1), bias=False, seed=0, dtype=torch.float64)
    x, y = digits.x_train[:20].double(), digits.y_train[:20]
    loss_fn = nn.CrossEntropyLoss()
    before = float(loss_fn(model(x), y).detach())
    result = ps.teleport(
        model,
        loss_fn,
        (x, y),
        layer_pair_actions(model, "pinv_GL"),
        **teleport_config(10, 0.1).options(),
    )
    assert result.steps == 10
    assert result.grad_norm_after > result.grad_norm_before
    assert float(loss_fn(model(x), y).detach()) == pytest.approx(before, rel=1e-10)
    assert result.grad_norm_after > 5 * result.grad_norm_before


def test_regression_problem_is_the_chapter_4_setup():
    model, (x, y) = regression_problem(4)
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(6, 5), (7, 6), (8, 7)]
    assert (tuple(x.shape), tuple(y.shape)) == ((4, 5), (4, 8))
    for t in (*model.parameters(), x, y):
        assert t.dtype == torch.float64
        assert float(t.detach().min()) >= 0
        assert float(t.detach().max()) <= 1
    with torch.no_grad():
        residual = model(x) - y
        assert float(half_squared_error(model(x), y)) == pytest.approx(
            0.5 * float((residual**2).sum())
        )


def test_regression_teleport_keeps_the_loss_and_raises_the_gradient():
    arms = regression_arms(OptimizersConfig())
    plain = run_regression_arm(arms["adagrad"][1], seed=2, steps=8, at=5)
    precond = run_regression_arm(arms["adagrad"][2], seed=2, steps=8, at=5)
    alone = run_regression_arm(arms["adagrad"][0], seed=2, steps=8, at=5)
    assert plain.loss[:5] == alone.loss[:5] == precond.loss[:5]
    # The teleport happens before step 5's gradient: the loss there is unchanged.
    assert plain.loss[5] == pytest.approx(alone.loss[5], rel=1e-8)
    assert precond.loss[5] == pytest.approx(alone.loss[5], rel=1e-8)
    assert plain.grad_norm_sq[5] > alone.grad_norm_sq[5]
    assert precond.teleport["steps"] == 2
    assert alone.teleport == {}


def test_reset_control_only_resets_the_momentum():
    arms = {a.label: a for a in regression_arms(OptimizersConfig())["momentum"]}
    control = arms["reset only (control)"]
    assert (control.teleport_steps, control.state_policy) == (0, "reset")
    reset = run_regression_arm(control, seed=1, steps=7, at=5)
    model, batch = regression_problem(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    losses = []
    for step in range(7):
        if step == 5:
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
        optimizer.zero_grad()
        loss = half_squared_error(model(batch[0]), batch[1])
        loss.backward()
        losses.append(float(loss.detach()))
        optimizer.step()
    assert reset.loss == pytest.approx(losses, rel=1e-12)


def test_transform_policy_moves_the_momentum_buffer():
    model, batch = regression_problem(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    tele = teleporter(
        model,
        half_squared_error,
        optimizer,
        layer_pair_actions(model, "inverse_GL"),
        schedule=ps.Schedule.at([2]),
        data=lambda: batch,
        state_policy="transform",
        config=ps.TeleportConfig(steps=2, lr=1e-7, max_step_norm=None, allow_approximate=True),
    )
    for _ in range(2):
        tele.zero_grad()
        half_squared_error(model(batch[0]), batch[1]).backward()
        tele.step()
    buffers = [optimizer.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    tele.maybe_teleport()
    moved = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(buffers, moved, strict=True))


# -- reduced runs ----------------------------------------------------------------------------------


def _run(name: str, tmp_path: Path, overrides: dict[str, str]) -> tuple[Path, dict[str, object]]:
    experiment = registry.get(name)
    run = tmp_path / name
    outcome = run_experiment(experiment, experiment.config("quick", overrides), run, workers=1)
    assert len(outcome.outcomes) == len(experiment.claims)
    for outcome_row in outcome.outcomes:
        assert not str(outcome_row.measured).startswith("check failed"), outcome_row
    metrics = _metrics(run)
    for filename in ("config.json", "report.md", *metrics["figures"]):
        assert (run / filename).exists(), filename
    for table in metrics["series"]:
        assert _rows(run / f"{table}.csv")
    return run, metrics


def test_teleport_mnist_reduced(tmp_path):
    overrides = {"hidden": "24,24", "epochs": "3", "runs": "1", "teleport_steps": "2"}
    run, metrics = _run("teleport-mnist", tmp_path, overrides)
    assert set(metrics["figures"]) == {"teleport_mnist.png"}
    assert set(metrics["series"]) == {"curves", "gradients"}
    rows = _rows(run / "curves.csv")
    assert {r["arm"] for r in rows} == {"SGD", "SGD + teleport", "AdaGrad", "AdaGrad + teleport"}
    assert len(rows) == 4 * 4  # arms × epochs 0…3
    values = metrics["metrics"]
    assert values["train_size"] == 1347
    assert values["steps_per_epoch"] == 68
    assert values["teleport_over_epoch"] > 0
    for key in ("sgd", "adagrad"):
        assert math.isfinite(values[f"{key}_train_log_ratio"])
        assert values[f"{key}_grad_norm_gain"] > 0


def test_teleport_schedules_reduced(tmp_path):
    overrides = {
        "hidden": "24,24",
        "epochs": "8",
        "runs": "1",
        "teleport_steps": "2",
        "once_epochs": "0,1,2",
        "once_batches": "2",
        "intervals": "1,2",
        "batch_counts": "1,2",
    }
    run, metrics = _run("teleport-schedules", tmp_path, overrides)
    values = metrics["metrics"]
    assert values["panels"] == {
        "a": ["[0]", "[1]", "[2]"],
        "b": ["[1, 2, 3, 4]", "[1, 3, 5, 7]"],
        "c": ["1 batch", "2 batches"],
    }
    arms = {r["arm"] for r in _rows(run / "curves.csv")}
    assert len(arms) == 1 + 3 + 2 + 2
    assert values["log_area"]["a: [1]"] == values["log_area"]["c: 2 batches"]  # the same arm
    assert values["log_area"]["no teleport"] < 0.5


def test_teleport_schedules_refuses_teleports_past_the_last_epoch():
    experiment = registry.get("teleport-schedules")
    config = experiment.config("quick", {"epochs": "10", "intervals": "4"})
    with pytest.raises(ps.InvalidArgumentError, match="interval 4"):
        experiment.run(config, registry.SilentProgress())


def test_teleport_optimizers_reduced(tmp_path):
    overrides = {
        "regression_runs": "2",
        "regression_steps": "20",
        "epochs": "2",
        "runs": "1",
        "teleport_batches": "2",
        "teleport_steps": "2",
        "optimizers": "adagrad,adam",
        "learning_rates": "0.1,0.001",
        "early_epochs": "1",
    }
    run, metrics = _run("teleport-optimizers", tmp_path, overrides)
    assert set(metrics["figures"]) == {
        "momentum_adagrad_regression.png",
        "optimizers_epochs.png",
        "optimizers_time.png",
    }
    regression = _rows(run / "regression.csv")
    assert len(regression) == (5 + 3) * 2 * 20  # arms × runs × steps
    values = metrics["metrics"]
    for policy in ("transform", "keep", "reset"):
        assert math.isfinite(values[f"momentum[{policy}]_log_area"])
    assert "adam_early_log_ratio" in values
    claims = {c["claim"]: c for c in metrics["claims"]}
    early = next(c for text, c in claims.items() if "early epochs" in text)
    assert "momentum" not in early["measured"]  # only the optimizers that ran are checked


def test_paper_presets_need_the_mnist_files(tmp_path, monkeypatch):
    monkeypatch.delenv("PARAMSYM_DATA", raising=False)
    with pytest.raises(MissingDataError):
        load_split("mnist", str(tmp_path), 0, holdout="validation")


def test_claim_checks_read_the_metrics_they_report():
    experiment = registry.get("teleport-mnist")
    metrics = {
        "sgd_train_log_ratio": -0.2,
        "sgd_train_log_ratio_per_run": [-0.1, -0.3],
        "sgd_teleport_final_train": 0.1,
        "sgd_base_final_train": 0.2,
        "sgd_grad_norm_gain": 3.0,
        "sgd_train_loss_jump": 1.0,
    }
    outcome = experiment.claims[0].evaluate(Result(metrics))
    assert outcome.holds
    assert "-0.200 ± 0.141" in outcome.measured
    metrics["sgd_train_log_ratio"] = 0.1
    assert not experiment.claims[0].evaluate(Result(metrics)).holds


def test_curve_defaults_are_empty():
    assert Curve().events == []
    assert RegressionArm("x", "sgd", 0.1).teleport


def test_a_diverged_run_ends_with_nan_and_an_infinite_log_area(digits):
    curve = run_arm(digits, SMALL, Arm("SGD", "sgd", 1e12), seed=0, run=0)
    assert len(curve.train_loss) == len(curve.seconds) == SMALL.epochs + 1
    assert len(curve.grad_norm_sq) == SMALL.epochs
    assert math.isnan(curve.train_loss[1])  # diverged in the first epoch, then stopped
    assert len(curve.epoch_seconds) == 1
    assert log_area(curve.train_loss) == math.inf
