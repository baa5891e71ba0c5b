"""The exact block updates of :func:`paramsym.align`: each group's best element given all the
others (:mod:`paramsym.connectivity.alignment` alternates them).

* :func:`procrustes_step`: a matrix group restricted to its orthogonal elements, Q = U Vᵀ from
  the SVD of M = Σ R_A R_Bᵀ (one angle per pair on RoPE's groups); on activations,
  :func:`orthogonal_completed` (the weights decide Q where the activations' M is singular);
* :func:`assignment_step`: a permutation group by linear assignment on a cost matrix, plain
  rows (:func:`permutation_cost`) or, for heads, the circuits their own maps leave unchanged
  (:func:`head_cost`);
* :func:`scaling_step`: per-unit positive scales from a quartic per unit;
* :func:`translation_step`: a translation (or a shift by amounts that tensors it leaves fixed
  decide: a norm's readers) by least squares.

B is a dict of the aligned model's own tensors, moved in place (:func:`assign`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from paramsym.core.assignment import max_assignment
from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.discrete import NeuronPermutation
from paramsym.symmetry.gl import MatrixNeuronSymmetry
from paramsym.symmetry.rotary import RotaryQueryKey
from paramsym.symmetry.scaling import PositiveScaling

# -- regions ----------------------------------------------------------------------------------


def region(t: Tensor, slot: Slot, length: int) -> Tensor:
    """The slot's ``length`` entries along its axis, that axis first, the rest flattened."""
    if slot.offset is not None:
        t = t.narrow(slot.axis, slot.offset, length)
    return t.movedim(slot.axis, 0).reshape(length, -1)


def blocks(t: Tensor, slot: Slot, width: int) -> Tensor:
    """A permuted slot's region as ``(width, block · rest)``: one row per unit or head."""
    if slot.offset is not None:
        t = t.narrow(slot.axis, slot.offset, width * slot.block)
    t = t.unflatten(slot.axis, (width, slot.block))
    return t.movedim(slot.axis, 0).reshape(width, -1)


# -- the orthogonal groups --------------------------------------------------------------------


def orthogonal(m: Tensor, s: MatrixNeuronSymmetry) -> Tensor:
    """argmax over the orthogonal elements Q of ``s``'s group of tr(Qᵀ M)."""
    if isinstance(s, RotaryQueryKey):
        q = torch.zeros_like(m)
        for i, j in s.pairs:
            angle = torch.atan2(m[j, i] - m[i, j], m[i, i] + m[j, j])
            c, sn = torch.cos(angle), torch.sin(angle)
            q[i, i], q[j, j], q[i, j], q[j, i] = c, c, -sn, sn
        return q
    u, _, vh = torch.linalg.svd(m)
    return u @ vh


