"""Permutation alignment by weight matching (Ainsworth et al. 2023, "Git Re-Basin", the
dissertation's [3]; Entezari et al. 2022's conjecture that SGD minima are linearly connected up
to permutation, §3.3.1).

Two networks θ_A, θ_B of one architecture are aligned by permuting the hidden neurons of θ_B,
π·θ_B, to maximise the *matching objective*

    J(π) = Σ_k ⟨θ_A[k], (π·θ_B)[k]⟩,    equivalently minimise ‖θ_A − π·θ_B‖²

(‖π·θ_B‖ does not depend on π). :func:`weight_matching` does coordinate descent over the
permutation groups: with every other group fixed, J is linear in one group's permutation P,
J = const + Σ_i C[i, p(i)], and the best P is a linear assignment problem, solved exactly
(:func:`paramsym.core.assignment.max_assignment`: scipy's sparse solver on each row's largest
entries, certified optimal over the whole matrix by LP duality; scipy's dense solver below
1024 units). Each update is accepted only if it does not lower J, so
J never decreases; the descent stops when a sweep over all groups improves nothing.

The result is a *coordinate-wise* optimum: no single group's permutation can raise J (tested
by brute force), but the joint problem is NP-hard and the descent can stop at a local optimum.
On narrow networks this happens even for an exact permuted copy of θ_A (3 of 10 random
[4, 6, 7, 5, 3] LeakyReLU nets); on wider ones ([8, 16, 16, 16, 4], 20 of 20) the planted
permutation is recovered exactly.

*Which* axes each group permutes is a :class:`PermutationSpec`. For a model that
:func:`paramsym.symmetries` analyses (MLPs, chains with normalisation layers, attention heads)
:func:`permutation_spec` builds it from the :class:`~paramsym.NeuronPermutation` symmetries that
detection finds, and the permutations are applied through their ``act``; for any other model,
write the spec by hand (:meth:`PermutationSpec.from_axes`, the layout of git-re-basin's
``axes_to_perm``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from torch import Tensor, nn

from paramsym.connectivity.matching_descent import coordinate_descent, inner_product
from paramsym.core.linalg import float64_dot, float64_squared_distance
from paramsym.core.model_checks import check_same_architecture, require_module
from paramsym.core.params import Params, params_of
from paramsym.errors import (
    InvalidArgumentError,
    MissingParameterError,
    NotConvergedWarning,
    ShapeError,
    UnsupportedModuleError,
)
from paramsym.symmetry.attention import HeadPermutation
from paramsym.symmetry.base import Slot, SlotLike, Symmetry, make_slots, regions_overlap
from paramsym.symmetry.detect import symmetries as detect_symmetries
from paramsym.symmetry.discrete import NeuronPermutation

Order = Literal["random", "forward"]


@dataclass(frozen=True)
class PermutationSpec:
    """Which tensor axes each permutation group re-indexes.

    Attributes:
        groups: group name → the slots it permutes, each a :class:`~paramsym.Slot`, a
            ``(name, axis)`` pair or a parameter name (axis 0). A slot's neurons occupy its whole
            axis, or ``[offset, offset + width·block)`` of it in blocks of ``block`` entries
            (e.g. attention heads). The name may be a buffer (running statistics) of the model.
        widths: group name → number of neurons, for groups whose every slot has an offset
            (otherwise inferred from the shapes).
        unmatched: tensors that are permuted but left out of the matching objective (the
            running statistics of normalisation layers).

    A group permutes all its slots with one index tensor ``p``: entry ``i`` of the aligned
    tensor along the slot's axis is entry ``p[i]`` of the original (:class:`NeuronPermutation`
    convention). Two groups may not permute overlapping regions of one axis.

    >>> spec = PermutationSpec.from_axes({"0.weight": ("h", None), "0.bias": ("h",),
    ...                                   "2.weight": (None, "h")})
    >>> [(s.name, s.axis) for s in spec.groups["h"]]
    [('0.weight', 0), ('0.bias', 0), ('2.weight', 1)]
    """

    groups: Mapping[str, Sequence[SlotLike]]
    widths: Mapping[str, int] = field(default_factory=dict)
    unmatched: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.groups:
            raise InvalidArgumentError("PermutationSpec: needs at least one permutation group")
        groups: dict[str, tuple[Slot, ...]] = {}
        for name, items in self.groups.items():
            slots = make_slots(items, axis=0, power=1.0)
            if not slots:
                raise InvalidArgumentError(f"PermutationSpec: group '{name}' has no slots")
            seen = [(s.name, s.axis, s.offset) for s in slots]
            if len(set(seen)) != len(seen):
                raise InvalidArgumentError(
                    f"PermutationSpec: group '{name}' lists the same (parameter, axis) twice"
                )
            groups[str(name)] = slots
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "widths", {str(k): int(v) for k, v in self.widths.items()})
        object.__setattr__(self, "unmatched", frozenset(self.unmatched))
        unknown = sorted(set(self.widths) - set(groups))
        if unknown:
            raise InvalidArgumentError(
                f"PermutationSpec: widths given for unknown groups {unknown}"
            )

    @classmethod
    def from_axes(cls, axes: Mapping[str, Sequence[str | None]]) -> PermutationSpec:
        """From ``{parameter: (group of axis 0, group of axis 1, ...)}``, ``None`` for an axis
        no group permutes (git-re-basin's ``axes_to_perm``)."""
        groups: dict[str, list[Slot]] = {}
        for name, per_axis in axes.items():
            for axis, group in enumerate(per_axis):
                if group is not None:
                    groups.setdefault(group, []).append(Slot(name, axis))
        return cls(groups=groups)

    @classmethod
    def from_symmetries(
        cls, symmetries: Iterable[Symmetry], unmatched: Iterable[str] = ()
    ) -> PermutationSpec:
        """One group per :class:`~paramsym.NeuronPermutation` among ``symmetries`` (others are
        skipped), named like the symmetry, e.g. ``"permutation[0->2]"``."""
        found = [s for s in symmetries if isinstance(s, NeuronPermutation)]
        if not found:
            raise UnsupportedModuleError(
                "PermutationSpec.from_symmetries: no neuron permutations among the symmetries "
                "given; write the spec by hand with PermutationSpec.from_axes"
            )
        return cls(
            groups={s.name: s.slots for s in found},
            widths={s.name: s.width for s in found},
            unmatched=frozenset(unmatched),
        )

    @property
    def slots(self) -> dict[str, tuple[Slot, ...]]:
        """The normalised groups (group name → slots)."""
        return dict(self.groups)  # type: ignore[arg-type]  # normalised in __post_init__

    def resolve_widths(self, state: Mapping[str, Tensor]) -> dict[str, int]:
        """The width of every group, checked against the shapes of ``state``.

        Raises :class:`~paramsym.errors.MissingParameterError` for a slot whose tensor is not in
        ``state`` and :class:`~paramsym.errors.ShapeError` for an axis that does not exist or
        whose size disagrees with the rest of its group.
        """
        widths: dict[str, int] = {}
        for group, slots in self.slots.items():
            for slot in slots:
                if slot.name not in state:
                    raise MissingParameterError(
                        f"permutation spec: group '{group}' permutes '{slot.name}', which the "
                        f"model does not have (it has {sorted(state)[:8]}...); fix the spec"
                    )
                t = state[slot.name]
                if not 0 <= slot.axis < t.ndim:
                    raise ShapeError(
                        f"permutation spec: group '{group}' permutes axis {slot.axis} of "
                        f"'{slot.name}', which has shape {tuple(t.shape)}"
                    )
            width = self.widths.get(group)
            if width is None:
                whole = [s for s in slots if s.offset is None]
                if not whole:
                    raise InvalidArgumentError(
                        f"permutation spec: every slot of group '{group}' has an offset; give "
                        "its width in PermutationSpec(widths=...)"
                    )
                first = whole[0]
                width = state[first.name].shape[first.axis] // first.block
            for slot in slots:
                size = state[slot.name].shape[slot.axis]
                needed = slot.length(width)
                fits = size == needed if slot.offset is None else size >= slot.offset + needed
                if width < 1 or not fits:
                    raise ShapeError(
                        f"permutation spec: group '{group}' has {width} neurons, but axis "
                        f"{slot.axis} of '{slot.name}' (shape {tuple(state[slot.name].shape)}) "
                        f"does not hold {needed} entries"
                        + ("" if slot.offset is None else f" from offset {slot.offset}")
                        + "; the spec does not match the model's shapes"
                    )
            widths[group] = width
        self._check_disjoint(widths)
        return widths

    def _check_disjoint(self, widths: Mapping[str, int]) -> None:
        regions = [
            (group, slot.region(widths[group]))
            for group, slots in self.slots.items()
            for slot in slots
        ]
        for i, (g1, r1) in enumerate(regions):
            for g2, r2 in regions[i + 1 :]:
                if g1 != g2 and regions_overlap(r1, r2):
                    raise InvalidArgumentError(
                        f"permutation spec: groups '{g1}' and '{g2}' both permute axis {r1[1]} "
                        f"of '{r1[0]}'; each axis entry belongs to at most one group"
                    )

    def actions(self, state: Mapping[str, Tensor]) -> dict[str, NeuronPermutation]:
        """One :class:`~paramsym.NeuronPermutation` per group, validated against ``state``."""
        out: dict[str, NeuronPermutation] = {}
        for group, width in self.resolve_widths(state).items():
            action = NeuronPermutation(width, incoming=self.slots[group], outgoing=())
            action.name = group  # error messages name the group as the user knows it
            out[group] = action
        return out


def permutation_spec(model: nn.Module, example_input: Any = None) -> PermutationSpec:
    """The permutation spec of ``model`` from the neuron permutations :func:`paramsym.symmetries`
    finds (one group per hidden layer of an MLP, named like the symmetry).

    With ``example_input`` the groups come from the traced graph, as rebasin derives them:
    every feature space of a CNN, ResNet (the residual stream of each stage is one group),
    transformer (per-head query-key and value-output spaces, MLP hidden units, the residual
    stream) or recurrent net. Whole-head permutations are left out (they overlap the per-head
    groups; a spec's groups must not share an axis entry).

    Running statistics ride along: a 1-d floating buffer of the module that owns a permuted
    per-neuron parameter (BatchNorm's ``running_mean`` and ``running_var``) is permuted with it
    and left out of the matching objective, so aligned networks in eval mode compute the same
    function.

    >>> import paramsym as ps
    >>> spec = permutation_spec(ps.mlp([4, 8, 8, 3], activation="relu"))
    >>> {g: [(s.name, s.axis) for s in slots] for g, slots in spec.slots.items()}
    ... # doctest: +NORMALIZE_WHITESPACE
    {'permutation[0->2]': [('0.weight', 0), ('0.bias', 0), ('2.weight', 1)],
     'permutation[2->4]': [('2.weight', 0), ('2.bias', 0), ('4.weight', 1)]}
    """
    require_module(model, "permutation_spec")
    found = [
        s
        for s in detect_symmetries(model, example_input=example_input)
        if isinstance(s, NeuronPermutation) and not isinstance(s, HeadPermutation)
    ]
    if not found:
        raise UnsupportedModuleError(
            f"permutation_spec: paramsym found no neuron permutations in {type(model).__name__}; "
            "pass a PermutationSpec written for this model (PermutationSpec.from_axes)"
        )
    groups: dict[str, list[Slot]] = {}
    widths: dict[str, int] = {}
    statistics: set[str] = set()
    for s in found:
        slots = list(s.slots)
        statistics |= s.buffer_names  # graph detection moves running statistics itself
        for extra in [] if s.buffer_names else _statistics_slots(model, s):
            slots.append(extra)
            statistics.add(extra.name)
        groups[s.name] = slots
        widths[s.name] = s.width
    return PermutationSpec(groups=groups, widths=widths, unmatched=frozenset(statistics))


def _statistics_slots(model: nn.Module, action: NeuronPermutation) -> list[Slot]:
    """Slots for the 1-d floating buffers of modules owning a permuted per-neuron parameter."""
    params = dict(model.named_parameters())
    out: list[Slot] = []
    for slot in action.slots:
        t = params.get(slot.name)
        if t is None or t.ndim != 1 or slot.offset is not None or slot.block != 1:
            continue
        owner_name = slot.name.rpartition(".")[0]
        owner = model.get_submodule(owner_name)
        for buffer_name, buffer in owner.named_buffers(recurse=False):
            full = f"{owner_name}.{buffer_name}" if owner_name else buffer_name
            if (
                buffer.is_floating_point()
                and buffer.ndim == 1
                and buffer.shape[0] == action.width
                and all(s.name != full for s in out)
            ):
                out.append(Slot(full, 0))
    return out


def apply_permutations(
    params: Mapping[str, Tensor],
    spec: PermutationSpec,
    permutations: Mapping[str, Tensor],
) -> Params:
    """``π·θ``: every group's permutation applied through its :class:`NeuronPermutation` action.

    Groups missing from ``permutations`` are left as they are.
    """
    actions = spec.actions(params)
    unknown = sorted(set(permutations) - set(actions))
    if unknown:
        raise InvalidArgumentError(
            f"apply_permutations: no group named {unknown} in the spec (groups: {sorted(actions)})"
        )
    out = dict(params)
    for group, p in permutations.items():
        out = actions[group].act(out, p)
    return out


def matching_objective(
    params_a: Mapping[str, Tensor], params_b: Mapping[str, Tensor], spec: PermutationSpec
) -> float:
    """J = Σ_k ⟨θ_A[k], θ_B[k]⟩ over the tensors the objective uses (all but ``spec.unmatched``),
    accumulated in float64."""
    return inner_product(params_a, params_b, spec.unmatched)


CANCELLATION = 1e-6
""":func:`_distances` computes ‖θ_A − θ_B‖² directly when ‖θ_A‖² + ‖θ_B‖² − 2J is below this
share of ‖θ_A‖² + ‖θ_B‖² (the formula then keeps fewer than ten correct digits)."""


def _distances(
    params_a: Mapping[str, Tensor],
    params_b: Mapping[str, Tensor],
    aligned: Mapping[str, Tensor],
    objectives: tuple[float, float],
    spec: PermutationSpec,
) -> tuple[float, float]:
    """‖θ_A − θ_B‖ and ‖θ_A − π·θ_B‖ over the matched tensors, from J before and after
    (``objectives``) and the two norms (‖π·θ_B‖ = ‖θ_B‖): two float64 passes over one model
    each instead of two over both; a distance that this formula would cancel (θ_B almost a
    permuted θ_A) is computed directly."""
    matched = [k for k in params_a if k not in spec.unmatched]
    norms = math.fsum(float64_dot(params_a[k], params_a[k]) for k in matched) + math.fsum(
        float64_dot(params_b[k], params_b[k]) for k in matched
    )
    distances = []
    for other, objective in zip((params_b, aligned), objectives, strict=True):
        squared = norms - 2.0 * objective
        if squared < CANCELLATION * norms:
            squared = math.fsum(float64_squared_distance(params_a[k], other[k]) for k in matched)
        distances.append(max(squared, 0.0) ** 0.5)
    return distances[0], distances[1]


@dataclass(frozen=True)
class WeightMatchingConfig:
    """Settings of :func:`weight_matching`.

    Attributes:
        max_iterations: sweeps over all groups at most.
        order: ``"random"`` (a fresh random order of the groups in each sweep, as in Git
            Re-Basin) or ``"forward"`` (model order).
        seed: seed of the random order.
        restarts: runs of the descent from the identity with the random orders of seeds
            ``seed, seed + 1, …``; the result is the run with the largest J. Coordinate descent
            stops at coordinate-wise optima, and which one depends on the order: on 512-wide
            MNIST-1D MLPs 3 of 5 orders stopped near J = 280 with a 10× larger barrier than
            the orders reaching J = 308.
        tolerance: a group's update counts as progress only if it raises J by more than
            ``tolerance`` times the sum of the absolute entries of its cost matrix.
    """

    max_iterations: int = 100
    order: Order = "random"
    seed: int = 0
    restarts: int = 1
    tolerance: float = 1e-12

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise InvalidArgumentError("WeightMatchingConfig: max_iterations must be >= 1")
        if self.order not in ("random", "forward"):
            raise InvalidArgumentError(
                f"WeightMatchingConfig: order must be 'random' or 'forward', got {self.order!r}"
            )
        if self.restarts < 1:
            raise InvalidArgumentError("WeightMatchingConfig: restarts must be >= 1")
        if not self.tolerance >= 0:
            raise InvalidArgumentError("WeightMatchingConfig: tolerance must be >= 0")


@dataclass
class WeightMatchingResult:
    """What :func:`weight_matching` found.

    Attributes:
        permutations: group name → index tensor ``p`` (aligned entry i is original entry p[i]).
        params: the second network permuted, π·θ_B (with permuted running statistics when the
            model has them); it computes the same function as θ_B.
        objective_before, objective_after: J at the identity and at π.
        distance_before, distance_after: ‖θ_A − θ_B‖ and ‖θ_A − π·θ_B‖ over the matched tensors.
        history: J after each accepted group update (starting with ``objective_before``);
            non-decreasing.
        iterations: sweeps done.
        converged: whether the last sweep improved nothing (else ``max_iterations`` ran out).
        restart_objectives: J at the end of each restart (the result is the largest).
        seconds: wall-clock time.
    """

    permutations: dict[str, Tensor]
    params: Params = field(repr=False)
    objective_before: float
    objective_after: float
    distance_before: float
    distance_after: float
    history: list[float]
    iterations: int
    converged: bool
    seconds: float
    restart_objectives: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers for JSON (permutations as lists; no tensors)."""
        return {
            "permutations": {k: v.tolist() for k, v in self.permutations.items()},
            "objective_before": self.objective_before,
            "objective_after": self.objective_after,
            "distance_before": self.distance_before,
            "distance_after": self.distance_after,
            "history": list(self.history),
            "iterations": self.iterations,
            "converged": self.converged,
            "seconds": self.seconds,
            "restart_objectives": list(self.restart_objectives),
        }


def _state(model: nn.Module | Mapping[str, Tensor], spec: PermutationSpec, what: str) -> Params:
    """Parameters (and the spec's running statistics) of a module, or a copy of a dict."""
    if isinstance(model, Mapping):
        return dict(model)
    if not isinstance(model, nn.Module):
        raise InvalidArgumentError(
            f"{what}: expected an nn.Module or a params dict, got {type(model).__name__}"
        )
    state = params_of(model)
    buffers = dict(model.named_buffers())
    for name in spec.unmatched:
        if name in buffers:
            state[name] = buffers[name].detach()
    return state


def _check_same_state(a: Mapping[str, Tensor], b: Mapping[str, Tensor], what: str) -> None:
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            where = "first" if name not in a else "second"
            raise ShapeError(
                f"{what}: '{name}' is missing from the {where} network; both networks must have "
                "the same architecture"
            )
        if a[name].shape != b[name].shape:
            raise ShapeError(
                f"{what}: '{name}' has shape {tuple(a[name].shape)} in the first network and "
                f"{tuple(b[name].shape)} in the second; both networks must have the same "
                "architecture"
            )


def weight_matching(
    model_a: nn.Module | Mapping[str, Tensor],
    model_b: nn.Module | Mapping[str, Tensor],
    spec: PermutationSpec | None = None,
    config: WeightMatchingConfig | None = None,
    *,
    example_input: Any = None,
) -> WeightMatchingResult:
    """Permute the hidden neurons of ``model_b`` to match ``model_a`` (module docstring).

    Args:
        model_a: the reference network: an ``nn.Module`` or its params dict.
        model_b: the network to align, of the same architecture. It is not changed: the aligned
            parameters are ``result.params`` (evaluate them with :func:`paramsym.functional_call`
            or load them with ``model.load_state_dict(result.params, strict=False)``).
        spec: the permutation groups; default :func:`permutation_spec` of the module given
            (``model_a`` if it is one). Needed when both arguments are dicts.
        config: a :class:`WeightMatchingConfig`.
        example_input: a batch the model accepts: the default spec is then derived from the
            traced graph (any architecture; see :func:`permutation_spec`).

    Raises:
        ShapeError: the two networks differ in architecture, or the spec does not match their
            shapes. MissingParameterError: the spec names a tensor the model does not have.

    Warns :class:`~paramsym.errors.NotConvergedWarning` when ``max_iterations`` ran out before a
    sweep without progress.

    >>> import torch, paramsym as ps
    >>> a = ps.mlp([4, 6, 2], activation="relu", seed=0)
    >>> spec = permutation_spec(a)
    >>> p = torch.tensor([2, 0, 1, 5, 4, 3])
    >>> b = apply_permutations(ps.params_of(a), spec, {"permutation[0->2]": p})
    >>> result = weight_matching(a, b)
    >>> result.distance_after
    0.0
    """
    config = config or WeightMatchingConfig()
    start = time.perf_counter()
    for which, network in (("model_a", model_a), ("model_b", model_b)):
        if not isinstance(network, Mapping):
            require_module(network, f"weight_matching({which})")
    if spec is None:
        module = next((m for m in (model_a, model_b) if isinstance(m, nn.Module)), None)
        if module is None:
            raise InvalidArgumentError(
                "weight_matching: both networks are params dicts, so paramsym cannot find their "
                "permutations; pass spec=PermutationSpec(...) or an nn.Module"
            )
        spec = permutation_spec(module, example_input)
    if isinstance(model_a, nn.Module) and isinstance(model_b, nn.Module):
        check_same_architecture(model_a, model_b, "weight_matching")
    state_a = _state(model_a, spec, "weight_matching(model_a)")
    state_b = _state(model_b, spec, "weight_matching(model_b)")
    _check_same_state(state_a, state_b, "weight_matching")
    actions = spec.actions(state_b)
    for action in actions.values():
        action.check_params(state_a)  # finite, right shapes: the descent does not check again
        action.check_params(state_b)

    runs = [
        coordinate_descent(
            state_a,
            state_b,
            actions,
            spec.unmatched,
            max_iterations=config.max_iterations,
            order=config.order,
            tolerance=config.tolerance,
            seed=config.seed + restart,
        )
        for restart in range(config.restarts)
    ]
    permutations, current, history, iterations, converged = max(runs, key=lambda r: r[2][-1])
    objective = history[-1]
    before, after = _distances(state_a, state_b, current, (history[0], objective), spec)
    if not converged:
        warnings.warn(
            f"weight_matching: stopped after max_iterations={config.max_iterations} sweeps while "
            "the objective was still improving; the alignment is not a coordinate-wise optimum",
            NotConvergedWarning,
            stacklevel=2,
        )
    return WeightMatchingResult(
        permutations=permutations,
        params=current,
        objective_before=history[0],
        objective_after=objective,
        distance_before=before,
        distance_after=after,
        history=history,
        iterations=iterations,
        converged=converged,
        seconds=time.perf_counter() - start,
        restart_objectives=[run[2][-1] for run in runs],
    )
