"""Equivariance-identity benchmark (issue 19, seed 003): the cost of checking Theorem 1's items
1 and 2a for one generator, as a ratio to one gradient measured in the same run.

Model: the 784-512-512-10 ReLU MLP with biases (669,706 parameters), a batch of 256, MSE loss,
float32, at g₀ (A = I), the sanity check off (it is a separate, optional pass). Timed
round-robin (``timing.round_robin``):

* **gradient**: one forward and backward, ``loss.backward()`` on the model (the unit);
* **symmetry** (S = id): a user-defined one-parameter rescaling of the first hidden layer,
  T(θ, g) = (e^g W₁, e^g b₁, e^{−g} W₂, …) with its generator in closed form (``tangent=``),
  through ``ps.check_identities(..., identities=("item1", "item2a"), sanity=False)``; target
  ≤ 3.5 gradients; ``symmetry_without_tangent``: the same T alone (J from a backward pass
  through T);
* **equivariance** (S ≠ id): ``ps.equivariance.homogeneity(model)`` (T = e^g θ with the l-th
  bias scaled by e^{lg}, S = e^{3g} y), the same call; target ≤ 4 gradients;
  ``equivariance_fused``: with ``fused=True`` (the output-side VJP folded into the HVP);
* **references**: one Hessian-vector product by double backward, and one by
  ``torch.func.jvp(grad)`` (forward over reverse), to place the check between them.

Peak memory: the resident high-water mark of each piece's first call in a fresh process, above
what the process held before it (``peak_memory``), at hidden widths 512 and 2048 (P grows 8.7×):
``extra_peak_over_theta`` is the growth of the peak over the growth of θ's size, a small
constant for O(P) memory (the dense Hessian of the 512 model alone would take 1.6 TiB).

Run ``make bench`` or ``python benchmarks/bench_equivariance.py`` (``--repeats 3`` for a smoke
run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import paramsym as ps
import peak_memory
from timing import round_robin, run_sections

WIDTHS = (784, 512, 512, 10)
BATCH = 256
TARGETS = {"symmetry": 3.5, "equivariance": 4.0}


def mean_squared_error(output: Tensor, target: Tensor) -> Tensor:
    """MSE from elementary operations (``nn.MSELoss`` has no forward-over-reverse rule in
    PyTorch, pytorch/pytorch#123996, and the forward-over-reverse reference needs one)."""
    return ((output - target) ** 2).mean()


def _problem(
    hidden: int = WIDTHS[1],
) -> tuple[nn.Module, Callable[[Tensor, Tensor], Tensor], tuple[Tensor, Tensor]]:
    torch.manual_seed(0)
    model = ps.mlp([WIDTHS[0], hidden, hidden, WIDTHS[-1]], activation="relu", seed=0)
    batch = (torch.randn(BATCH, WIDTHS[0]), torch.randn(BATCH, WIDTHS[-1]))
    return model, mean_squared_error, batch


def layer_rescaling(with_tangent: bool) -> ps.Equivariance:
    """Rescale the first hidden layer's neurons together: a one-generator symmetry of a ReLU
    net (incoming weight and bias by e^g, outgoing weight by e^{−g}), written as a user would;
    ``with_tangent`` also gives its generator in closed form (as the catalogue's and the
    built-ins' equivariances do), which spares the check one backward pass through T."""
    powers = {"0.weight": 1.0, "0.bias": 1.0, "2.weight": -1.0}

    def transform(params: dict[str, Tensor], g: Tensor) -> dict[str, Tensor]:
        return {k: t * (powers[k] * g[0]).exp() if k in powers else t for k, t in params.items()}

    def tangent(params: dict[str, Tensor], xi: Tensor) -> dict[str, Tensor]:
        return {k: powers[k] * xi[0] * t for k, t in params.items() if k in powers}

    return ps.Equivariance(
        transform, dim=1, name="rescaling[0->2]", tangent=tangent if with_tangent else None
    )


def _timed_pieces(
    model: nn.Module, loss_fn: Callable[[Tensor, Tensor], Tensor], batch: tuple[Tensor, Tensor]
) -> dict[str, Callable[[], Any]]:
    params = dict(model.named_parameters())
    vector = {k: torch.randn_like(t) for k, t in params.items()}
    homogeneity = ps.equivariance.homogeneity(model)

    def gradient() -> None:
        model.zero_grad()
        loss_fn(model(batch[0]), batch[1]).backward()

    def check(transformation: Any, **options: Any) -> Callable[[], Any]:
        return lambda: ps.check_identities(
            model,
            loss_fn,
            batch,
            transformation,
            identities=("item1", "item2a"),
            sanity=False,
            **options,
        )

    def hvp_double_backward() -> None:
        ps.hvp(model, loss_fn, batch, vector, method="reverse_over_reverse")

    def hvp_forward_over_reverse() -> None:
        ps.hvp(model, loss_fn, batch, vector, method="forward_over_reverse")

    return {
        "gradient": gradient,
        "symmetry": check(layer_rescaling(with_tangent=True)),
        "symmetry_without_tangent": check(layer_rescaling(with_tangent=False)),
        "equivariance": check(homogeneity),
        "equivariance_fused": check(homogeneity, fused=True),
        "hvp_double_backward": hvp_double_backward,
        "hvp_forward_over_reverse": hvp_forward_over_reverse,
    }


def cost_in_gradients(repeats: int) -> dict[str, Any]:
    model, loss_fn, batch = _problem()
    pieces = _timed_pieces(model, loss_fn, batch)
    seconds = round_robin(pieces, repeats)
    ratios = {name: seconds[name] / seconds["gradient"] for name in pieces}
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch": BATCH,
        "seconds": seconds,
        "gradients": ratios,
        "targets": TARGETS,
        "meets_targets": {name: ratios[name] <= limit for name, limit in TARGETS.items()},
    }


