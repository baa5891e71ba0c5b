"""The dissertation ch. 3 experiments (minimum-components, lmc-barrier, symmetry-curves,
permutation-alignment) at reduced sizes, and oracles for their helpers."""

from __future__ import annotations

import math

import pytest
import torch

import paramsym as ps
from helpers import csv_rows, run_quick
from paramsym.connectivity import (
    WeightMatchingConfig,
    matching_objective,
    permutation_spec,
    rescaling_barrier,
    weight_matching,
)
from paramsym.errors import InvalidArgumentError, MissingDataError
from paramsym.experiments import registry
from paramsym.experiments.connectivity.alignment import AlignmentConfig, classification_data
from paramsym.experiments.connectivity.barrier import _min_over_permutations
from paramsym.experiments.connectivity.common import (
    error_rate,
    gradient_descent,
    log_slope,
    sum_of_squares,
)
from paramsym.experiments.connectivity.curves import (
    _pinv_symmetry,
    distance_to_orbit,
    per_sample_squares,
    stable_learning_rate,
)
from paramsym.experiments.registry import SilentProgress

F64 = torch.float64
NAMES = ("minimum-components", "lmc-barrier", "symmetry-curves", "permutation-alignment")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- registration -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_presets_claims_and_a_plot(name):
    experiment = registry.get(name)
    assert experiment.seed_ref.startswith("seed 001")
    assert set(experiment.presets) >= {"quick", "paper"}
    assert experiment.claims
    assert all(c.source.startswith("seed 001") for c in experiment.claims)
    assert experiment.plot is not None


def test_paper_presets_use_the_papers_sizes():
    curves = registry.get("symmetry-curves").presets["paper"]
    assert (curves.nets, curves.size_low, curves.size_high, curves.curves) == (100, 2, 100, 5)
    assert (curves.inputs, curves.samples, curves.hidden, curves.outputs) == (16, 8, 32, 64)
    assert curves.scales[1] > curves.scales[0]  # Fig 3.3c: larger-magnitude g
    alignment = registry.get("permutation-alignment").presets["paper"]
    assert (alignment.dataset, alignment.hidden) == ("mnist", (512, 512, 512))
    assert alignment.data_dir is None
    assert registry.get("permutation-alignment").presets["quick"].dataset == "digits"
    barrier = registry.get("lmc-barrier").presets["paper"]
    assert barrier.activation == "leaky_relu"
    assert {2.0, 10.0, 100.0} <= set(barrier.scales)  # the notes' verified scales
    assert barrier.alphas % 2 == 1
    components = registry.get("minimum-components").presets["paper"]
    assert components.epsilons == (0.0, 1.0)  # Fig 3.1: X = Y = 1, ε = 1
    assert max(components.depths) >= 4


# -- reduced runs -------------------------------------------------------------------------------


def test_minimum_components_reduced(tmp_path):
    overrides = {"depths": "2,3", "widths": "2", "samples_per_component": "4", "resolution": "121"}
    directory, metrics, claims = run_quick(tmp_path, "minimum-components", overrides)
    for name in (
        "residual.csv",
        "square_linear.csv",
        "minimum_components.png",
        "linear_components.png",
    ):
        assert (directory / name).exists(), name
    assert metrics["residual_components"] == [4, 3]
    assert metrics["labels_found"] == metrics["labels_expected"] == [2, 4]
    assert metrics["max_path_loss"] < 1e-20
    assert metrics["aligned"] == metrics["alignment_cases"] == 6
    assert all(c["holds"] for c in claims.values())
    rows = csv_rows(directory / "residual.csv")
    on_minimum = [
        abs(float(r["w3"]) * (float(r["w1"]) * float(r["w2"]) + float(r["epsilon"])) - 1.0)
        for r in rows
    ]
    assert max(on_minimum) < 1e-12
    assert {r["component"] for r in rows if float(r["epsilon"]) == 0.0} == {"0", "1", "2", "3"}


