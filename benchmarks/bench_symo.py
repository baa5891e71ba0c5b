"""SymO benchmark (issue 7, seed 002): the cost of a SymO step, measured against peers in the
same run.

* **step time against Adam** on the paper's 100-70-40 Tanh net without bias, full batch of
  5000 points: one training iteration (forward, backward, step) and the optimizer step alone,
  for SymO and for GD, Adam, K-FAC and Shampoo with Table 2's hyperparameters; target: SymO
  iteration ≤ 1.5× Adam's;
* **against dense full-matrix preconditioning**: the same Σ̂^{−1/2} g formed densely (the P × P
  matrix from the factors, ``torch.linalg.eigh``, a matrix–vector product) against SymO's
  Kronecker step, on scaled copies of the net (P up to 1568 by default; the paper's P = 9800
  with ``--dense-full``, minutes per eigendecomposition);
* **step time against hidden width** d_1 = 70 … 4480 (d_0 = 100, d_2 = 40): the inverse root
  of the factors (an eigendecomposition of the (d_0 + d_2)² surrogate) stays flat, only the
  gradient stacking and the update grow with d_1;
* **wall-clock to Adam's 100-iteration test loss**: SymO against Adam on the teacher–student
  task of Figs 5–6 (linear and Tanh), training steps timed in the same process.

Run ``python benchmarks/bench_symo.py`` (``--repeats 2`` for a smoke run).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from paramsym.data import teacher_student
from paramsym.experiments.symo_training import half_mse, student, table2_key, train
from paramsym.symo import OPTIMIZERS, TABLE2, SymO, make_optimizer
from timing import round_robin, run_sections

F64 = torch.float64
WIDTHS = (100, 70, 40)
POINTS = 5000


def _problem(
    widths: tuple[int, ...], activation: str, points: int = POINTS
) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    data = teacher_student(widths, activation, points, 0, seed=0, dtype=F64)
    return student(widths, activation, seed=1), data.train


def _iteration(
    optimizer: torch.optim.Optimizer, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> Callable[[], None]:
    def run() -> None:
        optimizer.zero_grad()
        half_mse(model(batch[0]), batch[1]).backward()
        optimizer.step()

    return run


def step_time_versus_adam(repeats: int) -> dict[str, Any]:
    """Seconds per iteration and per optimizer step, five optimizers, the paper's net."""
    out: dict[str, Any] = {"target_symo_over_adam_at_most": 1.5}
    iterations: dict[str, Callable[[], object]] = {}
    steps: dict[str, Callable[[], object]] = {}
    for name in OPTIMIZERS:
        model, batch = _problem(WIDTHS, "tanh")
        optimizer = make_optimizer(name, model, TABLE2["tanh"][name])
        iterations[name] = _iteration(optimizer, model, batch)
        iterations[name]()  # gradients (and K-FAC's hooks' records) for the step-only timing
        steps[name] = optimizer.step
    full = round_robin(iterations, repeats)
    alone = round_robin(steps, repeats)
    for name in OPTIMIZERS:
        out[name] = {"iteration_seconds": full[name], "step_seconds": alone[name]}
    out["symo_over_adam_iteration"] = full["symo"] / full["adam"]
    out["symo_over_adam_step"] = alone["symo"] / alone["adam"]
    return out


