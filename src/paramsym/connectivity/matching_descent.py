"""Weight matching's coordinate descent (Git Re-Basin Alg. 1, notes 001 §4): one group's
permutation at a time by an exact linear assignment, until a sweep changes nothing.

J(P) = Σ_k ⟨θ_A[k], (P·θ_B)[k]⟩ is linear in one group's permutation when the others are
fixed (unless the group permutes two axes of one tensor), so each step solves a linear
assignment on the group's cost matrix (:func:`_cost_matrix`) with
``scipy.optimize.linear_sum_assignment``. A group solved on a cost matrix that has not changed
since is skipped (:class:`_Solved`). :func:`~paramsym.connectivity.matching.weight_matching`
is the public entry point; this module is its inner loop.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import scipy.optimize
import torch
from torch import Tensor

from paramsym.core.params import Params
from paramsym.symmetry.base import Slot
from paramsym.symmetry.discrete import NeuronPermutation


def inner_product(
    params_a: Mapping[str, Tensor], params_b: Mapping[str, Tensor], unmatched: Collection[str]
) -> float:
    """Σ_k ⟨θ_A[k], θ_B[k]⟩ over the tensors not ``unmatched``, accumulated in float64 (each
    product of two float32 numbers is exact in float64), a chunk at a time (:func:`float64_dot`)."""
    return math.fsum(float64_dot(params_a[k], params_b[k]) for k in params_a if k not in unmatched)


CHUNK = 1 << 20
"""Entries widened to float64 at a time by :func:`float64_dot` (8 MiB per operand): widening
whole tensors made two float64 copies of each, about half of weight matching's time on
GPT-2-small outside its cost matrices."""


def float64_dot(a: Tensor, b: Tensor) -> float:
    """⟨a, b⟩ in float64, widening ``CHUNK`` entries at a time (a BLAS dot per chunk)."""
    a, b = a.reshape(-1), b.reshape(-1)
    if a.dtype == torch.float64 and b.dtype == torch.float64:
        return float(torch.dot(a, b))
    return math.fsum(
        float(torch.dot(a[i : i + CHUNK].double(), b[i : i + CHUNK].double()))
        for i in range(0, a.numel(), CHUNK)
    )


def float64_squared_distance(a: Tensor, b: Tensor) -> float:
    """‖a − b‖² in float64, widening ``CHUNK`` entries at a time."""
    a, b = a.reshape(-1), b.reshape(-1)
    total = 0.0
    for i in range(0, a.numel(), CHUNK):
        d = a[i : i + CHUNK].double() - b[i : i + CHUNK].double()
        total += float(torch.dot(d, d))
    return total


def _neuron_rows(t: Tensor, slot: Slot, width: int) -> Tensor:
    """The slot's region of ``t`` as a ``(width, -1)`` matrix: one row per neuron."""
    if slot.offset is not None:
        t = t.narrow(slot.axis, slot.offset, slot.length(width))
    t = t.unflatten(slot.axis, (width, slot.block))
    return t.movedim(slot.axis, 0).reshape(width, -1)


def _cost_matrix(
    slots: Sequence[Slot],
    state_a: Mapping[str, Tensor],
    current: Mapping[str, Tensor],
    width: int,
    p: Tensor,
) -> tuple[np.ndarray, list[tuple[Tensor, Tensor]]]:
    """(C, rows): C[i, j] = Σ_slots ⟨row i of θ_A, row j of θ_B with the group's own
    permutation undone⟩,
    so that J = const + Σ_i C[i, p(i)], over the matched ``slots``; ``current`` is θ_B.

    Each slot's product is taken in the models' dtype (float32 at least) and the slots are
    summed in float64: float64 products of float32 models (twice the work, and a widened copy
    of each slot) were most of weight matching's time on GPT-2-small. In a float32 model the
    assignment thus sees C to float32 rounding; whether its step gains is decided exactly
    (:func:`_exact_gain`, from ``rows``: each slot's rows of θ_A and of θ_B, ``(width, -1)``)."""
    cost = torch.zeros(width, width, dtype=torch.float64)
    rows = []
    for slot in slots:
        a = _neuron_rows(state_a[slot.name], slot, width)
        b = _neuron_rows(current[slot.name], slot, width)
        work = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
        cost += (a.to(work) @ b.to(work).T).double().cpu()
        rows.append((a, b))
    undo = torch.argsort(p.cpu())  # [i, i'] pairs A's row i with original row p[i']
    return cost[:, undo].numpy(), rows


ROW_CHUNK = 64
"""Rows widened to float64 at a time by :func:`_exact_gain`."""


def _exact_gain(rows: Sequence[tuple[Tensor, Tensor]], old: Tensor, new: Tensor) -> float:
    """Σ_i C[i, new(i)] − C[i, old(i)] (:func:`_cost_matrix`'s C and ``rows``), over the rows
    that change, each entry a float64 dot of two rows (exact products): J's change when the
    group's permutation goes from ``old`` to ``new``, where J is linear in it."""
    changed = (new != old).nonzero().flatten()
    if changed.numel() == 0:
        return 0.0
    partner = torch.argsort(old)[new[changed]]  # current row argsort(old)[j]: θ_B's row j
    everything = changed.numel() == len(old)  # all rows move: no gathers of A's or B's rows
    total = 0.0
    for a, b in rows:
        index, other = changed.to(a.device), partner.to(b.device)
        kept = b if everything else b.index_select(0, index)
        mine = a if everything else a.index_select(0, index)
        for start in range(0, len(index), ROW_CHUNK):  # float64 copies of a few rows at a time
            part = slice(start, start + ROW_CHUNK)
            moved = b.index_select(0, other[part]).double() - kept[part].double()
            total += float(torch.sum(mine[part].double() * moved))
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
            cost, rows = _cost_matrix(slots_a[group], state_a, current, action.width, old)
            solved.mark(group)
            if np.array_equal(cost.argmax(axis=1), old.numpy()):
                continue  # each row at its maximum: no assignment does better (no LSAP needed)
            _, columns = scipy.optimize.linear_sum_assignment(cost, maximize=True)
            new = torch.as_tensor(columns, dtype=torch.long)
            gain = _exact_gain(rows, old, new)
            if gain <= tolerance * max(float(np.abs(cost).sum()), 1e-300):
                continue
            candidate = action.act_unchecked(current, action.compose(new, action.inverse(old)))
            if linear[group]:
                value = objective + gain
            else:
                value = inner_product(state_a, candidate, unmatched)
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

    A group's cost matrix (:func:`_cost_matrix`, in θ_B's original neuron order) depends on
    its own permutation only where it permutes two axes of one tensor; otherwise (``linear``)
    only on the permutations of the groups acting on the other axes of its tensors (its
    neighbours). Once such a group's assignment is solved, the group is at that matrix's
    optimum (moved there, or already within the tolerance of it), and until a neighbour
    changes, solving again would give the same answer: the group is skipped, neither its
    matrix nor its assignment recomputed. A sweep in which few groups move (the last one
    moves none) costs few matrix products and assignments; each cost matrix of a
    transformer's residual stream reads every weight of the model, and an assignment of a
    3072-wide FFN takes about a second."""

    def __init__(
        self,
        actions: Mapping[str, NeuronPermutation],
        matched: Mapping[str, list[Slot]],
    ) -> None:
        acting: dict[str, set[str]] = defaultdict(set)
        for group, action in actions.items():
            for slot in action.slots:
                acting[slot.name].add(group)
        self.neighbours = {
            group: sorted({h for slot in matched[group] for h in acting[slot.name]} - {group})
            for group in actions
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
