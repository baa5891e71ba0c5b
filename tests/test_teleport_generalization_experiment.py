"""``teleport-generalization`` (seed 001, Figs 5.7, 5.8): the quick preset once, its claims as
measured, its tables and teleports, the paper preset and bad input."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest
import scipy.stats

import paramsym.experiments.teleport.generalization as module
from paramsym.errors import InvalidArgumentError, MissingDataError
from paramsym.experiments.registry import Result, SilentProgress, get
from paramsym.experiments.teleport.generalization_report import ARMS

STOPS = {"steps", "drift", "no_gain", "no_improvement", "stationary", "non_finite"}


@pytest.fixture(scope="module")
def quick() -> Result:
    """The quick preset (digits, SGD and AdaGrad, 5 runs × 5 arms), run once."""
    entry = get("teleport-generalization")
    return entry.run(entry.presets["quick"], SilentProgress())


def test_claims_as_measured(quick: Result) -> None:
    """At quick size no teleport moves the final test loss detectably: every paired Δ has
    p ≥ 0.05 for both optimizers (|Δ| is a few 10⁻³ against test losses of 0.14-0.18, and
    SGD at batch 20 on digits is bumpy), so the three effect claims (φ ↓ lowers, ψ ↑ lowers,
    ψ ↓ raises the test loss) fail and "φ ↑ has no effect" holds; every teleport arm did move
    its own objective as asked."""
    entry = get("teleport-generalization")
    outcomes = entry.evaluate(quick)
    assert [o.holds for o in outcomes] == [False, True, False, False, True]
    for outcome in outcomes[:4]:
        assert "SGD: Δ = " in outcome.measured
        assert "AdaGrad: Δ = " in outcome.measured
    m = quick.metrics
    for o in ("sgd", "adagrad"):
        for arm in ARMS[1:]:
            assert m[f"{o}_{arm}_p"] >= 0.05
            low, high = m[f"{o}_{arm}_ci"]
            assert low <= m[f"{o}_{arm}_delta"] <= high
            assert m[f"{o}_{arm}_runs"] == 5


def test_tables(quick: Result) -> None:
    """Columns and row counts of the three tables; every arm of a run follows the same curve
    up to the teleport (epoch 14), and each teleport arm leaves it afterwards in some run (a
    run whose teleports were all undone would stay on it)."""
    curves, teleports, events = (quick.series[k] for k in ("curves", "teleports", "events"))
    assert list(curves) == module.CURVE_COLUMNS.split()
    assert list(teleports) == module.TELEPORT_COLUMNS.split()
    assert list(events) == module.EVENT_COLUMNS.split()
    assert len(curves["epoch"]) == 2 * 5 * 5 * 23
    assert len(teleports["batch"]) == 2 * 4 * 5 * 2
    assert len(events["arm"]) == 2 * 5 * 5
    assert all(math.isfinite(v) for v in curves["test_loss"] + curves["train_loss"])
    for o in ("sgd", "adagrad"):
        for arm in ARMS[1:]:
            left = 0
            for run in range(5):
                base = module.table_rows(curves, optimizer=o, arm="none", run=run)["test_loss"]
                test = module.table_rows(curves, optimizer=o, arm=arm, run=run)["test_loss"]
                assert test[:15] == base[:15]
                left += test[15:] != base[15:]
            assert left >= 1, (o, arm)


def test_teleports_move_their_objective(quick: Result) -> None:
    """Each teleport moved φ or ψ in the asked direction or not at all (a line search, and a
    teleport that ends worse is undone), most moved it, and the loss on the teleport batch
    stayed within the guard of 1%, although the action is approximate on 200 samples."""
    t = quick.series["teleports"]
    moved = 0
    for i, arm in enumerate(t["arm"]):
        change = t["objective_after"][i] - t["objective_before"][i]
        assert (change >= 0) if arm.endswith("up") else (change <= 0), (arm, i)
        moved += change != 0
        assert t["max_loss_drift"][i] <= 1e-2 * t["loss_before"][i] * (1 + 1e-6)
        assert abs(t["loss_after"][i] - t["loss_before"][i]) <= t["max_loss_drift"][i] + 1e-12
        assert t["stopped"][i] in STOPS
    assert moved >= 0.8 * len(t["arm"])
    m = quick.metrics
    for o in ("sgd", "adagrad"):
        assert m[f"{o}_phi_up_objective_ratio"] > 1 > m[f"{o}_phi_down_objective_ratio"]
        assert m[f"{o}_psi_up_objective_ratio"] > 1 > m[f"{o}_psi_down_objective_ratio"]


def test_events(quick: Result) -> None:
    """No teleport changes nothing at the teleport; each teleport arm changes the whole
    training-set loss in most runs (the action keeps the loss only on its batch: the warm
    restart)."""
    e = quick.series["events"]
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
    assert all(count >= 3 for count in changed.values()), changed


def test_figures(quick: Result) -> None:
    """One figure per optimizer, 2 × 2 panels (φ and ψ; losses and Δ)."""
    figures = get("teleport-generalization").plot(quick)  # type: ignore[misc]
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
    paper = get("teleport-generalization").presets["paper"]
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
