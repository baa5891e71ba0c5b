"""Seed 000's teleportation experiments (ntk-linearization, teleport-alignment) at sizes the
test suite can afford, and oracles for their helpers."""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.core.params import flatten, functional_call, unflatten
from paramsym.errors import MissingDataError
from paramsym.experiments import registry
from paramsym.experiments.registry import SilentProgress
from paramsym.experiments.teleport_ntk.alignment import (
    TeleportAlignmentConfig,
    _paired_statistics,
    distortion_bound,
    group_distortion,
    rescaling_symmetries,
    teleport_twin,
)
from paramsym.experiments.teleport_ntk.common import (
    half_squared_error,
    loss_function,
    ntk_mlp,
    power_law_exponent,
)
from paramsym.experiments.teleport_ntk.linearization import (
    Linearization,
    LinearizationConfig,
    Split,
    _fit_transformed,
    load_split,
    threshold_crossing,
    train_side_by_side,
)
from paramsym.sweep import run_experiment


def _tiny(seed: int = 0) -> nn.Module:
    return ps.mlp([3, 5, 4, 2], "relu", bias=False, parameterization="ntk", seed=seed).double()


def _dense_jacobian(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """J of the flattened outputs w.r.t. the flattened parameters, (n·O, P)."""
    like = {k: p.detach() for k, p in model.named_parameters()}

    def outputs(w: torch.Tensor) -> torch.Tensor:
        return functional_call(model, unflatten(w, like), x).reshape(-1)

    return torch.func.jacrev(outputs)(flatten(like))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


# -- registration ----------------------------------------------------------------------------------


def test_linearization_registered_with_the_papers_settings():
    experiment = registry.get("ntk-linearization")
    assert experiment.seed_ref.startswith("seed 000")
    assert len(experiment.claims) == 4
    assert experiment.plot is not None
    paper = experiment.presets["paper"]
    assert paper.dataset == "fashion_mnist"
    assert (paper.widths[0], paper.widths[-1], paper.trials, paper.epochs) == (100, 1500, 3, 200)
    assert (paper.learning_rate, paper.momentum, paper.accuracy_threshold) == (1.0, 0.9, 0.65)
    assert (paper.scale_lr, paper.scale_penalty, paper.scale_max) == (0.01, 0.1, 10.0)
    quick = experiment.presets["quick"]
    assert quick.dataset == "digits"
    assert quick.data_dir is None
    assert max(quick.widths) <= max(paper.widths)


def test_teleport_alignment_registered_with_the_papers_settings():
    experiment = registry.get("teleport-alignment")
    assert experiment.seed_ref.startswith("seed 000")
    assert len(experiment.claims) == 4
    paper = experiment.presets["paper"]
    assert (paper.dataset, paper.width, paper.epochs) == ("fashion_mnist", 1024, 100)
    assert (paper.learning_rate, paper.momentum, paper.batch_size) == (1.0, 0.9, 128)
    assert (paper.train_samples, paper.alignment_samples) == (5000, 1000)
    assert experiment.presets["quick"].runs <= paper.runs


# -- helpers ---------------------------------------------------------------------------------------


def test_linearization_is_the_first_order_taylor_model():
    """F_lin(θ₀ + δ) = F(θ₀) + Jδ with a dense Jacobian, and its gradient is Jᵀ∂L/∂F."""
    model = _tiny()
    x = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    linear = Linearization(model)
    torch.testing.assert_close(linear(x), model(x).detach())
    jacobian = _dense_jacobian(model, x)
    delta = torch.randn(jacobian.shape[1], dtype=torch.float64)
    with torch.no_grad():
        for p, d in zip(linear.parameters(), unflatten(delta, linear.theta0).values(), strict=True):
            p.add_(d)
    expected = model(x).detach().reshape(-1) + jacobian @ delta
    outputs = linear(x)
    torch.testing.assert_close(outputs.reshape(-1), expected)
    # A ReLU net is not linear in its weights: the linearisation differs from F at θ₀ + δ.
    moved = functional_call(model, unflatten(flatten(linear.theta0) + delta, linear.theta0), x)
    assert float((moved - outputs).detach().abs().max()) > 1e-3
    cotangent = torch.randn_like(outputs)
    (outputs * cotangent).sum().backward()
    gradient = torch.cat([p.grad.reshape(-1) for p in linear.parameters()])
    torch.testing.assert_close(gradient, jacobian.T @ cotangent.reshape(-1))


def test_linearization_of_the_scaled_model_scales_the_jacobian():
    """F̃(c, θ') = F(c ⊙ θ'): the linearisation in θ' has Jacobian J diag(c); c stays fixed."""
    model = _tiny(2)
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    scaled = ps.ScaledModel(copy.deepcopy(model))
    with torch.no_grad():
        for c in scaled.scales.values():
            c.uniform_(0.5, 2.0)
    linear = Linearization(scaled)
    assert len(linear.parameters()) == 3  # the base weights only, not the scales
    delta = [torch.randn_like(p) for p in linear.parameters()]
    with torch.no_grad():
        for p, d in zip(linear.parameters(), delta, strict=True):
            p.add_(d)
    c = torch.cat([t.reshape(-1) for t in scaled.scales.values()])
    point = scaled.effective_params()
    at_theta = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in at_theta.named_parameters():
            p.copy_(point[name])
    jacobian = _dense_jacobian(at_theta, x)
    expected = at_theta(x).detach().reshape(-1) + jacobian @ (c * flatten(dict(enumerate(delta))))
    torch.testing.assert_close(linear(x).detach().reshape(-1), expected)


def _float64_split(n: int = 24, d: int = 3, seed: int = 0) -> Split:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, dtype=torch.float64, generator=g)
    y = torch.randint(0, 2, (n,), generator=g)
    return Split(x, y, x[:10], y[:10], 2)


