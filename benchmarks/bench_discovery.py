"""Exact linear symmetry discovery benchmark (issue 21): its cost in gradient evaluations.

* **layer pairs on a 784-256-256-10 ReLU MLP** (softmax cross-entropy, MNIST-shaped Gaussian
  inputs, float64): ``ps.discover_symmetries(model, loss, data)`` with default settings, i.e.
  the layer-pair ansatz (262,244 unknowns: M, N ∈ gl(256) on both hidden layers and the
  10 × 10 output block) solved unit by unit; its wall time (target < 30 s on one thread), the
  dimension it finds against the known one (256 + 256 rescalings and the 10-dim output
  translation M = 1uᵀ), and the cost in gradient evaluations: wall time / one float64
  forward-backward pass of the same model at the batch size discovery draws;
* **a ResNet-style net** (the zoo's ``ResidualBlockNet``: conv–BN–ReLU stem, a BasicBlock
  with a skip, pooling, linear; evaluation mode; 8 × 8 images, cross-entropy) under the default
  ansatz, which on a non-MLP is the layer pairs read off the traced graph (``"channels"``),
  solved densely: wall time, dimension against the catalogue's parameter rescalings plus the
  logit shifts, and cost in gradient evaluations; and what ResNet-18 (the detector's benchmark
  model) would need: the dense system is refused with its size, since the unit-wise solver
  covers only MLP chains;
* **the dense solver** on small models (full gl(P) of a bias-free linear 3-4-2 net, P = 20,
  K = 400; the layer pairs of a 3-5-4-2 ReLU MLP, dense against unit-wise): the same two
  figures.

Every timing runs on one torch thread (``--threads``). Run ``python benchmarks/bench_discovery.py``
(writes ``benchmarks/results/discovery.json``).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import paramsym as ps
from paramsym.discovery import DiscoveryResult, discover_symmetries
from timing import median_seconds, run_sections

WIDTHS = [784, 256, 256, 10]
BATCH = 512


def _classes(inputs: int, classes: int, size: int) -> Callable[[torch.Generator], Any]:
    def draw(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(size, inputs, generator=generator, dtype=torch.float64)
        return x, torch.randint(0, classes, (size,), generator=generator)

    return draw


def _regression(inputs: int, outputs: int, size: int) -> Callable[[torch.Generator], Any]:
    def draw(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(size, inputs, generator=generator, dtype=torch.float64)
        return x, torch.randn(size, outputs, generator=generator, dtype=torch.float64)

    return draw


def gradient_seconds(model: nn.Module, loss_fn: nn.Module, batch: Any, repeats: int) -> float:
    """Median time of one forward-backward pass (all parameter gradients) at ``batch``."""
    x, y = batch

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()

    return median_seconds(step, repeats)


def _summary(result: DiscoveryResult, seconds: float, gradient: float) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "dim": result.dim,
        "determined": result.determined,
        "gap": result.gap,
        "samples": result.samples,
        "dims_by_samples": {str(k): v for k, v in result.dims_by_samples.items()},
        "rows": result.rows,
        "unknowns": result.unknowns,
        "solver": result.solver,
        "forward_backward_passes": result.gradient_evaluations,
        "gradient_seconds": gradient,
        "cost_in_gradient_evaluations": seconds / gradient,
    }


def layer_pairs_mlp(repeats: int) -> dict[str, Any]:
    model = ps.mlp(WIDTHS, "relu", seed=0, dtype=torch.float64)
    loss = nn.CrossEntropyLoss()
    data = _classes(WIDTHS[0], WIDTHS[-1], BATCH)
    gradient = gradient_seconds(model, loss, data(torch.Generator().manual_seed(1)), 20)
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = discover_symmetries(model, loss, data)
        times.append(time.perf_counter() - start)
    assert result is not None
    seconds = sorted(times)[len(times) // 2]
    expected = 2 * 256 + WIDTHS[-1]
    return {
        "model": "784-256-256-10 ReLU MLP, cross-entropy, float64",
        "batch": BATCH,
        **_summary(result, seconds, gradient),
        "expected_dim": expected,
        "dim_matches": result.dim == expected,
        "target_seconds": 30.0,
        "within_target": seconds < 30.0,
        "repeats": repeats,
    }


def _images(channels: int, size: int, classes: int, batch: int) -> Callable[..., Any]:
    def draw(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch, channels, size, size, generator=generator, dtype=torch.float64)
        return x, torch.randint(0, classes, (batch,), generator=generator)

    return draw


def resnet_style(width: int, repeats: int) -> dict[str, Any]:
    from paramsym.nn.zoo import ResidualBlockNet, resnet18

    torch.manual_seed(0)
    model = ResidualBlockNet(in_channels=3, width=width).double().eval()
    loss = nn.CrossEntropyLoss()
    classes = int(model.fc.out_features)
    data = _images(3, 8, classes, 32)
    gradient = gradient_seconds(model, loss, data(torch.Generator().manual_seed(1)), 20)
    results = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = discover_symmetries(model, loss, data)
        results.append((time.perf_counter() - start, result))
    seconds, result = sorted(results, key=lambda r: r[0])[len(results) // 2]
    expected = 2 * width + classes  # two BN→conv/linear rescalings, the logit shifts
    out: dict[str, Any] = {
        "model": f"ResidualBlockNet(width={width}), eval mode, 8x8 inputs, cross-entropy, float64",
        "batch": 32,
        **_summary(result, seconds, gradient),
        "ansatz": result.ansatz,
        "expected_dim": expected,
        "dim_matches": result.dim == expected,
        "target_seconds": 30.0,
        "within_target": seconds < 30.0,
        "repeats": repeats,
    }
    big = resnet18().double().eval()
    try:
        discover_symmetries(big, loss, _images(3, 32, 1000, 2), samples=2)
        out["resnet18"] = "ran (unexpected: the dense system should not fit)"
    except ps.InvalidArgumentError as error:
        out["resnet18"] = str(error)
    return out


def dense_small(repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    linear = ps.mlp([3, 4, 2], "identity", bias=False, seed=0, dtype=torch.float64)
    relu = ps.mlp([3, 5, 4, 2], "relu", seed=0, dtype=torch.float64)
    mse = nn.MSELoss()
    cases = {
        "linear_3-4-2_full": (linear, "full", "dense", 16),
        "relu_3-5-4-2_layer_pairs_dense": (relu, "layer_pairs", "dense", 9),
        "relu_3-5-4-2_layer_pairs_unitwise": (relu, "layer_pairs", "unitwise", 9),
    }
    for name, (model, ansatz, solver, expected) in cases.items():
        data = _regression(int(model[0].in_features), int(model[-1].out_features), 16)
        gradient = gradient_seconds(model, mse, data(torch.Generator().manual_seed(1)), 50)
        results = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = discover_symmetries(model, mse, data, ansatz, solver=solver)
            results.append((time.perf_counter() - start, result))
        seconds, result = sorted(results, key=lambda r: r[0])[len(results) // 2]
        out[name] = {**_summary(result, seconds, gradient), "expected_dim": expected}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/discovery.json"))
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of the big MLP")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for every timing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    warnings.simplefilter("ignore", ps.ParamsymWarning)
    sections = {
        "dense_small": lambda: dense_small(max(3, args.repeats)),
        "layer_pairs_mlp": lambda: layer_pairs_mlp(args.repeats),
        "resnet_style": lambda: resnet_style(16, args.repeats),
    }
    run_sections(sections, args.out)


if __name__ == "__main__":
    main()
