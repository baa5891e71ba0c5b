"""Mode-connectivity benchmark (issue 8): weight matching, paramsym against the ``rebasin``
package (Git Re-Basin's weight matching for PyTorch), on the same pair of trained models.

For each architecture, two ReLU MLPs are trained independently on scikit-learn's digits (the
``permutation-alignment`` experiment's training function) and model B is aligned to model A
by

* ``paramsym.weight_matching`` (coordinate descent over the hidden layers' permutations, one
  ``linear_sum_assignment`` per layer and sweep), once with the default random group order and
  as the best of 4 orders (the experiment's setting), and
* ``rebasin.PermutationCoordinateDescent(model_a, model_b, input_data).rebasin()`` (modifies
  model_b in place; it traces the model with torchview, which needs the graphviz system
  package), when ``rebasin`` is installed; otherwise the result records
  ``"rebasin not installed"`` and paramsym is timed alone.

Figures: median seconds of each (timed round-robin in the same process, each call on a fresh
copy of model B), their ratio, and the barrier reduction each achieves: the test-loss and
test-error barriers along the chord A → B before and after alignment, and ‖θ_A − π·θ_B‖.

The ``cnn_resnet`` section (issue 12) does the same on a pair of small ResNets with BatchNorm
(the ``cnn-weight-matching`` experiment's quick pair: one block per stage, widths 16, 32,
trained on digits), and ``cnn_resnet_wide`` on a larger pair (two blocks per stage, widths 32,
64, 128):
``ps.weight_matching(model_a, model_b, example_input=x)`` derives the permutation groups from the
traced graph on every call (the trace is inside the timing) and permutes the running statistics;
rebasin leaves them unpermuted, so its aligned network's statistics are recomputed on the
training images before its barrier is measured, and every barrier is taken with the
statistics of each interpolated network recomputed (Git Re-Basin's protocol). Target: paramsym
≥ 1.5× faster than rebasin at an equal or lower loss barrier.

Run ``python benchmarks/bench_connectivity.py`` (``--smoke`` for a reduced run).
"""

from __future__ import annotations

import argparse
import copy
import functools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import paramsym as ps
from paramsym.experiments.cnn_matching import (
    CnnMatchingConfig,
    chord,
    image_data,
    model_state,
    reset_batchnorm_statistics,
    train_resnet,
)
from paramsym.experiments.connectivity.alignment import (
    AlignmentConfig,
    classification_data,
    train_classifier,
)
from paramsym.experiments.connectivity.common import error_rate
from timing import round_robin, run_sections

try:  # the peer is optional: pip install rebasin (needs torchview and the graphviz package)
    from rebasin import PermutationCoordinateDescent
except ImportError:  # pragma: no cover - depends on the environment
    PermutationCoordinateDescent = None


def _distance(a: nn.Module, b: nn.Module) -> float:
    pa, pb = ps.params_of(a), ps.params_of(b)
    return float(sum(((pa[k].double() - pb[k].double()) ** 2).sum() for k in pa)) ** 0.5


def _barriers(
    model_a: nn.Module, params_b: dict[str, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor]
) -> dict[str, float]:
    a = ps.params_of(model_a)
    loss = ps.connectivity.linear_interpolation(
        model_a, nn.CrossEntropyLoss(), test, a, params_b, 11
    )
    error = ps.connectivity.linear_interpolation(model_a, error_rate, test, a, params_b, 11)
    return {"loss_barrier": loss.barrier, "error_barrier": error.barrier}


def _aligned_module(template: nn.Module, params: dict[str, torch.Tensor]) -> nn.Module:
    out = copy.deepcopy(template)
    out.load_state_dict(params, strict=False)
    return out


def _rebasin_call(
    model_a: nn.Module, model_b: nn.Module, input_data: torch.Tensor, results: dict[str, Any]
) -> Callable[[], None]:
    """A call of rebasin's weight matching on a fresh copy of B, kept as ``results["rebasin"]``."""

    def theirs() -> None:
        moved = copy.deepcopy(model_b)
        PermutationCoordinateDescent(model_a, moved, input_data).rebasin()
        results["rebasin"] = moved

    return theirs


