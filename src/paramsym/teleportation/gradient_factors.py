"""Gradient factors: a weight's transported gradient kept as the two factors of its
outer-product form, for the tensors a teleport moves along both axes.

A linear layer's weight gradient over the N rows it was applied to is a sum of N outer
products: ∇W = Δᵀ X for ``nn.Linear`` (weight ``(out, in)``, X the layer's inputs ``(N, in)``,
Δ the loss's gradient at its outputs ``(N, out)``) and ∇W = Xᵀ Δ for Hugging Face's
``Conv1D`` (weight ``(in, out)``, GPT-2). So ∇W = A C with A ``(rows, N)`` and C
``(N, columns)``. A transported gradient is moved by the actions' transposes; an action along
the rows moves A alone and one along the columns C alone (maps on different axes commute), so
the gradient at every point of the orbit stays A' C'. For J = w‖v‖² (gradient transport,
:class:`~paramsym.teleportation.ascent.TransportAscent`) the steps read of it

* ‖A C‖² = ⟨AᵀA, CCᵀ⟩;
* the rate of an action T_ξ along the rows, ⟨T_ξ(V), V⟩ = ⟨T_ξ(A) C, A C⟩ = ⟨T_ξ(A), A CCᵀ⟩:
  the action's own pairing at the point A with the covector A·CCᵀ, and along the columns
  ⟨T_ξ(C), AᵀA·C⟩.

Each is a product of N-wide factors, where the whole tensor costs products of its full size
(the Gram surrogates of :mod:`~paramsym.teleportation.gram_surrogate` shrink a tensor moved
along one axis only). On GPT-2-small with 64 tokens, the packed query–key–value projection
(768 × 2304, moved by the LayerNorm's rescaling along its rows and by the heads' query–key
and value–output maps along its columns) is carried as 768 × 64 and 64 × 2304.

The factors come from forward hooks on the layers that own the weights (the inputs X, and
the gradient Δ at the outputs from a hook on the output tensor) during the teleport's one
gradient, and are checked against autograd's gradient: ‖A C − ∇W‖_F ≤ 2 N ε ‖A‖_F ‖C‖_F, the
rounding bound of two evaluations of the product. A weight used elsewhere too (tied, or read
outside its layer), a layer of another kind, one that an absorbed translation moves or reads
(:func:`~paramsym.teleportation.gram_surrogate.regions_by_tensor`), or one whose factors would
not be smaller than a quarter of the tensor (:data:`MAX_SHARE`) is kept whole. The result is
exact: the same steps and end point as the whole tensors, to rounding
(tests/test_gradient_factors.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.symmetry.base import GroupElement
from paramsym.teleportation.gram_surrogate import moved_regions, regions_by_tensor
from paramsym.teleportation.orbit import Orbit, Unit

MAX_SHARE = 0.25
"""Factors are kept only where N (rows + columns) ≤ MAX_SHARE · rows · columns."""


class Factors:
    """∇W = ``rows @ columns`` for a 2-D weight: ``rows`` ``(R, N)``, ``columns`` ``(N, C)``;
    the Grams the steps read are computed once per point."""

    def __init__(self, rows: Tensor, columns: Tensor) -> None:
        self.rows, self.columns = rows, columns

    def side(self, axis: int) -> Tensor:
        """The factor an action along ``axis`` (0: rows, 1: columns) moves."""
        return self.rows if axis == 0 else self.columns

    def replaced(self, axis: int, factor: Tensor) -> Factors:
        return Factors(factor, self.columns) if axis == 0 else Factors(self.rows, factor)

    @cached_property
    def row_gram(self) -> Tensor:
        """AᵀA, ``(N, N)``."""
        return self.rows.T @ self.rows

    @cached_property
    def column_gram(self) -> Tensor:
        """CCᵀ, ``(N, N)``."""
        return self.columns @ self.columns.T

    def covector(self, axis: int) -> Tensor:
        """What an action along ``axis`` pairs its tangent at :meth:`side` with: A·CCᵀ
        (rows) or AᵀA·C (columns)."""
        return self.rows @ self.column_gram if axis == 0 else self.row_gram @ self.columns

    def squared_norm(self) -> float:
        """‖A C‖²_F = ⟨AᵀA, CCᵀ⟩."""
        return float(torch.sum(self.row_gram.double() * self.column_gram.double()))


def two_sided(units: Sequence[Unit], shapes: Mapping[str, torch.Size]) -> list[str]:
    """The 2-D tensors that ``units`` move along both axes, where every unit touching the
    tensor multiplies regions along one axis of it
    (:func:`~paramsym.teleportation.gram_surrogate.regions_by_tensor`)."""
    out = []
    for name, entries in regions_by_tensor(units).items():
        by_unit: dict[int, set[int]] = {}
        for position, (_, axis, *_) in entries:
            by_unit.setdefault(position, set()).add(axis)
        axes = set().union(*by_unit.values())
        if len(shapes[name]) == 2 and axes == {0, 1} and all(len(a) == 1 for a in by_unit.values()):
            out.append(name)
    return out


def _layout(module: nn.Module) -> str | None:
    """``"linear"`` (∇W = Δᵀ X), ``"conv1d"`` (∇W = Xᵀ Δ) or ``None`` (not known)."""
    if isinstance(module, nn.Linear) and type(module).forward is nn.Linear.forward:
        return "linear"
    if type(module).__name__ == "Conv1D" and type(module).__module__.startswith("transformers"):
        return "conv1d"
    return None


@contextmanager
def recorded_factors(model: nn.Module, names: Sequence[str]) -> Iterator[dict[str, Factors]]:
    """Records each named weight's layer inputs and output gradients during the block (one
    forward and backward pass); on leaving it, the returned dict holds their
    :class:`Factors` (unchecked: see :func:`checked`). Weights that are not a known layer's
    ``weight`` are left out."""
    calls: dict[str, list[list[Tensor]]] = {}  # per call: [inputs] or [inputs, gradient]
    unknown: set[str] = set()  # called in a way the hook cannot read: no factors
    layouts: dict[str, str] = {}
    handles = []

    def recorder(name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if not args or not isinstance(args[0], Tensor) or not isinstance(output, Tensor):
                unknown.add(name)
                return
            record = [args[0].detach().reshape(-1, args[0].shape[-1])]
            calls[name].append(record)
            if output.requires_grad:

                def keep(gradient: Tensor) -> None:
                    record.append(gradient.detach().reshape(-1, gradient.shape[-1]))

                output.register_hook(keep)

        return hook

    for name in names:
        path, _, attribute = name.rpartition(".")
        try:
            module = model.get_submodule(path)
        except AttributeError:
            continue
        layout = _layout(module)
        if attribute != "weight" or layout is None:
            continue
        layouts[name], calls[name] = layout, []
        handles.append(module.register_forward_hook(recorder(name)))
    out: dict[str, Factors] = {}
    try:
        yield out
    finally:
        for handle in handles:
            handle.remove()
    for name, records in calls.items():
        used = [r for r in records if len(r) == 2]  # not the outputs the loss never read
        if name in unknown or not used:
            continue
        inputs = torch.cat([x for x, _ in used])
        deltas = torch.cat([d for _, d in used])
        if layouts[name] == "linear":
            out[name] = Factors(deltas.T.contiguous(), inputs)
        else:
            out[name] = Factors(inputs.T.contiguous(), deltas)


def checked(factors: Mapping[str, Factors], gradient: Mapping[str, Tensor]) -> dict[str, Factors]:
    """The factors whose product is autograd's gradient to rounding and that are small
    enough to pay (module docstring)."""
    out = {}
    for name, f in factors.items():
        g = gradient.get(name)
        rows, n = f.rows.shape
        if g is None or g.shape != (rows, f.columns.shape[1]) or f.columns.shape[0] != n:
            continue
        if n * (g.shape[0] + g.shape[1]) > MAX_SHARE * g.numel():
            continue
        a, c = f.rows.to(g.dtype), f.columns.to(g.dtype)
        error = torch.linalg.vector_norm(torch.addmm(g, a, c, beta=-1))
        size = torch.linalg.vector_norm(a) * torch.linalg.vector_norm(c)
        bound = 2 * n * torch.finfo(g.dtype).eps * size
        if bool(error <= bound):
            out[name] = Factors(a, c)
    return out


class FactoredTensors:
    """The factored tensors of one teleport and the orbit's units that move them."""

    def __init__(self, orbit: Orbit, names: Sequence[str]) -> None:
        self.orbit = orbit
        self.position = {id(u): i for i, u in enumerate(orbit.units)}
        # per unit position: (its factored tensors, the axis it moves each along)
        self.units: dict[int, dict[str, int]] = {}
        for position, unit in enumerate(orbit.units):
            regions = moved_regions(unit) or []
            on = {name: axis for name, axis, *_ in regions if name in names}
            if on:
                self.units[position] = on

    def transport(
        self, factors: Mapping[str, Factors], elements: Sequence[tuple[Unit, GroupElement]]
    ) -> dict[str, Factors]:
        """The factors carried through a step's elements (:meth:`Orbit.transport`'s m ← A_g⁻ᵀ m,
        each action applied to the factor of its axis)."""
        out = dict(factors)
        for unit, g in elements:
            on = self.units.get(self.position[id(unit)])
            if not on:
                continue
            sides = {name: out[name].side(axis) for name, axis in on.items()}
            with torch.no_grad():
                unit.pull_back_in_place(sides, unit.inverse(g), set())  # type: ignore[union-attr]
            for name, axis in on.items():
                out[name] = out[name].replaced(axis, sides[name])
        return out

    def rates(self, factors: Mapping[str, Factors], wanted: Sequence[int]) -> dict[int, Tensor]:
        """Each wanted symmetry's rate ⟨T_ξ(V), V⟩ summed over the factored tensors V it moves
        (module docstring), by symmetry position."""
        out: dict[int, Tensor] = {}
        asked = set(wanted)
        for index, on in self.units.items():
            if asked.isdisjoint(self.orbit.members[index]):
                continue
            point = {name: factors[name].side(axis) for name, axis in on.items()}
            covector = {name: factors[name].covector(axis) for name, axis in on.items()}
            for i, rate in self.orbit.unit_pullback(index, point, covector).items():
                out[i] = out[i] + rate if i in out else rate
        return out
