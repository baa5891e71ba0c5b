"""Torch-Pruning's coupled channel groups, as (parameter name, axis) sets: a test oracle.

Channels that Torch-Pruning (DepGraph, Fang et al. CVPR 2023; ``pip install torch-pruning``) must
prune together are channels that must be *permuted* together, so its groups are the permutation
spaces that paramsym's detection should find. This module runs
``tp.DependencyGraph().build_dependency(model, example_inputs=...)`` and ``get_all_groups()`` and
translates each group into the set of ``(name, axis)`` pairs it touches, ``name`` as in
``model.named_parameters()``.

Translation of Torch-Pruning's pruning functions to axes (``out`` = ``prune_out_channels``,
``in`` = ``prune_in_channels``):

==========================  ====================================  ===========================
layer                       out                                   in
==========================  ====================================  ===========================
Linear                      weight 0, bias 0                      weight 1
Conv1d/2d/3d                weight 0, bias 0                      weight 1
ConvTranspose1d/2d/3d       weight 1, bias 0                      weight 0
depthwise conv              weight 0, bias 0 (in = out)           same
BatchNorm/InstanceNorm/GN   weight 0, bias 0 (in = out)           same
LayerNorm                   weight/bias on Torch-Pruning's dim    same
                            (the last one)
Embedding                   weight 1 (in = out)                   same
PReLU(num_parameters > 1)   weight 0                              same
nn.LSTM (1 layer)           *unmapped* (see below)                weight_ih_l0 1 (+ _reverse)
unwrapped nn.Parameter      the axis Torch-Pruning chose          same
                            (last non-singleton dim; caveat)
grouped conv, MHA, others   *unmapped*                            *unmapped*
==========================  ====================================  ===========================

Running statistics of BatchNorm are buffers, not parameters: they are not listed, though they must
be permuted with the group.

What is dropped, and why:

- Groups that touch the **model's output space** (the out-channels of a layer whose output is
  returned, or an element-wise op on a returned tensor): permuting them changes the output, so they
  are not symmetries. For ``Sequential(Linear(4, 8), ReLU, Linear(8, 8), ReLU, Linear(8, 3))``
  Torch-Pruning returns three groups, one per Linear rooted at its out-channels; the last one,
  ``{("4.weight", 0), ("4.bias", 0)}``, is the output group, and Torch-Pruning does not mark it
  (no ``_OutputOp`` node is made when a registered layer produces the output).
- Groups that touch the **model's input**. Torch-Pruning never makes a node for an input tensor,
  so on its own it reports the first layer's in-channels nowhere (``get_all_groups`` roots groups
  at out-channels only), and it would report ``x + f(x)`` with a raw input ``x`` as an interior
  group, which it is not. To see the input, each floating-point input tensor is passed as an
  ``nn.Parameter`` and registered with Torch-Pruning as an unwrapped parameter
  (``input_channel_dim`` names its channel axis); a group that reaches it touches the input.
- Groups that contain no parameter.

What is flagged rather than dropped (the group is kept in :attr:`ChannelGroups.groups` with its
mapped members; the notes are in :attr:`ChannelGroups.unmapped` / :attr:`ChannelGroups.caveats`):

- ``unmapped``: members with parameters that no ``(name, axis)`` pair describes: the hidden units
  of an LSTM (four gate blocks of rows of ``weight_ih_l0``, ``weight_hh_l0``, the biases, plus
  columns of ``weight_hh_l0``; Torch-Pruning 1.6's ``LSTMPruner`` also indexes these
  inconsistently), ``nn.MultiheadAttention`` (Torch-Pruning ties the embedding dimension to the
  internal q/k/v dimension), grouped (non-depthwise) convolutions, and any other layer type.
- ``caveats``: mapped members whose permutation is not a free permutation of the whole axis: a
  member covered only partly (concat/split), a member whose indices are a multiple of the group's
  channel count (a flatten after a conv: each channel is a block of columns), GroupNorm with
  ``1 < num_groups < num_channels``, a multi-dimensional LayerNorm, unwrapped parameters (whose
  axis Torch-Pruning guessed).

The groups are deduplicated (Torch-Pruning returns one group per root layer; the same parameter
set can come back from several roots) and sorted.

Example::

    res = coupled_channel_groups(model, torch.randn(2, 4))
    res.groups          # [frozenset({("0.weight", 0), ("0.bias", 0), ("2.weight", 1)}), ...]
    res.exact           # the groups with no unmapped member and no caveat
    res.records         # every group, boundary ones included, with why it was kept or dropped
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["ChannelGroups", "OracleGroup", "coupled_channel_groups"]

ParamAxis = tuple[str, int]


@dataclass(frozen=True)
class OracleGroup:
    """One Torch-Pruning group, translated.

    ``params``: the mapped ``(name, axis)`` members. ``unmapped``: descriptions of members with
    parameters that no pair describes. ``caveats``: notes on mapped members that are not freely
    permutable as a whole axis. ``touches_input`` / ``touches_output``: whether the group reaches
    the model's input or output space (such groups are not symmetries). ``n_channels``: the
    number of channels of the group (the root's). ``root``: Torch-Pruning's root layer.
    """

    params: frozenset[ParamAxis]
    unmapped: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()
    touches_input: bool = False
    touches_output: bool = False
    n_channels: int = 0
    root: str = ""

    @property
    def interior(self) -> bool:
        return not (self.touches_input or self.touches_output)


@dataclass(frozen=True)
class ChannelGroups:
    """What :func:`coupled_channel_groups` returns.

    ``groups``: the interior groups (not touching the model's input or output) with at least one
    mapped member, each a frozenset of ``(parameter name, axis)``; sorted.
    ``unmapped``: for the groups in ``groups`` that also hold members no pair describes, those
    members' descriptions (an interior group made *only* of such members is in ``records`` only).
    ``caveats``: for the groups in ``groups`` with members that are not freely permutable as a
    whole axis, the reasons. ``records``: every group (deduplicated), boundary ones included.
    ``uncovered``: parameters that appear in no group as a mapped member, on any axis: those of
    unmapped layers (an LSTM's ``weight_hh_l0``, a grouped conv), and those Torch-Pruning did not
    see (e.g. a registered layer's weight used through ``F.linear`` outside its ``forward``).
    ``build_seconds``: time of ``build_dependency``; ``groups_seconds``: of ``get_all_groups``.
    ``warnings``: what Torch-Pruning warned while tracing (unknown ops, unwrapped parameters).
    """

    groups: list[frozenset[ParamAxis]]
    unmapped: dict[frozenset[ParamAxis], tuple[str, ...]] = field(default_factory=dict)
    caveats: dict[frozenset[ParamAxis], tuple[str, ...]] = field(default_factory=dict)
    records: list[OracleGroup] = field(default_factory=list)
    uncovered: tuple[str, ...] = ()
    build_seconds: float = 0.0
    groups_seconds: float = 0.0
    warnings: tuple[str, ...] = ()
    version: str = ""

    @property
    def exact(self) -> list[frozenset[ParamAxis]]:
        """The groups that are plain "permute these axes together" statements."""
        return [g for g in self.groups if g not in self.unmapped and g not in self.caveats]

    @property
    def boundary(self) -> list[OracleGroup]:
        """The groups dropped because they touch the model's input or output."""
        return [r for r in self.records if not r.interior]


def _sort_key(group: frozenset[ParamAxis]) -> tuple:
    return tuple(sorted(group))


def _default_channel_dim(x: Tensor) -> int:
    # (N, C), (N, C, H, W), (N, C, D, H, W): dim 1; (N, L, D) sequences: the last; (C,): 0.
    if x.ndim == 3:
        return 2
    return 1 if x.ndim >= 2 else 0


def _wrap_inputs(example_input: Any, input_channel_dim: int | None) -> tuple[Any, list]:
    """Float tensors at the top level become nn.Parameters (probes); returns (inputs, probes)."""
    probes: list[tuple[nn.Parameter, int]] = []

    def wrap(x: Any) -> Any:
        if isinstance(x, Tensor) and x.is_floating_point() and x.ndim >= 1:
            p = nn.Parameter(x.detach().clone(), requires_grad=True)
            dim = _default_channel_dim(x) if input_channel_dim is None else input_channel_dim
            probes.append((p, dim % x.ndim))
            return p
        return x

    if isinstance(example_input, Mapping):
        return {k: wrap(v) for k, v in example_input.items()}, probes
    if isinstance(example_input, (tuple, list)):
        return tuple(wrap(v) for v in example_input), probes
    return wrap(example_input), probes


def _call(model: nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


def _flat_tensors(obj: Any) -> list[Tensor]:
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _flat_tensors(o)]
    return []


def _members(
    module: nn.Module, is_out: bool, pruning_dim: int
) -> tuple[list[tuple[Tensor, int]], str | None, str | None]:
    """(parameter, axis) pairs for one pruning op, or an unmapped description, or a caveat."""
    cls = type(module).__name__

    def present(*pairs: tuple[Tensor | None, int]) -> list[tuple[Tensor, int]]:
        return [(p, a) for p, a in pairs if isinstance(p, Tensor)]

    if isinstance(module, nn.modules.conv._ConvNd):
        w, b = module.weight, module.bias
        if module.groups == module.out_channels and module.out_channels > 1:  # depthwise
            return present((w, 0), (b, 0)), None, None
        if module.groups > 1:
            side = "out" if is_out else "in"
            return [], f"{cls}(groups={module.groups}) {side}-channels", None
        if module.transposed:
            return (present((w, 1), (b, 0)) if is_out else present((w, 0))), None, None
        return (present((w, 0), (b, 0)) if is_out else present((w, 1))), None, None
    if isinstance(module, nn.Linear):
        w, b = module.weight, module.bias
        return (present((w, 0), (b, 0)) if is_out else present((w, 1))), None, None
    if isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
        return present((module.weight, 0), (module.bias, 0)), None, None
    if isinstance(module, nn.GroupNorm):
        caveat = None
        if 1 < module.num_groups < module.num_channels:
            caveat = (
                f"GroupNorm(num_groups={module.num_groups}): only group-preserving permutations"
            )
        return present((module.weight, 0), (module.bias, 0)), None, caveat
    if isinstance(module, nn.LayerNorm):
        if module.weight is None:
            return [], None, None
        axis = pruning_dim % module.weight.ndim
        caveat = None
        if module.weight.ndim > 1:
            caveat = f"LayerNorm{tuple(module.normalized_shape)}: Torch-Pruning prunes axis {axis}"
        return present((module.weight, axis), (module.bias, axis)), None, caveat
    if isinstance(module, nn.Embedding):
        return present((module.weight, 1)), None, None
    if isinstance(module, nn.PReLU):
        return (present((module.weight, 0)) if module.num_parameters > 1 else []), None, None
    if isinstance(module, nn.LSTM):
        if is_out:
            return [], f"{cls} hidden units (gate-blocked rows, weight_hh columns)", None
        names = ["weight_ih_l0"] + (["weight_ih_l0_reverse"] if module.bidirectional else [])
        return [(getattr(module, n), 1) for n in names], None, None
    if isinstance(module, nn.Parameter):
        return (
            [(module, pruning_dim % module.ndim)],
            None,
            "unwrapped parameter, axis guessed by Torch-Pruning",
        )
    if isinstance(module, nn.MultiheadAttention):
        return [], f"{cls} embed_dim (tied to q/k/v internal dim by Torch-Pruning)", None
    if isinstance(module, nn.Module) and any(True for _ in module.parameters(recurse=False)):
        return [], f"{cls} ({'out' if is_out else 'in'})", None
    return [], None, None  # Torch-Pruning's own ops (element-wise, reshape, concat, ...)


def _default_roots() -> tuple[type, ...]:
    return (
        nn.modules.conv._ConvNd,
        nn.Linear,
        nn.modules.batchnorm._BatchNorm,
        nn.modules.instancenorm._InstanceNorm,
        nn.GroupNorm,
        nn.LayerNorm,
        nn.Embedding,
        nn.PReLU,
        nn.LSTM,
        nn.MultiheadAttention,
        nn.Parameter,
    )


def _all_groups(dg: Any, roots: tuple[type, ...]) -> list:
    """``DependencyGraph.get_all_groups``, with identity-based bookkeeping.

    Torch-Pruning 1.6's ``get_all_groups`` tests ``m in visited_layers`` on a list that holds
    ``nn.Parameter`` objects, which compares tensors with ``==`` and raises as soon as a parameter
    is a root and the graph has two parameter nodes of different shapes. Same walk otherwise: one
    group per root's out-channels, skipping roots already pruned as out-channels by an earlier
    group.
    """
    visited: set[int] = set()
    groups = []
    for m in list(dg.module2node):
        if not isinstance(m, roots) or id(m) in visited:
            continue
        pruner = dg.get_pruner_of_module(m)
        n = None if pruner is None else dg.get_out_channels(m)
        if not n:
            continue
        group = dg.get_pruning_group(m, pruner.prune_out_channels, list(range(n)))
        for item in group:
            if dg.is_out_channel_pruning_fn(item.dep.handler):
                visited.add(id(item.dep.target.module))
        groups.append(group)
    return groups


def coupled_channel_groups(
    model: nn.Module,
    example_input: Tensor | Sequence[Any] | Mapping[str, Any],
    *,
    input_channel_dim: int | None = None,
    root_module_types: tuple[type, ...] | None = None,
) -> ChannelGroups:
    """Torch-Pruning's coupled channel groups of ``model``, as ``(name, axis)`` sets.

    ``example_input``: a tensor (``model(x)``), a tuple (``model(*x)``) or a dict
    (``model(**x)``). ``input_channel_dim``: the channel axis of the floating-point inputs
    (default: 1 for 2-, 4- and 5-d inputs, the last for 3-d ``(N, L, D)`` inputs; pass 1 for
    ``Conv1d`` inputs). ``root_module_types``: the layer types whose out-channels root a group
    (default: every type Torch-Pruning knows, and unwrapped parameters, so that no group is
    missed; Torch-Pruning's own default is conv and linear only). See the module docstring for
    what is dropped and what is flagged. The model's train/eval flags are restored afterwards
    (Torch-Pruning's tracer calls ``model.eval()``).
    """
    import torch_pruning as tp

    try:
        from importlib.metadata import version as _dist_version

        version = _dist_version("torch-pruning")
    except Exception:  # pragma: no cover - metadata missing
        version = getattr(tp, "__version__", "")

    roots = _default_roots() if root_module_types is None else root_module_types
    inputs, probes = _wrap_inputs(example_input, input_channel_dim)
    probe_ids = {id(p) for p, _ in probes}
    captured: dict[str, Any] = {}

    def forward_fn(m: nn.Module, x: Any) -> Any:
        # Only the output tensors that autograd sees: Torch-Pruning's own flattening chokes on
        # other output objects (e.g. a Hugging Face ``DynamicCache``).
        captured["out"] = out = _flat_tensors(_call(m, x))
        return [t for t in out if t.grad_fn is not None]

    modes = {m: m.training for m in model.modules()}
    dg = tp.DependencyGraph()
    try:
        with warnings.catch_warnings(record=True) as caught, torch.enable_grad():
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            dg.build_dependency(
                model,
                example_inputs=inputs,
                forward_fn=forward_fn,
                unwrapped_parameters=list(probes),
            )
            t1 = time.perf_counter()
            tp_groups = _all_groups(dg, roots)
            t2 = time.perf_counter()
    finally:
        for m, mode in modes.items():
            m.training = mode
    messages = tuple(dict.fromkeys(str(w.message) for w in caught))

    output_fns = {t.grad_fn for t in captured.get("out", []) if t.grad_fn is not None}
    param_name = {id(p): n for n, p in model.named_parameters()}

    records: dict[tuple, OracleGroup] = {}
    for group in tp_groups:
        params: set[ParamAxis] = set()
        unmapped: set[str] = set()
        caveats: set[str] = set()
        touches_in = touches_out = False
        n_channels = len(set(group[0].root_idxs or group[0].idxs))
        root = group[0].dep.target.name
        for item in group:
            dep, idxs = item.dep, item.idxs
            node, module = dep.target, dep.target.module
            is_out = dep.handler.__name__ == "prune_out_channels"
            if isinstance(module, nn.Parameter) and id(module) in probe_ids:
                touches_in = True
                continue
            if isinstance(module, tp.ops._OutputOp) or (is_out and node.grad_fn in output_fns):
                touches_out = True
            pairs, unknown, caveat = _members(module, is_out, node.pruning_dim)
            if isinstance(module, nn.Parameter):
                where = param_name.get(id(module), "parameter")
            else:
                where = node._name if node._name is not None else type(module).__name__
            if unknown is not None:
                unmapped.add(f"{where}: {unknown}")
            if caveat is not None:
                caveats.add(f"{where}: {caveat}")
            n_idx = len(set(idxs))
            for p, axis in pairs:
                name = param_name.get(id(p))
                if name is None:  # a parameter that is not the model's (should not happen)
                    unmapped.add(f"{where}: parameter outside model.named_parameters()")
                    continue
                params.add((name, axis))
                size = p.shape[axis]
                if n_idx < size:
                    caveats.add(f"{name}[{axis}]: partial ({n_idx} of {size} indices)")
                elif n_idx < n_channels:
                    caveats.add(
                        f"{name}[{axis}]: takes {n_idx} of the {n_channels} channels (split)"
                    )
                elif n_idx > n_channels:
                    note = f"{n_idx} indices for {n_channels} channels (blocked: flatten)"
                    caveats.add(f"{name}[{axis}]: {note}")
        if not params and not unmapped:
            continue  # no parameter in the group
        fparams = frozenset(params)
        key = (fparams, frozenset(unmapped)) if not params else (fparams,)
        old = records.get(key)
        if old is not None:
            unmapped |= set(old.unmapped)
            caveats |= set(old.caveats)
            touches_in |= old.touches_input
            touches_out |= old.touches_output
            root = old.root
        records[key] = OracleGroup(
            params=fparams,
            unmapped=tuple(sorted(unmapped)),
            caveats=tuple(sorted(caveats)),
            touches_input=touches_in,
            touches_output=touches_out,
            n_channels=n_channels,
            root=root,
        )

    ordered = sorted(records.values(), key=lambda r: (_sort_key(r.params), r.unmapped))
    kept = [r for r in ordered if r.interior and r.params]
    covered = {name for r in ordered for name, _ in r.params}
    return ChannelGroups(
        groups=[r.params for r in kept],
        unmapped={r.params: r.unmapped for r in kept if r.unmapped},
        caveats={r.params: r.caveats for r in kept if r.caveats},
        records=ordered,
        uncovered=tuple(n for n, _ in model.named_parameters() if n not in covered),
        build_seconds=t1 - t0,
        groups_seconds=t2 - t1,
        warnings=messages,
        version=version,
    )
