"""Gradient transport along actions that shift parameters by amounts read off others.

An absorbed translation (:mod:`paramsym.symmetry.absorption`: a LayerNorm's β into its readers'
biases, a value bias into the output projection's, a LayerNorm reader's weight rows along
γ⁻¹) moves parameters θ_m by an amount that depends on parameters θ_r it reads and leaves
fixed (:attr:`~paramsym.symmetry.Symmetry.shifts_by_reads`):

    act(θ, t) = θ + Σ_k t_k e_k(θ_r),        e_k zero off θ_m,  θ_r ∩ θ_m = ∅.

Its Jacobian is J_t = I + Σ_k t_k ∂e_k/∂θ_r (a block in the θ_m rows and θ_r columns), and
L(act(θ, t)) = L(θ) for every θ gives ∇L(act(θ, t)) = J_t⁻ᵀ ∇L(θ), exactly, at every t:

    u_m = v_m,        u_r = v_r − Σ_k t_k (De_k(θ_r))ᵀ v_m        (v = ∇L(θ), u = ∇L(g·θ)),

the VJP of the inverse action at the point (:meth:`~paramsym.teleportation.orbit.Orbit.transport`).
An objective f of ∇L changes along the action only through u_r; at t = 0

    ∂f(u)/∂t_k = −⟨De_k(θ_r)[c_r], v_m⟩,        c = ∇f(v),

a mixed second derivative −∂²/∂t_k∂ε ⟨T(θ + ε c_r, t), v_m⟩ of the action's tangent
T(θ, t) = Σ_k t_k e_k(θ_r): two backward passes through the tangent on the tensors involved, no
pass through the network (:func:`read_shift_rate`). Where e_k is linear in θ_r (β absorption:
e_k = (δ_k, −W δ_k), bilinear in (t, W)) this is −⟨e_k(c_r), v_m⟩, the same at every point; a
LayerNorm's readers shift by u_k γ⁻¹ᵀ and −u_k Σβ/γ, which depend on γ and β, so their
transport and rate need the current point (:class:`~paramsym.teleportation.ascent.TransportAscent`
keeps it where another action of the orbit moves what they read).

Closed forms (the generic version differentiates the tangent; these are a few products each):

* :class:`~paramsym.symmetry.absorption.BiasAbsorption`, each reader r with weight block B_r
  (the translated inputs) and bias change −B_r t: (De)ᵀm on B_r is −t m_{b_r}ᵀ (in the
  block's layout), and the rate is Σ_r c_{B_r} m_{b_r} (the input axis kept).
* :class:`~paramsym.symmetry.absorption.NormReaderTranslation`, reader r with u_r (its slice
  of t), W_r += u_r γ⁻¹ᵀ, b_r −= u_r S, S = Σβ/γ: with p = Σ_r W-layout m_{W_r}ᵀu_r and
  a = Σ_r ⟨u_r, m_{b_r}⟩, (De)ᵀm is (−p + a β)/γ² on γ and −a/γ on β; with q = c_γ/γ² and
  σ = ⟨c_γ, β/γ²⟩ − ⟨c_β, 1/γ⟩, the rate on u_r is m_{W_r} q − σ m_{b_r}.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.absorption import BiasAbsorption, NormReaderTranslation, Reader
from paramsym.symmetry.base import GroupElement, Symmetry


def shifts_by_reads(symmetry: Symmetry) -> bool:
    """Whether ``symmetry`` is an action θ ↦ θ + b(g, θ_reads) on parameters disjoint from
    the ones it reads (module docstring): gradient transport is exact along it
    (:func:`read_pullback`), and :func:`read_shift_rate` gives the rate of an objective of ∇L.
    """
    return symmetry.shifts_by_reads and not set(symmetry.reads) & set(symmetry.parameter_names)


Patch = tuple[str, int | None, int, Tensor]
"""(read tensor, axis, offset, value): ``value`` is the part of :func:`read_pullback` on the
entries from ``offset`` along ``axis`` (``None``: the whole tensor)."""


def read_patches(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    g: GroupElement,
    covector: Mapping[str, Tensor],
) -> list[Patch]:
    """:func:`read_pullback` as the blocks it is nonzero on (a value bias's output projection
    rows, not the whole matrix)."""
    t = symmetry.check_element(g)
    if not isinstance(t, Tensor):
        raise InvalidArgumentError(
            f"{symmetry.name}: a shift by what it reads takes a vector of amounts, got {type(t)}"
        )
    if isinstance(symmetry, BiasAbsorption):
        return _bias_pullback(symmetry, params, t, covector)
    if isinstance(symmetry, NormReaderTranslation):
        return _norm_reader_pullback(symmetry, params, t, covector)
    generic = generic_read_pullback(symmetry, params, t, covector)
    return [(name, None, 0, value) for name, value in generic.items()]


def read_pullback(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    g: GroupElement,
    covector: Mapping[str, Tensor],
) -> dict[str, Tensor]:
    """Σ_k t_k (De_k(θ_r))ᵀ m_m on the read tensors, for the element t = ``g``: carried along
    act(·, g), a covector m keeps its moved components and loses this on the read ones,
    m_r ↦ m_r − read_pullback (module docstring). Read tensors missing from ``params`` or
    moved ones missing from ``covector`` contribute nothing."""
    out: dict[str, Tensor] = {}
    for name, axis, offset, value in read_patches(symmetry, params, g, covector):
        if name not in out:
            out[name] = torch.zeros_like(params[name], dtype=value.dtype)
        target = out[name] if axis is None else out[name].narrow(axis, offset, value.shape[axis])
        target.add_(value)
    return out


def carry_reads(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    g: GroupElement,
    covector: dict[str, Tensor],
    owned: set[str],
) -> None:
    """``covector`` carried along act(·, g) in place: m_r ← m_r − :func:`read_pullback` on the
    read tensors it holds (its moved ones stay). A tensor not in ``owned`` (copied by this
    transport and referenced nowhere else) is copied first, then added to ``owned``."""
    for name, axis, offset, value in read_patches(symmetry, params, g, covector):
        if name not in covector:
            continue
        if name not in owned:
            covector[name] = covector[name].clone()
            owned.add(name)
        m = covector[name]
        target = m if axis is None else m.narrow(axis, offset, value.shape[axis])
        target.sub_(value.to(m.dtype))


def generic_read_pullback(
    symmetry: Symmetry, params: Mapping[str, Tensor], t: Tensor, covector: Mapping[str, Tensor]
) -> dict[str, Tensor]:
    """:func:`read_pullback` by one backward pass through the tangent T(θ, t) = Σ t_k e_k(θ_r):
    the gradient of ⟨T(θ, t), m_m⟩ in θ_r."""
    reads = [k for k in symmetry.reads if k in params]
    moved = [k for k in symmetry.parameter_names if k in covector]
    if not reads or not moved:
        return {}
    own = {
        k: params[k].detach() for k in (*symmetry.parameter_names, *symmetry.reads) if k in params
    }
    with torch.enable_grad():
        own.update({k: own[k].requires_grad_(True) for k in reads})
        tangent = symmetry.tangent(own, t.to(own[reads[0]].dtype))
        pairing = torch.stack([(tangent[k] * covector[k]).sum() for k in moved]).sum()
        if not pairing.requires_grad:
            return {}
        grads = torch.autograd.grad(pairing, [own[k] for k in reads], allow_unused=True)
    return {k: gr.detach() for k, gr in zip(reads, grads, strict=True) if gr is not None}


def read_shift_rate(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    gradient: Mapping[str, Tensor],
    cotangent: Mapping[str, Tensor],
) -> Tensor:
    """∂f(∇L(exp(t)·θ))/∂t at t = 0, shape ``(dim,)``, for an action that shifts by what it
    reads: −⟨De_k(θ_r)[c_r], v_m⟩ (module docstring); closed forms for the absorbed
    translations, else −∂²/∂t∂ε ⟨T(θ + ε c_r, t), v_m⟩ by two backward passes through
    :meth:`~paramsym.symmetry.Symmetry.tangent`.

    Args:
        symmetry: the action (:func:`shifts_by_reads`).
        params: the point θ (its moved and read tensors are used).
        gradient: v = ∇L(θ), on the trained parameters (it must hold the moved ones).
        cotangent: c = ∇f(v); read parameters missing from it or from ``gradient`` (frozen:
            ∇L is not taken over them) contribute nothing.
    """
    ref = params[symmetry.parameter_names[0]]
    rate = torch.zeros(symmetry.dim, dtype=ref.dtype, device=ref.device)
    reads = [k for k in symmetry.reads if k in cotangent and k in gradient]
    moved = [k for k in symmetry.parameter_names if k in gradient]
    if not reads or not moved or symmetry.dim == 0:
        return rate
    used = {k: cotangent[k] for k in reads}
    if isinstance(symmetry, BiasAbsorption):
        return _bias_rate(symmetry, params, gradient, used, rate)
    if isinstance(symmetry, NormReaderTranslation):
        return _norm_reader_rate(symmetry, params, gradient, used, rate)
    return generic_read_shift_rate(symmetry, params, gradient, used)


def generic_read_shift_rate(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    gradient: Mapping[str, Tensor],
    cotangent: Mapping[str, Tensor],
) -> Tensor:
    """:func:`read_shift_rate` as −∂²/∂t∂ε ⟨T(θ + ε c_r, t), v_m⟩, two backward passes through
    the tangent."""
    ref = params[symmetry.parameter_names[0]]
    rate = torch.zeros(symmetry.dim, dtype=ref.dtype, device=ref.device)
    reads = [k for k in symmetry.reads if k in cotangent and k in gradient and k in params]
    moved = [k for k in symmetry.parameter_names if k in gradient]
    if not reads or not moved or symmetry.dim == 0:
        return rate
    with torch.enable_grad():
        xi = rate.clone().requires_grad_(True)
        eps = torch.zeros((), dtype=ref.dtype, device=ref.device, requires_grad=True)
        own = {
            k: params[k].detach()
            for k in (*symmetry.parameter_names, *symmetry.reads)
            if k in params
        }
        for k in reads:
            own[k] = own[k] + eps * cotangent[k].to(own[k].dtype)
        tangent = symmetry.tangent(own, xi)
        pairing = torch.stack([(tangent[k] * gradient[k]).sum() for k in moved]).sum()
        if not pairing.requires_grad:
            return rate
        (along,) = torch.autograd.grad(pairing, eps, create_graph=True, allow_unused=True)
        if along is None or not along.requires_grad:
            return rate  # the shift does not depend on the reads here
        (mixed,) = torch.autograd.grad(along, xi, allow_unused=True)
    return rate if mixed is None else -mixed.detach()


# -- closed forms ------------------------------------------------------------------------------


def _bias_pullback(
    s: BiasAbsorption, params: Mapping[str, Tensor], t: Tensor, covector: Mapping[str, Tensor]
) -> list[Patch]:
    """Each reader's bias takes back −B t, so (De)ᵀm on its weight block B is −t m_bᵀ."""
    out: list[Patch] = []
    for reader in s.readers:
        m_b = covector.get(reader.bias) if reader.bias is not None else None
        if m_b is None or reader.weight not in params:
            continue
        u = t.to(dtype=m_b.dtype, device=m_b.device)
        block = torch.outer(u, m_b) if reader.axis == 0 else torch.outer(m_b, u)
        out.append((reader.weight, reader.axis, reader.offset, -block))
    return out


