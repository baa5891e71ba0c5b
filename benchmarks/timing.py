"""Timing helpers shared by the benchmarks: medians timed round-robin, and the machine."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

import torch


def round_robin(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 2
) -> dict[str, float]:
    """Median seconds of each function, timed in turn within every repeat, so that a slow
    period of the machine affects every method alike and the ratios stay fair."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    return round_robin({"fn": fn}, repeats, warmup)["fn"]


def machine() -> dict[str, object]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