def compare(
    hidden: tuple[int, ...], epochs: int, repeats: int, input_samples: int
) -> dict[str, Any]:
    """Train one pair, align B to A with both implementations, time and score them."""
    config = AlignmentConfig(hidden=hidden, epochs=epochs)
    train, test = classification_data(config)
    widths = [train[0].shape[1], *hidden, 10]
    model_a = train_classifier(widths, train, config, seed=0)
    model_b = train_classifier(widths, train, config, seed=1)
    out: dict[str, Any] = {"widths": widths, "epochs": epochs}
    out["naive"] = {
        **_barriers(model_a, ps.params_of(model_b), test),
        "distance": _distance(model_a, model_b),
    }

    results: dict[str, Any] = {}

    def ours() -> None:
        results["paramsym"] = ps.connectivity.weight_matching(model_a, copy.deepcopy(model_b))

    def ours_restarts() -> None:
        results["paramsym_best_of_4"] = ps.connectivity.weight_matching(
            model_a, copy.deepcopy(model_b), config=ps.WeightMatchingConfig(restarts=4)
        )

    fns = {"paramsym": ours, "paramsym_best_of_4": ours_restarts}
    if PermutationCoordinateDescent is not None:
        fns["rebasin"] = _rebasin_call(model_a, model_b, train[0][:input_samples], results)
    seconds = round_robin(fns, repeats, warmup=1)
    for name in ("paramsym", "paramsym_best_of_4"):
        matched = results[name]
        out[name] = {
            "seconds": seconds[name],
            **_barriers(model_a, matched.params, test),
            "distance": _distance(model_a, _aligned_module(model_b, matched.params)),
            "objective": matched.objective_after,
        }
    if PermutationCoordinateDescent is None:
        out["rebasin"] = "rebasin not installed"
        return out
    theirs_module = results["rebasin"]
    with torch.no_grad():
        change = float((theirs_module(test[0]) - model_b(test[0])).abs().max())
    out["rebasin"] = {
        "seconds": seconds["rebasin"],
        **_barriers(model_a, ps.params_of(theirs_module), test),
        "distance": _distance(model_a, theirs_module),
        "function_change": change,
    }
    out["rebasin_over_paramsym_seconds"] = seconds["rebasin"] / seconds["paramsym"]
    return out


def compare_cnn(
    layers: tuple[int, ...],
    widths: tuple[int, ...],
    epochs: int,
    repeats: int,
    input_samples: int,
) -> dict[str, Any]:
    """Train a pair of small ResNets, align B to A with both implementations, time and score."""
    config = CnnMatchingConfig(layers=layers, widths=widths, epochs=epochs, threads=0)
    train, test = image_data(config)
    model_a, model_b = (train_resnet(config, train, seed) for seed in (0, 1))
    state_a = model_state(model_a)
    x_train = train[0]

    def barriers(state_b: dict[str, torch.Tensor]) -> dict[str, float]:
        line = chord(model_a, state_a, state_b, test, 11, x_train)
        return {"loss_barrier": line.loss_barrier, "error_barrier": line.error_barrier}

    results: dict[str, Any] = {}

    def ours() -> None:
        results["paramsym"] = ps.weight_matching(model_a, model_b, example_input=x_train[:8])

    fns = {"paramsym": ours}
    if PermutationCoordinateDescent is not None:
        fns["rebasin"] = _rebasin_call(model_a, model_b, x_train[:input_samples], results)
    seconds = round_robin(fns, repeats, warmup=1)
    state_b = model_state(model_b)
    matched = results["paramsym"]
    out: dict[str, Any] = {
        "model": f"zoo ResNet, blocks {layers}, widths {widths}, BatchNorm, digits 8x8",
        "parameters": sum(p.numel() for p in model_a.parameters()),
        "epochs": epochs,
        "naive": barriers(state_b),
        "paramsym": {
            "seconds": seconds["paramsym"],
            **barriers({**state_b, **{k: v for k, v in matched.params.items() if k in state_b}}),
            "distance_before": matched.distance_before,
            "distance_after": matched.distance_after,
        },
    }
    if PermutationCoordinateDescent is None:
        out["rebasin"] = "rebasin not installed"
        return out
    recomputed = model_state(reset_batchnorm_statistics(results["rebasin"], None, x_train))
    out["rebasin"] = {"seconds": seconds["rebasin"], **barriers(recomputed)}
    ratio = seconds["rebasin"] / seconds["paramsym"]
    out["rebasin_over_paramsym_seconds"] = ratio
    out["target_met"] = bool(
        ratio >= 1.5 and out["paramsym"]["loss_barrier"] <= out["rebasin"]["loss_barrier"]
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/connectivity.json"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--input-samples", type=int, default=256, help="rebasin's input batch")
    parser.add_argument("--smoke", action="store_true", help="small models, 2 repeats")
    args = parser.parse_args()
    torch.manual_seed(0)
    warnings.simplefilter("ignore", ps.ParamsymWarning)
    architectures = {"mlp_128x2": (128, 128), "mlp_512x3": (512, 512, 512)}
    if args.smoke:
        architectures = {"mlp_64x2": (64, 64)}
        args.repeats, args.epochs = 2, 3
    sections = {
        name: functools.partial(compare, hidden, args.epochs, args.repeats, args.input_samples)
        for name, hidden in architectures.items()
    }
    cnn_epochs = 2 if args.smoke else 10
    resnets = {"cnn_resnet": ((1, 1), (16, 32)), "cnn_resnet_wide": ((2, 2, 2), (32, 64, 128))}
    if args.smoke:
        resnets.pop("cnn_resnet_wide")
    for name, (layers, widths) in resnets.items():
        sections[name] = functools.partial(
            compare_cnn, layers, widths, cnn_epochs, args.repeats, 64
        )
    run_sections(sections, args.out, {"smoke": args.smoke})


if __name__ == "__main__":
    main()
