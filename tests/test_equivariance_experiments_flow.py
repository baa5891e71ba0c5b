"""Seed 003 experiments ``noether-flow`` and ``symmetry-null-space``: registration, presets, and
reduced runs whose exact claims must hold (identities, zero counts) and whose statistical claim
must evaluate, against independent dense oracles where cheap."""

from __future__ import annotations

import dataclasses
import itertools
import math

import matplotlib.pyplot as plt
import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.core.tables import empty_table
from paramsym.equivariance.noether import QuadraticCharge
from paramsym.equivariance.stationarity import stationary_null_space
from paramsym.experiments import registry
from paramsym.experiments.equivariance import noether_flow, null_space
from paramsym.experiments.equivariance.noether_flow import NoetherFlowConfig, run_noether_flow
from paramsym.experiments.equivariance.null_space import NullSpaceConfig, run_null_space
from paramsym.experiments.registry import SilentProgress

NAMES = ("noether-flow", "symmetry-null-space")
F64 = torch.float64


@pytest.fixture(scope="module")
def flow_result() -> registry.Result:
    config = NoetherFlowConfig(
        widths=(3, 4, 1),
        samples=8,
        flow_time=2.0,
        flow_dt=0.1,
        gd_lrs=(0.1, 0.2),
        batch_sizes=(1, 3),
        sgd_steps=300,
        trajectory_steps=20,
    )
    return run_noether_flow(config, SilentProgress())


@pytest.fixture(scope="module")
def null_result() -> registry.Result:
    config = NullSpaceConfig(
        inputs=4,
        outputs=3,
        rank=1,
        samples=6,
        hidden=(1, 2),
        scales=(1e-7, 1e-5, 1e-3),
        tanh_widths=(2, 3, 1),
        distances=(1e-7, 1e-5, 1e-3, 1e-1),
    )
    return run_null_space(config, SilentProgress())


def _outcomes(name: str, result: registry.Result) -> dict[str, registry.ClaimOutcome]:
    return {o.claim: o for o in registry.get(name).evaluate(result)}


# -- registration and presets ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_presets_and_claims(name):
    experiment = registry.get(name)
    assert experiment.seed_ref.startswith("seed 003, ")
    assert registry.paper_of(experiment) == "seed 003"
    assert len(experiment.claims) == 5
    assert all(c.source.startswith(("seed 003", "note 003")) for c in experiment.claims)
    assert set(experiment.presets) == {"quick", "paper"}
    assert dataclasses.is_dataclass(experiment.config_type)
    assert experiment.presets["quick"].seed == 0
    assert experiment.plot is not None


def test_paper_presets_have_the_documented_settings():
    flow = registry.get("noether-flow").presets["paper"]
    assert flow.models == ("relu", "linear")
    assert flow.widths == (10, 32, 1)
    assert flow.samples == 64
    assert flow.batch_sizes == (1, 4, 16)
    assert flow.sgd_steps == 20_000  # ~±7% at 95% for per-step std/mean ≈ 5 (note 003 §5b)
    assert flow.trajectory_steps == 5_000
    assert flow.flow_dt == 0.05
    quick = registry.get("noether-flow").presets["quick"]
    assert quick.sgd_steps < flow.sgd_steps
    assert min(quick.batch_sizes) == min(flow.batch_sizes) == 1
    space = registry.get("symmetry-null-space").presets["paper"]
    assert (space.inputs, space.outputs, space.rank, space.samples) == (20, 15, 4, 40)
    assert space.hidden == (4, 6)  # h = r (generic) and h > r
    assert space.tanh_widths == (5, 8, 3)
    assert space.samples >= space.inputs


# -- noether-flow ---------------------------------------------------------------------------------