def orthogonal_completed(
    m: Tensor, s: MatrixNeuronSymmetry, weights: Callable[[], Tensor], eps: float
) -> Tensor:
    """:func:`orthogonal` of ``m`` where ``m`` (an activation pairing M = Σ X_Aᵀ X_B) fixes the
    element, completed by ``weights()`` (the weight pairing, read only when needed) where it
    does not.

    Activations determine Q only on the subspace they span: where every activation at the
    group's neurons is orthogonal to a direction (the mean of a residual stream that
    :func:`~paramsym.symmetry.fold.fold_norms` centred, a stream wider than the samples), M
    is rank-deficient, Q = U Vᵀ is arbitrary on its null spaces (a sign or an O(k) element
    that rounding, hence the thread count, picks) and the function is the same for every
    choice while the weights' distance is not. So Q = U_r V_rᵀ + U₀ R V₀ᵀ: on the singular
    directions above ``width · eps · σ_max`` (numerical rank, ``eps`` the activations'
    precision) from the activations, and on the null spaces U₀, V₀ the R ∈ O(k) maximising
    tr(Qᵀ M_w), R the polar factor of U₀ᵀ M_w V₀ (independent of the bases chosen for them).
    On RoPE's groups, a pair whose 2 × 2 block of M vanishes takes its angle from M_w."""
    if isinstance(s, RotaryQueryKey):
        sin = torch.stack([m[j, i] - m[i, j] for i, j in s.pairs])
        cos = torch.stack([m[i, i] + m[j, j] for i, j in s.pairs])
        size = torch.hypot(sin, cos)
        empty = size <= s.width * eps * size.max()
        if bool(empty.any()):
            mw, m = weights().to(m), m.clone()
            for (i, j), blank in zip(s.pairs, empty.tolist(), strict=True):
                if blank:
                    m[[i, i, j, j], [i, j, i, j]] = mw[[i, i, j, j], [i, j, i, j]]
        return orthogonal(m, s)
    u, sigma, vh = torch.linalg.svd(m)
    rank = int((sigma > s.width * eps * sigma[0]).sum())
    if rank == s.width:
        return u @ vh
    u0, v0 = u[:, rank:], vh[rank:].mT
    inner_u, _, inner_vh = torch.linalg.svd(u0.mT @ weights().to(m) @ v0)
    return u[:, :rank] @ vh[:rank] + u0 @ (inner_u @ inner_vh) @ v0.mT


def pairing(
    s: MatrixNeuronSymmetry, a: Mapping[str, Tensor], b: Mapping[str, Tensor], slots: Sequence[Slot]
) -> Tensor:
    """M = Σ R_A R_Bᵀ over ``slots`` of ``s``, ``(w, w)``: each product in the models' dtype
    (float32 costs are ample for choosing an element; float64 models stay exact), summed in
    float64."""
    m = torch.zeros(s.width, s.width, dtype=torch.float64)
    for slot in slots:
        ra = region(a[slot.name], slot, s.width)
        rb = region(b[slot.name], slot, s.width)
        m += (ra @ rb.T).double().cpu()
    return m


# -- the permutation groups -------------------------------------------------------------------


@dataclass
class Located:
    """The matrix groups inside each block (head) of a permutation group: per block, a list of
    (matrix group, index of its slot that lies in the block), in one order for every block."""

    per_block: list[list[tuple[MatrixNeuronSymmetry, int]]]
    covered: set[int]  # indices of the permutation's slots whose blocks hold matrix slots


def locate(p: NeuronPermutation, matrices: Sequence[MatrixNeuronSymmetry]) -> Located:
    per_block: list[list[tuple[MatrixNeuronSymmetry, int]]] = [[] for _ in range(p.width)]
    covered: set[int] = set()
    for index, ps in enumerate(p.slots):
        low = ps.offset or 0
        for s in matrices:
            for k, ms in enumerate(s.slots):
                if (ms.name, ms.axis) != (ps.name, ps.axis) or ms.offset is None:
                    continue
                block, within = divmod(ms.offset - low, ps.block)
                if 0 <= block < p.width and within + s.width <= ps.block:
                    per_block[block].append((s, k))
                    covered.add(index)
    return Located(per_block, covered)


def head_cost(located: Located, a: Mapping[str, Tensor], b: Mapping[str, Tensor], n: int) -> Tensor:
    """C[i, j] = Σ over the matrix groups of block i (A) and j (B), position by position, of
    ⟨circuit_A, circuit_B⟩ = ⟨R₊ᴬ R₊ᴮᵀ, R₋ᴬ R₋ᴮᵀ⟩ for every pair of slots of opposite power
    (the maps inside a head leave each circuit R₊ᵀ R₋ unchanged)."""
    cost = torch.zeros(n, n, dtype=torch.float64)
    positions = len(located.per_block[0])
    if any(len(block) != positions for block in located.per_block):
        raise InvalidArgumentError(
            "align: the heads of one permutation group carry different matrix groups; "
            "report this model (its heads are not alike)"
        )
    crosses: dict[tuple[tuple[int, int], ...], Tensor] = {}  # one per slot, however often paired

    def cross(slots: list[tuple[MatrixNeuronSymmetry, int]]) -> Tensor:
        key = tuple((id(s), k) for s, k in slots)
        if key not in crosses:
            crosses[key] = cross_products(a, b, [(s, s.slots[k]) for s, k in slots])
        return crosses[key]

    for t in range(positions):
        own = [located.per_block[i][t] for i in range(n)]
        s0, k0 = own[0]
        for m, partner in enumerate(s0.slots):
            if partner.power == s0.slots[k0].power:
                continue
            x, y = cross(own), cross([(s, m) for s, _ in own])
            cost += (x * y).sum(dim=(-1, -2)).cpu()
    return cost


