"""Seed 003 experiment ``equivariance-identities``: registration and presets, its helpers
(restricted generators against the full group's J, discrete elements and their fixed points,
skipped and excluded checks, a failing exact check), its claims on synthetic tables, and a
reduced run through the runner whose four claims must hold."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.equivariance import builtins
from paramsym.equivariance.discrete import DiscreteSymmetry
from paramsym.equivariance.result import THEOREM1, THEOREM2
from paramsym.experiments import registry
from paramsym.experiments.equivariance import identities
from paramsym.experiments.equivariance.identities import IdentitiesConfig, _Runner
from paramsym.experiments.registry import Result, SilentProgress
from paramsym.sweep import run_experiment

F64 = torch.float64
NAME = "equivariance-identities"
TOL = 1e-9


def _batch(n_in: int = 3, n_out: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(8, n_in, generator=gen, dtype=F64), torch.randn(
        8, n_out, generator=gen, dtype=F64
    )


def _rows(runner: _Runner) -> list[dict[str, object]]:
    table = runner.table
    return [dict(zip(table, values, strict=True)) for values in zip(*table.values(), strict=True)]


# -- registration and presets ---------------------------------------------------------------------


def test_registered_under_seed_003_with_four_claims_and_a_figure():
    experiment = registry.get(NAME)
    assert experiment.seed_ref.startswith("seed 003, ")
    assert registry.paper_of(experiment) == "seed 003"
    assert len(experiment.claims) == 4
    assert all(c.source.startswith("seed 003") for c in experiment.claims)
    assert experiment.plot is not None
    assert experiment.module == "paramsym.experiments.equivariance.identities"


def test_presets():
    experiment = registry.get(NAME)
    quick, paper = experiment.presets["quick"], experiment.presets["paper"]
    assert type(quick) is type(paper) is IdentitiesConfig
    assert quick.seed == paper.seed == 0
    assert quick.activations == paper.activations == identities.ACTIVATIONS
    assert "relu" in quick.activations
    assert "linear" not in quick.activations
    assert (quick.directions, quick.per_family) == (2, 1)
    assert set(quick.zoo) <= set(paper.zoo)
    # the paper preset: every zoo model whose forward returns one tensor, three directions per
    # continuous symmetry, every symmetry found
    assert paper.zoo == tuple(
        n for n in ps.nn.zoo.ZOO if n not in ("lstm-raw", "hf-gpt2", "hf-bert")
    )
    assert (paper.directions, paper.per_family, paper.g_scale) == (3, 0, 0.3)
    assert (paper.tol, paper.control_floor, paper.approximate_range) == (1e-9, 1e-3, (1e-12, 1e-2))


def test_bad_configs_are_named():
    run = registry.get(NAME).run
    quick = registry.get(NAME).presets["quick"]
    for change in ({"zoo": ("no-such-model",)}, {"activations": ("swish",)}, {"directions": 0}):
        with pytest.raises(ps.InvalidArgumentError, match="equivariance-identities"):
            run(dataclasses.replace(quick, **change), SilentProgress())


# -- helpers --------------------------------------------------------------------------------------


def test_restricted_generators_are_the_full_groups_contracted_with_the_directions():
    model = ps.mlp([3, 5, 4, 2], activation="relu", seed=3, dtype=F64)
    sym = next(s for s in ps.symmetries(model) if s.name == "rescaling[0->2]")
    config = IdentitiesConfig(seed=7)
    restricted = _Runner(config).restricted(sym)
    xi = torch.randn(2, sym.dim, generator=torch.Generator().manual_seed(7), dtype=F64)
    xi = xi / xi.norm(dim=1, keepdim=True)  # the runner's first draw
    assert restricted.dim == 2
    assert restricted.name == "rescaling[0->2]<2 dirs>"
    batch = _batch()
    full = ps.check_identities(model, nn.MSELoss(), batch, sym)
    part = ps.check_identities(model, nn.MSELoss(), batch, restricted)
    torch.testing.assert_close(part.terms["J"], xi @ full.terms["J"], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(part.lhs["item2a"], xi @ full.lhs["item2a"], rtol=1e-12, atol=1e-14)
    assert part.holds(TOL)
    # at a random h the sanity check (f(T(θ, h)) = f(θ)) passes and the identities hold
    moved = ps.check_identities(model, nn.MSELoss(), batch, restricted, g=[0.4, -0.3])
    assert moved.holds(TOL)
    assert moved.solver != "identity"
    # a group no larger than the number of directions is kept whole
    small = next(s for s in ps.symmetries(ps.mlp([3, 2, 2], seed=0)) if s.dim)
    assert _Runner(config).restricted(small).dim == small.dim == 2


def test_discrete_elements_are_a_transposition_and_one_flip_with_reachable_fixed_points():
    model = ps.mlp([3, 5, 2], activation="tanh", seed=1, dtype=F64)
    found = {s.name.split("[")[0]: s for s in ps.symmetries(model)}
    runner = _Runner(IdentitiesConfig())
    perm = runner.element(found["permutation"])
    moved = torch.nonzero(perm != torch.arange(5)).reshape(-1)
    assert len(moved) == 2
    assert torch.equal(perm[perm], torch.arange(5))
    signs = runner.element(found["sign_flip"])
    assert sorted(signs.tolist()) == [-1.0, 1.0, 1.0, 1.0, 1.0]
    params = ps.params_of(model)
    i, j = moved.tolist()
    point = DiscreteSymmetry.from_symmetry(found["permutation"], perm).project(params)
    assert torch.equal(point["0.weight"][i], point["0.weight"][j])  # the two neurons are equal
    assert torch.equal(point["2.weight"][:, i], point["2.weight"][:, j])
    k = int(torch.nonzero(signs < 0))
    point = DiscreteSymmetry.from_symmetry(found["sign_flip"], signs).project(params)
    assert float(point["0.weight"][k].abs().max()) == 0.0  # the flipped neuron is zeroed
    assert float(point["2.weight"][:, k].abs().max()) == 0.0


def test_unreachable_fixed_points_and_eval_mode_batchnorm_are_skipped_with_the_reason():
    runner = _Runner(IdentitiesConfig(per_family=0))
    # GroupNorm(2, 4) with eps = 0: swapping the two channels of a group makes them equal, the
    # group variance 0 and f(θ) = 0/0 at the projection
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.GroupNorm(2, 4, eps=0.0), nn.Tanh(), nn.Linear(4, 2))
    model = model.to(F64)
    batch = _batch()
    found = ps.symmetries(model, example_input=batch[0])
    assert [s.name for s in found] == ["permutation[0->3]", "permutation[0->3]#2"]
    runner.catalogue(("gn", "norm"), (model, nn.MSELoss(), batch), found)
    assert runner.table["model"] == []
    assert len(runner.skipped) == 2
    assert all("not finite at the projection" in note for note in runner.skipped)
    # a zoo CNN with BatchNorm in eval mode: symmetries moving running statistics are skipped,
    # the others checked
    problem = identities._zoo_problem("cnn-bn", 0, torch.Generator().manual_seed(0))
    assert not isinstance(problem, str)
    found = ps.symmetries(problem[0], example_input=problem[2][0])
    runner = _Runner(IdentitiesConfig(per_family=0))
    runner.catalogue(("cnn-bn", "cnn"), problem, found)
    moving = [s.name for s in found if s.buffer_names]
    assert len(moving) == 4
    assert len(runner.skipped) == 4
    assert all("running statistics" in note for note in runner.skipped)
    rows = _rows(runner)
    assert {r["transformation"] for r in rows} == {
        "rescaling[bn1->conv2]<2 dirs>",
        "rescaling[bn2->fc]<2 dirs>",
        # the evaluation-mode absorptions read the statistics without moving them: checked
        "batchnorm_scaling[conv1->bn1]<2 dirs>",
        "batchnorm_scaling[conv2->bn2]<2 dirs>",
        "batchnorm_shift[conv1->bn1]<2 dirs>",
        "batchnorm_shift[conv2->bn2]<2 dirs>",
    }
    assert {r["at"] for r in rows} == {"g0", "random"}
    assert max(r["residual"] for r in rows) <= TOL
    assert identities._zoo_problem("lstm-raw", 0, torch.Generator()) == (
        "returns tuple, not one tensor f(θ)"
    )


def test_a_check_on_a_kink_is_excluded_and_a_failing_exact_check_is_recorded():
    model = ps.mlp([3, 4, 2], activation="relu", bias=False, seed=0, dtype=F64)
    with torch.no_grad():
        model[0].weight[2] = 0.0  # neuron 2's pre-activation is 0 on every input: a kink
    runner = _Runner(IdentitiesConfig())
    problem = (model, nn.MSELoss(), _batch())
    runner.check(("relu", "builtin"), problem, builtins.homogeneity(model), "builtin")
    assert runner.table["model"] == []
    assert runner.skipped == [
        "relu: homogeneity(m=2) @ g0: θ on a kink (NonSmoothWarning), excluded"
    ]
    # an exact transformation that is no equivariance (S of the wrong degree) fails the sanity
    # check: recorded as an exact row with residual inf, and the exact claim fails
    clean = ps.mlp([3, 4, 2], activation="relu", bias=False, seed=0, dtype=F64)
    wrong = builtins.homogeneity(clean, degree=1)
    runner.check(("relu", "builtin"), (clean, nn.MSELoss(), _batch()), wrong, "builtin", "random")
    assert _rows(runner) == [
        {
            "model": "relu",
            "family": "builtin",
            "transformation": "homogeneity(m=1)",
            "kind": "builtin",
            "exact": True,
            "at": "random",
            "identity": "sanity",
            "residual": math.inf,
        }
    ]
    assert "FAILED" in runner.skipped[-1]
    assert "EquivarianceError" not in runner.skipped[-1]
    metrics = identities._metrics(runner.table, IdentitiesConfig(), ["builtin"])
    measured, holds = identities._exact_claim(Result(metrics))
    assert holds is False
    assert "1 above 1e-09" in measured


def test_controls_fail_their_model_identities_but_not_consistency():
    runner = _Runner(IdentitiesConfig())
    identities._controls(runner, torch.Generator().manual_seed(0))
    rows = _rows(runner)
    assert {r["kind"] for r in rows} == {"control"}
    checks = {(r["model"], r["transformation"], r["at"]) for r in rows}
    assert len(checks) == 5
    for check in checks:
        mine = [r for r in rows if (r["model"], r["transformation"], r["at"]) == check]
        model_side = [r["residual"] for r in mine if r["identity"] in identities.MODEL_IDENTITIES]
        assert max(model_side) >= 1e-3, (check, mine)
        # consistency involves T and S only: it holds for these smooth T and S
        assert all(r["residual"] <= TOL for r in mine if r["identity"] == "consistency")


def _synthetic(values: list[tuple[str, bool, float]]) -> Result:
    runner = _Runner(IdentitiesConfig())
    for i, (kind, exact, residual) in enumerate(values):
        row = ("m", "activation", f"t{i}", kind, exact, "g0", "item1", residual)
        for column, entry in zip(runner.table.values(), row, strict=True):
            column.append(entry)
    return Result(identities._metrics(runner.table, IdentitiesConfig(), ["activation", "norm"]))


def test_claims_on_synthetic_tables():
    good = _synthetic(
        [("continuous", True, 3e-16), ("builtin", False, 2e-5), ("control", True, 0.2)]
    )
    outcomes = [claim.evaluate(good).holds for claim in registry.get(NAME).claims]
    assert outcomes == [True, True, True, False]  # no exact 'norm' identity: coverage fails
    assert good.metrics["families_missing"] == ["norm"]
    # an approximate symmetry that is numerically exact (eps = 1e-12, as in BERT), one far off,
    # an exact identity above the tolerance and a control too close to 0: every claim fails
    bad = _synthetic(
        [
            ("continuous", True, 2e-9),
            ("continuous", False, 1e-13),
            ("builtin", False, 0.05),
            ("control", True, 1e-4),
        ]
    )
    assert [claim.evaluate(bad).holds for claim in registry.get(NAME).claims] == [
        False,
        False,
        False,
        False,
    ]
    assert bad.metrics["approximate_in_range"] == 0


# -- a reduced run ---------------------------------------------------------------------------------


def test_reduced_run_through_the_runner(tmp_path):
    experiment = registry.get(NAME)
    config = dataclasses.replace(
        experiment.presets["quick"],
        activations=("relu", "tanh", "identity", "gelu"),
        zoo=("cnn", "resnet-block", "gpt", "lstm"),
    )
    run_experiment(experiment, config, tmp_path / "run", workers=1)
    run = tmp_path / "run"
    data = json.loads((run / "metrics.json").read_text())
    assert [c["holds"] for c in data["claims"]] == [True, True, True, True], data["claims"]
    with (run / "residuals.csv").open() as handle:
        reader = csv.reader(handle)
        assert next(reader) == identities.COLUMNS.split()
        rows = list(reader)
    assert (run / "identities.png").stat().st_size > 0
    metrics = data["metrics"]
    assert metrics["families"] == [
        "activation", "norm", "attention", "lora", "cnn", "resnet", "transformer", "rnn"
    ]  # fmt: skip
    assert metrics["families_missing"] == []
    assert metrics["exact_failures"] == 0
    assert metrics["exact_max"] <= TOL
    assert metrics["control_checks"] == 5
    assert metrics["control_min"] >= 1e-3
    # per kind: catalogue continuous at g0 and random, discrete at fixed points, built-ins
    kinds = {(r[3], r[5]) for r in rows}
    assert kinds >= {
        ("continuous", "g0"),
        ("continuous", "random"),
        ("discrete", "fixed_point"),
        ("builtin", "g0"),
        ("builtin", "random"),
        ("control", "random"),
    }
    # every identity of both theorems appears, and the approximate norm layers are reported
    assert {r[6] for r in rows} == {*THEOREM1, *THEOREM2}
    approximate = {r[0] for r in rows if r[4] == "False"}
    assert approximate == {
        "gpt",
        "layernorm-eps1e-05",
        "groupnorm-eps1e-05",
        "rmsnorm-eps1e-05",
        "batchnorm-eps1e-05",
    }
    assert metrics["approximate_checks"] == 10
    assert all(1e-12 <= v <= 1e-2 for v in metrics["approximate"].values())