def test_noether_flow_exact_claims_hold_and_the_statistical_one_evaluates(flow_result):
    outcomes = list(_outcomes("noether-flow", flow_result).values())
    flow, gd, identity, sgd, ratio = outcomes
    assert flow.holds is True, flow.measured
    assert gd.holds is True, gd.measured
    assert identity.holds is True, identity.measured
    assert sgd.holds in (True, False)  # statistical: evaluated, as measured
    assert ratio.holds in (True, False)
    for kind in ("relu", "linear"):
        metrics = flow_result.metrics[kind]
        assert metrics["gd_max_residual"] <= 1e-9
        assert metrics["gd_max_orthogonality"] <= 1e-9
        assert metrics["identity_max_residual"] <= 1e-9
        assert metrics["symmetry_max_residual"] <= 1e-9
        assert metrics["flow_relative_drift_half_dt"] < metrics["flow_relative_drift"]
        assert metrics["flow_loss_ratio"] < 1.0
    # the smooth (linear) field: RK4 is fourth order; the ReLU field jumps at kinks
    assert flow_result.metrics["linear"]["flow_order"] > 3.0


def test_noether_flow_tables(flow_result):
    flow, sgd = flow_result.series["flow"], flow_result.series["sgd"]
    assert list(flow) == list(
        empty_table("model method step_size step time loss charge_change predicted_change")
    )
    assert list(sgd) == list(empty_table(noether_flow.SGD_COLUMNS))
    assert {"gd_drift", "noise_drift", "mean_drift", "drift_half_width"} <= set(sgd)
    # per model: 2 points × 2 batch sizes of independent draws, and one trajectory
    assert sgd["mode"].count("independent draws") == 8
    assert sgd["mode"].count("trajectory") == 2
    assert len(flow["model"]) == 2 * (21 + 21 + 11)  # RK4 at dt = 0.1; GD at η = 0.1, 0.2
    rows = [i for i, m in enumerate(sgd["mode"]) if m == "independent draws"]
    for i in rows:  # Corollary 2's two sides, and the prediction as the sum of its terms
        assert sgd["trace_sigma_dj"][i] == pytest.approx(
            sgd["minus_half_j_grad_trace_sigma"][i], rel=1e-9
        )
        assert sgd["mean_predicted"][i] == pytest.approx(
            sgd["gd_drift"][i] + sgd["noise_drift"][i], rel=1e-12
        )
        b = sgd["batch_size"][i]
        assert sgd["finite_population_factor"][i] == pytest.approx((8 - b) / 7)
    trajectories = [i for i, m in enumerate(sgd["mode"]) if m == "trajectory"]
    assert all(math.isnan(sgd["gd_drift"][i]) for i in trajectories)
    figures = noether_flow.plot_noether_flow(flow_result)
    assert set(figures) == {"noether_flow.png"}
    plt.close("all")


def test_noether_flow_gd_drift_against_a_hand_loop():
    """The GD rows against an independent loop: Q = ½(‖W₁‖² − ‖W₂‖²) after torch.optim.SGD."""
    config = NoetherFlowConfig(
        models=("relu",), widths=(3, 4, 1), samples=8, flow_time=1.0, gd_lrs=(0.2,)
    )
    problem = noether_flow._problem(config, "relu")
    model, loss_fn, (x, y), A, point = problem
    table = empty_table("model method step_size step time loss charge_change predicted_change")
    charge = QuadraticCharge(A, point)
    assert float(charge(point)) == pytest.approx(
        0.5 * float(point["0.weight"].square().sum() - point["2.weight"].square().sum())
    )
    summary = noether_flow._integrate(problem, charge, "descent", 0.2, 5, (table, "relu"))
    q0 = float(charge(point))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    for _ in range(5):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        q5 = 0.5 * float(model[0].weight.square().sum() - model[2].weight.square().sum())
    assert summary["measured"] == pytest.approx(q5 - q0, rel=1e-10)
    assert table["charge_change"][-1] == pytest.approx(q5 - q0, rel=1e-10)
    assert summary["residual"] <= 1e-9


def test_noether_flow_rejects_an_unknown_model():
    with pytest.raises(ps.ParamsymError, match="'relu' or 'linear'"):
        run_noether_flow(NoetherFlowConfig(models=("tanh",)), SilentProgress())


# -- symmetry-null-space --------------------------------------------------------------------------