def test_side_by_side_training_matches_hand_loops():
    """The network follows plain SGD with momentum; the linearisation follows SGD on the linear
    model written with a dense Jacobian; RMSE and accuracies are those of the two."""
    split = _float64_split()
    config = LinearizationConfig(epochs=2, batch_size=10, learning_rate=0.5, eval_every=2)
    model, copy_model = _tiny(4), _tiny(4)
    curve = train_side_by_side(
        model, split, nn.CrossEntropyLoss(), config, torch.Generator().manual_seed(7)
    )
    assert curve.steps == [0, 2, 4, 6]  # 24 samples in batches of 10: 3 steps per epoch
    assert curve.rmse[0] == 0.0

    like = {k: p.detach().clone() for k, p in copy_model.named_parameters()}
    theta0 = flatten(like)
    jac_train = _dense_jacobian(copy_model, split.x).reshape(split.x.shape[0], 2, -1)
    out0 = copy_model(split.x).detach()
    weights = theta0.clone().requires_grad_(True)
    network_opt = torch.optim.SGD(copy_model.parameters(), lr=0.5, momentum=0.9)
    linear_opt = torch.optim.SGD([weights], lr=0.5, momentum=0.9)
    generator = torch.Generator().manual_seed(7)
    for _ in range(2):
        order = torch.randperm(24, generator=generator)
        for start in range(0, 24, 10):
            b = order[start : start + 10]
            network_opt.zero_grad()
            nn.CrossEntropyLoss()(copy_model(split.x[b]), split.y[b]).backward()
            network_opt.step()
            linear_opt.zero_grad()
            linear_out = out0[b] + jac_train[b] @ (weights - theta0)
            nn.CrossEntropyLoss()(linear_out, split.y[b]).backward()
            linear_opt.step()
    for p, q in zip(model.parameters(), copy_model.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    with torch.no_grad():
        test_out = copy_model(split.x_test)
        linear_test = out0[:10] + jac_train[:10] @ (weights - theta0)
    assert curve.rmse[-1] == pytest.approx(float((test_out - linear_test).pow(2).mean().sqrt()))
    assert curve.rmse[-1] > 0
    accuracy = float((linear_test.argmax(1) == split.y_test).double().mean())
    assert curve.linear_accuracy[-1] == pytest.approx(accuracy)


def test_threshold_crossing_first_batch_and_interpolation():
    steps = [0, 10, 20, 30]
    first, fine = threshold_crossing(steps, [0.1, 0.5, 0.7, 0.9], 0.65)
    assert (first, fine) == (20, pytest.approx(17.5))
    assert threshold_crossing(steps, [0.7, 0.8, 0.9, 0.95], 0.65) == (0, 0.0)
    first, fine = threshold_crossing(steps, [0.1, 0.2, 0.3, 0.4], 0.65)  # never
    assert first == -1
    assert math.isnan(fine)


def test_power_law_exponent_recovers_the_exponent():
    widths = [64, 128, 256, 512]
    assert power_law_exponent(widths, [3.0 * n**-0.5 for n in widths]) == pytest.approx(-0.5)
    assert power_law_exponent(widths, [0.2 * n**-1.0 for n in widths]) == pytest.approx(-1.0)
    assert math.isnan(power_law_exponent([64], [1.0]))


def test_loss_functions_and_the_unknown_name():
    outputs = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.5, 0.0]])
    labels = torch.tensor([2, 0])
    # ½((1² + 0 + 1²) + (1² + 0.5² + 0)) / 2
    assert float(half_squared_error(outputs, labels)) == pytest.approx(0.5 * (2 + 1.25) / 2)
    assert isinstance(loss_function("cross_entropy"), nn.CrossEntropyLoss)
    with pytest.raises(ps.InvalidArgumentError, match="loss must be"):
        loss_function("hinge")