def _bias_rate(
    s: BiasAbsorption,
    params: Mapping[str, Tensor],
    gradient: Mapping[str, Tensor],
    cotangent: Mapping[str, Tensor],
    rate: Tensor,
) -> Tensor:
    """Σ_r c_{B_r} m_{b_r}, contracted over the readers' output axis."""
    for reader in s.readers:
        c = cotangent.get(reader.weight)
        v_b = gradient.get(reader.bias) if reader.bias is not None else None
        if c is None or v_b is None:
            continue
        block = c.narrow(reader.axis, reader.offset, s.dim)
        rate = rate + torch.tensordot(block, v_b.to(block.dtype), dims=([1 - reader.axis], [0]))
    return rate


def _norm_terms(
    s: NormReaderTranslation, params: Mapping[str, Tensor], ref: Tensor
) -> tuple[Tensor, Tensor | None]:
    """(γ, β) of the norm (γ = 1 without an elementwise scale; β ``None`` without a shift)."""
    gamma = (
        params[s.weight]
        if s.weight is not None
        else torch.ones(s.width, dtype=ref.dtype, device=ref.device)
    )
    return gamma.to(ref.dtype), params[s.bias].to(ref.dtype) if s.bias is not None else None


def _readers(s: NormReaderTranslation, t: Tensor) -> Iterator[tuple[Reader, Tensor]]:
    """Each reader with its slice u_r of the element."""
    start = 0
    for reader, size in zip(s.readers, s.outputs, strict=True):
        yield reader, t[start : start + size]
        start += size


