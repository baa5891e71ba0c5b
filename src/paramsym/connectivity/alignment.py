"""Aligning two networks of one architecture with every symmetry group the graph gives
(issue 30; Theus et al. 2025, "Generalized Linear Mode Connectivity for Transformers").

:func:`align` moves model B along its symmetry orbit to the point closest to model A,

    min_g ‖θ_A − g·θ_B‖²,

where g runs over the product of the groups that detection finds on B (after folding the norm
weights into their readers, :func:`~paramsym.symmetry.fold.fold_norms`, which is what opens the
residual stream's orthogonal group):

* per-unit positive rescalings (ReLU layers, gated MLPs' up and down maps): a quartic per
  unit;
* unit permutations (FFN units, conv channels) and head permutations (whole heads, query heads
  within a key/value group, whole key/value groups): one linear assignment per group
  (:func:`paramsym.core.assignment.max_assignment`, exact);
* translations and shifts by read amounts (a LayerNorm's readers, absorbed biases, summed
  embedding tables, the stream's mean: notes 006), θ_B + E t with E the same all along the
  group: t by least squares (:func:`~paramsym.connectivity.align_steps.translation_step`);
* the matrix groups — per-head query–key and value–output maps, RoPE's per-pair rotations, the
  stream's orthogonal group — restricted to their orthogonal elements, for which ‖g·θ_B‖ is
  constant and the best element given the others is an orthogonal Procrustes problem:
  Q = U Vᵀ from the SVD U Σ Vᵀ of M = Σ_slots R_A R_Bᵀ (R: a slot's region, neuron axis
  first); on RoPE's pairs, one rotation angle per pair, atan2(M_ji − M_ij, M_ii + M_jj).

Each group is solved exactly given the others and the groups are alternated (block coordinate
ascent of ⟨θ_A, g·θ_B⟩), so the distance never increases. A head's own query–key and
value–output maps make its rows incomparable across models, so heads are matched on what those
maps leave invariant: for each of the head's matrix groups, the circuit R₊ᵀ R₋ of its slots of
power +1 and −1 (W_Qᵀ W_K and W_Vᵀ W_O per head), compared across models as
⟨R₊ᴬ R₊ᴮᵀ, R₋ᴬ R₋ᴮᵀ⟩ (small w × w products); the maps themselves are then found by Procrustes
on the matched heads. On the first sweep the stream map is solved from the tensors whose other
axes no other group moves (the embeddings), so that unaligned heads and units do not blur it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from paramsym.connectivity import align_steps as steps
from paramsym.connectivity.activations import capture, matrix_pairing, site
from paramsym.connectivity.activations import permutation_cost as activation_cost
from paramsym.core.model_checks import check_same_architecture, require_module
from paramsym.core.params import Params, output_change
from paramsym.errors import InvalidArgumentError, UnsupportedModuleError
from paramsym.symmetry.base import NeuronSymmetry, Slot, Symmetry
from paramsym.symmetry.discrete import NeuronPermutation
from paramsym.symmetry.fold import fold_norms
from paramsym.symmetry.gl import MatrixNeuronSymmetry
from paramsym.symmetry.rotary import RotaryQueryKey
from paramsym.symmetry.scaling import PositiveScaling

Groups = Literal["all", "permutations"]
GROUPS: tuple[str, ...] = ("all", "permutations")
Method = Literal["weights", "activations"]
METHODS: tuple[str, ...] = ("weights", "activations")


@dataclass
class AlignResult:
    """What :func:`align` returns.

    Attributes:
        model: model B moved along its orbit to A (the folded B where ``fold``): it computes
            B's function (``output_change``).
        reference: model A as it was aligned to (the folded A where ``fold``), same structure as
            ``model``: merge these two.
        distance_before / distance_after: ‖θ_A − θ_B‖ before and after, over every parameter.
        history: the distance after each sweep.
        sweeps: sweeps run.
        groups: group kind → number of groups moved along (``"permutation"``, ``"heads"``,
            ``"orthogonal"``, ``"rotary"``, ``"scaling"``, ``"translation"``).
        method: ``"weights"`` or ``"activations"``.
        by_weights: (``method="activations"``) groups aligned by their weights, for want of
            an activation site.
        output_change: max |B(x) − aligned B(x)| / max |B(x)| on the example input.
        seconds: wall-clock time.
        symmetries: the groups moved along (of ``model``), permutations first.
        original, example_input: model B as the user gave it and the input ``output_change``
            is measured on (what :func:`~paramsym.connectivity.learn_alignment` measures its
            refined model against); not serialised.
    """

    model: nn.Module = field(repr=False)
    reference: nn.Module = field(repr=False)
    distance_before: float
    distance_after: float
    history: list[float] = field(default_factory=list)
    sweeps: int = 0
    groups: dict[str, int] = field(default_factory=dict)
    method: str = "weights"
    by_weights: list[str] = field(default_factory=list)
    output_change: float = 0.0
    seconds: float = 0.0
    symmetries: list[Symmetry] = field(default_factory=list, repr=False)
    original: nn.Module | None = field(default=None, repr=False)
    example_input: Any = field(default=None, repr=False)

    def __str__(self) -> str:
        kinds = ", ".join(f"{n} {k}" for k, n in self.groups.items()) or "no group"
        return (
            f"{type(self.model).__name__} aligned ({self.method}): {kinds}; distance "
            f"{self.distance_before:.4g} → {self.distance_after:.4g} in {self.sweeps} "
            f"sweep(s); output change {self.output_change:.2e}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "distance_before": self.distance_before,
            "distance_after": self.distance_after,
            "history": list(self.history),
            "sweeps": self.sweeps,
            "groups": dict(self.groups),
            "method": self.method,
            "by_weights": list(self.by_weights),
            "output_change": self.output_change,
            "seconds": self.seconds,
        }


# -- the descent ------------------------------------------------------------------------------


def _scalings(found: Sequence[Symmetry]) -> list[PositiveScaling]:
    """The exact per-unit rescalings with slots of power ±1 (ReLU layers, gated MLPs' up and
    down maps), which :func:`~paramsym.connectivity.align_steps.scaling_step` solves in closed
    form."""
    return [
        s
        for s in found
        if isinstance(s, PositiveScaling)
        and s.exact
        and s.preserves == "function"
        and s.per_neuron
        and all(t.power in (1.0, -1.0) and t.block == 1 for t in s.slots)
    ]


def _translations(found: Sequence[Symmetry]) -> list[Symmetry]:
    """The exact translations and shifts by read amounts (absorbed biases, a norm's readers,
    summed embeddings, the stream's mean: notes 006), which
    :func:`~paramsym.connectivity.align_steps.translation_step` solves by least squares."""
    return [
        s
        for s in found
        if s.exact
        and s.preserves == "function"
        and s.dim > 0
        and (s.translation or s.shifts_by_reads)
    ]


def _selected(found: Sequence[Symmetry], groups: str) -> tuple[list, list]:
    """(permutation groups, matrix groups) to align along."""
    perms = [
        s
        for s in found
        if isinstance(s, NeuronPermutation) and s.exact and s.preserves == "function"
    ]
    matrices = []
    if groups == "all":
        matrices = [
            s
            for s in found
            if isinstance(s, MatrixNeuronSymmetry)
            and s.exact
            and s.preserves == "function"
            and not s.data_dependent
            and all(slot.block == 1 for slot in s.slots)
        ]
        # permutations inside a matrix group's regions (a head's own coordinates) are elements
        # of its orthogonal group: Procrustes covers them
        inside = [
            (t.name, t.axis, t.offset or 0, (t.offset or 0) + s.width)
            for s in matrices
            for t in s.slots
        ]
        perms = [
            p
            for p in perms
            if not all(
                any(
                    (t.name, t.axis) == (name, axis)
                    and low <= (t.offset or 0)
                    and (t.offset or 0) + p.width * t.block <= high
                    for name, axis, low, high in inside
                )
                for t in p.slots
            )
        ]
    return perms, matrices


def _clean_slots(
    s: MatrixNeuronSymmetry, others: Sequence[NeuronSymmetry], shapes: Mapping[str, torch.Size]
) -> list[Slot]:
    """``s``'s slots on tensors whose other axes no other group moves (the embeddings of the
    stream): the first sweep's Procrustes reads only these, where there are any."""
    moved = {(t.name, t.axis) for o in others if o is not s for t in o.slots}
    clean = [
        slot
        for slot in s.slots
        if not any(
            (slot.name, axis) in moved
            for axis in range(len(shapes[slot.name]))
            if axis != slot.axis
        )
    ]
    return clean or list(s.slots)


