"""Teleportation benchmark (issue 6): the cost of teleporting, measured against training.

Every figure is a ratio between things timed in the same run on the same machine:

* **ascent step / gradient evaluation** on a 784-512-512-10 LeakyReLU MLP (batch 20, the
  paper's MNIST setting): one step of ``ps.teleport`` (objective ‖∇L‖², its HVP, the pullback
  through the action's tangent, the move and the loss guard), for the neuron rescalings and
  for the pseudo-inverse GL action of Eq. 4.16 on both layer pairs, against one
  forward-and-backward pass; target ≤ 3;
* **one teleport (4 mini-batches × 10 ascent steps) / one training epoch** of SGD at batch 20
  over 48,000 samples (MNIST's training split size; synthetic data of that shape); target < 1;
* **wall-clock speedup to |ΔL| < 1e-3** on the dissertation's regression with GD (Fig 4.7's
  measure, one teleport at epoch 5), using the ``teleport-regression`` experiment's training
  function; target ≥ 1.5;
* **gradient-norm gain per second** of symmetry teleportation against the symmetry-free
  level-set baseline (``ps.level_set_teleport``), as log(‖∇L‖²_after/‖∇L‖²_before)/seconds.

Run ``make bench`` or ``python benchmarks/bench_teleport.py``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

import paramsym as ps
from timing import round_robin, run_sections

WIDTHS = [784, 512, 512, 10]
BATCH = 20
EPOCH_SAMPLES = 48_000


def _mnist_like(samples: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, WIDTHS[0], generator=generator)  # centred, like normalised pixels
    y = torch.randint(0, WIDTHS[-1], (samples,), generator=generator)
    return x, y


def _model() -> nn.Sequential:
    return ps.mlp(WIDTHS, nn.LeakyReLU(0.01), seed=0)


def _symmetries(model: nn.Module, kind: str) -> list[ps.Symmetry]:
    found = ps.symmetries(model, data_dependent=kind == "pinv_GL")
    return [s for s in found if s.dim > 0 and s.name.startswith(kind)]


ASCENT_STEPS = 5
# The pseudo-inverse GL(512) action is timed with the paper's g = I + T (Algorithm 1): the
# exponential of a 512 × 512 algebra element costs more than the rest of the step.
PARAMETERIZATION = {"rescaling": "exp", "pinv_GL": "first_order"}


def ascent_step_cost(repeats: int) -> dict[str, Any]:
    """Seconds per ascent step over seconds per gradient, per action and batch size.

    The rescalings are cheap (O(P)); the pseudo-inverse GL(512) action multiplies h × h and
    h × n matrices and exponentiates an h × h algebra element, O(h³) whatever the batch, so
    its cost in gradients falls as the batch grows (batch 20 is the paper's; at 256 = h/2 the
    action is still exact, while at 512 = h σ(H) of this data already loses rank).
    """
    model, loss_fn = _model(), nn.CrossEntropyLoss()
    leaves = list(model.parameters())
    out: dict[str, Any] = {"target_at_most": 3.0}
    for kind in ("rescaling", "pinv_GL"):
        symmetries = _symmetries(model, kind)
        for batch_size in (BATCH, 256):
            batch = _mnist_like(batch_size, seed=1)

            def gradient(batch: tuple[torch.Tensor, torch.Tensor] = batch) -> None:
                torch.autograd.grad(loss_fn(model(batch[0]), batch[1]), leaves)

            def run(
                steps: int, batch: Any = batch, symmetries: Any = symmetries, kind: str = kind
            ) -> None:
                ps.teleport(
                    model, loss_fn, batch, symmetries, steps=steps, lr=1e-3,
                    parameterization=PARAMETERIZATION[kind], keep_worse=True, update_model=False,
                )  # fmt: skip

            seconds = round_robin(
                {
                    "gradient": gradient,
                    "zero": lambda run=run: run(0),
                    "steps": lambda run=run: run(ASCENT_STEPS),
                },
                repeats,
            )
            per_step = (seconds["steps"] - seconds["zero"]) / ASCENT_STEPS
            out[f"{kind}_batch{batch_size}"] = {
                "gradient_seconds": seconds["gradient"],
                "ascent_step_seconds": per_step,
                "ascent_step_in_gradients": per_step / seconds["gradient"],
                "algebra_dimension": sum(s.dim for s in symmetries),
            }
    return out


def teleport_versus_epoch(repeats: int) -> dict[str, Any]:
    """One teleport of 4 mini-batches × 10 steps against one SGD epoch at batch 20."""
    model, loss_fn = _model(), nn.CrossEntropyLoss()
    x, y = _mnist_like(EPOCH_SAMPLES)
    symmetries = _symmetries(model, "pinv_GL")
    optimizer = torch.optim.SGD(model.parameters(), lr=2e-3)

    def epoch() -> None:
        for start in range(0, EPOCH_SAMPLES, BATCH):
            optimizer.zero_grad()
            loss_fn(model(x[start : start + BATCH]), y[start : start + BATCH]).backward()
            optimizer.step()

    def one_teleport() -> None:
        for k in range(4):
            batch = (x[k * BATCH : (k + 1) * BATCH], y[k * BATCH : (k + 1) * BATCH])
            # update_model=False: the same work, but teleports do not pile up across repeats
            # (each pinv_GL move leaves U with rank ≤ 20, which would make later batches
            # rank-deficient and the action inexact)
            ps.teleport(
                model, loss_fn, batch, symmetries, steps=10, lr=1e-3,
                parameterization="first_order", keep_worse=True, update_model=False,
            )  # fmt: skip

    seconds = round_robin({"epoch": epoch, "teleport": one_teleport}, repeats, warmup=1)
    return {
        "epoch_seconds": seconds["epoch"],
        "teleport_seconds": seconds["teleport"],
        "teleport_over_epoch": seconds["teleport"] / seconds["epoch"],
        "target_below": 1.0,
    }


def regression_speedup(runs: int, steps: int = 2000) -> dict[str, Any]:
    """Fig 4.7's wall-clock speedup to |L_t − L_{t+1}| < 1e-3 with GD, at the paper's teleport.

    Each run trains the ``teleport-regression`` problem twice back to back, without and with
    the one teleport at epoch 5 (GD lr 1e-4; 8 ascent steps at lr 1e-7), on one torch thread.
    """
    from paramsym.experiments.teleport import regression_training
    from paramsym.experiments.teleport.regression import RegressionConfig

    config = RegressionConfig(runs=runs)
    regression_training.warm_up(config.problem(0))
    rows = []
    for run in range(runs):
        base = config.train(run, "gd", steps, None, stop_at_convergence=True)
        tele = config.train(run, "gd", steps, config.plan("gd"), stop_at_convergence=True)
        wall, in_steps = regression_training.speedup(base, tele)
        rows.append(
            {
                "run": run,
                "baseline_seconds": base.time_to_convergence,
                "teleport_seconds": tele.time_to_convergence,
                "teleport_share_seconds": tele.teleport_seconds,
                "baseline_steps": base.converged_step,
                "teleport_steps": tele.converged_step,
                "wall_clock_speedup": wall,
                "step_speedup": in_steps,
            }
        )
    speedups = [r["wall_clock_speedup"] for r in rows if math.isfinite(r["wall_clock_speedup"])]
    return {
        "runs": rows,
        "converged_pairs": len(speedups),
        "median_wall_clock_speedup": statistics.median(speedups) if speedups else math.nan,
        "target_at_least": 1.5,
    }


def level_set_comparison(repeats: int) -> dict[str, Any]:
    """Gradient-norm gain per second: symmetry teleport against level-set teleportation.

    Both take 10 steps from the same point with a backtracking line search. The symmetry
    teleport moves along the neuron rescalings (an exact group action) and along the
    pseudo-inverse GL action of Eq. 4.16 on both layer pairs (``keep_worse=True``: with 20
    samples and 512 hidden units its first move projects U, which lowers ‖∇L‖, and the default
    would undo the teleport).
    """
    model, loss_fn = _model(), nn.CrossEntropyLoss()
    batch = _mnist_like(BATCH, seed=2)
    base = ps.params_of(model)
    runs: dict[str, Any] = {}
    for kind in ("rescaling", "pinv_GL"):
        symmetries = _symmetries(model, kind)

        def ours(symmetries: Any = symmetries, kind: str = kind) -> Any:
            return ps.teleport(
                model, loss_fn, batch, symmetries, steps=10, lr=1.0, params=base,
                parameterization=PARAMETERIZATION[kind], line_search=True, keep_worse=True,
                update_model=False,
            )  # fmt: skip

        runs[f"symmetry_{kind}"] = ours

    def theirs() -> Any:
        return ps.level_set_teleport(
            model, loss_fn, batch, steps=10, params=base, update_model=False
        )

    runs["level_set"] = theirs
    results: dict[str, Any] = {}

    def timed(name: str, fn: Any) -> Any:
        def run() -> None:
            results[name] = fn()

        return run

    seconds = round_robin({k: timed(k, fn) for k, fn in runs.items()}, repeats, warmup=1)
    out: dict[str, Any] = {}
    for name in runs:
        r = results[name]
        gain = (r.grad_norm_after / r.grad_norm_before) ** 2
        out[name] = {
            "seconds": seconds[name],
            "grad_norm_sq_gain": gain,
            "log_gain_per_second": math.log(gain) / seconds[name],
            "loss_drift_relative": abs(r.loss_after - r.loss_before) / abs(r.loss_before),
        }
    for kind in ("rescaling", "pinv_GL"):
        out[f"{kind}_over_level_set"] = (
            out[f"symmetry_{kind}"]["log_gain_per_second"] / out["level_set"]["log_gain_per_second"]
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/teleport.json"))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5, help="regression runs for the speedup")
    args = parser.parse_args()
    torch.manual_seed(0)
    warnings.simplefilter("ignore", ps.ParamsymWarning)
    sections = {
        "ascent_step_cost": lambda: ascent_step_cost(args.repeats),
        "teleport_versus_epoch": lambda: teleport_versus_epoch(max(1, args.repeats // 3)),
        "regression_speedup": lambda: regression_speedup(args.runs),
        "level_set_comparison": lambda: level_set_comparison(args.repeats),
    }
    run_sections(sections, args.out)


if __name__ == "__main__":
    main()