def _norm_reader_pullback(
    s: NormReaderTranslation,
    params: Mapping[str, Tensor],
    t: Tensor,
    covector: Mapping[str, Tensor],
) -> list[Patch]:
    """(−p + a β)/γ² on γ and −a/γ on β (module docstring)."""
    first = next((covector[r.weight] for r in s.readers if r.weight in covector), None)
    if first is None:
        return []
    gamma, beta = _norm_terms(s, params, first)
    p = torch.zeros(s.width, dtype=first.dtype, device=first.device)
    a = torch.zeros((), dtype=first.dtype, device=first.device)
    for reader, u in _readers(s, t.to(dtype=first.dtype, device=first.device)):
        m_w = covector.get(reader.weight)
        if m_w is not None:
            p = p + (m_w.T @ u if reader.axis == 1 else m_w @ u)
        m_b = covector.get(reader.bias) if reader.bias is not None else None
        if beta is not None and m_b is not None:
            a = a + torch.dot(u, m_b.to(u.dtype))
    out: list[Patch] = []
    if s.weight is not None and s.weight in params:
        out.append((s.weight, None, 0, (-p + a * beta if beta is not None else -p) / gamma**2))
    if s.bias is not None and s.bias in params:
        out.append((s.bias, None, 0, -a / gamma))
    return out