def align(
    model_a: nn.Module,
    model_b: nn.Module,
    example_input: Any,
    *,
    groups: Groups = "all",
    method: Method = "weights",
    data: Any = None,
    fold: bool = True,
    max_sweeps: int = 20,
    tolerance: float = 1e-12,
) -> AlignResult:
    """Model B moved along its symmetry group to model A (module docstring).

    Args:
        model_a, model_b: two models of one architecture (same modules, same shapes); neither
            is changed.
        example_input: a batch both accept (as for :func:`paramsym.symmetries`); the groups
            are read off its traced graph.
        groups: ``"all"``: permutations and the orthogonal maps of every matrix group (heads'
            query–key and value–output maps, RoPE's rotations, the stream); ``"permutations"``:
            unit and head permutations alone (Git Re-Basin's groups).
        method: ``"weights"`` (data-free: the alternating descent of the module docstring) or
            ``"activations"``: each group once, from the activations at its neurons on ``data``
            (:mod:`~paramsym.connectivity.activations`): units by the correlation of their
            activations, heads by ‖X_Aᵀ X_B‖_*, orthogonal maps by Procrustes on the
            activations (M = X_Aᵀ X_B; on directions the activations never take, e.g. the
            mean of a stream that folding centred, where M is singular, Q is taken from the
            weights); a group none of whose tensors has a known activation site is aligned by
            its weights (named in ``by_weights``).
        data: the inputs for ``method="activations"`` (default: ``example_input``).
        fold: fold the norm weights into their readers first (both models, with
            ``add_bias=True``: a LayerNorm's bias read by a linear map without one, GPT-2's
            head, gives that map a bias; the result's models are the folded ones), which opens
            the stream's orthogonal group.
        max_sweeps: sweeps over all groups at most.
        tolerance: stop when a sweep lowers ‖θ_A − g·θ_B‖² by less than this times its
            value before alignment.

    Returns:
        :class:`AlignResult` with the aligned B and the A it was aligned to.

    Raises:
        ShapeError: the models differ in architecture or shapes.
        UnsupportedModuleError: no group was found on the model (the trace cannot see it).
        InvalidArgumentError: ``groups``, ``max_sweeps`` or ``tolerance`` out of range.
    """
    start = time.perf_counter()
    require_module(model_a, "align: model_a")
    require_module(model_b, "align: model_b")
    if groups not in GROUPS:
        raise InvalidArgumentError(
            f"align: groups must be one of {', '.join(map(repr, GROUPS))}, got {groups!r}"
        )
    if method not in METHODS:
        raise InvalidArgumentError(
            f"align: method must be one of {', '.join(map(repr, METHODS))}, got {method!r}"
        )
    if max_sweeps < 1 or not tolerance >= 0:
        raise InvalidArgumentError(
            f"align: max_sweeps must be ≥ 1 and tolerance ≥ 0, got {max_sweeps}, {tolerance}"
        )
    check_same_architecture(model_a, model_b, "align")
    user_b = model_b
    if fold:
        model_a, model_b = (fold_norms(m, example_input, add_bias=True) for m in (model_a, model_b))
        check_same_architecture(model_a, model_b, "align (folded)")
    else:
        model_a, model_b = copy.deepcopy(model_a), copy.deepcopy(model_b)
    from paramsym.symmetry.detect import symmetries

    found = symmetries(model_b, example_input=example_input)
    perms, matrices = _selected(found, groups)
    scalings = _scalings(found) if groups == "all" else []
    translations = _translations(found) if groups == "all" else []
    if not perms and not matrices:
        raise UnsupportedModuleError(
            f"align: found no permutation or matrix group on {type(user_b).__name__} (the trace "
            "analysed none of its layers, or it has none); ps.symmetries(model, example_input, "
            "strict=True) names what it could not analyse"
        )
    # the stream first (whole axes), then the permutations, then the maps inside heads
    streams = [s for s in matrices if all(t.offset is None for t in s.slots)]
    local = [s for s in matrices if s not in streams]
    a: Params = {k: v.detach() for k, v in model_a.named_parameters()}
    b: Params = {k: v.detach() for k, v in model_b.named_parameters()}  # B's own, moved in place
    for name in a:
        if b.get(name) is None or a[name].shape != b[name].shape:
            raise InvalidArgumentError(f"align: parameter '{name}' differs between the models")
    # coarse blocks first: whole key/value groups before the query heads within them
    perms.sort(key=lambda p: -max(t.block for t in p.slots))
    located = {id(p): steps.locate(p, matrices) for p in perms}
    shapes = {k: v.shape for k, v in a.items()}

    def distance() -> float:
        return math.fsum(float((a[k] - b[k]).square().sum(dtype=torch.float64)) for k in a) ** 0.5

    history = [distance()]
    by_weights: list[str] = []
    if method == "weights":
        for sweep in range(max_sweeps):
            for s in streams:
                slots = _clean_slots(s, [*perms, *matrices], shapes) if sweep == 0 else s.slots
                steps.procrustes_step(s, a, b, slots)
            for p in perms:
                steps.assignment_step(p, steps.permutation_cost(p, located[id(p)], a, b), b)
            for c in scalings:
                steps.scaling_step(c, a, b)
            for s in local:
                steps.procrustes_step(s, a, b, s.slots)
            for t in translations:
                steps.translation_step(t, a, b)
            history.append(distance())
            if history[-2] ** 2 - history[-1] ** 2 <= tolerance * history[0] ** 2:
                break
    else:
        by_weights = _on_activations(
            model_a, model_b, a, b, perms, [*streams, *local], located, data or example_input
        )
        for c in scalings:  # a unit's scale has no activation statistic to match: by weights
            steps.scaling_step(c, a, b)
            by_weights.append(c.name)
        for t in translations:  # nor has a translation
            steps.translation_step(t, a, b)
            by_weights.append(t.name)
        history.append(distance())
    aligned = model_b  # moved in place through ``b``
    kinds: dict[str, int] = {}
    for s in [*perms, *matrices, *scalings]:
        kind = (
            "scaling"
            if isinstance(s, PositiveScaling)
            else "rotary"
            if isinstance(s, RotaryQueryKey)
            else "orthogonal"
            if isinstance(s, MatrixNeuronSymmetry)
            else "heads"
            if located[id(s)].covered
            else "permutation"
        )
        kinds[kind] = kinds.get(kind, 0) + 1
    if translations:
        kinds["translation"] = len(translations)
    return AlignResult(
        model=aligned,
        reference=model_a,
        distance_before=history[0],
        distance_after=history[-1],
        history=history,
        sweeps=len(history) - 1,
        groups=kinds,
        method=method,
        by_weights=by_weights,
        output_change=output_change(user_b, aligned, example_input),
        seconds=time.perf_counter() - start,
        symmetries=[*perms, *matrices, *scalings, *translations],
        original=user_b,
        example_input=example_input,
    )