def cross_products(
    a: Mapping[str, Tensor],
    b: Mapping[str, Tensor],
    slots: Sequence[tuple[MatrixNeuronSymmetry, Slot]],
) -> Tensor:
    """X[i, j] = R_A(slot i) R_B(slot j)ᵀ for one slot per block, shape ``(n, n, w, w)``."""
    ra = torch.stack([region(a[t.name], t, s.width) for s, t in slots])
    rb = torch.stack([region(b[t.name], t, s.width) for s, t in slots])
    return torch.einsum("iar,jbr->ijab", ra, rb).double()


def permutation_cost(
    p: NeuronPermutation,
    located: Located,
    a: Mapping[str, Tensor],
    b: Mapping[str, Tensor],
) -> Tensor:
    """C[i, j]: how well block i of A matches block j of B (plain rows where no matrix group
    lives in the blocks, circuits where one does)."""
    cost = torch.zeros(p.width, p.width, dtype=torch.float64)
    for index, slot in enumerate(p.slots):
        if index in located.covered:
            continue
        ra = blocks(a[slot.name], slot, p.width)
        rb = blocks(b[slot.name], slot, p.width)
        cost += (ra @ rb.T).double().cpu()
    if located.covered:
        cost += head_cost(located, a, b, p.width)
    return cost


def scaling_step(s: PositiveScaling, a: Mapping[str, Tensor], b: Params) -> None:
    """B ← c·B with c > 0 per unit minimising ‖θ_A − c·θ_B‖² given everything else: with
    u = Σ₊ (‖b‖², ⟨a, b⟩) over the slots scaled by c and d over those scaled by 1/c, the
    stationarity condition is u_bb c⁴ − u_ab c³ + d_ab c − d_bb = 0; of its positive roots
    the one with the lowest distance is taken (c = 1 where there is none)."""
    terms = torch.zeros(4, s.width, dtype=torch.float64)  # u_bb, u_ab, d_bb, d_ab
    for slot in s.slots:
        ra = region(a[slot.name], slot, s.width).double().cpu()
        rb = region(b[slot.name], slot, s.width).double().cpu()
        row = 0 if slot.power > 0 else 2
        terms[row] += rb.square().sum(1)
        terms[row + 1] += (ra * rb).sum(1)
    u_bb, u_ab, d_bb, d_ab = terms.numpy()
    scales = np.ones(s.width)
    for i in range(s.width):
        roots = np.roots([u_bb[i], -u_ab[i], 0.0, d_ab[i], -d_bb[i]])
        real = roots[(np.abs(roots.imag) <= 1e-9 * np.abs(roots).max(initial=1.0))].real
        real = real[real > 0]
        if real.size:
            cost = u_bb[i] * real**2 - 2 * u_ab[i] * real + d_bb[i] / real**2 - 2 * d_ab[i] / real
            scales[i] = real[np.argmin(cost)]
    reference = b[s.slots[0].name]
    c = torch.as_tensor(scales, dtype=reference.dtype, device=reference.device)
    assign(b, s.act({k: b[k] for k in s.parameter_names}, c))


