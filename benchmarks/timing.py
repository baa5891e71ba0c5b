"""Timing helpers shared by the benchmarks: medians timed round-robin, and the machine."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

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


def run_sections(
    sections: dict[str, Callable[[], object]], out: Path, header: dict[str, object] | None = None
) -> dict[str, object]:
    """Run each benchmark section in turn, printing it and rewriting ``out`` (JSON) after each
    one, so that an interrupted run keeps what finished; ``seconds`` is the total."""
    start = time.perf_counter()
    results: dict[str, object] = {"machine": machine(), **(header or {})}
    out.parent.mkdir(parents=True, exist_ok=True)
    for name, section in sections.items():
        results[name] = section()
        print(name, json.dumps(results[name], indent=2))
        out.write_text(json.dumps(results, indent=2) + "\n")
    results["seconds"] = time.perf_counter() - start
    out.write_text(json.dumps(results, indent=2) + "\n")
    return results
