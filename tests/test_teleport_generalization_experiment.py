"""``teleport-generalization`` (seed 001, Figs 5.7, 5.8): a reduced quick preset once (3 runs,
12 epochs; the full quick preset's claims are checked under ``-m slow``), its claims as
measured, its tables and teleports, the paper preset and bad input."""

from __future__ import annotations

import dataclasses
import math

import matplotlib.pyplot as plt
import pytest
import scipy.stats

import paramsym.experiments.teleport.generalization as module
from conftest import once_per_session
from paramsym.errors import InvalidArgumentError, MissingDataError
from paramsym.experiments.registry import Result, SilentProgress, get
from paramsym.experiments.teleport.generalization_report import ARMS

STOPS = {"steps", "drift", "no_gain", "no_improvement", "stationary", "non_finite"}
NAME = "teleport-generalization"
SMALL = {"runs": 3, "epochs": 12, "teleport_epoch": 8}
"""The quick preset at 3 runs of 12 epochs, teleporting after epoch 8 (digits, SGD and
AdaGrad, 5 arms, 2 teleport batches of 200): every part of a run at ≈ 40% of its cost."""


def _small_config() -> module.GeneralizationConfig:
    return dataclasses.replace(get(NAME).presets["quick"], **SMALL)


@pytest.fixture(scope="module")
def small(request: pytest.FixtureRequest) -> Result:
    """The reduced quick preset (:data:`SMALL`), run once per session (shared by xdist
    workers)."""
    return once_per_session(
        request,
        "teleport-generalization-small",
        lambda: get(NAME).run(_small_config(), SilentProgress()),
    )


def _check_claims_as_measured(result: Result, runs: int) -> None:
    """No teleport moves the final test loss detectably: every paired Δ has p ≥ 0.05 for both
    optimizers (|Δ| is a few 10⁻³ against test losses of 0.14-0.18, and SGD at batch 20 on
    digits is bumpy), so the three effect claims (φ ↓ lowers, ψ ↑ lowers, ψ ↓ raises the test
    loss) fail and "φ ↑ has no effect" holds; every teleport arm did move its own objective
    as asked."""
    outcomes = get(NAME).evaluate(result)
    assert [o.holds for o in outcomes] == [False, True, False, False, True]
    for outcome in outcomes[:4]:
        assert "SGD: Δ = " in outcome.measured
        assert "AdaGrad: Δ = " in outcome.measured
    m = result.metrics
    for o in ("sgd", "adagrad"):
        for arm in ARMS[1:]:
            assert m[f"{o}_{arm}_p"] >= 0.05
            low, high = m[f"{o}_{arm}_ci"]
            assert low <= m[f"{o}_{arm}_delta"] <= high
            assert m[f"{o}_{arm}_runs"] == runs


def test_claims_as_measured(small: Result) -> None:
    """At the reduced size (3 runs) as at quick size: the claims of
    :func:`_check_claims_as_measured` (all p ≥ 0.12 at 3 runs)."""
    _check_claims_as_measured(small, runs=3)


@pytest.mark.slow
def test_quick_preset_claims_as_measured() -> None:
    """The quick preset itself (5 runs × 5 arms, 22 epochs; ≈ 45 s on one core): the same
    claims as measured, with 5 runs."""
    entry = get(NAME)
    result = entry.run(entry.presets["quick"], SilentProgress())
    _check_claims_as_measured(result, runs=5)
    assert len(result.series["curves"]["epoch"]) == 2 * 5 * 5 * 23


def test_tables(small: Result) -> None:
    """Columns and row counts of the three tables; every arm of a run follows the same curve
    up to the teleport (epoch 8), and each teleport arm leaves it afterwards in some run (a
    run whose teleports were all undone would stay on it)."""
    config = _small_config()
    runs, shared = config.runs, config.teleport_epoch + 1
    curves, teleports, events = (small.series[k] for k in ("curves", "teleports", "events"))
    assert list(curves) == module.CURVE_COLUMNS.split()
    assert list(teleports) == module.TELEPORT_COLUMNS.split()
    assert list(events) == module.EVENT_COLUMNS.split()
    assert len(curves["epoch"]) == 2 * 5 * runs * (config.epochs + 1)
    assert len(teleports["batch"]) == 2 * 4 * runs * 2
    assert len(events["arm"]) == 2 * 5 * runs
    assert all(math.isfinite(v) for v in curves["test_loss"] + curves["train_loss"])
    for o in ("sgd", "adagrad"):
        for arm in ARMS[1:]:
            left = 0
            for run in range(runs):
                base = module.table_rows(curves, optimizer=o, arm="none", run=run)["test_loss"]
                test = module.table_rows(curves, optimizer=o, arm=arm, run=run)["test_loss"]
                assert test[:shared] == base[:shared]
                left += test[shared:] != base[shared:]
            assert left >= 1, (o, arm)


