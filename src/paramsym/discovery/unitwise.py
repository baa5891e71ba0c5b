"""The unit-wise solver of the layer-pair ansatz, for MLPs too large for one dense SVD.

For an MLP chain ``z_l = W_l a_{l-1} + b_l, a_l = σ(z_l)`` (σ pointwise) and one example, the
layer-pair constraint row splits over hidden units: with δ_l = ∂ℓ/∂z_l and g_l = ∂ℓ/∂a_l,

    ⟨∇ℓ, A θ⟩ = Σ_l Σ_i g_{l,i} [σ'(z_{l,i}) (M_l z_l)_i + (N_l a_l)_i]
                + ⟨δ_L, M_L z_L⟩ + ⟨W_1ᵀ δ_1, N_0 a_0⟩,

where unit i of hidden layer l owns row i of M_l (left block of layer l) and row i of N_l
(right block of layer l+1). The solver asks each unit's term to vanish on its own: for every
example with g_{l,i} ≠ 0,

    φ_i(z) · (m_i, n_i) = 0,      φ_i(z) = (σ'(z_i) z, σ(z)) ∈ R^{2h}.

Its solutions are the symmetries of each layer pair as a subnetwork, which lift to the network
(dissertation Prop. 6.4.1, Cor. 6.4.3), so everything it finds is in the dense solution. The
converse is the argument that varying the outgoing weights W_{l+1} varies each g_{l,i}
independently of the other units and of everything upstream; it is not a proof for every
loss, which is why the output block, where the loss itself couples the units (a softmax's
translation), stays one coupled system. Input units (the right block of the first layer) split
like hidden ones. A combination that is a symmetry only jointly across units would be missed;
none is known for MLPs, and on every model of the tests the dense solver, which sees all
combinations, finds the same span. Unit systems are 2h × 2h instead of one K × K system with
K = Σ 2h²: the layer-pair ansatz of a 784-256-256-10 MLP (262k unknowns) becomes 512 systems
of 512 unknowns (plus the 100-unknown output block).

Per unit, the right part is eliminated exactly, n = −(AᵀA)⁺ Aᵀ D_i Z m (A, Z: the examples'
a and z as rows, D_i = diag σ'(z_i)), leaving the Schur complement
S_i = Zᵀ D_i² Z − Zᵀ D_i A (AᵀA)⁺ Aᵀ D_i Z for m. The reported values per unit are the square
roots of the eigenvalues of S_i and of AᵀA (the pivots of the Gram matrix's block LDLᵀ: the
same number of zeros as the unit's singular values), relative to the unit's scale; values
below 1e-4 are recomputed as residual norms ‖Φ_i c‖ of the candidate null vector, which
removes the Gram matrix's √eps error. The half-sample system only needs the count, which is
read off the Gram eigenvalues at σ ≤ 1e-6 (their resolution).

This solver assumes what it states: an ``nn.Sequential`` of ``nn.Linear`` / ``NTKLinear``
layers with parameter-free pointwise activations (or none, or dropout in evaluation mode)
between them, and a loss that is a sum over examples. The dense solver needs no assumption
and is the oracle in the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from paramsym.core.model_checks import chain_hazards, random_modules
from paramsym.core.params import buffer_copies, stateless_call
from paramsym.discovery.ansatz import LayerPairAnsatz, PairBlock
from paramsym.discovery.result import decide
from paramsym.nn.layers import NTKLinear
from paramsym.symmetry.chain import Node, flatten_sequential

CANDIDATE_RTOL = 1e-4
"""Gram-based relative values below this are recomputed as residuals."""

GRAM_RESOLUTION = 1e-6
"""Relative values the Gram eigenvalues resolve (counts of the half-sample systems)."""

CHUNK_ELEMENTS = 1 << 23
"""Entries of the (units, rows, width) tensor built at once."""


@dataclass
class Chain:
    """An MLP read off an ``nn.Sequential``: its linear nodes and what lies between them."""

    nodes: list[Node]
    linear: list[int]  # positions of the linear nodes in ``nodes``

    def between(self, layer: int) -> list[Node]:
        """The (parameter-free, pointwise) modules after linear layer ``layer``, up to the next."""
        return self.nodes[self.linear[layer] + 1 : self.linear[layer + 1]]


def unitwise_chain(model: nn.Module, ansatz: LayerPairAnsatz) -> Chain | str:
    """The chain when the unit-wise solver applies to ``model``, otherwise the reason why not."""
    if not isinstance(model, nn.Sequential):
        return f"{type(model).__name__} is not an nn.Sequential"
    if chain_hazards(model):
        return "; ".join(h.message for h in chain_hazards(model))
    if random_modules(model):
        return "dropout in training mode"
    nodes = list(flatten_sequential(model, ""))
    linear = [i for i, n in enumerate(nodes) if n.kind == "linear"]
    for i in linear:
        if type(nodes[i].module) not in (nn.Linear, NTKLinear):
            return f"{nodes[i].label} is a subclass of a linear layer with its own forward"
    for k, i in enumerate(linear[:-1]):
        for node in nodes[i + 1 : linear[k + 1]]:
            pointwise = node.kind == "activation" and node.spec is not None and node.spec.pointwise
            if not (pointwise or node.kind == "dropout") or any(node.module.parameters()):
                return f"{node.label} between linear layers is not a parameter-free pointwise map"
    for node in nodes[: linear[0]]:
        if any(node.module.parameters()):
            return f"{node.label} before the first linear layer has parameters"
    names = [nodes[i].name for i in linear]
    if names != ansatz.layers:
        return "the linear layers are not called in module order"
    return Chain(nodes, linear)


@dataclass
class Recorded:
    """What one forward-backward pass records, per example (rows)."""

    inputs: list[Tensor]  # a_{l-1}: input of linear layer l, (k, n_l)
    outputs: list[Tensor]  # z_l: output of linear layer l, (k, n_{l+1})
    input_grads: list[Tensor | None]  # ∂ℓ/∂a_{l-1} (None for l = 0 without the input block)
    output_grads: list[Tensor]  # ∂ℓ/∂z_l
    slopes: list[Tensor]  # σ'(z_l) for hidden layers l < L-1


def _local(params: Mapping[str, Tensor], prefix: str) -> dict[str, Tensor]:
    head = prefix + "."
    return {k[len(head) :]: v for k, v in params.items() if k.startswith(head)}


def record(
    chain: Chain,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    params: Mapping[str, Tensor],
    batch: tuple[Tensor, Tensor],
    input_grad: bool,
) -> Recorded:
    """Forward the chain at ``params`` on ``batch``, then one backward pass for the gradients
    with respect to every linear layer's input and output (per example: the loss is a sum or
    mean over examples)."""
    x, y = batch
    h = x.detach().clone().requires_grad_(True)
    inputs: list[Tensor] = []
    outputs: list[Tensor] = []
    for node in chain.nodes:
        if node.kind == "linear":
            inputs.append(h)
            local = _local(params, node.name)
            h = stateless_call(node.module, {**buffer_copies(node.module, local), **local}, (h,))
            outputs.append(h)
        else:
            h = node.module(h)
    loss = loss_fn(h, y)
    wrt = outputs + inputs[1:] + ([inputs[0]] if input_grad else [])
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    count = len(outputs)
    output_grads = [_zero_if_none(g, t) for g, t in zip(grads[:count], outputs, strict=True)]
    later = [
        _zero_if_none(g, t) for g, t in zip(grads[count : 2 * count - 1], inputs[1:], strict=True)
    ]
    first = _zero_if_none(grads[-1], inputs[0]) if input_grad else None
    slopes = []
    for layer in range(count - 1):
        between = chain.between(layer)
        z = outputs[layer].detach()

        def pointwise(t: Tensor, between: Sequence[Node] = between) -> Tensor:
            for node in between:
                t = node.module(t)
            return t

        slopes.append(torch.func.jvp(pointwise, (z,), (torch.ones_like(z),))[1])
    return Recorded(
        inputs=[t.detach() for t in inputs],
        outputs=[t.detach() for t in outputs],
        input_grads=[first, *[g.detach() for g in later]],
        output_grads=[g.detach() for g in output_grads],
        slopes=slopes,
    )


def _zero_if_none(grad: Tensor | None, like: Tensor) -> Tensor:
    return torch.zeros_like(like) if grad is None else grad


@dataclass
class UnitSolution:
    """The null space of every unit of one layer (or of the input units)."""

    values: list[Tensor]  # per unit: relative values, (h_z + h_a,)
    dims: Tensor  # null dimension per unit, (units,)
    half_dims: Tensor  # null dimension per unit with the first half of the rows
    vectors: list[Tensor]  # per unit: (width_z + width_a, d_i) orthonormal null vectors
    ambiguous: Tensor  # per unit
    gaps: Tensor  # per unit


def _pinv_psd(matrix: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(pseudo-inverse, eigenvalues, eigenvectors) of symmetric PSD matrices (…, h, h)."""
    values, vectors = torch.linalg.eigh(matrix)
    top = values.amax(dim=-1, keepdim=True).clamp_min(1e-300)
    keep = values > top * 1e-13
    inverse = torch.where(keep, 1.0 / values.where(keep, torch.ones_like(values)), 0.0)
    return (vectors * inverse[..., None, :]) @ vectors.mT, values, vectors