def assign(b: Params, moved: Mapping[str, Tensor]) -> None:
    """Write ``moved`` into B's tensors in place (``b`` holds the aligned model's own
    parameters, so no second copy of the model is kept)."""
    for name, value in moved.items():
        b[name].copy_(value)


def procrustes_step(
    s: MatrixNeuronSymmetry, a: Mapping[str, Tensor], b: Params, slots: Sequence[Slot]
) -> None:
    """B ← Q·B with Q the best orthogonal element of ``s`` given everything else."""
    reference = b[s.slots[0].name]
    q = orthogonal(pairing(s, a, b, slots), s).to(reference.dtype).to(reference.device)
    assign(b, s.act({k: b[k] for k in s.parameter_names}, q))


def assignment_step(p: NeuronPermutation, cost: Tensor, b: Params) -> bool:
    """B ← π·B with π the best assignment for ``cost`` (C[i, j]: block i of A with block j of
    B); whether B changed. Where every row's largest entry is on the diagonal, the identity
    is optimal (no assignment beats the sum of the row maxima) and no assignment is solved."""
    if bool((cost.argmax(dim=1) == torch.arange(p.width)).all()):
        return False
    columns = max_assignment(cost.numpy())
    if np.array_equal(columns, np.arange(p.width)):
        return False
    index = torch.as_tensor(columns, device=b[p.slots[0].name].device)
    assign(b, p.act({k: b[k] for k in p.parameter_names}, index))
    return True


def translation_step(s: Symmetry, a: Mapping[str, Tensor], b: Params) -> None:
    """B ← B + E t with t = argmin ‖θ_A − θ_B − E t‖² over the tensors ``s`` moves, E its
    tangents at B. ``s`` is a translation or a shift by amounts its :attr:`reads` decide and it
    leaves fixed (:attr:`~paramsym.symmetry.Symmetry.shifts_by_reads`), so E is the same all
    along the group and one step is exact: act(θ_B, exp t) = θ_B + E t. The normal equations
    EᵀE t = Eᵀ(θ_A − θ_B) are solved by conjugate gradients, E ξ by the tangent (linear in ξ)
    and Eᵀ v by its reverse-mode derivative, in float64; E is never formed (a norm reader's
    has a column per reader row)."""
    moved = [k for k in s.parameter_names if k in b]
    own = {k: b[k].double() for k in (*s.parameter_names, *s.reads) if k in b}
    residual = {k: a[k].double() - own[k] for k in moved}

    def forward(xi: Tensor) -> dict[str, Tensor]:
        tangent = s.tangent(own, xi)
        return {k: tangent[k] for k in moved if k in tangent}

    def adjoint(v: Mapping[str, Tensor]) -> Tensor:
        xi = torch.zeros(s.dim, dtype=torch.float64, requires_grad=True)
        with torch.enable_grad():
            out = forward(xi)
            pairing = sum((out[k] * v[k]).sum() for k in out)
            if not isinstance(pairing, Tensor) or not pairing.requires_grad:
                return torch.zeros(s.dim, dtype=torch.float64)
            (grad,) = torch.autograd.grad(pairing, xi)
        return grad

    rhs = adjoint(residual)
    t = torch.zeros_like(rhs)
    r, p = rhs.clone(), rhs.clone()
    rr = float(r @ r)
    limit = 1e-28 * max(rr, 1e-300)
    for _ in range(min(s.dim, 200)):
        if rr <= limit:
            break
        q = adjoint(forward(p))
        step = rr / float(p @ q)
        t, r = t + step * p, r - step * q
        rr, previous = float(r @ r), rr
        p = r + (rr / previous) * p
    if not bool(torch.isfinite(t).all()) or not bool(t.abs().max() > 0):
        return
    moved_b = {k: b[k] for k in (*s.parameter_names, *s.reads) if k in b}
    reference = b[moved[0]]
    assign(b, {k: v for k, v in s.act(moved_b, s.exp(t.to(reference.dtype))).items()
               if k in moved})  # fmt: skip