def test_teleports_move_their_objective(small: Result) -> None:
    """Each teleport moved φ or ψ in the asked direction or not at all (a line search, and a
    teleport that ends worse is undone), most moved it, and the loss on the teleport batch
    stayed within the guard of 1%, although the action is approximate on 200 samples."""
    t = small.series["teleports"]
    moved = 0
    for i, arm in enumerate(t["arm"]):
        change = t["objective_after"][i] - t["objective_before"][i]
        assert (change >= 0) if arm.endswith("up") else (change <= 0), (arm, i)
        moved += change != 0
        assert t["max_loss_drift"][i] <= 1e-2 * t["loss_before"][i] * (1 + 1e-6)
        assert abs(t["loss_after"][i] - t["loss_before"][i]) <= t["max_loss_drift"][i] + 1e-12
        assert t["stopped"][i] in STOPS
    assert moved >= 0.8 * len(t["arm"])
    m = small.metrics
    for o in ("sgd", "adagrad"):
        assert m[f"{o}_phi_up_objective_ratio"] > 1 > m[f"{o}_phi_down_objective_ratio"]
        assert m[f"{o}_psi_up_objective_ratio"] > 1 > m[f"{o}_psi_down_objective_ratio"]


def test_events(small: Result) -> None:
    """No teleport changes nothing at the teleport; each teleport arm changes the whole
    training-set loss in most runs (the action keeps the loss only on its batch: the warm
    restart)."""
    e = small.series["events"]
    changed: dict[tuple[str, str], int] = {}
    for i, arm in enumerate(e["arm"]):
        pairs = [(e[f"{q}_before"][i], e[f"{q}_after"][i]) for q in ("train", "test", "phi")]
        if arm == "none":
            assert all(a == b for a, b in pairs)
        else:
            key = (e["optimizer"][i], arm)
            changed[key] = changed.get(key, 0) + (pairs[0][0] != pairs[0][1])
        assert min(e["psi_before"][i], e["psi_after"][i]) >= 0
    assert len(changed) == 8
    assert all(count >= 2 for count in changed.values()), changed


def test_figures(small: Result) -> None:
    """One figure per optimizer, 2 × 2 panels (φ and ψ; losses and Δ)."""
    figures = get(NAME).plot(small)  # type: ignore[misc]
    assert list(figures) == [
        "teleport_generalization_sgd.png",
        "teleport_generalization_adagrad.png",
    ]
    assert all(len(f.axes) == 4 for f in figures.values())
    plt.close("all")


def test_paired() -> None:
    """Δ statistics agree with scipy's paired t-test; identical arms give p = 1."""
    treated, base = [1.0, 2.5, 2.0, 4.0], [0.5, 0.5, 1.0, 1.5]
    out = module.paired(treated, base)
    assert out["delta"] == pytest.approx(1.5)
    assert out["p"] == pytest.approx(scipy.stats.ttest_rel(treated, base).pvalue, rel=1e-12)
    assert out["ci"][0] < 1.5 < out["ci"][1]
    assert out["runs_lower"] == 0
    same = module.paired(base, base)
    assert same["p"] == 1.0
    assert same["ci"] == [0.0, 0.0]


def test_paper_preset() -> None:
    """The dissertation's setting (§5.3) with the authors' code where the text is silent."""
    paper = get(NAME).presets["paper"]
    assert paper.dataset == "cifar10"
    assert paper.optimizers == ("sgd", "adagrad")
    assert paper.hidden == (32, 10)
    assert paper.runs == 5
    assert (paper.teleport_epoch, paper.epochs) == (20, 40)
    assert (paper.teleport_batches, paper.teleport_batch_size) == (5, 2000)
    assert paper.teleport_lr == 5e-2
    assert (paper.sharpness_steps, paper.curvature_steps) == (10, 1)
    assert paper.learning_rates[0] == 0.02
    assert paper.batch_size == 20
    assert not paper.shuffle
    assert paper.curves == 1
    assert paper.radii == module.TELEPORT_RADII


def test_bad_input(tmp_path) -> None:
    """Unknown data set, missing CIFAR-10 files, too few runs, a teleport after the last epoch
    and an unknown action are refused with paramsym errors naming the setting."""
    Config = module.GeneralizationConfig
    with pytest.raises(InvalidArgumentError, match="dataset"):
        module.generalization_split(Config(dataset="imagenet"))
    with pytest.raises(MissingDataError, match="data_batch_1"):
        module.run_generalization(
            Config(dataset="cifar10", data_dir=str(tmp_path)), SilentProgress()
        )
    for bad, field in (
        (Config(runs=1), "runs"),
        (Config(teleport_epoch=22), "teleport_epoch"),
        (Config(action="rescale"), "action"),
        (Config(optimizers=("lbfgs",), learning_rates=(0.1,)), "lbfgs"),
        (Config(probe_size=0), "probe_size"),
    ):
        with pytest.raises(InvalidArgumentError, match=field):
            module.run_generalization(bad, SilentProgress())