def test_lmc_barrier_reduced(tmp_path):
    overrides = {"scales": "2,10,100", "alphas": "11", "widths": "3,5,4,2", "samples": "6"}
    directory, metrics, claims = run_quick(tmp_path, "lmc-barrier", overrides)
    assert (directory / "lmc_barrier.png").exists()
    assert metrics["max_relative_deviation"] < 1e-10
    # Fig 3.2's scalar net (X = Y = w1 = w2 = 1): the barrier at α = ½ is the closed form
    expected = [rescaling_barrier(0.5, m, 1.0, 1.0) for m in (2.0, 10.0, 100.0)]
    assert metrics["scalar_barriers"] == pytest.approx(expected, rel=1e-10)
    assert metrics["permutations_searched"] == 24
    # the best permutation can only lower the midpoint loss
    for best, chord in zip(metrics["min_over_permutations"], metrics["deep_barriers"], strict=True):
        assert best <= chord * (1 + 1e-12)
    chord_rows = csv_rows(directory / "chord.csv")
    assert len(chord_rows) == 2 * 3 * 11
    assert all(c["holds"] for c in claims.values()), claims


def test_lmc_barrier_needs_an_odd_grid(tmp_path):
    experiment = registry.get("lmc-barrier")
    with pytest.raises(InvalidArgumentError, match="odd"):
        experiment.run(experiment.config("quick", {"alphas": "10"}), SilentProgress())


def test_symmetry_curves_reduced(tmp_path):
    overrides = {
        "nets": "6",
        "size_high": "12",
        "train_steps": "5",
        "curve_train_steps": "200",
        "curves": "2",
        "hidden": "16",
        "outputs": "8",
        "points": "5",
        "geometry_points": "5",
        "orbit_probes": "1",
        "orbit_iterations": "5",
    }
    directory, metrics, claims = run_quick(tmp_path, "symmetry-curves", overrides)
    for name in ("output_change.csv", "curve_b.csv", "curve_c.csv", "chord_bound.csv"):
        assert (directory / name).exists(), name
    assert (directory / "symmetry_curves.png").exists()
    assert metrics["nets_above_diagonal"] == metrics["nets"] == 6
    assert metrics["max_exact_change_ratio"] < 1e-6  # k ≤ h: the map is exact
    # k = 8 ≤ h = 16: the pinv map is exact on X, so the loss is constant along γ
    assert metrics["b_gamma_max_change"] < 1e-10
    assert metrics["c_gamma_max_change"] < 1e-10
    assert metrics["c_chord_barrier"] > metrics["b_chord_barrier"] > 0
    rows = csv_rows(directory / "chord_bound.csv")
    assert len(rows) == 4
    for row in rows:  # the orbit distance is optimised from the curve point: never larger
        assert float(row["orbit_distance"]) <= float(row["curve_distance"]) * (1 + 1e-9)
    assert claims["the pseudo-inverse map changes the layer output by at most its norm"]["holds"]


def test_permutation_alignment_reduced(tmp_path):
    overrides = {"hidden": "48", "pairs": "1", "epochs": "3", "alphas": "5"}
    directory, metrics, claims = run_quick(tmp_path, "permutation-alignment", overrides)
    assert (directory / "permutation_alignment.png").exists()
    assert len(csv_rows(directory / "chords.csv")) == 5
    assert metrics["widths"] == [64, 48, 10]
    assert metrics["max_function_change"] < 1e-4
    assert metrics["distance_after"][0] < metrics["distance_before"][0]
    assert metrics["loss_barrier_matched"][0] < metrics["loss_barrier_naive"][0]
    assert claims["the permuted network computes the same function"]["holds"]


def test_permutation_alignment_data_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("PARAMSYM_DATA", raising=False)
    with pytest.raises(MissingDataError):
        classification_data(AlignmentConfig(dataset="mnist", data_dir=str(tmp_path)))
    with pytest.raises(InvalidArgumentError, match="dataset must be"):
        classification_data(AlignmentConfig(dataset="cifar"))


# -- helper oracles -----------------------------------------------------------------------------


def test_gradient_descent_is_plain_full_batch_gd():
    model = ps.mlp([3, 4, 2], "sigmoid", bias=False, dtype=F64, seed=0)
    copy = ps.mlp([3, 4, 2], "sigmoid", bias=False, dtype=F64, seed=0)
    x = torch.randn(5, 3, generator=_gen(1), dtype=F64)
    y = torch.randn(5, 2, generator=_gen(2), dtype=F64)
    final = gradient_descent(model, (x, y), per_sample_squares, 0.3, 7)
    for _ in range(7):  # hand loop: θ ← θ − η ∇L(θ)
        grads = torch.autograd.grad(per_sample_squares(copy(x), y), list(copy.parameters()))
        with torch.no_grad():
            for p, g in zip(copy.parameters(), grads, strict=True):
                p -= 0.3 * g
    for p, q in zip(model.parameters(), copy.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-13, atol=1e-15)
    assert final == pytest.approx(float(((copy(x) - y) ** 2).sum().detach() / 5), rel=1e-12)


