"""Teleportation benchmark (issue 6): the cost of teleporting, measured against training.

Every figure is a ratio between things timed in the same run on the same machine:

* **one whole teleport / gradient evaluation** on a 784-512-512-10 LeakyReLU MLP (batch 20,
  the paper's MNIST setting, and 256): the default 10-step teleport along the neuron
  rescalings by gradient transport and by the Hessian path; target ≤ 2;
* **ascent step / gradient evaluation** for the data-dependent GL actions (Eqs. 4.13, 4.16)
  on both layer pairs; target ≤ 3;
* **sharpness and curvature objectives**: one ascent step in gradient evaluations;
* **one teleport (4 mini-batches × 10 ascent steps) / one training epoch** of SGD at batch 20
  over 48,000 samples (MNIST's training split size; synthetic data of that shape); target < 1;
* **wall-clock speedup to |ΔL| < 1e-3** on the dissertation's regression with GD (Fig 4.7's
  measure, one teleport at epoch 5), with the paper's teleport and with the untuned default,
  using the ``teleport-regression`` experiment's training function; target ≥ 1.5;
* **gradient-norm gain per second** of symmetry teleportation against the symmetry-free
  level-set baseline (``ps.level_set_teleport``), as log(‖∇L‖²_after/‖∇L‖²_before)/seconds.

Every timing runs on one torch thread (``--threads``). Run ``make bench`` or
``python benchmarks/bench_teleport.py``.
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
    found = ps.symmetries(model, data_dependent=kind != "rescaling")
    return [s for s in found if s.dim > 0 and s.name.startswith(kind)]


# The pseudo-inverse GL(512) action is timed with the paper's g = I + T (Algorithm 1): the
# exponential of a 512 × 512 algebra element costs more than the rest of the step.
PARAMETERIZATION = {"rescaling": "exp", "pinv_GL": "first_order", "inverse_GL": "first_order"}
BATCHES = (BATCH, 256)


def _gradient(model: nn.Module, loss_fn: nn.Module, batch: Any) -> Any:
    leaves = list(model.parameters())
    return lambda: torch.autograd.grad(loss_fn(model(batch[0]), batch[1]), leaves)


def whole_teleport_cost(repeats: int) -> dict[str, Any]:
    """One default teleport (10 trust-region steps on ‖∇L‖² along the 1024 neuron rescalings)
    in gradient evaluations, by gradient transport (``method="auto"``: one gradient, a loss
    check and O(P) matrix-vector work per step) and by the Hessian path (reverse over reverse
    through the actions at every step); target ≤ 2 for the transport."""
    model, loss_fn = _model(), nn.CrossEntropyLoss()
    symmetries = _symmetries(model, "rescaling")
    out: dict[str, Any] = {"target_at_most": 2.0}
    for batch_size in BATCHES:
        batch = _mnist_like(batch_size, seed=1)

        def run(method: str, batch: Any = batch) -> None:
            ps.teleport(model, loss_fn, batch, symmetries, method=method, update_model=False)

        seconds = round_robin(
            {
                "gradient": _gradient(model, loss_fn, batch),
                "transport": lambda run=run: run("transport"),
                "hessian": lambda run=run: run("hessian"),
            },
            repeats,
        )
        out[f"batch{batch_size}"] = {
            "gradient_seconds": seconds["gradient"],
            "transport_in_gradients": seconds["transport"] / seconds["gradient"],
            "hessian_in_gradients": seconds["hessian"] / seconds["gradient"],
            "transport_speedup": seconds["hessian"] / seconds["transport"],
        }
    return out


ASCENT_STEPS = 5


def data_dependent_step_cost(repeats: int) -> dict[str, Any]:
    """Seconds per ascent step over seconds per gradient for the data-dependent GL actions of
    both layer pairs (Eq. 4.13 ``inverse_GL`` and Eq. 4.16 ``pinv_GL``, g = I + T), from the
    difference between 5-step and 0-step teleports; target ≤ 3.

    A step is one reverse-over-reverse evaluation (forward, backward with graph, backward)
    plus the moves: acting with a GL(512) element multiplies and inverts 512 × 512 matrices,
    O(h³) whatever the batch, about 3 gradients at batch 20 on its own, so the step's cost in
    gradients falls as the batch grows.
    """
    model, loss_fn = _model(), nn.CrossEntropyLoss()
    out: dict[str, Any] = {"target_at_most": 3.0}
    for kind in ("inverse_GL", "pinv_GL"):
        symmetries = _symmetries(model, kind)
        for batch_size in BATCHES:
            batch = _mnist_like(batch_size, seed=1)

            def run(
                steps: int, batch: Any = batch, symmetries: Any = symmetries, kind: str = kind
            ) -> None:
                ps.teleport(
                    model, loss_fn, batch, symmetries, steps=steps, lr=1e-3,
                    parameterization=PARAMETERIZATION[kind], keep_worse=True, update_model=False,
                )  # fmt: skip

            seconds = round_robin(
                {
                    "gradient": _gradient(model, loss_fn, batch),
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


CURVATURE_WIDTHS = [64, 32, 10, 10]
CURVATURE_BATCH = 200


def curvature_objective_cost(repeats: int) -> dict[str, Any]:
    """One ascent step on the sharpness φ (Eq. 5.1: 200 directions × the text's 20 radii,
    vmapped) and on the orbit curvature ψ (Eq. 5.2: k = 1 curve through the inverse-activation
    GL actions of both layer pairs, by nested forward-mode derivatives), in gradient
    evaluations, in ch. 5's setting: a 3-layer LeakyReLU MLP (digits-sized, 64-32-10-10) on a
    probe batch of 200 (the authors' code).

    φ costs about one forward pass per (direction, radius) pair, 4,000 in all, and its gradient
    one backward pass through them; ψ differentiates third derivatives of the action."""
    model = ps.mlp(CURVATURE_WIDTHS, nn.LeakyReLU(0.1), bias=False, seed=0)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(CURVATURE_BATCH, CURVATURE_WIDTHS[0], generator=generator)
    batch = (x, torch.randint(0, CURVATURE_WIDTHS[-1], (CURVATURE_BATCH,), generator=generator))
    symmetries = _symmetries(model, "inverse_GL")
    objectives = {
        "sharpness": ps.Sharpness(generator=torch.Generator().manual_seed(0)),
        "curvature": ps.Curvature(generator=torch.Generator().manual_seed(0)),
    }
    out: dict[str, Any] = {"widths": CURVATURE_WIDTHS, "batch": CURVATURE_BATCH}
    for name, objective in objectives.items():

        def run(steps: int, objective: Any = objective) -> None:
            ps.teleport(
                model, loss_fn, batch, symmetries, objective=objective, steps=steps, lr=1e-3,
                parameterization="first_order", allow_approximate=True, keep_worse=True,
                update_model=False,
            )  # fmt: skip

        seconds = round_robin(
            {
                "gradient": _gradient(model, loss_fn, batch),
                "zero": lambda run=run: run(0),
                "step": lambda run=run: run(1),
            },
            repeats,
            warmup=1,
        )
        step = seconds["step"] - seconds["zero"]
        out[name] = {
            "gradient_seconds": seconds["gradient"],
            "ascent_step_seconds": step,
            "ascent_step_in_gradients": step / seconds["gradient"],
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


def regression_speedup(runs: int, steps: int = 3000) -> dict[str, Any]:
    """Fig 4.7's wall-clock speedup to |L_t − L_{t+1}| < 1e-3 with GD (lr 1e-4), one teleport at
    epoch 5 along the Eq. 4.13 GL actions, two ways: the paper's (8 ascent steps at lr 1e-7,
    each bounded to ‖T‖ ≤ 0.1) and ``ps.teleport``'s untuned default (10 trust-region steps of
    ‖T‖ = 0.1). Each run trains without and with the teleport back to back, on one thread."""
    from paramsym.experiments.teleport import regression_training as rt

    plans = {"paper": rt.RegressionTeleport(), "default": rt.RegressionTeleport(steps=10, lr=None)}
    rt.warm_up(rt.make_regression_problem(0))
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in plans}
    for run in range(runs):
        problem = rt.make_regression_problem(run)
        base = rt.train_regression(problem, "gd", 1e-4, steps, None, stop_at_convergence=True)
        for name, plan in plans.items():
            tele = rt.train_regression(problem, "gd", 1e-4, steps, plan, stop_at_convergence=True)
            wall, in_steps = rt.speedup(base, tele)
            rows[name].append(
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
    out: dict[str, Any] = {"target_at_least": 1.5}
    for name, table in rows.items():
        wall = [r["wall_clock_speedup"] for r in table if math.isfinite(r["wall_clock_speedup"])]
        in_steps = [r["step_speedup"] for r in table if math.isfinite(r["step_speedup"])]
        out[name] = {
            "runs": table,
            "converged_pairs": len(wall),
            "median_wall_clock_speedup": statistics.median(wall) if wall else math.nan,
            "median_step_speedup": statistics.median(in_steps) if in_steps else math.nan,
        }
    return out


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
    parser.add_argument("--runs", type=int, default=8, help="regression runs for the speedup")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for every timing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    warnings.simplefilter("ignore", ps.ParamsymWarning)
    sections = {
        "whole_teleport_cost": lambda: whole_teleport_cost(args.repeats),
        "data_dependent_step_cost": lambda: data_dependent_step_cost(args.repeats),
        "curvature_objective_cost": lambda: curvature_objective_cost(max(1, args.repeats // 3)),
        "teleport_versus_epoch": lambda: teleport_versus_epoch(max(1, args.repeats // 3)),
        "regression_speedup": lambda: regression_speedup(args.runs),
        "level_set_comparison": lambda: level_set_comparison(args.repeats),
    }
    run_sections(sections, args.out)


if __name__ == "__main__":
    main()
