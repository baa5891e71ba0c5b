"""Linear regions sampled by a batch, and upper bounds on the functional dimension (seed 004).

For a network with piecewise-linear activations (ReLU, LeakyReLU), the *activation pattern* of
an input is the sign vector of all hidden pre-activations (active: z > 0, seed 004 §5; z = 0
counts as inactive and is reported as a boundary point). Distinct patterns are the linear
regions the batch samples.

Bounds on rank(J) (:func:`fd_bounds`):

* trivial: min(m·O, P);
* positive rescaling of every hidden neuron (Remark 4.3): P − N;
* linear regions (Prop 4.6 / C.3): within a region f is affine in x, so the rows of J for
  inputs sharing a pattern span at most n0 + 1 dimensions per output: O·(n0 + 1)·#regions
  (seed 004 states O = 1; the factor O is the direct extension);
* explicit null directions (a robust form of Theorem 1, notes 004 §2.4 and §5.6): per-neuron
  rescaling, GL(k) among the k neurons always active on the batch (and, for LeakyReLU, among
  those always negative), and the zero Jacobian columns of neurons dead on the batch. Stacked as
  the columns of T, J T = 0 exactly, so rank(J) ≤ P − rank(T) at every θ. Theorem 1's closed form
  lumps dead and active neurons into one GL block, which is not a symmetry for dead neurons, so
  it is not used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import flatten, functional_call, resolve_params
from paramsym.errors import InvalidArgumentError, UnsupportedModuleError
from paramsym.symmetry.chain import flatten_sequential


def _is_piecewise_linear(module: nn.Module) -> bool:
    return isinstance(module, (nn.ReLU, nn.LeakyReLU))


@dataclass
class LinearRegions:
    """Distinct activation patterns on a batch.

    Attributes:
        count: number of distinct patterns (linear regions sampled).
        neurons: N, hidden neurons with a piecewise-linear activation.
        boundary_samples: samples with some pre-activation exactly 0 (on a region boundary).
        patterns: ``(m, N)`` booleans, active = z > 0 (not serialised).
    """

    count: int
    neurons: int
    boundary_samples: int
    patterns: Tensor = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "neurons": self.neurons,
            "boundary_samples": self.boundary_samples,
        }


def preactivations(
    model: nn.Module, x: Tensor, params: Mapping[str, Tensor] | None = None
) -> dict[str, Tensor]:
    """Inputs of every ReLU/LeakyReLU module on ``x``, flattened per sample: name → (m, n)."""
    captured: dict[str, Tensor] = {}
    handles = [
        module.register_forward_hook(
            lambda m, args, out, name=name: captured.__setitem__(
                name, args[0].detach().reshape(args[0].shape[0], -1)
            )
        )
        for name, module in model.named_modules()
        if _is_piecewise_linear(module)
    ]
    if not handles:
        raise InvalidArgumentError(
            f"linear regions need ReLU or LeakyReLU modules; {type(model).__name__} has none"
        )
    try:
        with torch.no_grad():
            functional_call(model, resolve_params(model, params), x)
    finally:
        for handle in handles:
            handle.remove()
    return captured


def linear_regions(
    model: nn.Module, x: Tensor, params: Mapping[str, Tensor] | None = None
) -> LinearRegions:
    """Count the distinct activation patterns (linear regions) that the inputs ``x`` sample."""
    z = torch.cat(list(preactivations(model, x, params).values()), dim=1)
    patterns = z > 0
    count = int(torch.unique(patterns, dim=0).shape[0])
    boundary = int((z == 0).any(dim=1).sum())
    return LinearRegions(count, z.shape[1], boundary, patterns)


@dataclass
class FDBounds:
    """Upper bounds on the functional dimension of a network on a batch.

    Attributes:
        trivial: min(m·O, P).
        hidden_rescaling: P − N.
        regions: O·(n0 + 1)·#regions (Prop 4.6).
        generators: P − rank(T) from the explicit null directions.
        null_directions: rank(T).
        always_active, dead: per hidden layer, neurons active on every / no sample.
    """

    trivial: int
    hidden_rescaling: int
    regions: int
    generators: int
    null_directions: int
    always_active: list[int]
    dead: list[int]

    @property
    def best(self) -> int:
        return min(self.trivial, self.hidden_rescaling, self.regions, self.generators)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "best": self.best}


def _sites(model: nn.Module) -> list[tuple[str, nn.Module, str, str]]:
    """(incoming linear, activation module, its name, outgoing linear) of each hidden layer."""
    if not isinstance(model, nn.Sequential):
        raise UnsupportedModuleError(
            f"fd_bounds: expected an nn.Sequential MLP of Linear and ReLU/LeakyReLU layers, "
            f"got {type(model).__name__}"
        )
    nodes = [n for n in flatten_sequential(model, "") if n.kind != "dropout"]
    sites = []
    for i, node in enumerate(nodes):
        if node.kind == "linear" and i + 2 < len(nodes):
            act, nxt = nodes[i + 1], nodes[i + 2]
            if (
                act.kind == "activation"
                and _is_piecewise_linear(act.module)
                and nxt.kind == "linear"
            ):
                sites.append((node.name, act.module, act.name, nxt.name))
                continue
        if node.kind not in ("linear", "activation") or (
            node.kind == "activation" and not _is_piecewise_linear(node.module)
        ):
            raise UnsupportedModuleError(
                f"fd_bounds: module {node.label} is not Linear, ReLU or LeakyReLU; the null "
                "directions are derived for such MLPs only"
            )
    return sites


def null_directions(
    model: nn.Module, x: Tensor, params: Mapping[str, Tensor] | None = None
) -> Tensor:
    """The explicit null directions of J on ``x`` as the columns of T, shape ``(P, k)``."""
    point = resolve_params(model, params)
    z_by_activation = preactivations(model, x, point)
    columns: list[Tensor] = []

    def column(parts: dict[str, Tensor]) -> None:
        full = {k: parts.get(k, torch.zeros_like(t)) for k, t in point.items()}
        columns.append(flatten(full))

    for incoming, activation, act_name, outgoing in _sites(model):
        w_in, w_out = point[f"{incoming}.weight"], point[f"{outgoing}.weight"]
        b_name = f"{incoming}.bias"
        bias = point.get(b_name)
        z = z_by_activation[act_name]
        blocks = [torch.nonzero((z > 0).all(0)).flatten().tolist()]
        if isinstance(activation, nn.LeakyReLU):
            blocks.append(torch.nonzero((z < 0).all(0)).flatten().tolist())
        for block in blocks:  # GL(k) on neurons that stay on one linear piece (i = j: rescaling)
            for i in block:
                for j in block:
                    d_in = torch.zeros_like(w_in)
                    d_in[i] = w_in[j]
                    d_out = torch.zeros_like(w_out)
                    d_out[:, j] = -w_out[:, i]
                    parts = {f"{incoming}.weight": d_in, f"{outgoing}.weight": d_out}
                    if bias is not None:
                        d_b = torch.zeros_like(bias)
                        d_b[i] = bias[j]
                        parts[b_name] = d_b
                    column(parts)
        for k in range(w_in.shape[0]):  # rescaling of every neuron
            parts = {
                f"{incoming}.weight": torch.zeros_like(w_in),
                f"{outgoing}.weight": torch.zeros_like(w_out),
            }
            parts[f"{incoming}.weight"][k] = w_in[k]
            parts[f"{outgoing}.weight"][:, k] = -w_out[:, k]
            if bias is not None:
                parts[b_name] = torch.zeros_like(bias)
                parts[b_name][k] = bias[k]
            column(parts)
        if isinstance(activation, nn.ReLU):  # dead neurons: their weights do not matter on x
            for k in torch.nonzero((z <= 0).all(0)).flatten().tolist():
                for name, index in [
                    (f"{incoming}.weight", (k, slice(None))),
                    (f"{outgoing}.weight", (slice(None), k)),
                ]:
                    size = point[name][index].numel()
                    for e in range(size):
                        d = torch.zeros_like(point[name])
                        d[index].view(-1)[e] = 1.0
                        column({name: d})
                if bias is not None:
                    d_b = torch.zeros_like(bias)
                    d_b[k] = 1.0
                    column({b_name: d_b})
    if not columns:
        return torch.zeros(sum(t.numel() for t in point.values()), 0)
    return torch.stack(columns, dim=1)


def fd_bounds(model: nn.Module, x: Tensor, params: Mapping[str, Tensor] | None = None) -> FDBounds:
    """All upper bounds on the functional dimension of ``model`` on ``x`` (module docstring)."""
    point = resolve_params(model, params)
    sites = _sites(model)
    size = sum(t.numel() for t in point.values())
    with torch.no_grad():
        outputs = functional_call(model, point, x[:1]).reshape(1, -1).shape[1]
    rows = x.shape[0] * outputs
    hidden = sum(point[f"{a}.weight"].shape[0] for a, _, _, _ in sites)
    regions = linear_regions(model, x, point)
    inputs = x[0].numel()
    t = null_directions(model, x, point).to(torch.float64)
    rank_t = int(torch.linalg.matrix_rank(t)) if t.shape[1] else 0
    z = preactivations(model, x, point)
    active = [int((z[name] > 0).all(0).sum()) for _, _, name, _ in sites]
    dead = [int((z[name] <= 0).all(0).sum()) for _, _, name, _ in sites]
    return FDBounds(
        trivial=min(rows, size),
        hidden_rescaling=size - hidden,
        regions=outputs * (inputs + 1) * regions.count,
        generators=size - rank_t,
        null_directions=rank_t,
        always_active=active,
        dead=dead,
    )
