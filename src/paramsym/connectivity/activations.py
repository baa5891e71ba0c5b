"""The activations at a symmetry's neurons, for alignment on data (:func:`paramsym.align` with
``method="activations"``).

A slot of a symmetry indexes one axis of a parameter; the activation living on that axis is the
output of the parameter's module (rows of a linear map's weight, its bias, an embedding's
columns, a convolution's output channels) or its input (columns of a linear map, input
channels). An element acting on the slot's neurons transforms those activations the same way:
a permutation permutes them, an orthogonal map Q of a matrix group maps them to Q·a (rows by Q,
columns by Q⁻ᵀ = Q). :func:`capture` records them with forward hooks in one pass, as
``(samples, neurons)`` matrices (every position and token a sample).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.calls import call_arguments
from paramsym.symmetry.base import Slot

Site = tuple[str, str]
"""(module name, ``"in"`` or ``"out"``): where a slot's activations are read."""


def _conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")  # Hugging Face's GPT-2


def site(model: nn.Module, slot: Slot) -> Site | None:
    """Where the activations on ``slot``'s axis are, or ``None`` for a module whose layout is
    not known here (its group is then aligned by its weights)."""
    module_name, _, leaf = slot.name.rpartition(".")
    try:
        module = model.get_submodule(module_name)
    except AttributeError:
        return None
    if isinstance(module, nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d):
        if leaf == "bias" or (leaf == "weight" and slot.axis == 0):
            return module_name, "out"
        if leaf == "weight" and slot.axis == 1:
            return module_name, "in"
    if _conv1d(module):
        if leaf == "bias" or (leaf == "weight" and slot.axis == 1):
            return module_name, "out"
        if leaf == "weight" and slot.axis == 0:
            return module_name, "in"
    if isinstance(module, nn.Embedding) and leaf == "weight" and slot.axis == 1:
        return module_name, "out"
    return None


def _features(t: Tensor, module: nn.Module) -> Tensor:
    """``(samples, features)``: channels last for convolutions, every other axis a sample."""
    if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d):
        t = t.movedim(1, -1)
    return t.reshape(-1, t.shape[-1]).detach()


def capture(model: nn.Module, sites: Iterable[Site], inputs: Any) -> dict[Site, Tensor]:
    """The activations at ``sites`` on ``inputs`` (one forward pass, no gradients, eval-mode
    behaviour is the caller's), float64, ``(samples, features)`` each."""
    wanted = set(sites)
    out: dict[Site, Tensor] = {}
    handles = []
    modules = dict(model.named_modules())
    for name in {n for n, _ in wanted}:
        module = modules[name]

        def hook(mod: nn.Module, args: tuple, result: Any, name: str = name) -> None:
            if (name, "in") in wanted:
                out[(name, "in")] = _features(args[0], mod).double()
            if (name, "out") in wanted:
                value = result if isinstance(result, Tensor) else result[0]
                out[(name, "out")] = _features(value, mod).double()

        handles.append(module.register_forward_hook(hook))
    try:
        args, kwargs = call_arguments(model, inputs)
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return out


def neurons(activations: Tensor, slot: Slot, length: int) -> Tensor:
    """The slot's ``length`` features of ``(samples, features)`` activations."""
    start = slot.offset or 0
    return activations[:, start : start + length]


def _distinct(slots: Iterable[Slot], model: nn.Module) -> list[tuple[Site, Slot]]:
    """Each slot's site, one slot per (site, offset): a weight's rows and its bias read the same
    activations."""
    seen: set[tuple[Site, int | None]] = set()
    out = []
    for slot in slots:
        where = site(model, slot)
        if where is not None and (where, slot.offset) not in seen:
            seen.add((where, slot.offset))
            out.append((where, slot))
    return out


def _paired(
    model: nn.Module,
    slots: Iterable[Slot],
    width: int,
    acts_a: dict[Site, Tensor],
    acts_b: dict[Site, Tensor],
) -> Iterator[tuple[Slot, Tensor, Tensor]]:
    """(slot, A's activations, B's) at each distinct site of ``slots``: ``width · block``
    features each, ``(samples, features)``."""
    for where, slot in _distinct(slots, model):
        length = width * slot.block
        yield slot, neurons(acts_a[where], slot, length), neurons(acts_b[where], slot, length)


def permutation_cost(
    model: nn.Module,
    slots: Iterable[Slot],
    width: int,
    acts_a: dict[Site, Tensor],
    acts_b: dict[Site, Tensor],
) -> Tensor | None:
    """C[i, j] for a permutation of ``width`` blocks (each slot's ``block`` neurons) from
    activations: the correlation of unit i of A with unit j of B (blocks of one), or for heads
    the nuclear norm ‖X_A,iᵀ X_B,j‖_* (how well head j matches head i under the best orthogonal
    map between them); ``None`` when no slot has a known site."""
    cost: Tensor | None = None
    for slot, xa, xb in _paired(model, slots, width, acts_a, acts_b):
        if slot.block == 1:
            xa = (xa - xa.mean(0)) / (xa.std(0) + 1e-12)
            xb = (xb - xb.mean(0)) / (xb.std(0) + 1e-12)
            term = xa.T @ xb / xa.shape[0]
        else:
            ha, hb = (x.unflatten(1, (width, slot.block)) for x in (xa, xb))
            term = torch.linalg.svdvals(torch.einsum("nia,njb->ijab", ha, hb)).sum(-1)
        cost = term if cost is None else cost + term
    return cost


def matrix_pairing(
    model: nn.Module,
    slots: Iterable[Slot],
    width: int,
    acts_a: dict[Site, Tensor],
    acts_b: dict[Site, Tensor],
) -> Tensor | None:
    """M = Σ X_Aᵀ X_B over the slots' activations (``(w, w)``), whose orthogonal polar factor
    maps B's activations closest to A's; ``None`` when no slot has a known site."""
    m: Tensor | None = None
    for _, xa, xb in _paired(model, slots, width, acts_a, acts_b):
        m = xa.T @ xb if m is None else m + xa.T @ xb
    return m