def _largest_eigenvalue(matrix: Tensor, iterations: int = 10) -> Tensor:
    """λ_max of symmetric PSD matrices (c, h, h) by power iteration (a scale, not a result)."""
    v = torch.ones(matrix.shape[0], matrix.shape[1], 1, dtype=matrix.dtype)
    value = torch.zeros(matrix.shape[0], dtype=matrix.dtype)
    for _ in range(iterations):
        w = matrix @ v
        value = w.norm(dim=(1, 2))
        v = w / value.clamp_min(1e-300)[:, None, None]
    return value


def _gathered(
    z: Tensor, a: Tensor | None, weight: Tensor, units: Sequence[int], rows: slice
) -> tuple[Tensor, Tensor | None]:
    """Zᵀ D_i² Z and Zᵀ D_i A over the rows in ``rows`` where D_i ≠ 0, for the given units:
    each unit's non-zero rows are gathered (padded with weight 0), so the cost follows the
    number of rows where the unit is active. Shapes (c, h, h) and (c, h, h_a)."""
    block = weight[rows][:, units]  # (n_r, c)
    active = block != 0
    counts = active.sum(dim=0)
    longest = max(1, int(counts.max()) if counts.numel() else 1)
    order = torch.argsort((~active).to(torch.int8), dim=0, stable=True)[:longest].T  # (c, m)
    taken = torch.gather(block.T, 1, order) * (torch.arange(longest)[None, :] < counts[:, None])
    offset = rows.start or 0
    zg = z[order + offset] * taken[:, :, None]
    zz = zg.mT @ zg
    za = zg.mT @ a[order + offset] if a is not None else None
    return zz, za