def test_stable_learning_rate_is_the_inverse_top_hessian_eigenvalue_in_u():
    model = ps.mlp([3, 4, 2], "sigmoid", bias=False, dtype=F64, seed=3)
    x = torch.randn(6, 3, generator=_gen(4), dtype=F64)
    y = torch.randn(6, 2, generator=_gen(5), dtype=F64)
    u = model[2].weight.detach()

    def loss_in_u(weight: torch.Tensor) -> torch.Tensor:
        params = {**ps.params_of(model), "2.weight": weight}
        return per_sample_squares(ps.functional_call(model, params, x), y)

    hessian = torch.autograd.functional.hessian(loss_in_u, u).reshape(u.numel(), u.numel())
    top = float(torch.linalg.eigvalsh(hessian).max())
    assert stable_learning_rate(model, x, 0.5) == pytest.approx(0.5 / top, rel=1e-10)


def test_distance_to_orbit_finds_points_on_the_orbit():
    model = ps.mlp([4, 6, 3], "leaky_relu", bias=False, dtype=F64, seed=6)
    x = torch.randn(3, 4, generator=_gen(7), dtype=F64)  # k = 3 ≤ h = 6: exact action
    symmetry = _pinv_symmetry(model)
    w = ps.params_of(model)
    xi = 0.3 * torch.randn(symmetry.dim, generator=_gen(8), dtype=F64)
    on_orbit = symmetry.act(w, symmetry.exp(xi), x)
    assert distance_to_orbit(symmetry, w, x, on_orbit, xi, 3) < 1e-12
    start = 0.5 * xi
    initial = math.sqrt(
        float(
            (ps.flatten(symmetry.act(w, symmetry.exp(start), x)) - ps.flatten(on_orbit))
            .pow(2)
            .sum()
        )
    )
    found = distance_to_orbit(symmetry, w, x, on_orbit, start, 30)
    assert found < 0.1 * initial  # L-BFGS walks back along the orbit
    # off the orbit by δ: the distance is positive (δ has a normal part) and at most ‖δ‖
    delta = {k: 1e-2 * torch.randn(v.shape, generator=_gen(11), dtype=F64) for k, v in w.items()}
    off = {k: on_orbit[k] + delta[k] for k in w}
    distance = distance_to_orbit(symmetry, w, x, off, xi, 10)
    assert 0 < distance <= float(ps.flatten(delta).norm()) * (1 + 1e-9)


def test_min_over_permutations_brute_force():
    model = ps.mlp([3, 5, 4, 2], "leaky_relu", dtype=F64, seed=9)
    x = torch.randn(7, 3, generator=_gen(10), dtype=F64)
    with torch.no_grad():
        y = model(x)
    assert _min_over_permutations(model, (x, y), 1.0) < 1e-25  # identity: the midpoint is W
    bias = ps.params_of(model)["4.bias"]
    norm = float(((y - bias) ** 2).sum())
    best = _min_over_permutations(model, (x, y), 50.0)
    assert 0 < best <= rescaling_barrier(0.5, 50.0, 1.0, norm) * (1 + 1e-12)


def test_weight_matching_restarts_keep_the_largest_objective():
    a = ps.mlp([6, 12, 12, 3], "relu", dtype=F64, seed=12)
    b = ps.mlp([6, 12, 12, 3], "relu", dtype=F64, seed=13)
    best = weight_matching(a, b, config=WeightMatchingConfig(restarts=3))
    objectives = best.restart_objectives
    singles = [weight_matching(a, b, config=WeightMatchingConfig(seed=s)) for s in range(3)]
    assert objectives == [r.objective_after for r in singles]
    assert best.objective_after == max(objectives)
    assert best.objective_after == pytest.approx(
        matching_objective(ps.params_of(a), best.params, permutation_spec(a)), rel=1e-12
    )
    with pytest.raises(InvalidArgumentError, match="restarts"):
        WeightMatchingConfig(restarts=0)


def test_small_metrics():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]])
    assert float(error_rate(logits, torch.tensor([0, 0, 0]))) == pytest.approx(1 / 3)
    out, target = torch.ones(2, 3), torch.zeros(2, 3)
    assert float(sum_of_squares(out, target)) == 6.0
    assert float(per_sample_squares(out, target)) == 3.0
    assert log_slope([1.0, 10.0, 100.0], [5.0, 1.0, 100.0]) == pytest.approx(2.0)
