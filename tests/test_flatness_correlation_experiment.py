"""``sharpness-curvature-correlation`` (seed 001, Table 5.1, Figs 5.3, 5.4): a reduced run,
its claims and table, the paper preset and the missing-data errors."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest

import paramsym.experiments.teleport.flatness_correlation as module
from paramsym.errors import InvalidArgumentError, MissingDataError
from paramsym.experiments.registry import Result, SilentProgress, get
from paramsym.teleportation import TEXT_RADII


@pytest.fixture(scope="module")
def reduced() -> Result:
    """A small digits run: 8 models, 1-2 epochs, one probe batch."""
    config = module.CorrelationConfig(
        runs=8,
        learning_rates=(0.01, 0.1),
        epochs=(1, 2),
        probe_batches=1,
        probe_batch_size=64,
        directions=2,
        curves=1,
    )
    return module.run_correlation(config, SilentProgress())


def test_claims_evaluate(reduced: Result) -> None:
    """Every claim gives a measured string and a True/False verdict."""
    entry = get("sharpness-curvature-correlation")
    outcomes = entry.evaluate(reduced)
    assert len(outcomes) == 4
    for outcome in outcomes:
        assert outcome.holds in (True, False)
        assert "digits: r = " in outcome.measured


def test_table_and_metrics(reduced: Result) -> None:
    """One row per model with the table's columns; r, p, CI and n for every quantity."""
    table = reduced.series["models"]
    assert list(table) == module.COLUMNS.split()
    assert len(table["run"]) == 8
    assert set(table["dataset"]) == {"digits"}
    assert all(v >= 0 for v in table["curvature"])
    assert all(math.isfinite(v) for v in table["sharpness"])
    m = reduced.metrics
    for quantity in module.QUANTITIES:
        r, (low, high) = m[f"digits_{quantity}_r"], m[f"digits_{quantity}_ci"]
        assert -1 <= low <= r <= high <= 1
        assert 0 <= m[f"digits_{quantity}_p"] <= 1
        assert m[f"digits_{quantity}_n"] == 8
    assert m["digits_radii"] == list(TEXT_RADII)
    figures = get("sharpness-curvature-correlation").plot(reduced)  # type: ignore[misc]
    assert list(figures) == ["sharpness_curvature_correlation.png"]
    plt.close("all")


def test_pearson_fisher_interval() -> None:
    """The interval is tanh(atanh r ± 1.96/√(n − 3)); a constant column gives NaN."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=40)
    y = x + rng.normal(size=40)
    out = module.pearson(x, y)
    z, se = math.atanh(out["r"]), 1 / math.sqrt(40 - 3)
    q = 1.959963984540054
    assert out["ci"] == pytest.approx([math.tanh(z - q * se), math.tanh(z + q * se)], rel=1e-9)
    assert math.isnan(module.pearson(np.ones(10), y[:10])["r"])


def test_paper_preset() -> None:
    """The dissertation's sizes and the authors' code's settings."""
    entry = get("sharpness-curvature-correlation")
    paper = entry.presets["paper"]
    assert paper.datasets == ("mnist", "fashion_mnist", "cifar10")
    assert paper.runs == 100
    assert paper.epochs == (40,)
    assert paper.batch_size == 20
    assert paper.hidden == (16, 10)
    assert paper.cifar_hidden == (128, 32)
    assert paper.learning_rates == (0.01,)
    assert paper.cifar_learning_rates == (0.02,)
    assert paper.slope == 0.1
    assert not paper.shuffle
    assert paper.probe_batches * paper.directions == 200
    assert paper.probe_batches * paper.curves == 200
    assert paper.probe_batch_size == 200
    assert module.radii_for("mnist", paper) == TEXT_RADII
    assert module.radii_for("cifar10", paper) == module.CODE_RADII
    assert module.CODE_RADII[0] == 0.0001
    assert module.CODE_RADII[-1] == 0.0191


@pytest.mark.parametrize(
    ("name", "file"),
    [("mnist", "idx"), ("fashion_mnist", "idx"), ("cifar10", "data_batch_1")],
)
def test_missing_paper_data(tmp_path, name: str, file: str) -> None:
    """Each paper data set without its files raises MissingDataError naming what it needs."""
    config = get("sharpness-curvature-correlation").config("paper", {"data_dir": str(tmp_path)})
    with pytest.raises(MissingDataError, match=file):
        module.correlation_split(name, config)


def test_bad_input() -> None:
    """An unknown data set and too few runs are refused."""
    with pytest.raises(InvalidArgumentError, match="datasets"):
        module.correlation_split("imagenet", module.CorrelationConfig())
    with pytest.raises(InvalidArgumentError, match="runs"):
        module.run_correlation(module.CorrelationConfig(runs=3), SilentProgress())