def solve_units(
    z: Tensor,
    a: Tensor | None,
    slope: Tensor,
    mask: Tensor,
    half: int,
    rtol: float,
    min_gap: float,
    units: Sequence[int] | None = None,
) -> UnitSolution:
    """Null spaces of the unit systems Φ_i = [D_i Z, A] (rows where ``mask[:, i]``), for
    all rows and for the first ``half`` of them (see the module docstring); only for
    ``units`` when given (the other entries of the solution stay empty).

    Shapes: z (n, h), a (n, h_a) or ``None`` (no right part), slope and mask (n, units).
    """
    n, width = z.shape
    count = slope.shape[1]
    weight = slope * mask
    parts = {"half": slice(0, half), "full": slice(0, n)}
    shared: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]] = {}
    if a is not None:
        for part, rows in parts.items():
            aa = a[rows].T @ a[rows]
            shared[part] = (aa, *_pinv_psd(aa))
    dropped_any = (~mask).any(dim=0)
    activity = (weight != 0).sum(dim=0)
    chosen = torch.arange(slope.shape[1]) if units is None else torch.as_tensor(list(units))
    # units of similar activity share a chunk, so the gathered rows need little padding
    ordered = chosen[torch.argsort(activity[chosen])].tolist()
    chunk = max(1, CHUNK_ELEMENTS // max(1, n * width))
    values: list[Tensor] = [torch.zeros(0)] * count
    dims = torch.zeros(count, dtype=torch.long)
    half_dims = torch.zeros(count, dtype=torch.long)
    vectors: list[Tensor] = [torch.zeros(0)] * count
    ambiguous = torch.zeros(count, dtype=torch.bool)
    gaps = torch.zeros(count, dtype=torch.float64)
    for start in range(0, len(ordered), chunk):
        block = ordered[start : start + chunk]
        zz_h, za_h = _gathered(z, a, weight, block, parts["half"])
        zz_r, za_r = _gathered(z, a, weight, block, slice(half, n))
        for part in ("half", "full"):
            zz = zz_h if part == "half" else zz_h + zz_r
            za = za_h if part == "half" or za_h is None or za_r is None else za_h + za_r
            aa_pinv, aa_values, aa_vectors = _right_part(
                a, mask, shared, part, parts[part], block, dropped_any
            )
            schur = zz if za is None or aa_pinv is None else zz - za @ aa_pinv @ za.mT
            schur = 0.5 * (schur + schur.mT)
            scale = _largest_eigenvalue(zz)
            if aa_values is not None:
                scale = scale + aa_values[:, -1].clamp_min(0)
            scale = scale.sqrt().clamp_min(1e-300)
            if part == "half":
                rel = _rel(torch.linalg.eigvalsh(schur), scale)
                if aa_values is not None:
                    rel = torch.cat([rel, _rel(aa_values, scale)], dim=1)
                half_dims[block] = (rel <= max(rtol, GRAM_RESOLUTION)).sum(dim=1)
                continue
            s_values, s_vectors = torch.linalg.eigh(schur)
            rel_s = _rel(s_values, scale)
            rel_a = _rel(aa_values, scale) if aa_values is not None else None
            for j, unit in enumerate(block):
                merged, basis = _refine(
                    z, a, weight[:, unit], mask[:, unit], rel_s[j], s_vectors[j],
                    None if rel_a is None or aa_vectors is None else (rel_a[j], aa_vectors[j]),
                    None if za is None or aa_pinv is None else (za[j], aa_pinv[j]),
                    float(scale[j]), rtol,
                )  # fmt: skip
                decision = decide(merged, rtol, min_gap)
                values[unit] = merged
                dims[unit] = decision.dim
                vectors[unit] = basis
                ambiguous[unit] = decision.ambiguous
                gaps[unit] = decision.gap
    return UnitSolution(
        values=values,
        dims=dims,
        half_dims=half_dims,
        vectors=vectors,
        ambiguous=ambiguous,
        gaps=gaps,
    )


def _right_part(
    a: Tensor | None,
    mask: Tensor,
    shared: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]],
    part: str,
    rows: slice,
    units: Sequence[int],
    dropped_any: Tensor,
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """(AᵀA)⁺, eigenvalues and eigenvectors per unit, (c, h_a, h_a): shared, except for units
    whose rows are partly masked (their gradient vanished on some examples)."""
    if a is None:
        return None, None, None
    aa, pinv, values, vectors = shared[part]
    c = len(units)
    pinv_u = pinv.expand(c, -1, -1).clone()
    values_u = values.expand(c, -1).clone()
    vectors_u = vectors.expand(c, -1, -1).clone()
    for j, unit in enumerate(units):
        if bool(dropped_any[unit]):
            off = a[rows][~mask[rows, unit]]
            pinv_u[j], values_u[j], vectors_u[j] = _pinv_psd(aa - off.T @ off)
    return pinv_u, values_u, vectors_u


