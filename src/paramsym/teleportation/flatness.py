"""Sharpness φ of a minimum (dissertation §5.2, Eq. 5.1) and its teleport objective.

    φ(θ, T, D) = 1/(|T||D|) Σ_{t∈T} Σ_{d∈D} L(θ + t d),   ‖d‖ = 1 over all trained parameters,

the mean loss along random unit directions (after Izmailov et al.). The directions are drawn
once per call (once per teleport for :class:`Sharpness`), so φ is a deterministic,
differentiable function of θ. As defined, φ mostly measures the training loss L(θ) itself
(notes 001b §3: on digits r(φ, val) ≈ r(L, val)); on a loss-preserving orbit the two differ by
a constant, so a sharpness teleport is unaffected. The orbit curvature ψ (Eq. 5.2) is in
:mod:`paramsym.teleportation.orbit_geometry`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor, nn

from paramsym.core.model_checks import require_module
from paramsym.core.params import Params, functional_call, resolve_params
from paramsym.errors import InvalidArgumentError
from paramsym.teleportation.objectives import Batch, LossFn, Objective, TeleportContext

if TYPE_CHECKING:
    from paramsym.symmetry.base import Symmetry

Distribution = Literal["sphere", "orthant"]
SharpnessMethod = Literal["auto", "vmap", "loop"]

TEXT_RADII: tuple[float, ...] = tuple(round(0.001 + 0.01 * i, 3) for i in range(20))
"""T of the dissertation's correlation study (Table 5.1): {0.001, 0.011, …, 0.191}."""

_CHUNK_ELEMENTS = 1 << 22  # perturbed parameter entries held at once by the vmap path


# -- shared checks ---------------------------------------------------------------------------


def _check_radii(radii: Sequence[float] | Tensor | float, where: str) -> tuple[float, ...]:
    values = (
        [float(r) for r in radii.reshape(-1)]
        if isinstance(radii, Tensor)
        else [float(radii)]
        if isinstance(radii, (int, float))
        else [float(r) for r in radii]
    )
    if not values:
        raise InvalidArgumentError(f"{where}: radii is empty; give displacements t > 0")
    bad = [r for r in values if not (math.isfinite(r) and r > 0)]
    if bad:
        raise InvalidArgumentError(
            f"{where}: radii must be finite and > 0 (Eq. 5.1's displacements t), got {bad[0]}"
        )
    return tuple(values)


def _check_count(count: int, what: str, where: str) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidArgumentError(f"{where}: {what} must be an integer ≥ 1, got {count!r}")
    return count


def _check_distribution(distribution: str, where: str) -> None:
    if distribution not in ("sphere", "orthant"):
        raise InvalidArgumentError(
            f"{where}: distribution must be 'sphere' (Gaussian, normalised) or 'orthant' "
            f"(U[0, 1) entries, normalised: the authors' code), got {distribution!r}"
        )


def _seed_from(generator: torch.Generator | None) -> int:
    """One draw from ``generator`` (torch's global generator when ``None``)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def _unit(
    shapes: Sequence[torch.Size], generator: torch.Generator, distribution: Distribution
) -> list[Tensor]:
    """One random direction over all ``shapes`` together, unit norm (float64, CPU)."""
    draw = torch.randn if distribution == "sphere" else torch.rand
    parts = [draw(shape, generator=generator, dtype=torch.float64) for shape in shapes]
    norm = math.sqrt(sum(float((p * p).sum()) for p in parts))
    return [p / norm for p in parts]


# -- sharpness (Eq. 5.1) -----------------------------------------------------------------------


def _trained(model: nn.Module, params: Mapping[str, Tensor]) -> list[str]:
    """The entries of ``params`` that are parameters with ``requires_grad`` (buffers and frozen
    parameters are not perturbed)."""
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    return [k for k in params if k in trained]


def _directions(
    params: Mapping[str, Tensor],
    names: Sequence[str],
    count: int,
    seed: int,
    distribution: Distribution,
) -> Iterator[dict[str, Tensor]]:
    """The ``count`` unit directions of seed ``seed``, one at a time, in ``params``' dtype."""
    generator = torch.Generator().manual_seed(seed)
    shapes = [params[k].shape for k in names]
    for _ in range(count):
        parts = _unit(shapes, generator, distribution)
        yield {
            k: p.to(dtype=params[k].dtype, device=params[k].device)
            for k, p in zip(names, parts, strict=True)
        }


def sharpness_directions(
    params: Mapping[str, Tensor],
    directions: int = 200,
    generator: torch.Generator | None = None,
    *,
    names: Sequence[str] | None = None,
    distribution: Distribution = "sphere",
) -> list[Params]:
    """The directions D that :func:`sharpness` draws from the same ``generator`` state.

    Returns ``directions`` params dicts over ``names`` (default every entry of ``params``),
    each of unit norm over all of them together.
    """
    _check_count(directions, "directions", "sharpness_directions")
    _check_distribution(distribution, "sharpness_directions")
    keys = list(params) if names is None else list(names)
    return list(_directions(params, keys, directions, _seed_from(generator), distribution))


