"""The chapter-2 experiments of seed 001 (q-distribution, q-convergence, q-sharpness, q-drift,
group-ensemble): registration, oracles of their helpers, and reduced runs end to end."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

import paramsym as ps
from paramsym.conserved import (
    ConservedTracker,
    ElementwiseQ,
    RadialReparameterization,
    flat_minimum,
    spectral_init,
    xavier_q_statistics,
)
from paramsym.errors import MissingDataError
from paramsym.experiments import registry
from paramsym.experiments.conserved.gradient_descent import (
    batched_gradient_descent,
    elementwise_q,
    init_scales,
    spearman,
    steps_to_threshold,
    sum_squares,
)
from paramsym.experiments.conserved.q_convergence import QConvergenceConfig, radial_gradient_descent
from paramsym.experiments.conserved.q_distribution import QDistributionConfig
from paramsym.experiments.conserved.q_drift import QDriftConfig, _late_share
from paramsym.experiments.conserved.q_sharpness import (
    QSharpnessConfig,
    scalar_gradient_descent,
    scalar_start,
)
from paramsym.experiments.group_ensemble import (
    GroupEnsembleConfig,
    _image_data,
    ensemble_cnn,
    train_classifier,
)
from paramsym.sweep import run_experiment

NAMES = ("q-distribution", "q-convergence", "q-sharpness", "q-drift", "group-ensemble")
F64 = torch.float64


def _randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=F64)


def _run(name: str, config: object, directory: Path) -> tuple[dict, dict[str, dict]]:
    """Run through the sweep; return (metrics, claims by text) and check the report files."""
    experiment = registry.get(name)
    run_experiment(experiment, config, directory, workers=1)
    for file in ("config.json", "metrics.json", "report.md"):
        assert (directory / file).exists(), file
    data = json.loads((directory / "metrics.json").read_text())
    assert len(data["claims"]) == len(experiment.claims)
    return data["metrics"], {c["claim"]: c for c in data["claims"]}


def _files(directory: Path, *names: str) -> None:
    for name in names:
        path = directory / name
        assert path.exists(), name
        assert path.stat().st_size > 0, name


# -- registration -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_presets_and_claims(name):
    experiment = registry.get(name)
    assert experiment.seed_ref.startswith("seed 001")
    assert experiment.claims
    assert all(c.source.startswith("seed 001") for c in experiment.claims)
    assert set(experiment.presets) >= {"quick", "paper"}


def test_paper_presets_have_the_papers_sizes():
    dist = registry.get("q-distribution").presets["paper"]
    assert dist.samples == 1000
    assert dist.nonlinear_size == 100
    conv = registry.get("q-convergence").presets["paper"]
    assert (conv.outputs, conv.hidden, conv.inputs) == (5, 50, 10)  # Y 5×10, U 5×50, V 10×50
    assert conv.learning_rate == 1e-3
    assert conv.radial_learning_rate == 1e-5
    assert (conv.radial_outputs, conv.radial_inputs, len(conv.lambdas)) == (5, 10, 4)
    sharp = registry.get("q-sharpness").presets["paper"]
    assert (sharp.outputs, sharp.hidden, sharp.inputs) == (10, 50, 5)  # 750 parameters
    assert sharp.threshold == 1e-3
    drift = registry.get("q-drift").presets["paper"]
    assert drift.learning_rates == (0.1, 0.01, 0.001)
    assert set(drift.activations) == {"identity", "relu", "sigmoid", "tanh"}
    ensemble = registry.get("group-ensemble").presets["paper"]
    assert ensemble.dataset == "cifar10"
    assert ensemble.hidden == 32


def test_paper_group_ensemble_without_files_names_what_it_needs(tmp_path):
    config = registry.get("group-ensemble").config("paper", {"data_dir": str(tmp_path)})
    with pytest.raises(MissingDataError, match="data_batch_1"):
        _image_data(config)


# -- oracles --------------------------------------------------------------------------------------


def test_batched_gradient_descent_is_sgd_on_the_model_run_by_run():
    generator = torch.Generator().manual_seed(0)
    n, h, m = 3, 4, 2
    w1, w2, y = _randn(generator, 2, h, n), _randn(generator, 2, m, h), _randn(generator, n, m)
    lrs = torch.tensor([0.05, 0.01], dtype=F64)
    result = batched_gradient_descent("tanh", w1, w2, y, lrs, 7, keep_every=3)
    assert result.checkpoints == [0, 3, 6, 7]
    for b in range(2):
        model = ps.mlp([n, h, m], "tanh", bias=False, dtype=F64)
        with torch.no_grad():
            model[0].weight.copy_(w1[b])
            model[2].weight.copy_(w2[b])
        optimizer = torch.optim.SGD(model.parameters(), lr=float(lrs[b]))
        x = torch.eye(n, dtype=F64)
        for step in range(8):
            loss = sum_squares(model(x), y)
            assert float(loss.detach()) == pytest.approx(float(result.losses[b, step]), rel=1e-12)
            if step == 7:
                break
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        assert torch.allclose(model[0].weight, result.incoming[-1][b], atol=1e-13)
        assert torch.allclose(model[2].weight, result.outgoing[-1][b], atol=1e-13)


def test_steps_to_threshold_against_a_hand_loop():
    losses = torch.tensor([[5.0, 3.0, 0.9, 0.5], [5.0, 4.0, 3.0, 2.0], [0.1, 2.0, 0.1, 0.1]])
    expected = []
    for row in losses.tolist():
        found = math.nan
        for step, value in enumerate(row):
            if value <= 1.0:
                found = float(step)
                break
        expected.append(found)
    got = steps_to_threshold(losses, 1.0)
    assert got[0] == expected[0] == 2.0
    assert got[2] == expected[2] == 0.0
    assert math.isnan(got[1])
    assert math.isnan(expected[1])


def test_drift_pipeline_matches_the_library_tracker():
    """q-drift's ΔQ̃ (batched GD, Eq. 2.17 Q over its initial magnitude) equals
    ConservedTracker.relative_trace_change on a hand SGD loop."""
    generator = torch.Generator().manual_seed(1)
    n, h, m, lr = 3, 5, 2, 0.05
    w1, w2, y = _randn(generator, 1, h, n), _randn(generator, 1, m, h), _randn(generator, n, m)
    result = batched_gradient_descent("sigmoid", w1, w2, y, lr, 20, keep_every=5)
    q = torch.stack(
        [
            elementwise_q("sigmoid", a, b)[0]
            for a, b in zip(result.incoming, result.outgoing, strict=True)
        ]
    )
    _, size = elementwise_q("sigmoid", result.incoming[0], result.outgoing[0])
    ours = ((q - q[0]) / size)[:, 0]

    model = ps.mlp([n, h, m], "sigmoid", bias=False, dtype=F64)
    with torch.no_grad():
        model[0].weight.copy_(w1[0])
        model[2].weight.copy_(w2[0])
    x = torch.eye(n, dtype=F64)
    tracker = ConservedTracker(
        model, ElementwiseQ(model), every=5, loss_fn=sum_squares, batch=(x, y)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(21):
        tracker(step)
        optimizer.zero_grad()
        sum_squares(model(x), y).backward()
        optimizer.step()
    reference = torch.tensor(tracker.history["relative_trace_change"], dtype=F64)
    assert result.checkpoints == tracker.history["step"]
    assert torch.allclose(ours, reference, rtol=1e-9, atol=1e-15)
    assert float(ours.abs().max()) > 0  # GD does move Q


def test_late_share():
    change = torch.tensor([0.0, 0.5, 0.9, 1.0])
    assert _late_share([0, 10, 20, 30], change, 15.0) == pytest.approx(0.1)
    assert math.isnan(_late_share([0, 10, 20, 30], change, math.nan))


def test_init_scales_hit_the_expected_q():
    for scheme in ("product", "outgoing"):
        su, sv = init_scales(5, 50, 10, 3.0, "tanh", scheme)
        mean = xavier_q_statistics(5, 50, 10, "tanh", u_std=su, v_std=sv).mean
        assert mean == pytest.approx(3.0, abs=1e-8)
    assert init_scales(5, 50, 10, 3.0, "identity", "outgoing")[1] == pytest.approx(10**-0.5)
    with pytest.raises(ps.InvalidArgumentError, match="below"):
        init_scales(5, 50, 10, -100.0, "identity", "outgoing")


def test_radial_gradient_descent_is_gd_on_the_library_model():
    generator = torch.Generator().manual_seed(2)
    y = _randn(generator, 3, 4)
    model = RadialReparameterization(3, 3, 4, dtype=F64, generator=generator)
    spectral_init(model, y, 0.7, 0.2)
    u0, v0 = model.U.detach().clone(), model.V.detach().clone()
    steps, products, losses = radial_gradient_descent(u0[None], v0[None], y, 0.01, 1, 1)
    assert steps == [0, 1]
    assert torch.allclose(products[0][0], model.matrix(), atol=1e-14)
    u, v = u0.clone().requires_grad_(), v0.clone().requires_grad_()
    loss = 0.5 * ((model.matrix({"U": u, "V": v}) - y) ** 2).sum()
    assert float(losses[0, 0]) == pytest.approx(float(loss.detach()), rel=1e-12)
    gu, gv = torch.autograd.grad(loss, (u, v))
    after = model.matrix({"U": u0 - 0.01 * gu, "V": v0 - 0.01 * gv})
    assert torch.allclose(products[1][0], after, atol=1e-14)
    assert not torch.allclose(products[1][0], products[0][0])


def test_scalar_example_start_and_descent():
    for q in (-2.0, 0.0, 1.5):
        u, v = scalar_start(q)
        assert u * u - v * v == pytest.approx(q, abs=1e-12)
        assert u * v > 0
    u0, v0 = torch.tensor([1.3, 0.2], dtype=F64), torch.tensor([0.1, 0.4], dtype=F64)
    u, v = scalar_gradient_descent(u0, v0, 0.1, 3)
    for b in range(2):  # oracle: autograd GD on L = ½(1 − UV)²
        uu, vv = u0[b].clone().requires_grad_(), v0[b].clone().requires_grad_()
        for _ in range(3):
            gu, gv = torch.autograd.grad(0.5 * (1 - uu * vv) ** 2, (uu, vv))
            uu, vv = (
                (uu - 0.1 * gu).detach().requires_grad_(),
                (vv - 0.1 * gv).detach().requires_grad_(),
            )
        assert float(u[b]) == pytest.approx(float(uu.detach()), rel=1e-13)
        assert float(v[b]) == pytest.approx(float(vv.detach()), rel=1e-13)


def test_linear_hessian_at_a_minimum_is_the_sum_of_the_gram_spectra():
    """[derived] At a zero-loss point of ‖Y − W₁ᵀW₂ᵀ‖², the nonzero Hessian eigenvalues are
    2(a_i + b_j), a = eig(W₁ᵀW₁) (n×n), b = eig(W₂W₂ᵀ) (m×m): what Fig 2.7's centre measures."""
    generator = torch.Generator().manual_seed(3)
    n, h, m = 2, 5, 3
    w1, w2 = _randn(generator, h, n), _randn(generator, m, h)
    y = w1.T @ w2.T
    model = ps.mlp([n, h, m], "identity", bias=False, dtype=F64)
    flat = flat_minimum(
        model,
        sum_squares,
        (torch.eye(n, dtype=F64), y),
        params={"0.weight": w1, "2.weight": w2},
        threshold=1e-9,
    )
    a, b = torch.linalg.eigvalsh(w1.T @ w1), torch.linalg.eigvalsh(w2 @ w2.T)
    predicted = torch.sort(2 * (a[:, None] + b[None, :]).reshape(-1)).values
    nonzero = torch.tensor(sorted(e for e in flat.eigenvalues if abs(e) > 1e-9), dtype=F64)
    assert torch.allclose(nonzero, predicted, rtol=1e-9)
    assert flat.near_zero == flat.orbit_dimension == h * h - (h - n) * (h - m)


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2], [1, 2]))


