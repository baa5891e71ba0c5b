"""Plotting helpers of the teleportation training experiments (seed 001, Figs 4.6, 4.8, 5.9-5.11).

Log-scale bands over seeds and loss-curve panels, used by ``teleport-mnist``,
``teleport-schedules``, ``teleport-optimizers`` and ``teleport-cnn``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

# -- plotting helpers -----------------------------------------------------------------------------


def log_bands(table: Mapping[str, list[Any]], value: str, x: str = "epoch") -> dict[str, Any]:
    """``{arm: (xs, centre, lower, upper)}`` over runs from a long-format table, for log axes:
    the geometric mean and ±1 standard deviation of log10(value) (diverged runs give gaps)."""
    out: dict[str, Any] = {}
    for arm in dict.fromkeys(table["arm"]):
        rows = [i for i, a in enumerate(table["arm"]) if a == arm]
        runs = sorted({table["run"][i] for i in rows})
        values, xs = (
            np.array([[float(table[c][i]) for i in rows if table["run"][i] == r] for r in runs])
            for c in (value, x)
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log10(np.where(values > 0, values, np.nan))
        mean, std = logs.mean(axis=0), logs.std(axis=0)
        out[arm] = (xs.mean(axis=0), 10**mean, 10 ** (mean - std), 10 ** (mean + std))
    return out


def plot_band(axes: Any, xs: Any, centre: Any, lower: Any, upper: Any, **style: Any) -> None:
    """One of :func:`log_bands`'s arms: the centre line and, where it has width, the band."""
    axes.plot(xs, centre, **style)
    if np.nanmax(upper - lower, initial=0.0) > 0:
        axes.fill_between(xs, lower, upper, color=style.get("color"), alpha=0.2)


def plot_losses(
    axes: Any,
    table: Mapping[str, list[Any]],
    arms: Sequence[str],
    colours: Mapping[str, str],
    x: str = "epoch",
    labels: Mapping[str, str] | None = None,
) -> None:
    """Training loss solid, validation loss dashed (geometric mean ± std over runs), log y."""
    train = log_bands(table, "train_loss", x)
    val = log_bands(table, "val_loss", x)
    for arm in arms:
        name = (labels or {}).get(arm, arm)
        plot_band(axes, *train[arm], color=colours[arm], label=f"{name} (train)")
        plot_band(axes, *val[arm], color=colours[arm], linestyle="--", label=f"{name} (val)")
    axes.set_yscale("log")
    axes.set_xlabel("epoch" if x == "epoch" else "wall-clock time (s)")
    axes.set_ylabel("loss")


def palette(labels: Sequence[str]) -> dict[str, str]:
    """One viridis colour per label, evenly spaced."""
    cycle = plt.get_cmap("viridis")
    count = max(len(labels) - 1, 1)
    return {label: cycle(i / count) for i, label in enumerate(labels)}  # type: ignore[misc]