def _peak_of(name: str, hidden: int) -> float:
    """In this (fresh) process: build the problem, reset the high-water mark, run one piece."""
    model, loss_fn, batch = _problem(hidden)
    piece = _timed_pieces(model, loss_fn, batch)[name]
    baseline = peak_memory.reset()
    piece()
    return peak_memory.peak_since(baseline)


PIECES_MEASURED = ("gradient", "symmetry", "equivariance", "hvp_double_backward")


def peak_memory_mib() -> dict[str, Any]:
    """Each piece's first call in a fresh process (``--peak NAME``), at hidden widths 512 and
    2048: what grows with P (O(P): by P's factor, 8.7×; O(P²) would be 76×) and what is fixed
    (the first call's one-off allocations)."""
    out: dict[str, Any] = {}
    for hidden in (512, 2048):
        model, _, _ = _problem(hidden)
        size = sum(p.numel() for p in model.parameters())
        peaks = {}
        for name in PIECES_MEASURED:
            command = [sys.executable, __file__, "--peak", name, "--hidden", str(hidden)]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            peaks[name] = float(output.split()[-1])
        out[f"hidden_{hidden}"] = {
            "parameters": size,
            "theta_mib": size * 4 / 2**20,
            "peak_mib": peaks,
        }
    small, large = out["hidden_512"], out["hidden_2048"]
    out["parameter_growth"] = large["parameters"] / small["parameters"]
    out["peak_growth"] = {
        name: large["peak_mib"][name] / small["peak_mib"][name] for name in PIECES_MEASURED
    }
    out["extra_peak_over_theta"] = {
        name: (large["peak_mib"][name] - small["peak_mib"][name])
        / (large["theta_mib"] - small["theta_mib"])
        for name in PIECES_MEASURED
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/equivariance.json"))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--peak", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--hidden", type=int, default=WIDTHS[1], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak is not None:
        print(_peak_of(args.peak, args.hidden))
        return
    sections = {
        "cost_in_gradients": lambda: cost_in_gradients(args.repeats),
        "peak_memory": peak_memory_mib,
    }
    run_sections(sections, args.out)


if __name__ == "__main__":
    main()
