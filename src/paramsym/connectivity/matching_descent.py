"""Weight matching's coordinate descent (Git Re-Basin Alg. 1, notes 001 §4): one group's
permutation at a time by an exact linear assignment, until a sweep changes nothing.

J(P) = Σ_k ⟨θ_A[k], (P·θ_B)[k]⟩ is linear in one group's permutation when the others are
fixed (unless the group permutes two axes of one tensor), so each step solves a linear
assignment on the group's cost matrix (:class:`_CostMatrices`) with
:func:`~paramsym.core.assignment.max_assignment` (started from the group's current
permutation). A group solved on a cost matrix that has not changed
since is skipped (:class:`_Solved`). :func:`~paramsym.connectivity.matching.weight_matching`
is the public entry point; this module is its inner loop.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from paramsym.core.assignment import max_assignment
from paramsym.core.linalg import CHUNK, float64_dot
from paramsym.core.params import Params
from paramsym.symmetry.base import Slot
from paramsym.symmetry.discrete import NeuronPermutation


def inner_product(
    params_a: Mapping[str, Tensor], params_b: Mapping[str, Tensor], unmatched: Collection[str]
) -> float:
    """Σ_k ⟨θ_A[k], θ_B[k]⟩ over the tensors not ``unmatched``, accumulated in float64 (each
    product of two float32 numbers is exact in float64), a chunk at a time (:func:`float64_dot`)."""
    return math.fsum(float64_dot(params_a[k], params_b[k]) for k in params_a if k not in unmatched)


def _neuron_rows(t: Tensor, slot: Slot, width: int) -> Tensor:
    """The slot's region of ``t`` as a ``(width, -1)`` matrix: one row per neuron."""
    if slot.offset is not None:
        t = t.narrow(slot.axis, slot.offset, slot.length(width))
    t = t.unflatten(slot.axis, (width, slot.block))
    return t.movedim(slot.axis, 0).reshape(width, -1)


def _slot_entries(t: Tensor, slot: Slot, width: int) -> int:
    """How many entries of ``t`` the slot's region holds."""
    return t.numel() // t.shape[slot.axis] * slot.length(width)


def _product(pairs: Sequence[tuple[Tensor, Tensor]], width: int, undo: Tensor) -> Tensor:
    """Σ over ``pairs`` of ``a @ b[undo]ᵀ`` (each a slot's ``(width, -1)`` rows of θ_A and θ_B)
    in the models' dtype (float32 at least), summed in float64: ``(width, width)``.

    A slot of at least ``width²`` entries (each tensor of a transformer's residual stream) is
    multiplied as it lies, a view of the tensor, and its product widened and added: that costs
    less than copying the slot. The smaller slots (a 3072-wide FFN's rows, biases, norm
    scales) are laid side by side and multiplied at once. θ_B's rows are put in ``undo``'s
    order before the products where they are fewer than two float64 matrices' entries (the
    FFN), else the sum's columns after them (the residual stream, which reads every weight)."""
    work = torch.float32
    for a, b in pairs:
        work = torch.promote_types(work, torch.promote_types(a.dtype, b.dtype))
    before = sum(b.numel() for _, b in pairs) < 2 * width**2
    index = undo.to(pairs[0][1].device)
    factors = [(a, b) for a, b in pairs if a.numel() >= width**2]
    small = [(a, b) for a, b in pairs if a.numel() < width**2]
    if len(small) == 1:
        factors.append(small[0])
    elif small:
        a_side = torch.cat([a.to(work) for a, _ in small], dim=1)
        factors.append((a_side, torch.cat([b.to(work) for _, b in small], dim=1)))
    total: Tensor | None = None
    for a, b in factors:
        product = (a.to(work) @ (b.index_select(0, index) if before else b).to(work).T).cpu()
        total = product.double() if total is None else total.add_(product)
    assert total is not None  # pairs is not empty
    return total if before else total[:, undo]


KEEP_RATIO = 4
"""A part of a group's cost matrix is kept between sweeps when its slots hold at least this many
entries per entry of the matrix (:class:`_CostMatrices`): a group's kept float64 parts take at
most 2/``KEEP_RATIO`` of the bytes of the float32 tensors it reads."""