def _symo_after_steps(
    widths: tuple[int, ...], points: int, steps: int = 3
) -> tuple[SymO, nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    model, batch = _problem(widths, "tanh", points)
    optimizer = SymO(model, **TABLE2["tanh"]["symo"])
    run = _iteration(optimizer, model, batch)
    for _ in range(steps):
        run()
    return optimizer, model, batch


def dense_versus_kronecker(repeats: int, full: bool) -> dict[str, Any]:
    """SymO's step against forming Σ̂^{−1/2} densely (P × P) and multiplying."""
    scales = [(10, 7, 4), (20, 14, 8), (40, 28, 16)] + ([WIDTHS] if full else [])
    out: dict[str, Any] = {}
    for widths in scales:
        optimizer, model, _ = _symo_after_steps(widths, 500)
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

        def dense(optimizer: SymO = optimizer, grads: Any = grads) -> None:
            matrix = optimizer.curvature().to_dense(max_params=10**5)
            values, vectors = torch.linalg.eigh(matrix)
            keep = values > values.max() * values.shape[0] * torch.finfo(values.dtype).eps
            powered = torch.where(keep, values.clamp_min(1e-300).rsqrt(), 0.0)
            root = (vectors * powered) @ vectors.T
            root @ optimizer.structure.flatten(grads)

        seconds = round_robin(
            {"symo_step": optimizer.step, "dense": dense}, max(1, repeats), warmup=1
        )
        out[f"P{optimizer.structure.num_params}"] = {
            "widths": list(widths),
            "symo_step_seconds": seconds["symo_step"],
            "dense_seconds": seconds["dense"],
            "dense_over_symo": seconds["dense"] / seconds["symo_step"],
        }
    return out


def width_scaling(repeats: int, widths: tuple[int, ...] = (70, 280, 1120, 4480)) -> dict[str, Any]:
    """SymO's step and its inverse root against the hidden width (1000 points)."""
    out: dict[str, Any] = {}
    for hidden in widths:
        optimizer, _, _ = _symo_after_steps((WIDTHS[0], hidden, WIDTHS[2]), 1000)

        def inverse_root(optimizer: SymO = optimizer) -> None:
            optimizer.curvature().inverse_root()

        seconds = round_robin({"step": optimizer.step, "inverse_root": inverse_root}, repeats)
        out[f"d1_{hidden}"] = {
            "step_seconds": seconds["step"],
            "inverse_root_seconds": seconds["inverse_root"],
            "surrogate_size": optimizer.structure.surrogate_size,
        }
    first, last = out[f"d1_{widths[0]}"], out[f"d1_{widths[-1]}"]
    out["inverse_root_growth"] = last["inverse_root_seconds"] / first["inverse_root_seconds"]
    out["step_growth"] = last["step_seconds"] / first["step_seconds"]
    out["width_growth"] = widths[-1] / widths[0]
    return out


def time_to_adam_loss(iterations: int = 100) -> dict[str, Any]:
    """Seconds of training until SymO's test loss reaches Adam's after ``iterations``."""
    out: dict[str, Any] = {}
    for activation in ("identity", "tanh"):
        data = teacher_student(WIDTHS, activation, POINTS, POINTS, seed=0, dtype=F64)
        table = TABLE2[table2_key(activation)]
        adam = train("adam", student(WIDTHS, activation, 1), data, iterations, table["adam"])
        symo = train("symo", student(WIDTHS, activation, 1), data, iterations, table["symo"])
        target = adam.test_loss[-1]
        reached = next((i for i, v in enumerate(symo.test_loss) if v <= target), None)
        symo_seconds = symo.seconds[reached] if reached is not None else math.nan
        out[activation] = {
            "adam_loss": target,
            "adam_seconds": adam.seconds[-1],
            "symo_iterations_to_adam_loss": reached,
            "symo_seconds_to_adam_loss": symo_seconds,
            "wall_clock_speedup": adam.seconds[-1] / symo_seconds,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/symo.json"))
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--dense-full", action="store_true", help="dense step at P = 9800 too")
    args = parser.parse_args()
    torch.manual_seed(0)
    sections = {
        "step_time_versus_adam": lambda: step_time_versus_adam(args.repeats),
        "dense_versus_kronecker": lambda: dense_versus_kronecker(args.repeats, args.dense_full),
        "width_scaling": lambda: width_scaling(args.repeats),
        "time_to_adam_loss": time_to_adam_loss,
    }
    run_sections(sections, args.out)


if __name__ == "__main__":
    main()
