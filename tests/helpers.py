"""Test helpers: relative errors, generic parameter points, and reduced experiment runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch

import paramsym as ps
from paramsym.experiments import registry
from paramsym.sweep import run_experiment


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / max(‖b‖, tiny)."""
    a, b = a.detach(), b.detach()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-300))


def params_relative_error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return relative_error(ps.flatten(a), ps.flatten(b))


def randomize_(model: torch.nn.Module, generator: torch.Generator, std: float = 0.7) -> None:
    """Overwrite every parameter with N(0, std²): a generic point, not an initialisation."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(std * torch.randn(p.shape, generator=generator, dtype=p.dtype))


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers of ``model`` (detached): what symmetries that move running
    statistics act on."""
    return {**ps.params_of(model), **{k: b.detach() for k, b in model.named_buffers()}}


def randomize_statistics_(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Give every BatchNorm non-default running statistics and affine parameters, so eval-mode
    invariance tests would catch statistics that are not transformed."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
                shape, dtype = m.running_mean.shape, m.running_mean.dtype
                m.running_mean.copy_(torch.randn(shape, generator=generator, dtype=dtype))
                m.running_var.copy_(0.5 + torch.rand(shape, generator=generator, dtype=dtype))


def moved_state(symmetry, state: dict[str, torch.Tensor], seed: int, scale: float = 0.5):
    """``symmetry`` applied to ``state`` with a random element that really moves it (a random
    permutation or sign vector may be the identity: draw again)."""
    for attempt in range(50):
        generator = torch.Generator().manual_seed(seed + 1000 * attempt)
        g = symmetry.sample(scale=scale, generator=generator, dtype=torch.float64)
        moved = symmetry.act(state, g)
        if params_relative_error(moved, state) > 1e-6:
            return moved
    raise AssertionError(f"{symmetry.name}: no random element moved the parameters")


def assert_exact_symmetries(
    model: torch.nn.Module, x, found, tol: float = 1e-10, select=lambda y: y
) -> float:
    """Every symmetry in ``found`` marked exact and function-preserving leaves the output of
    ``model`` (in its current mode; ``select`` picks a tensor from it) unchanged to ``tol``
    relative; returns the largest error."""
    state = state_of(model)
    with torch.no_grad():
        reference = select(ps.functional_call(model, state, x))
        worst = 0.0
        for i, s in enumerate(found):
            if not (s.exact and s.preserves == "function"):
                continue
            moved = select(ps.functional_call(model, moved_state(s, state, i), x))
            error = relative_error(moved, reference)
            assert error <= tol, f"{s.name}: output changed by {error:.2e}"
            worst = max(worst, error)
    return worst


def run_quick(tmp_path: Path, name: str, overrides: dict[str, str]) -> tuple[Path, dict, dict]:
    """Run experiment ``name`` at its quick preset with ``overrides`` into ``tmp_path / name``:
    (run directory, saved metrics, ``{claim text: saved claim}``); every claim is saved and
    the report is written."""
    experiment = registry.get(name)
    directory = tmp_path / name
    run_experiment(experiment, experiment.config("quick", overrides), directory, workers=1)
    saved = json.loads((directory / "metrics.json").read_text())
    claims = {c["claim"]: c for c in saved["claims"]}
    assert set(claims) == {c.text for c in experiment.claims}
    assert (directory / "report.md").exists()
    return directory, saved["metrics"], claims


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a series CSV as dicts of strings."""
    with path.open() as handle:
        return list(csv.DictReader(handle))


def reduce_kernel(full: torch.Tensor, mode: str) -> torch.Tensor:
    """A ``(n1, n2, O, O)`` kernel reduced as ``ps.ntk``'s ``mode`` does: ``"full"`` as is,
    ``"diagonal"`` → ``(n1, n2, O)``, ``"trace"`` → ``(n1, n2)``."""
    if mode == "full":
        return full
    diagonal = torch.diagonal(full, dim1=2, dim2=3)
    return diagonal if mode == "diagonal" else diagonal.sum(-1)


def seeded(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def random_mlp(activation: str, widths=(4, 6, 6, 3), seed: int = 0) -> torch.nn.Sequential:
    """A float64 ``ps.mlp`` with weights drawn by :func:`randomize_` (away from any symmetric
    point)."""
    import paramsym as ps

    model = ps.mlp(list(widths), activation, dtype=torch.float64)
    randomize_(model, seeded(seed))
    return model


def random_batch(n: int, inputs: int = 4, outputs: int = 3, seed: int = 1, classes: bool = False):
    """A float64 batch ``(x, y)``: Gaussian targets, or class labels with ``classes``."""
    g = seeded(seed)
    x = torch.randn(n, inputs, generator=g, dtype=torch.float64)
    y = (
        torch.randint(0, outputs, (n,), generator=g)
        if classes
        else torch.randn(n, outputs, generator=g, dtype=torch.float64)
    )
    return x, y


def assert_same_teleport(fast: Any, whole: Any) -> None:
    """Two default teleports (``TeleportResult``) took the same 10 steps to the same point
    (float64 tolerances), raised the objective, and kept the loss to 1e-10 relative."""
    assert fast.steps == whole.steps == 10
    assert fast.gain > 1.0
    assert fast.objective_after == pytest.approx(whole.objective_after, rel=1e-12)
    assert [s.objective for s in fast.history] == pytest.approx(
        [s.objective for s in whole.history], rel=1e-12
    )
    for key in fast.params:
        torch.testing.assert_close(fast.params[key], whole.params[key], rtol=1e-10, atol=1e-13)
    assert abs(fast.loss_after - fast.loss_before) <= 1e-10 * abs(fast.loss_before)