def test_load_split_standardises_with_training_statistics(tmp_path, monkeypatch):
    split = load_split("digits", 0, None, 200, 50)
    assert split.x.shape == (200, 64)
    assert split.x_test.shape == (50, 64)
    assert split.classes == 10
    assert float(split.x.mean(0).abs().max()) < 1e-5
    std = split.x.std(0)
    varying = std > 1e-6
    torch.testing.assert_close(std[varying], torch.ones_like(std[varying]))
    assert bool((split.x[:, ~varying] == 0).all())
    assert not bool(varying.all())  # digits has blank border pixels on these 200 images
    assert bool(torch.isfinite(split.x_test).all())
    assert float(split.x_test.abs().max()) < 100  # constant training pixels are not divided by 0
    with pytest.raises(ps.InvalidArgumentError, match="dataset must be"):
        load_split("cifar", 0, None, 10, 10)
    monkeypatch.delenv("PARAMSYM_DATA", raising=False)
    with pytest.raises(MissingDataError):
        load_split("fashion_mnist", 0, str(tmp_path), 10, 10)


def test_fitted_transform_keeps_the_function_and_moves_the_scales():
    split = load_split("digits", 0, None, 200, 40)
    config = LinearizationConfig(teleport_samples=100, scale_steps=5)
    network = ntk_mlp(64, 16, 10, seed=0)
    transformed, scales = _fit_transformed(network, split, nn.CrossEntropyLoss(), config)
    with torch.no_grad():
        torch.testing.assert_close(transformed(split.x_test), network(split.x_test))
    assert 0 < scales["max_relative_deviation"] < 0.06  # 5 Adam steps of lr 0.01
    assert scales["steps"] == 5
    effective = transformed.effective_params()
    for name, p in network.named_parameters():
        torch.testing.assert_close(effective[name], p.detach())