def _on_activations(
    model_a: nn.Module,
    model_b: nn.Module,
    a: Params,
    b: Params,
    perms: Sequence[NeuronPermutation],
    matrices: Sequence[MatrixNeuronSymmetry],
    located: Mapping[int, steps.Located],
    data: Any,
) -> list[str]:
    """Each group once from the activations at its neurons (``align(method="activations")``),
    the permutations first; B's activations are read again after each group that moved it.
    Returns the groups aligned by their weights instead (no activation site)."""
    sites = {w for s in [*perms, *matrices] for t in s.slots if (w := site(model_b, t))}
    acts_a = capture(model_a, sites, data)
    by_weights: list[str] = []
    # groups with blocks of one size do not move each other's neurons: one capture of B
    # serves them all (whole key/value groups first, then the heads in them, then units)
    stages: list[list[NeuronSymmetry]] = []
    for p in perms:
        if stages and max(t.block for t in stages[-1][0].slots) == max(t.block for t in p.slots):
            stages[-1].append(p)
        else:
            stages.append([p])
    stages.append(list(matrices))
    for stage in stages:
        acts_b = capture(model_b, sites, data)
        for s in stage:
            if isinstance(s, NeuronPermutation):
                cost = activation_cost(model_b, s.slots, s.width, acts_a, acts_b)
                if cost is None:
                    by_weights.append(s.name)
                    cost = steps.permutation_cost(s, located[id(s)], a, b)
                steps.assignment_step(s, cost.cpu(), b)
                continue
            assert isinstance(s, MatrixNeuronSymmetry)
            reference = b[s.slots[0].name]
            m = matrix_pairing(model_b, s.slots, s.width, acts_a, acts_b)
            if m is None:
                by_weights.append(s.name)
                q = steps.orthogonal(steps.pairing(s, a, b, s.slots), s)
            else:  # where the activations leave Q undetermined, the weights decide it
                eps = max(torch.finfo(reference.dtype).eps, torch.finfo(m.dtype).eps)

                def weights(s: MatrixNeuronSymmetry = s) -> torch.Tensor:
                    return steps.pairing(s, a, b, s.slots)

                q = steps.orthogonal_completed(m.cpu(), s, weights, eps)
            q = q.to(reference.dtype).to(reference.device)
            steps.assign(b, s.act({k: b[k] for k in s.parameter_names}, q))
    return by_weights