def test_classifier_trains_and_has_the_transformed_hidden_layer():
    config = dataclasses.replace(GroupEnsembleConfig(), epochs=2, channels=4)
    x, y, _, _ = _image_data(config)
    model = ensemble_cnn(1, 8, 4, 32, 10, 0.01)
    assert model(x[:5]).shape == (5, 10)
    history = train_classifier(model, x[:300], y[:300], config, torch.Generator().manual_seed(0))
    assert history[-1] < history[0]
    ensemble = ps.ensembles.group_ensemble(model, x[:50], epsilon=0.1, members=2, generator=0)
    assert ensemble.symmetry.width == 32


# -- reduced runs ---------------------------------------------------------------------------------


def test_q_distribution_small_run(tmp_path):
    config = QDistributionConfig(samples=200, shapes=((6, 10, 4), (10, 4, 6)), nonlinear_size=12)
    metrics, _claims = _run("q-distribution", config, tmp_path)
    _files(tmp_path, "summary.csv", "draws.csv", "q_linear.png", "q_nonlinear.png")
    assert metrics["linear_predicted_means"] == [-2.0, 3.0]  # (m − h)/2
    assert metrics["linear_paper_means"] == [-4, 6]
    for mean, expected in zip(metrics["linear_means"], [-2.0, 3.0], strict=True):
        assert abs(mean - expected) < 0.5
    assert metrics["std_vs_closed_form_max_ratio_error"] < 0.2
    assert set(metrics["nonlinear_relative_spread"]) == {"identity", "relu", "sigmoid", "tanh"}