class _CostMatrices:
    """The groups' cost matrices (C[i, j] = Σ_slots ⟨row i of θ_A, row j of θ_B with the
    group's own permutation undone⟩, so that J = const + Σ_i C[i, p(i)]), computed part by part.

    A group's slots are split into parts by the other groups that move them (``_Solved``). A
    group that permutes one axis of each tensor (``linear``) has, in θ_B's original neuron
    order, a part that depends only on those other groups' permutations; a large part (the
    token embedding in the residual stream's matrix, 31% of GPT-2-small's weights, which no
    other group moves) is kept with the versions of the groups it depends on (``_Solved``) and
    reused until one of them changes. The other parts are multiplied together (:func:`_product`), in
    the models' dtype (float32 at least; twice the work and a widened copy of each slot in
    float64), and the parts are summed in float64. A float32 model's assignment thus sees C to
    float32 rounding; whether its step gains is decided exactly (:func:`_exact_gain`).
    """

    def __init__(self, solved: _Solved) -> None:
        self.solved = solved
        self.parts: dict[str, dict[tuple[str, ...], list[int]]] = {}
        for group, moving in solved.moving.items():
            parts: dict[tuple[str, ...], list[int]] = defaultdict(list)
            for index, others in enumerate(moving):
                parts[others].append(index)
            self.parts[group] = dict(parts)
        self.kept: dict[tuple[str, tuple[str, ...]], tuple[tuple[int, ...], Tensor]] = {}

    def __call__(
        self,
        group: str,
        state_a: Mapping[str, Tensor],
        current: Mapping[str, Tensor],
        width: int,
        p: Tensor,
    ) -> tuple[np.ndarray, list[tuple[Tensor, Tensor]]]:
        """(C, rows) of ``group`` over its matched slots, where ``current`` is θ_B with the
        group's permutation ``p`` applied; ``rows``: each slot's ``(width, -1)`` rows of θ_A
        and of θ_B (views where the layout allows), for :func:`_exact_gain`."""
        rows = [
            (
                _neuron_rows(state_a[slot.name], slot, width),
                _neuron_rows(current[slot.name], slot, width),
            )
            for slot in self.solved.matched[group]
        ]
        undo = torch.argsort(p.cpu())  # [i, i'] pairs A's row i with original row p[i']
        cost = torch.zeros(width, width, dtype=torch.float64)
        fresh = []
        for others, indices in self.parts[group].items():
            pairs = [rows[i] for i in indices]
            if (
                not self.solved.linear[group]
                or sum(a.numel() for a, _ in pairs) < KEEP_RATIO * width**2
            ):
                fresh.extend(pairs)
                continue
            versions = tuple(self.solved.version[h] for h in others)
            kept = self.kept.get((group, others))
            if kept is None or kept[0] != versions:
                kept = (versions, _product(pairs, width, undo))
                self.kept[(group, others)] = kept
            cost += kept[1]
        if fresh:
            cost += _product(fresh, width, undo)
        return cost.numpy(), rows