def _norm_reader_rate(
    s: NormReaderTranslation,
    params: Mapping[str, Tensor],
    gradient: Mapping[str, Tensor],
    cotangent: Mapping[str, Tensor],
    rate: Tensor,
) -> Tensor:
    """m_{W_r} q − σ m_{b_r} on each reader's u_r (module docstring)."""
    gamma, beta = _norm_terms(s, params, rate)
    c_gamma = cotangent.get(s.weight) if s.weight is not None else None
    c_beta = cotangent.get(s.bias) if s.bias is not None else None
    q = c_gamma.to(rate.dtype) / gamma**2 if c_gamma is not None else None
    sigma = torch.zeros((), dtype=rate.dtype, device=rate.device)
    if q is not None and beta is not None:
        sigma = sigma + torch.dot(q, beta)
    if c_beta is not None:
        sigma = sigma - torch.dot(c_beta.to(rate.dtype), 1.0 / gamma)
    parts = []
    for reader, u in _readers(s, rate):
        part = torch.zeros_like(u)
        v_w = gradient.get(reader.weight)
        if q is not None and v_w is not None:
            v_w = v_w.to(rate.dtype)
            part = part + (v_w @ q if reader.axis == 1 else v_w.T @ q)
        v_b = gradient.get(reader.bias) if reader.bias is not None else None
        if beta is not None and v_b is not None:
            part = part - sigma * v_b.to(rate.dtype)
        parts.append(part)
    return torch.cat(parts)