def test_rescaling_teleport_twin_keeps_the_function_and_prop_5_1():
    """In float64 the twin computes the same function, A and ‖∇L‖² rise in the same ratio, and
    ascent by A ends where ascent by ‖∇L‖² does."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=g)
    y = torch.randint(0, 3, (40,), generator=g)
    model = ntk_mlp(6, 8, 3, seed=1)
    assert [s.name for s in rescaling_symmetries(model)] == ["rescaling[0->2]", "rescaling[2->4]"]
    config = TeleportAlignmentConfig(width=8, teleport_steps=4, max_step_norm=0.2)
    twin, measured = teleport_twin(model, (x, y), config)
    assert twin.state_dict()["0.weight"].dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(twin(x), model(x), rtol=1e-5, atol=1e-5)
    assert measured["alignment_after"] > measured["alignment_before"]
    ratio_a = measured["alignment_after"] / measured["alignment_before"]
    ratio_g = measured["grad_sq_after"] / measured["grad_sq_before"]
    assert ratio_a == pytest.approx(ratio_g, rel=1e-10)
    assert measured["ratio_deviation"] < 1e-10
    assert measured["endpoint_distance"] < 1e-10
    assert measured["output_change"] < 1e-12
    assert measured["clipped"] == 1.0
    assert 1 < measured["distortion"] <= distortion_bound(4, 0.2)
    # The alignment really is loss_alignment at the twin's point.
    expected = ps.loss_alignment(twin.double(), nn.CrossEntropyLoss(), (x.double(), y))
    assert measured["alignment_after"] == pytest.approx(expected, rel=1e-5)


def test_group_distortion_of_a_known_rescaling():
    model = ntk_mlp(3, 4, 2, seed=0).double()
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    first, second = rescaling_symmetries(model)
    c1 = torch.tensor([1.0, 2.0, 0.5, 1.0], dtype=torch.float64)
    c2 = torch.tensor([1.0, 1.0, 3.0, 1.0], dtype=torch.float64)
    after = second.act(first.act(before, c1), c2)
    # entries of G: c1 (first layer), c2_i / c1_j (middle), 1 / c2 (last): max 3 / 0.5 = 6
    assert group_distortion(before, after) == pytest.approx(6.0)
    assert group_distortion(before, before) == pytest.approx(1.0)
    u = torch.log(torch.cat([c1, c2]))
    assert group_distortion(before, after) <= math.exp(math.sqrt(2) * float(u.norm())) + 1e-12


def test_paired_statistics_by_hand():
    untouched = np.array([2.0, 2.0, 3.0, 1.0, np.nan])
    teleported = np.array([1.5, 2.0, 2.0, 1.5, 1.0])
    stats = _paired_statistics(untouched, teleported)
    assert stats["pairs"] == 4
    assert stats["fraction_faster"] == pytest.approx(0.5)
    assert stats["fraction_ties"] == pytest.approx(0.25)
    assert stats["fraction_slower"] == pytest.approx(0.25)
    assert stats["mean_difference"] == pytest.approx((-0.5 + 0 - 1 + 0.5) / 4)
    assert 0 < stats["wilcoxon_p"] < 1
    assert math.isnan(_paired_statistics(untouched, untouched)["wilcoxon_p"])


# -- reduced runs ----------------------------------------------------------------------------------


def test_linearization_reduced_run(tmp_path):
    experiment = registry.get("ntk-linearization")
    config = dataclasses.replace(
        experiment.presets["quick"],
        widths=(16, 48),
        trials=2,
        epochs=1,
        train_samples=256,
        test_samples=120,
        teleport_samples=100,
        scale_steps=10,
        batch_size=64,
        accuracy_threshold=0.3,
    )
    run = tmp_path / "lin"
    outcome = run_experiment(experiment, config, run, workers=1)
    for name in (
        "metrics.json",
        "report.md",
        "accuracy.csv",
        "rmse.csv",
        "curves.csv",
        "scales.csv",
        "rmse_vs_width.png",
        "accuracy.png",
    ):
        assert (run / name).exists(), name
    data = json.loads((run / "metrics.json").read_text())
    metrics = data["metrics"]
    assert metrics["widths"] == [16, 48]
    assert len(metrics["alpha_standard_per_trial"]) == 2
    assert metrics["scale_max_deviation"] < 0.2
    for variant in ("standard", "transformed"):
        assert all(v > 0 for v in metrics[f"rmse_{variant}"])
        assert metrics[f"evaluation_batch_{variant}"] <= 4  # 256 samples, batch 64, 1 epoch
    rows = _rows(run / "curves.csv")
    assert len(rows) == 2 * 2 * 2 * 5  # variants × widths × trials × evaluations (0..4)
    assert all(float(r["rmse"]) == 0.0 for r in rows if r["step"] == "0")
    rmse_rows = _rows(run / "rmse.csv")
    assert len(rmse_rows) == 2 * 2 * 2
    assert {o.claim for o in outcome.outcomes} == {c.text for c in experiment.claims}


def test_teleport_alignment_reduced_run(tmp_path):
    experiment = registry.get("teleport-alignment")
    config = dataclasses.replace(
        experiment.presets["quick"],
        runs=4,
        width=16,
        train_samples=300,
        alignment_samples=100,
        batch_size=32,
        epochs=5,
        teleport_steps=4,
    )
    run = tmp_path / "tel"
    outcome = run_experiment(experiment, config, run, workers=1)
    for name in ("metrics.json", "report.md", "runs.csv", "teleport_speed.png", "prop51_ratio.png"):
        assert (run / name).exists(), name
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert metrics["runs"] == 4
    assert metrics["max_ratio_deviation"] < 1e-10
    assert metrics["max_endpoint_distance"] < 1e-10
    assert metrics["alignment_gain_min"] > 1
    assert metrics["max_distortion"] <= metrics["distortion_bound"]
    rows = _rows(run / "runs.csv")
    assert len(rows) == 4
    assert all(float(r["alignment_after"]) > float(r["alignment_before"]) for r in rows)
    assert all(math.isfinite(float(r["halving_untouched"])) for r in rows)
    assert metrics["pairs"] == 4
    by_claim = {o.claim: o for o in outcome.outcomes}
    assert by_claim[experiment.claims[0].text].holds
    assert by_claim[experiment.claims[1].text].holds


@pytest.mark.parametrize("name", ["ntk-linearization", "teleport-alignment"])
def test_paper_presets_need_the_fashion_mnist_files(name, tmp_path, monkeypatch):
    monkeypatch.delenv("PARAMSYM_DATA", raising=False)
    experiment = registry.get(name)
    config = dataclasses.replace(experiment.presets["paper"], data_dir=str(tmp_path))
    with pytest.raises(MissingDataError, match="train-images-idx3-ubyte"):
        experiment.run(config, SilentProgress())