def test_q_convergence_small_run(tmp_path):
    config = QConvergenceConfig(
        activations=("identity", "tanh"),
        q_targets=(-20.0, 0.0, 20.0),
        steps=400,
        lambdas=(0.5, 1.0),
        radial_steps=2000,
    )
    metrics, claims = _run("q-convergence", config, tmp_path)
    _files(
        tmp_path,
        "curves.csv",
        "runs.csv",
        "radial.csv",
        "convergence_elementwise.png",
        "convergence_radial.png",
    )
    assert set(metrics["spearman_q_steps"]) == {"identity", "tanh"}
    times = metrics["radial_convergence_times"]
    assert times[0] < times[1]  # λ = 0.5 converges before λ = 1
    assert times[1] == pytest.approx(2 * times[0], rel=0.02)  # equal λ_i: time scales with λ
    assert metrics["radial_worst_bound_ratio"] <= 1.0 + 1e-3
    assert claims["radial net with spectral init: smaller λ = ū² + v̄² converges faster"]["holds"]


def test_q_sharpness_small_run(tmp_path):
    config = QSharpnessConfig(
        scalar_qs=(-1.0, 0.0, 2.0),
        outputs=3,
        hidden=6,
        inputs=2,
        panels=(("identity", "product"), ("identity", "outgoing"), ("tanh", "product")),
        q_targets=(-4.0, 0.0, 4.0),
        outgoing_q_targets=(-1.0, 1.0, 3.0),
        learning_rate=0.02,
        steps=4000,
    )
    metrics, claims = _run("q-sharpness", config, tmp_path)
    _files(tmp_path, "scalar.csv", "spectrum.csv", "runs.csv", "sharpness_1d.png", "spectra.png")
    assert metrics["scalar_flattest_q"] == 0.0
    assert metrics["scalar_error_vs_sqrt"] < 1e-6
    assert metrics["scalar_error_vs_paper"] == pytest.approx(0.5, abs=1e-6)
    assert metrics["linear_min_near_zero"] == metrics["linear_orbit_dimension"] == 36 - 4 * 3
    held = [c["holds"] for text, c in claims.items() if "1-D" in text]
    assert held == [True, True]