def _exact_gain(rows: Sequence[tuple[Tensor, Tensor]], old: Tensor, new: Tensor) -> float:
    """Σ_i C[i, new(i)] − C[i, old(i)] (:class:`_CostMatrices`' C and ``rows``), over the rows
    that change, each entry a float64 dot of two rows (exact products): J's change when the
    group's permutation goes from ``old`` to ``new``, where J is linear in it.

    The rows are read a block of columns at a time (at most ``CHUNK`` float64 entries per
    operand): a slot on the second axis of a tensor (the residual stream's columns of the
    token embedding) is then read in contiguous blocks of the tensor's rows, not gathered
    strided row by strided row."""
    changed = (new != old).nonzero().flatten()
    if changed.numel() == 0:
        return 0.0
    partner = torch.argsort(old)[new[changed]]  # current row argsort(old)[j]: θ_B's row j
    everything = changed.numel() == len(old)  # all rows move: no gathers of A's or B's rows
    step = max(1, CHUNK // changed.numel())
    total = 0.0
    for a, b in rows:
        index, other = changed.to(a.device), partner.to(b.device)
        for start in range(0, a.shape[1], step):
            a_part, b_part = a[:, start : start + step], b[:, start : start + step]
            mine = a_part if everything else a_part.index_select(0, index)
            kept = b_part if everything else b_part.index_select(0, index)
            moved = b_part.index_select(0, other).double()
            moved -= kept.double()
            total += float(torch.dot(mine.double().reshape(-1), moved.reshape(-1)))
    return total


def coordinate_descent(
    state_a: Mapping[str, Tensor],
    state_b: Mapping[str, Tensor],
    actions: Mapping[str, NeuronPermutation],
    unmatched: Collection[str],
    *,
    max_iterations: int,
    order: str,
    tolerance: float,
    seed: int,
) -> tuple[dict[str, Tensor], Params, list[float], int, bool]:
    """One descent from the identity: (permutations, aligned state, J history, sweeps,
    converged), visiting the groups in the random orders of ``seed`` (``order="random"``) or
    in spec order; a step is taken when its gain exceeds ``tolerance`` times the cost
    matrix's absolute sum (:class:`~paramsym.connectivity.WeightMatchingConfig`)."""
    permutations = {g: torch.arange(a.width) for g, a in actions.items()}
    # Permutations are exact in any dtype: θ_B is moved in its own dtype, and J and the cost
    # matrices are accumulated in float64 tensor by tensor (the same values as on widened
    # copies of both models, without them).
    current = dict(state_b)
    slots_a = {
        group: [slot for slot in action.slots if slot.name not in unmatched]
        for group, action in actions.items()
    }
    # J is linear in a group's permutation unless the group permutes two axes of one tensor
    # (two slots on one axis, a head's query and key rows of a packed projection, are disjoint
    # regions permuted alike); then the assignment's gain is J's change exactly, and J need not
    # be recomputed.
    solved = _Solved(actions, slots_a)
    linear = solved.linear  # the same condition: J and the cost matrix linear in the group
    costs = _CostMatrices(solved)
    # A linear group whose slots hold most of the matched entries (a transformer's residual
    # stream) moves nearly all of them: its gain is read off J recomputed on the moved θ_B (one
    # float64 pass over both models), not gathered row pair by row pair (three, strided).
    matched_entries = sum(t.numel() for k, t in state_a.items() if k not in unmatched)
    whole = {
        group: linear[group]
        and 2 * sum(_slot_entries(state_a[s.name], s, action.width) for s in slots_a[group])
        > matched_entries
        for group, action in actions.items()
    }
    objective = inner_product(state_a, current, unmatched)
    history = [objective]
    names = list(actions)
    order_rng = np.random.default_rng(seed)
    converged = False
    iterations = 0
    for iterations in range(1, max_iterations + 1):  # noqa: B007 (used after the loop)
        improved = False
        visit = order_rng.permutation(len(names)) if order == "random" else range(len(names))
        for index in visit:
            group = names[int(index)]
            action = actions[group]
            old = permutations[group]
            if solved.current(group):
                continue  # at the optimum of its unchanged cost matrix
            cost, rows = costs(group, state_a, current, action.width, old)
            solved.mark(group)
            if np.array_equal(cost.argmax(axis=1), old.numpy()):
                continue  # each row at its maximum: no assignment does better (no LSAP needed)
            new = torch.as_tensor(max_assignment(cost, start=old.numpy()), dtype=torch.long)
            threshold = tolerance * max(float(np.abs(cost).sum()), 1e-300)
            gain = 0.0 if whole[group] else _exact_gain(rows, old, new)
            if not whole[group] and gain <= threshold:
                continue
            candidate = action.act_unchecked(current, action.compose(new, action.inverse(old)))
            if linear[group] and not whole[group]:
                value = objective + gain
            else:
                value = inner_product(state_a, candidate, unmatched)
                if whole[group] and value - objective <= threshold:
                    continue
                if value < objective:
                    # J is quadratic in P and the assignment step only its linearisation: a
                    # step that lowers J is not taken.
                    continue
            current, permutations[group], objective = candidate, new, value
            solved.changed(group)
            history.append(objective)
            improved = True
        if not improved:
            converged = True
            break
    history[-1] = inner_product(state_a, current, unmatched)  # the sum of gains, recomputed
    return permutations, current, history, iterations, converged


def _one_axis_per_tensor(slots: Sequence[Slot]) -> bool:
    """Whether a group permutes at most one axis of each tensor it acts on."""
    axes: dict[str, set[int]] = defaultdict(set)
    for slot in slots:
        axes[slot.name].add(slot.axis)
    return all(len(found) == 1 for found in axes.values())


class _Solved:
    """Which groups sit at the optimum of their current cost matrix.

    A group's cost matrix (:class:`_CostMatrices`, in θ_B's original neuron order) depends on
    its own permutation only where it permutes two axes of one tensor; otherwise (``linear``)
    only on the permutations of the groups that move the regions it reads (its neighbours):
    the groups acting on another axis of one of its tensors. Groups on the same axis permute
    disjoint regions of it (:class:`~paramsym.connectivity.PermutationSpec`; the heads'
    in-head permutations of one packed projection) and leave each other's regions alone. Once
    such a group's assignment is solved, the group is at that matrix's optimum (moved there,
    or already within the tolerance of it), and until a neighbour changes, solving again
    would give the same answer: the group is skipped, neither its matrix nor its assignment
    recomputed. A sweep in which few groups move (the last one moves none) costs few matrix
    products and assignments; each cost matrix of a transformer's residual stream reads every
    weight of the model, and an assignment of a 3072-wide FFN takes 0.2 s (0.7 s densely)."""

    def __init__(
        self,
        actions: Mapping[str, NeuronPermutation],
        matched: Mapping[str, list[Slot]],
    ) -> None:
        axes: dict[str, list[tuple[str, int]]] = defaultdict(list)  # tensor → (group, axis)
        for group, action in actions.items():
            for slot in action.slots:
                axes[slot.name].append((group, slot.axis))

        def moving(slot: Slot) -> tuple[str, ...]:
            return tuple(sorted({group for group, axis in axes[slot.name] if axis != slot.axis}))

        self.matched = matched
        self.moving = {group: [moving(slot) for slot in matched[group]] for group in actions}
        """group → for each matched slot, the groups acting on another axis of its tensor."""
        self.neighbours = {
            group: sorted({h for found in self.moving[group] for h in found}) for group in actions
        }
        self.linear = {
            group: _one_axis_per_tensor(action.slots) for group, action in actions.items()
        }
        self.version = dict.fromkeys(actions, 0)
        self.at: dict[str, tuple[int, ...]] = {}

    def _key(self, group: str) -> tuple[int, ...]:
        return tuple(self.version[h] for h in self.neighbours[group])

    def current(self, group: str) -> bool:
        """Whether ``group`` was solved on the cost matrix it has now."""
        return self.at.get(group) == self._key(group)

    def mark(self, group: str) -> None:
        """``group``'s assignment is being solved on its current cost matrix."""
        if self.linear[group]:
            self.at[group] = self._key(group)

    def changed(self, group: str) -> None:
        self.version[group] += 1
