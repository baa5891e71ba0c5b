"""The orbit a teleport moves along: its symmetries, their group elements and tangents.

:class:`Orbit` holds the continuous symmetries of one teleport and the teleport batch's inputs
(for data-dependent actions). It turns algebra coordinates ξ into group elements (``exp`` or
the paper's first-order ``I + ξ``), moves parameters by them, pulls a parameter-space
cotangent back to the algebra through each action's tangent, and transports covectors
(momentum, gradients) along a move as m ↦ J⁻ᵀm.

It acts through *units*: each symmetry alone, or a :class:`~paramsym.symmetry.batched.MatrixBatch`
of per-head matrix groups acting on disjoint slices of the same projections, whose elements,
moves, transports and pullbacks are a few batched operations for the whole layer.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from paramsym.core.params import Params
from paramsym.errors import ApproximateActionWarning, InvalidArgumentError, InvalidGroupElementError
from paramsym.symmetry.base import GroupElement, Region, Symmetry, regions_overlap
from paramsym.symmetry.batched import MatrixBatch, batch_symmetries
from paramsym.teleportation.read_shifts import carry_reads, shifts_by_reads

Parameterization = Literal["exp", "first_order"]
Unit = Symmetry | MatrixBatch
Move = tuple[Unit, GroupElement, Params]
"""(unit, group element, the parameters after acting with it: for a linear or affine action,
whose covector transport is the same at every point, any point of the orbit; for one that
reads parameters it leaves fixed (:attr:`~paramsym.symmetry.Symmetry.reads`), a point with
their values where it acted)."""


class Orbit:
    """The continuous symmetries moved along together, with the teleport batch's input."""

    def __init__(
        self,
        symmetries: Sequence[Symmetry],
        x: Any,
        parameterization: Parameterization,
        params: Mapping[str, Tensor],
    ) -> None:
        self.symmetries = list(symmetries)
        self.x = x
        self.parameterization = parameterization
        ref = next(iter(params.values()))
        self.dtype, self.device = ref.dtype, ref.device
        for s in self.symmetries:
            missing = [n for n in s.parameter_names if n not in params]
            if missing:
                raise InvalidArgumentError(
                    f"teleport: symmetry {s.name} acts on parameter '{missing[0]}', which the "
                    "model does not have; pass symmetries found on this model"
                )
        if parameterization == "first_order":
            for s in self.symmetries:
                probe = torch.full((s.dim,), 1e-3, dtype=self.dtype, device=self.device)
                try:
                    s.check_element(self.element(s, probe))
                except InvalidGroupElementError as error:
                    raise InvalidArgumentError(
                        f"teleport: parameterization='first_order' uses g = I + ξ, which is not "
                        f"in {s.group} ({s.name}): {error}. Use parameterization='exp'"
                    ) from error

        self.units: list[Unit] = batch_symmetries(self.symmetries)
        position = {id(s): i for i, s in enumerate(self.symmetries)}
        self.members: list[list[int]] = [
            [position[id(m)] for m in u.members]
            if isinstance(u, MatrixBatch)
            else [position[id(u)]]
            for u in self.units
        ]

    def _x(self, s: Unit) -> Any:
        return self.x if isinstance(s, Symmetry) and s.data_dependent else None

    def element(self, s: Symmetry, xi: Tensor) -> GroupElement:
        if self.parameterization == "exp":
            return s.exp(xi)
        return s.linear_element(xi)

    def elements(
        self, xis: Sequence[Tensor], skip_zero: bool = False
    ) -> list[tuple[Unit, GroupElement]]:
        """Each unit with its element g(ξ) for the coordinates ``xis`` (aligned with
        :attr:`symmetries`); with ``skip_zero``, units whose ξ are all exactly zero (their
        element is the identity) are left out."""
        out: list[tuple[Unit, GroupElement]] = []
        for unit, members in zip(self.units, self.members, strict=True):
            chosen = [xis[i] for i in members]
            if skip_zero and not any(bool(xi.any()) for xi in chosen):
                continue
            if isinstance(unit, MatrixBatch):
                out.append((unit, unit.element(chosen, self.parameterization)))
            else:
                out.append((unit, self.element(unit, chosen[0])))
        return out

    def pullback(
        self,
        params: Mapping[str, Tensor],
        cotangent: Mapping[str, Tensor],
        only: Sequence[int] | None = None,
    ) -> list[Tensor]:
        """∂J(exp(ξ)·θ)/∂ξ at ξ = 0 for each symmetry (those at positions ``only``): T_sᵀ ∇_θJ
        (:meth:`~paramsym.symmetry.base.Symmetry.cotangent_pullback`)."""
        wanted = range(len(self.symmetries)) if only is None else only
        rates: dict[int, Tensor] = {}
        for index, members in enumerate(self.members):
            if any(i in wanted for i in members):
                rates.update(self.unit_pullback(index, params, cotangent))
        return [rates[i].to(self.dtype) for i in wanted]

    def unit_pullback(
        self, index: int, params: Mapping[str, Tensor], cotangent: Mapping[str, Tensor]
    ) -> dict[int, Tensor]:
        """:meth:`pullback` for the members of ``units[index]`` (symmetry position: rate),
        from the tensors ``params`` and ``cotangent`` hold (a slot-by-slot action pairs the
        slots present)."""
        unit, members = self.units[index], self.members[index]
        if isinstance(unit, MatrixBatch):
            return dict(zip(members, unit.pullbacks(params, cotangent), strict=True))
        return {members[0]: unit.cotangent_pullback(params, cotangent, self._x(unit))}

    def through_actions(self, params: Mapping[str, Tensor]) -> tuple[list[Tensor], Params]:
        """(ξ, q(ξ)): algebra coordinates at zero that require grad, and the point moved by
        g(ξ_s) through every action in turn, differentiable in ξ (and in ``params``)."""
        xis = [
            torch.zeros(s.dim, dtype=self.dtype, device=self.device, requires_grad=True)
            for s in self.symmetries
        ]
        current = dict(params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ApproximateActionWarning)  # warned once up front
            for s, xi in zip(self.symmetries, xis, strict=True):
                # I + ξ: the same first derivative at ξ = 0 as exp(ξ), without matrix_exp
                current = s.act(current, s.linear_element(xi), self._x(s))
        return xis, current

    def rebase(self, params: Mapping[str, Tensor]) -> Params:
        """``act(θ, identity)`` for every data-dependent symmetry: a move that keeps the loss
        on the batch and makes θ a fixed point of the identity.

        The batch actions with a pseudo-inverse (Eqs. 4.13, 4.16) fail the identity axiom when
        the batch has fewer samples than the pseudo-inverse's other side: ``act(θ, I)``
        projects weights onto the data's span. The tangent ``d/dt act(θ, exp tξ)`` describes a
        curve through ``act(θ, I)``, so the ascent gradient is only consistent at such fixed
        points (the projection is idempotent). Group actions are left unchanged.
        """
        current = dict(params)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ApproximateActionWarning)
            for s in self.symmetries:
                if s.data_dependent:
                    identity = s.identity(dtype=self.dtype, device=self.device)
                    current = s.act(current, identity, self.x)
        return current

    def move(
        self, params: Mapping[str, Tensor], xis: Sequence[Tensor]
    ) -> tuple[Params, list[Move]]:
        """θ after acting with each g(ξ_s) in turn, and each (symmetry, g, point after it).
        The Hessian path evaluates the result through the actions (:meth:`through_actions`),
        which re-bases it onto the batch-fixed points of data-dependent actions."""
        return self.apply(params, self.elements(xis))

    def apply(
        self, params: Mapping[str, Tensor], elements: Sequence[tuple[Unit, GroupElement]]
    ) -> tuple[Params, list[Move]]:
        """θ after acting with each (unit, g) of ``elements`` in turn (as :meth:`elements` gives
        them), and each (unit, g, point after it): :meth:`move` for given elements.

        A family that acts slot by slot (``NeuronSymmetry.acts_in_place``) writes its regions
        into one copy of each tensor it touches, made once per move: its recorded point is
        the dict being written, whose values change later, which its covector transport
        allows (the action is linear in θ, so its VJP is the same at every point). Any other
        action returns a new dict, recorded as the point after it and never written again (the
        next slot-by-slot family writes into a copy of the dict): the covector transport of an
        action that reads parameters (:attr:`~paramsym.symmetry.Symmetry.reads`) depends on
        their values at its point."""
        moves: list[Move] = []
        current = dict(params)
        owned: set[str] = set()  # tensors copied here and referenced by no recorded point
        recorded = False  # whether ``current`` is the recorded point of a non-slot action
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ApproximateActionWarning)  # warned once up front
            for s, g in elements:
                if getattr(s, "acts_in_place", False):
                    if recorded:
                        current, recorded = dict(current), False
                    s.act_in_place(current, g, owned)  # type: ignore[union-attr]
                    moves.append((s, g, current))
                else:
                    assert isinstance(s, Symmetry)
                    current = s.act(current, g, self._x(s))
                    owned.clear()
                    moves.append((s, g, current))
                    recorded = True
        return current, moves

    def transport(self, covector: Mapping[str, Tensor], moves: Sequence[Move]) -> Params:
        """Carry a covector through the moves: m ← J⁻ᵀm as the VJP of θ' ↦ s.act(θ', g⁻¹) at
        the point recorded with the move, differentiated in the parameters the symmetry moves and
        those it reads (:attr:`~paramsym.symmetry.Symmetry.reads`); for a shift by what it
        reads, m keeps its moved components and loses Σ g_k (De_k)ᵀ m on the read ones, in
        closed form (:func:`~paramsym.teleportation.read_shifts.carry_reads`)."""
        m = dict(covector)
        owned: set[str] = set()
        for s, g, after in moves:
            names = [
                k for k in dict.fromkeys((*s.parameter_names, *getattr(s, "reads", ()))) if k in m
            ]
            if not names:
                continue
            inverse = s.inverse(g)
            if isinstance(s, MatrixBatch) or getattr(s, "acts_in_place", False):
                # slot by slot (the tensors ``m`` lacks skipped): one copy of each tensor,
                # regions rewritten in place
                with torch.no_grad():
                    s.pull_back_in_place(m, inverse, owned)  # type: ignore[union-attr]
                continue
            assert isinstance(s, Symmetry)
            if shifts_by_reads(s):  # m_r ← m_r − Σ g_k (De_k)ᵀ m_m, closed form (read_shifts.py)
                carry_reads(s, after, g, m, owned)
                continue
            owned.clear()
            leaves = dict(after)
            leaves.update({k: after[k].detach().requires_grad_(True) for k in names})
            with torch.enable_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", ApproximateActionWarning)
                back = s.act(leaves, inverse, self._x(s))
                pulled = torch.autograd.grad(
                    [back[k] for k in names],
                    [leaves[k] for k in names],
                    grad_outputs=[m[k] for k in names],
                    allow_unused=True,
                    materialize_grads=True,
                )
            m.update({k: p.detach() for k, p in zip(names, pulled, strict=True)})
        return m

    def replay(
        self, params: Mapping[str, Tensor], steps: Sequence[Sequence[tuple[Unit, GroupElement]]]
    ) -> Params:
        """``params`` moved by each step's elements in turn (as :meth:`elements` gives them),
        for paths that move θ once, at the end. Where the units pairwise commute
        (:func:`commute`), each unit's elements are composed first (small products of group
        elements) and the parameters moved once per unit, whatever the number of steps."""
        if not steps:
            return dict(params)
        used = list({id(u): u for step in steps for u, _ in step}.values())
        if commute(used):
            composed: dict[int, tuple[Unit, GroupElement]] = {}
            for step in steps:
                for unit, g in step:
                    previous = composed.get(id(unit))
                    if previous is not None:
                        g = unit.compose(g, previous[1])
                    composed[id(unit)] = (unit, g)
            steps = [list(composed.values())]
        current = dict(params)
        owned: set[str] = set()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ApproximateActionWarning)
            for step in steps:
                for unit, g in step:
                    if getattr(unit, "acts_in_place", False):
                        unit.act_in_place(current, g, owned)  # type: ignore[union-attr]
                    else:
                        assert isinstance(unit, Symmetry)
                        current = unit.act(current, g, self._x(unit))
                        owned.clear()
        return current


def commute(units: Sequence[Unit]) -> bool:
    """Whether the units' actions commute pairwise, read off their slots: each acts slot by
    slot (transforming one axis of a tensor region at a time), and two units that share a
    tensor act on different axes of it or on disjoint regions of the same axis (maps on
    different axes of a tensor commute). One common scale of whole tensors
    (``PositiveScaling`` with ``per_neuron=False``) commutes with every such action."""
    if not all(getattr(u, "acts_in_place", False) for u in units):
        return False
    by_axis: dict[tuple[str, int], list[tuple[int, Region]]] = {}
    for index, unit in enumerate(units):
        if getattr(unit, "per_neuron", True) is False:
            continue
        for region in unit.touched_regions:
            by_axis.setdefault((region[0], region[1]), []).append((index, region))
    for entries in by_axis.values():
        for k, (a, r) in enumerate(entries):
            if any(a != b and regions_overlap(r, q) for b, q in entries[k + 1 :]):
                return False
    return True
