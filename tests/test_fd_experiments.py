"""The seed 004 experiments: functional dimension during training (fd-univariate, fd-bivariate,
fd-weight-decay, fd-energy), run at reduced sizes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.errors import MissingDataError
from paramsym.experiments import registry
from paramsym.experiments.functional_dimension.training import (
    Schedule,
    Task,
    _Cohort,
    adam,
    functional_dimensions,
    he_variant_init,
    init_seed,
    train_and_track,
)
from paramsym.experiments.registry import SilentProgress
from paramsym.sweep import run_experiment
from paramsym.tangent_kernel.dimension import parameter_jacobian

NAMES = ("fd-univariate", "fd-bivariate", "fd-weight-decay", "fd-energy")


def _table(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _check_invariants(run: Path, inputs: int, points: int) -> list[dict[str, str]]:
    """FD ≤ min(m, D) and FD ≤ (n0 + 1)·#regions (Prop 4.6) at every checkpoint of every run."""
    parameters = 10 * (inputs + 1) + 3 * 10 * 11 + 11
    rows = _table(run / "trajectories.csv")
    assert rows
    for row in rows:
        regions = int(row["regions"])
        for column in ("fd_float32", "fd_float64"):
            fd = int(row[column])
            assert 1 <= fd <= min(points, parameters), row
            assert fd <= (inputs + 1) * regions, row
        assert 1 <= regions <= points
        assert float(row["loss"]) >= 0
    return rows


def _claims(run: Path) -> dict[str, dict[str, object]]:
    metrics = json.loads((run / "metrics.json").read_text())
    return {c["claim"]: c for c in metrics["claims"]}


# -- registration ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "paper_runs", "paper_every"),
    [
        ("fd-univariate", 15, 50),
        ("fd-bivariate", 20, 25),
        ("fd-weight-decay", 10, 50),
        ("fd-energy", 10, 25),
    ],
)
def test_registered_with_presets_and_claims(name, paper_runs, paper_every):
    experiment = registry.get(name)
    assert experiment.seed_ref.startswith("seed 004")
    assert set(experiment.presets) >= {"quick", "paper"}
    assert experiment.claims
    assert all(c.source.startswith("seed 004") for c in experiment.claims)
    assert "epochs" in experiment.description
    paper, quick = experiment.presets["paper"], experiment.presets["quick"]
    assert (paper.runs, paper.every) == (paper_runs, paper_every)
    assert quick.runs <= paper.runs
    assert quick.epochs <= paper.epochs
    assert (paper.learning_rate, paper.batch_size, paper.success_r2) == (0.01, 16, 0.9)
    assert experiment.plot is not None


def test_energy_reads_the_data_dir_and_weight_decays_are_the_papers():
    assert registry.get("fd-energy").presets["quick"].data_dir is None
    assert registry.get("fd-weight-decay").presets["paper"].weight_decays == (0.0, 1e-4, 1e-3)


# -- training helper -----------------------------------------------------------------------------


def test_he_variant_draws_weights_and_biases_with_variance_two_over_fan_in():
    model = he_variant_init(nn.Linear(50, 4000), torch.Generator().manual_seed(0))
    for p in (model.weight.detach(), model.bias.detach()):
        assert abs(float(p.std()) - (2 / 50) ** 0.5) < 0.01
        assert abs(float(p.mean())) < 0.01