def test_q_drift_small_run(tmp_path):
    config = QDriftConfig(activations=("identity", "tanh"), steps=200, every=20)
    metrics, _ = _run("q-drift", config, tmp_path)
    _files(tmp_path, "drift.csv", "drift.png")
    for activation in ("identity", "tanh"):
        changes = metrics["final_abs_relative_change"][activation]
        assert len(changes) == 3
        assert all(c > 0 for c in changes)
        assert changes[0] > changes[1] > changes[2]  # ΔQ̃ grows with the learning rate


def test_q_drift_rejects_an_unknown_loss():
    run = registry.get("q-drift").run
    with pytest.raises(ps.InvalidArgumentError, match="loss"):
        run(QDriftConfig(loss="l1"), registry.SilentProgress())


def test_group_ensemble_small_run(tmp_path):
    config = GroupEnsembleConfig(
        channels=4,
        epochs=8,
        learning_rate=3e-3,
        epsilons=(0.01, 1.0),
        members=3,
        attack_samples=100,
        fgsm_strengths=(0.0, 0.1),
        pgd_strengths=(0.0, 0.1),
        pgd_steps=2,
    )
    metrics, _claims = _run("group-ensemble", config, tmp_path)
    _files(tmp_path, "accuracy_change.csv", "attacks.csv", "accuracy_change.png", "attacks.png")
    assert metrics["test_accuracy"] > 0.5
    assert set(metrics["mean_change_large_eps"]) == {
        "group",
        "g_inverse",
        "random_diagonal",
        "shuffle",
        "perm_interp",
    }
    assert metrics["group_max_abs_change_small_eps"] <= 0.05
    assert len(metrics["fgsm_accuracy"]["original"]) == 1  # strengths > 0 only
