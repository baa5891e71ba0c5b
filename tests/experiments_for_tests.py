"""A tiny experiment for testing the runner: it logs each seed it runs and can die on one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from paramsym.experiments.registry import Claim, Progress, Result, experiment


@dataclass(frozen=True)
class CounterConfig:
    seed: int = 0
    log: str = ""  # file to which every run appends its seed
    kill_file: str = ""  # while this file exists, the worker running seed 3 dies (os._exit)
    offset: float = 0.0


def plot(result: Result) -> dict[str, Any]:
    figure, axes = plt.subplots()
    axes.plot(result.series["values"]["x"], result.series["values"]["y"])
    return {"values.png": figure}


@experiment(
    "test-counter",
    seed_ref="test",
    description="counts its runs",
    quick=CounterConfig(),
    paper=CounterConfig(offset=1.0),
    claims=[
        Claim(
            "value is seed + offset", "test", "seed + offset", lambda r: (r.metrics["value"], True)
        ),
        Claim(
            "value is small", "test", "< 2", lambda r: (r.metrics["value"], r.metrics["value"] < 2)
        ),
    ],
    plot=plot,
)
def run_counter(config: CounterConfig, progress: Progress) -> Result:
    if config.seed == 3 and config.kill_file and Path(config.kill_file).exists():
        os._exit(1)  # like a worker killed by the OS: no exception, no cleanup
    if config.log:
        with Path(config.log).open("a") as file:
            file.write(f"{config.seed}\n")
    value = config.seed + config.offset
    return Result(
        {"value": value, "label": "x"},
        {"values": {"x": [0, 1, 2], "y": [value, value + 1, value + 2]}},
    )


@experiment(
    "test-counter-offset",
    seed_ref="test",
    description="counts its runs from an offset",
    quick=CounterConfig(offset=0.5),
    paper=CounterConfig(offset=1.5),
    claims=[
        Claim(
            "value is small", "test", "< 2", lambda r: (r.metrics["value"], r.metrics["value"] < 2)
        )
    ],
    plot=plot,
)
def run_counter_offset(config: CounterConfig, progress: Progress) -> Result:
    return run_counter(config, progress)


@experiment(
    "test-broken",
    seed_ref="test",
    description="always fails (reproduce must finish the others and then name it)",
    quick=CounterConfig(),
    paper=CounterConfig(),
    claims=[Claim("never measured", "test", "-", lambda r: (None, True))],
)
def run_broken(config: CounterConfig, progress: Progress) -> Result:
    raise RuntimeError("broken on purpose")