def test_batched_runs_follow_their_own_adam_updates():
    """Each network of the batch gets exactly the updates of torch.optim.Adam with coupled
    weight decay on its own, with its own initialisation and minibatch order."""
    x = torch.linspace(0, 1, 20).unsqueeze(1)
    tasks = [
        Task("a", x, torch.sin(3 * x), 1e-3),
        Task("b", x, torch.cos(3 * x), 0.0),
    ]
    schedule = Schedule(seed=3, runs=2, epochs=3, every=1, learning_rate=0.01, batch_size=6)
    cohort = _Cohort(tasks, schedule)
    optimizer = adam(cohort.parameters, 0.01)
    for _ in range(schedule.epochs):
        cohort.epoch(optimizer, schedule.batch_size)
    for b, (task, run) in enumerate(cohort.members):
        generator = torch.Generator().manual_seed(init_seed(schedule.seed, run))
        model = he_variant_init(ps.mlp([1, 10, 10, 10, 10, 1]), generator)
        alone = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=task.weight_decay)
        for _ in range(schedule.epochs):
            order = torch.randperm(20, generator=generator)
            for start in range(0, 20, 6):
                index = order[start : start + 6]
                alone.zero_grad()
                nn.MSELoss()(model(task.x[index]), task.y[index]).backward()
                alone.step()
        batched = cohort.model(b)
        for p, q in zip(model.parameters(), batched.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_fused_adam_is_torch_optim_adams_fused_update_bit_for_bit():
    """``adam`` calls torch.optim.Adam's fused kernel directly (FusedAdam, where this torch has
    it): the same parameters after the same gradients as ``torch.optim.Adam(fused=True)``, bit
    for bit, a parameter left without a gradient included (neither moves it nor counts it)."""
    generator = torch.Generator().manual_seed(0)
    shapes = [(4, 3, 2), (4, 3), (4, 1, 3)]
    mine = [torch.randn(s, generator=generator) for s in shapes]
    theirs = [p.clone() for p in mine]
    optimizer = adam(mine, 0.05)
    if isinstance(optimizer, torch.optim.Optimizer):
        pytest.skip("this torch has no fused Adam on the CPU")
    reference = torch.optim.Adam(theirs, lr=0.05, fused=True)
    for step in range(6):
        grads = [torch.randn(s, generator=generator) for s in shapes]
        for i, (p, q, g) in enumerate(zip(mine, theirs, grads, strict=True)):
            skipped = step == 2 and i == 1
            p.grad = None if skipped else g.clone()
            q.grad = None if skipped else g.clone()
        optimizer.step()
        reference.step()
        for p, q in zip(mine, theirs, strict=True):
            assert torch.equal(p, q)
    for step, q in zip(optimizer.steps, theirs, strict=True):
        assert torch.equal(step, reference.state[q]["step"])
    optimizer.zero_grad()
    assert all(p.grad is None for p in mine)


def _autograd_epoch(cohort: _Cohort, optimizer: torch.optim.Optimizer, batch_size: int) -> None:
    """``_Cohort.epoch`` with the gradient from autograd (its implementation before the
    backpropagation was written out)."""
    m = cohort.x.shape[1]
    order = torch.stack([torch.randperm(m, generator=g) for g in cohort.generators])
    rows = torch.arange(len(cohort.members)).unsqueeze(1)
    xs = cohort.x[rows, order].split(batch_size, dim=1)
    ys = cohort.y[rows, order].split(batch_size, dim=1)
    parameters = [p.requires_grad_() for p in cohort.parameters]
    for x, y in zip(xs, ys, strict=True):
        optimizer.zero_grad()
        error = cohort.forward(x.contiguous()) - y.contiguous()
        error.pow(2).mean(dim=(1, 2)).sum().backward()
        grads = [p.grad for p in parameters]
        with torch.no_grad():
            torch._foreach_add_(grads, torch._foreach_mul(parameters, cohort._decays))
        optimizer.step()


@pytest.mark.parametrize(("inputs", "points", "batch_size"), [(1, 20, 6), (2, 30, 8), (2, 32, 16)])
def test_written_out_backpropagation_is_autograds_bit_for_bit(inputs, points, batch_size):
    """``_Cohort.epoch`` computes the gradient without autograd; the parameters after a few
    epochs of Adam are exactly those of the same training with autograd's gradient (so the
    measured values of the experiments do not depend on which one runs). A short last
    minibatch (6 of 20, 6 of 30) and three weight decays included."""
    x = torch.rand(points, inputs, generator=torch.Generator().manual_seed(0))
    tasks = [
        Task("a", x, x.sum(1, keepdim=True).sin(), 1e-3),
        Task("b", x, x[:, :1] ** 2, 0.0),
        Task("c", x, x.prod(1, keepdim=True).cos(), 1e-4),
    ]
    schedule = Schedule(seed=2, runs=2, epochs=4, every=4, learning_rate=0.05, batch_size=8)
    written, reference = _Cohort(tasks, schedule), _Cohort(tasks, schedule)
    written_adam = adam(written.parameters, schedule.learning_rate)
    reference_adam = adam(reference.parameters, schedule.learning_rate)
    for _ in range(schedule.epochs):
        written.epoch(written_adam, batch_size)
        _autograd_epoch(reference, reference_adam, batch_size)
    for p, q in zip(written.parameters, reference.parameters, strict=True):
        assert torch.equal(p, q.detach())
    assert not torch.equal(written.weights[0], _Cohort(tasks, schedule).weights[0])  # it moved


def test_cohort_jacobians_and_ranks_are_the_librarys():
    """The FD of every network of a cohort, from the cohort's batched Jacobians and one batched
    SVD, is ps.functional_dimension of that network alone (float32 and float64), and the
    Jacobians are ps's parameter_jacobian (2-D inputs, weight decays of both kinds, after a
    few epochs so that some units are dead on some samples)."""
    x = torch.rand(30, 2, generator=torch.Generator().manual_seed(0))
    tasks = [Task("a", x, x.sum(1, keepdim=True).sin(), 1e-3), Task("b", x, x[:, :1] ** 2, 0.0)]
    schedule = Schedule(seed=1, runs=3, epochs=5, every=5, learning_rate=0.05, batch_size=8)
    cohort = _Cohort(tasks, schedule)
    optimizer = adam(cohort.parameters, schedule.learning_rate)
    for _ in range(schedule.epochs):
        cohort.epoch(optimizer, schedule.batch_size)
    for dtype in (torch.float32, torch.float64):
        jacobians = cohort.jacobians(dtype)
        ranks = functional_dimensions(cohort, dtype)
        for b, (task, _) in enumerate(cohort.members):
            model = cohort.model(b)
            expected = parameter_jacobian(model, task.x, dtype=dtype)
            torch.testing.assert_close(jacobians[b], expected, rtol=1e-6, atol=1e-7)
            assert ranks[b] == ps.functional_dimension(model, task.x, dtype=dtype).rank


def test_checkpoints_include_init_every_and_the_last_epoch():
    x = torch.linspace(0, 1, 12).unsqueeze(1)
    records = train_and_track(
        [Task("f", x, x**2, 1e-4)],
        Schedule(seed=0, runs=2, epochs=5, every=2, learning_rate=0.01, batch_size=4),
        SilentProgress(),
    )
    assert [r.epochs for r in records] == [[0, 2, 4, 5]] * 2
    assert all(len(r.fd32) == len(r.fd64) == len(r.regions) == len(r.loss) == 4 for r in records)
    assert records[0].fd32[0] != records[1].fd32[0] or records[0].loss != records[1].loss


# -- reduced runs ----------------------------------------------------------------------------------


def test_univariate_reduced(tmp_path):
    experiment = registry.get("fd-univariate")
    config = experiment.config(
        "quick", {"runs": "2", "epochs": "40", "every": "20", "probe_points": "25"}
    )
    run = tmp_path / "uni"
    outcome = run_experiment(experiment, config, run, workers=1)
    for name in (
        "metrics.json",
        "report.md",
        "trajectories.csv",
        "runs.csv",
        "data.csv",
        "functions.csv",
        "fd_trajectories.png",
        "fd_vs_regions.png",
        "functions.png",
    ):
        assert (run / name).exists(), name
    rows = _check_invariants(run, inputs=1, points=100)
    assert len(rows) == 3 * 2 * 3  # targets × runs × checkpoints (0, 20, 40)
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert metrics["checkpoint_epochs"] == [0, 20, 40]
    assert metrics["region_bound_violations"] == 0
    assert metrics["fd_cap"] == 100
    assert metrics["parameters"] == 361
    assert metrics["fd_init_f1"] == metrics["fd_init_f2"]  # same inputs, same initialisations
    bound = [o for o in outcome.outcomes if "2·#linear regions" in o.claim]
    assert bound
    assert bound[0].holds
    assert len(outcome.outcomes) == 4


def test_bivariate_reduced(tmp_path):
    experiment = registry.get("fd-bivariate")
    config = experiment.config("quick", {"runs": "1", "epochs": "6", "every": "3", "grid": "8"})
    run = tmp_path / "bi"
    run_experiment(experiment, config, run, workers=1)
    _check_invariants(run, inputs=2, points=64)
    assert (run / "fd_trajectories.png").exists()
    assert set(_claims(run)) == {c.text for c in experiment.claims}


def test_weight_decay_reduced(tmp_path):
    experiment = registry.get("fd-weight-decay")
    config = experiment.config("quick", {"runs": "2", "epochs": "10", "every": "5"})
    run = tmp_path / "wd"
    run_experiment(experiment, config, run, workers=1)
    rows = _check_invariants(run, inputs=1, points=100)
    assert {float(r["weight_decay"]) for r in rows} == {0.0, 1e-4, 1e-3}
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert metrics["groups"] == ["wd=0", "wd=0.0001", "wd=0.001"]


def _energy_file(directory: Path, rows: int = 60) -> None:
    generator = torch.Generator().manual_seed(0)
    values = torch.rand(rows, 10, generator=generator, dtype=torch.float64)
    header = [f"X{i}" for i in range(1, 9)] + ["Y1", "Y2"]
    lines = [",".join(header)] + [",".join(f"{v:.6f}" for v in row) for row in values.tolist()]
    (directory / "ENB2012_data.csv").write_text("\n".join(lines) + "\n")


def test_energy_with_a_small_generated_file(tmp_path):
    _energy_file(tmp_path)
    experiment = registry.get("fd-energy")
    config = experiment.config(
        "quick", {"runs": "1", "epochs": "4", "every": "2", "data_dir": str(tmp_path)}
    )
    run = tmp_path / "energy"
    run_experiment(experiment, config, run, workers=1)
    rows = _check_invariants(run, inputs=8, points=60)
    assert {r["target"] for r in rows} == {"heating", "cooling"}
    assert (run / "fd_vs_regions.png").exists()
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["metrics"]["parameters"] == 431
    assert any("z-scored" in note for note in metrics["notes"])


def test_energy_without_data_raises_missing_data(tmp_path, monkeypatch):
    monkeypatch.delenv("PARAMSYM_DATA", raising=False)
    experiment = registry.get("fd-energy")
    with pytest.raises(MissingDataError):
        run_experiment(experiment, experiment.config("quick"), tmp_path / "none", workers=1)
    config = experiment.config("quick", {"data_dir": str(tmp_path)})  # a directory without files
    with pytest.raises(MissingDataError):
        run_experiment(experiment, config, tmp_path / "empty", workers=1)