def _sharpness(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    params: Mapping[str, Tensor],
    names: Sequence[str],
    radii: Sequence[float],
    count: int,
    seed: int,
    distribution: Distribution,
    method: SharpnessMethod,
) -> Tensor:
    """φ of Eq. 5.1 with the directions of ``seed``; differentiable in ``params``."""
    x, y = batch
    total: Tensor | None = None
    size = max(1, sum(params[k].numel() for k in names))
    chunk = max(1, _CHUNK_ELEMENTS // (size * len(radii)))
    pending: list[dict[str, Tensor]] = []

    def loop(block: list[dict[str, Tensor]]) -> Tensor:
        out = []
        for d in block:
            for t in radii:
                moved = dict(params)
                moved.update({k: params[k] + t * d[k] for k in names})
                out.append(loss_fn(functional_call(model, moved, x), y).reshape(()))
        return torch.stack(out).sum()

    def batched(block: list[dict[str, Tensor]]) -> Tensor:
        ts = torch.tensor(radii, dtype=params[names[0]].dtype, device=params[names[0]].device)
        stacked = {}
        for k in names:
            d = torch.stack([b[k] for b in block])  # (chunk, *shape)
            moved = params[k] + ts.reshape((-1,) + (1,) * d.ndim) * d.unsqueeze(0)
            stacked[k] = moved.reshape((-1, *params[k].shape))  # (|T|·chunk, *shape)
        rest = {k: v for k, v in params.items() if k not in stacked}

        def one(moved: dict[str, Tensor]) -> Tensor:
            return loss_fn(functional_call(model, {**rest, **moved}, x), y).reshape(())

        return torch.vmap(one)(stacked).sum()

    use_vmap = method in ("auto", "vmap")

    def flush(block: list[dict[str, Tensor]]) -> Tensor:
        nonlocal use_vmap
        if use_vmap:
            try:
                return batched(block)
            except Exception as error:  # a forward vmap cannot batch: data-dependent control flow
                if method == "vmap":
                    raise InvalidArgumentError(
                        f"sharpness: method='vmap' failed on this model ({error}); use "
                        "method='loop' (or 'auto', which falls back to it)"
                    ) from error
                use_vmap = False
        return loop(block)

    for d in _directions(params, names, count, seed, distribution):
        pending.append(d)
        if len(pending) == chunk:
            part = flush(pending)
            total = part if total is None else total + part
            pending = []
    if pending:
        part = flush(pending)
        total = part if total is None else total + part
    assert total is not None
    return total / (count * len(radii))


def sharpness(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    radii: Sequence[float] | Tensor | float,
    directions: int = 200,
    generator: torch.Generator | None = None,
    params: Mapping[str, Tensor] | None = None,
    *,
    distribution: Distribution = "sphere",
    method: SharpnessMethod = "auto",
) -> Tensor:
    """Sharpness φ(θ, T, D) of Eq. 5.1: the mean batch loss at θ + t d over t ∈ ``radii`` and
    ``directions`` random unit vectors d over the trained parameters (all together).

    Args:
        model, loss_fn, batch: L(θ) = loss_fn(model(x; θ), y) on ``batch = (x, y)``.
        radii: the displacements T, each > 0 (the text's grid is :data:`TEXT_RADII`).
        directions: |D| ≥ 1, drawn once per call from ``generator`` (torch's global generator
            when ``None``; :func:`sharpness_directions` returns the same ones).
        params: the point θ (default the model's parameters). Tensors that require grad make
            the result differentiable in them.
        distribution: ``"sphere"`` (uniform on the unit sphere, the text) or ``"orthant"``
            (U[0, 1) entries normalised: the authors' code, positive orthant only).
        method: ``"vmap"`` batches the |T|·|D| forward passes, ``"loop"`` runs them one by
            one, ``"auto"`` tries vmap and falls back to the loop.

    Returns:
        A scalar tensor φ (Eq. 5.1): |T|·|D| forward passes.
    """
    require_module(model, "sharpness")
    values = _check_radii(radii, "sharpness")
    count = _check_count(directions, "directions", "sharpness")
    _check_distribution(distribution, "sharpness")
    if method not in ("auto", "vmap", "loop"):
        raise InvalidArgumentError(
            f"sharpness: method must be 'auto', 'vmap' or 'loop', got {method!r}"
        )
    theta = resolve_params(model, params)
    names = _trained(model, theta)
    if not names:
        raise InvalidArgumentError(
            "sharpness: no trained parameter to perturb (params holds no parameter of the "
            "model with requires_grad)"
        )
    return _sharpness(
        model, loss_fn, batch, theta, names, values, count, _seed_from(generator),
        distribution, method,
    )  # fmt: skip


# -- teleport objectives -----------------------------------------------------------------------


class Sharpness(Objective):
    """φ of Eq. 5.1 as a teleport objective (maximised by default; ``ascend=False`` lowers it).

    Args:
        radii: the displacements T (> 0); default the text's grid :data:`TEXT_RADII`.
        directions: |D| ≥ 1 (default 200, the text's). Each evaluation costs |T|·|D| forward
            passes and their backward: pass fewer for a cheap teleport.
        generator: where the directions come from; they are drawn at the start of each
            teleport and held fixed through its steps.
        distribution, method: as in :func:`sharpness`.
    """

    name = "sharpness"

    def __init__(
        self,
        radii: Sequence[float] | Tensor | float = TEXT_RADII,
        directions: int = 200,
        generator: torch.Generator | None = None,
        *,
        distribution: Distribution = "sphere",
        method: SharpnessMethod = "auto",
    ) -> None:
        self.radii = _check_radii(radii, "Sharpness")
        self.directions = _check_count(directions, "directions", "Sharpness")
        _check_distribution(distribution, "Sharpness")
        self.generator, self.distribution, self.method = generator, distribution, method
        self._seed: int | None = None

    def start(
        self, symmetries: Sequence[Symmetry], params: Mapping[str, Tensor], batch: Batch
    ) -> None:
        self._seed = _seed_from(self.generator)

    def __call__(self, context: TeleportContext) -> Tensor:
        if self._seed is None:
            self._seed = _seed_from(self.generator)
        names = context.trained
        return _sharpness(
            context.model, context.loss_fn, context.batch, context.params, names, self.radii,
            self.directions, self._seed, self.distribution, self.method,
        )  # fmt: skip