def test_null_space_claims_hold(null_result):
    outcomes = _outcomes("symmetry-null-space", null_result)
    assert all(o.holds is True for o in outcomes.values()), {
        o.claim: o.measured for o in outcomes.values() if not o.holds
    }
    minima = null_result.metrics["minima"]
    assert set(minima) == {"constructed", "trained h=1", "trained h=2"}
    for case, values in minima.items():
        assert values["zero_count"] >= values["rank"], case
        assert values["zero_count"] == values["predicted_zeros"], case
        assert values["null_residual"] <= 1e-9, case
        assert values["away_residual"] <= 1e-9, case
    for case in ("constructed", "trained h=1"):  # h = r = 1: r² = 1 zero
        assert minima[case]["zero_count"] == minima[case]["rank"] == 1
    assert minima["constructed"]["gradient_norm"] == 0.0
    assert minima["trained h=2"]["zero_count"] > minima["trained h=2"]["rank"]
    for values in null_result.metrics["mirrors"].values():
        assert values["fixed_gradient_residual"] <= 1e-9
        assert values["fixed_hessian_residual"] <= 1e-9
        assert values["farthest_hessian_residual"] > 1e-3
    assert null_result.metrics["loss_invariance"] <= 1e-12


def test_null_space_tables_and_figure(null_result):
    series = null_result.series
    assert list(series["minima"]) == list(
        empty_table(
            "case hidden parameters rank zero_count predicted_zeros gap gradient_norm "
            "null_residual away_residual orthogonality_residual hessian_norm"
        )
    )
    assert list(series["spectrum"]) == ["case", "index", "eigenvalue", "relative"]
    assert list(series["off_minimum"]) == [
        "scale",
        "gradient_norm",
        "null_residual",
        "away_residual",
    ]
    assert list(series["mirror"]) == [
        "mirror",
        "distance",
        "gradient_residual",
        "hessian_residual",
        "gradient_norm",
    ]
    assert list(series["heatmap"]) == ["distance", "row", "column", "value", "rank"]
    assert len(series["mirror"]["mirror"]) == 2 * 5  # the fixed point and four distances
    assert series["off_minimum"]["scale"] == [1e-7, 1e-5, 1e-3]
    figures = null_space.plot_null_space(null_result)
    assert set(figures) == {"null_space.png"}
    plt.close("all")


def test_null_space_zero_count_against_a_dense_oracle():
    """The trained over-parameterised minimum: eigenvalues of torch.func.hessian, counted."""
    config = NullSpaceConfig(inputs=4, outputs=3, rank=1, samples=6, hidden=(2,))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, generator=generator, dtype=F64)
    teacher = torch.randn(3, 1, generator=generator, dtype=F64) @ torch.randn(
        1, 4, generator=generator, dtype=F64
    )
    model = ps.mlp([4, 2, 3], "identity", bias=False, seed=7, dtype=F64)
    point = null_space._train(config, model, (x, x @ teacher.T))

    def loss_of(flat: torch.Tensor) -> torch.Tensor:
        output = torch.func.functional_call(model, ps.unflatten(flat, point), (x,))
        return nn.functional.mse_loss(output, x @ teacher.T)

    eigenvalues = torch.linalg.eigvalsh(torch.func.hessian(loss_of)(ps.flatten(point)))
    zeros = int((eigenvalues.abs() <= 1e-8 * eigenvalues.abs().max()).sum())
    result = stationary_null_space(
        model, nn.MSELoss(), (x, x @ teacher.T), null_space._gl_generators(2), point, dense=True
    )
    assert result.gradient_norm <= 1e-12
    assert result.zero_count == zeros
    assert zeros >= result.rank
    # rank J of GL(2) by hand: the stacked J_ab = (−E_ab W₁, W₂E_ab)
    columns = []
    for a, b in itertools.product(range(2), repeat=2):
        E = torch.zeros(2, 2, dtype=F64)
        E[a, b] = 1.0
        moved = {"0.weight": -E @ point["0.weight"], "2.weight": point["2.weight"] @ E}
        columns.append(ps.flatten(moved))
    assert int(torch.linalg.matrix_rank(torch.stack(columns, 1))) == result.rank