def _refine(
    z: Tensor,
    a: Tensor | None,
    weight: Tensor,
    keep: Tensor,
    rel_s: Tensor,
    s_vectors: Tensor,
    right: tuple[Tensor, Tensor] | None,
    elimination: tuple[Tensor, Tensor] | None,
    scale: float,
    rtol: float,
) -> tuple[Tensor, Tensor]:
    """One unit's values with the candidates (Gram value ≤ ``CANDIDATE_RTOL``) replaced by the
    residual norm of their null vector, and an orthonormal basis of the null vectors."""
    width = z.shape[1]
    values = [rel_s.clone()]
    candidates: list[tuple[int, int, Tensor]] = []
    for k in torch.nonzero(rel_s <= CANDIDATE_RTOL).flatten().tolist():
        m = s_vectors[:, k]
        if elimination is not None:
            za, pinv = elimination
            c = torch.cat([m, -(pinv @ (za.T @ m))])
        else:
            c = m
        candidates.append((0, k, c / c.norm()))
    if right is not None:
        rel_a, vectors = right
        values.append(rel_a.clone())
        for k in torch.nonzero(rel_a <= CANDIDATE_RTOL).flatten().tolist():
            candidates.append((1, k, torch.cat([torch.zeros(width, dtype=z.dtype), vectors[:, k]])))
    for part, k, c in candidates:
        residual = (z @ c[:width]) * weight
        if a is not None:
            residual = residual + (a @ c[width:]) * keep
        values[part][k] = residual.norm() / scale
    null = [c for part, k, c in candidates if values[part][k] <= rtol]
    size = width + (0 if a is None else a.shape[1])
    basis = (
        torch.linalg.qr(torch.stack(null, dim=1)).Q if null else torch.zeros(size, 0, dtype=z.dtype)
    )
    return torch.cat(values), basis


def _rel(values: Tensor, scale: Tensor) -> Tensor:
    return values.clamp_min(0).sqrt() / scale[:, None]


def unit_coefficients(
    ansatz: LayerPairAnsatz,
    left: PairBlock | None,
    right: PairBlock | None,
    solution: UnitSolution,
) -> tuple[list[Tensor], list[Tensor]]:
    """Sparse coefficient columns (indices, values) of each unit's null vectors: unit i owns
    row i of ``left`` (width h_z) and row i of ``right`` (width h_a)."""
    indices: list[Tensor] = []
    entries: list[Tensor] = []
    for unit, basis in enumerate(solution.vectors):
        for column in basis.T:
            parts = []
            if left is not None:
                parts.append(left.start + unit * left.size + torch.arange(left.size))
            if right is not None:
                parts.append(right.start + unit * right.size + torch.arange(right.size))
            indices.append(torch.cat(parts))
            entries.append(column)
    return indices, entries
