"""First- and second-order equivariance identities (seed 003, Theorems 1-2), matrix-free.

:func:`check_identities` evaluates, at one point θ (and g), both sides of the identities that
differentiating ``f(T(θ, g)) = S(f(θ), g)`` once and twice gives (notes 003 §2, with the
corrections of §5b), for ``L = ℓ∘f`` with ``ℓ = loss_fn(·, targets)`` and f the stacked output on
the batch:

* **item 1** ``Jᵀ∇L = Kᵀ∇ℓ`` (k-vector);
* **item 2a** ``HJ = Fᵀ∇²ℓK + (∂_θK)ᵀ∇ℓ − (∂_θJ)ᵀ∇L``, in the compact form of notes 003 §5
  item 3: ``Fᵀ[∇²ℓK_j + ∇_y⟨c, ∂_gS e_j − ∂_yS K_j⟩] + ∇_θ⟨a, ∂_θT J_j − ∂_gT e_j⟩`` with the
  covectors a = A⁻ᵀ∇L, c = C⁻ᵀ∇ℓ and J, K frozen. The parameter-side term enters with **+**
  (an earlier version of the note had −; §5b measured residuals 0.44-2.0 with −, ≤ 3.4e-16
  with +);
* **item 2b** ``JᵀHJ`` (k × k) against the gg form ``Kᵀ∇²ℓK + ⟨c, S_gg − S_yy[K, K]⟩ +
  ⟨a, T_θθ[J, J] − T_gg⟩`` and against the mixed form (S_gg → S_yg[K, ·], T_gg →
  T_θg[J, ·]);
* **consistency** ``⟨a, T_gg − T_θg[J, ·]⟩ = ⟨c, S_gg − S_yg[K, ·]⟩`` (k × k), the identity
  the proof derives from eqs. (16)-(17), C F A⁻¹(∂²_ggT − ∂²_θgT[J, ·]) = ∂²_ggS − ∂²_ygS[K, ·],
  contracted with c; it is exactly the difference of the two 2b forms.

For a :class:`~paramsym.equivariance.DiscreteSymmetry` at a fixed point it checks Theorem 2
(:mod:`paramsym.equivariance.fixed_points`). The seed's formulas were stripped from its text:
every one here is the reconstruction of notes 003, verified there numerically and in this
package's tests against dense oracles.

f is one tensor. For a model that returns a tuple or a Hugging Face ``ModelOutput`` (called
with a dict of keyword inputs, ``{"input_ids": ids}``, and ``use_cache=False``), ``output=``
picks it, and a ``ModelOutput`` with one field, a tensor (``last_hidden_state``, ``logits``),
needs no ``output=``; ``loss_fn`` still receives the model's own output object, with the other
fields held fixed so that L = ℓ∘f (:mod:`paramsym.equivariance.forward`).

**Cost.** The model runs forward once, with its graph kept; ∇L comes from that graph with
``create_graph=True`` and each H J_j is one more backward pass (reverse-over-reverse); the
output-side terms of item 2a are folded into one VJP Fᵀu_j per generator (``fused=True`` folds
that VJP into the Hessian product too); everything else differentiates only T and S. At g = g₀,
A = C = I, and J_j = ∂_gT(θ, g₀) e_j and the parameter-side term of item 2a come from one
double-backward pass through T per generator (or from the closed-form ``Equivariance.tangent``
that ``from_symmetry`` and the built-ins provide, and one backward pass through it). Memory is
O(P) plus the activations of one forward, and O(k·P) for J. Measured by
``benchmarks/bench_equivariance.py`` (items 1 + 2a, one generator, the 784-512-512-10 ReLU MLP,
batch 256, float32, two threads, ``sanity=False``; ratios to one gradient, on a shared 2-core
machine, where one Hessian-vector product measured 2.5-2.9): a user-written rescaling 3.7-4.0
(3.4-3.7 with ``tangent=``), homogeneity (S ≠ id) 4.1-4.6 and 3.3-3.7 with ``fused=True``.
About 0.3-0.4 of each is the kernel's page faults on the P-sized results (glibc returns the
freed heap after every call); with ``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_MMAP_THRESHOLD_`` set
high: 3.3-3.5 (3.2), 4.0-4.1 and 3.2-3.4. The sanity check (``sanity=True``, the default) adds
a no-grad forward per g checked, T at θ and at a perturbed θ, the comparison of a closed-form
tangent with a JVP of T, and the kink watch: about 2 gradients there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, flatten, unflatten
from paramsym.core.seeding import make_generator
from paramsym.equivariance.discrete import DiscreteSymmetry
from paramsym.equivariance.fixed_points import theorem2
from paramsym.equivariance.forward import (
    LossFn,
    forward,
    gradient_point,
    prepare,
    warn_kinks,
)
from paramsym.equivariance.jacobians import check_solver, pick_method
from paramsym.equivariance.result import THEOREM1, THEOREM2, IdentityResult, distance, norm, ratio
from paramsym.equivariance.sanity import continuous_sanity, default_tolerance
from paramsym.equivariance.sides import SecondDerivatives, Side, operator_estimates, rows
from paramsym.equivariance.transformations import Equivariance
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.symmetry.base import Symmetry
from paramsym.tangent_kernel.outputs import OutputSelector, check_output_selector

_ALIASES = {
    "item2b": ("item2b_gg", "item2b_mixed", "consistency"),
    "item1": ("thm2_item1",),
    "item2": ("thm2_item2",),
}


def _wanted(identities: Sequence[str] | str | None, theorem: int) -> tuple[str, ...]:
    names = THEOREM1 if theorem == 1 else THEOREM2
    if identities is None:
        return names
    if isinstance(identities, str):
        identities = (identities,)
    chosen: set[str] = set()
    for item in identities:
        if item in names:
            chosen.add(item)
        elif item in _ALIASES and (theorem == 2 or item == "item2b"):
            chosen.update(_ALIASES[item])
        else:
            raise InvalidArgumentError(
                f"check_identities: unknown identity {item!r} for Theorem {theorem}; choose from "
                f"{names}" + (" or 'item2b'" if theorem == 1 else " or 'item1', 'item2'")
            )
    return tuple(name for name in names if name in chosen)


def _group_element(g: Any, eq: Equivariance, dtype: torch.dtype, device: torch.device) -> Tensor:
    if g is None:
        return eq.identity_element(dtype, device)
    g = torch.as_tensor(g)
    if g.ndim == 0 and eq.dim == 1:
        g = g.reshape(1)
    if tuple(g.shape) != (eq.dim,):
        raise ShapeError(
            f"check_identities: g must have shape ({eq.dim},) for {eq.name}, got {tuple(g.shape)}"
        )
    if not (g.is_floating_point() or g.dtype in (torch.int32, torch.int64)):
        raise InvalidArgumentError(f"check_identities: g must be real, got {g.dtype}")
    g = g.to(dtype=dtype, device=device)
    if not bool(torch.isfinite(g).all()):
        raise InvalidArgumentError("check_identities: g has NaN or infinite entries")
    return g


def check_identities(
    model: nn.Module,
    loss_fn: LossFn,
    batch: tuple[Any, Tensor],
    transformation: Equivariance | DiscreteSymmetry | Symmetry,
    g: Tensor | Sequence[float] | float | None = None,
    *,
    params: Mapping[str, Tensor] | None = None,
    identities: Sequence[str] | str | None = None,
    solver: str = "auto",
    sanity: bool = True,
    sanity_tol: float | None = None,
    sanity_scale: float = 0.1,
    generator: torch.Generator | int | None = None,
    hessian_norm: float | None = None,
    operator_norms: bool | None = None,
    fused: bool = False,
    probes: int | Tensor = 2,
    fixed_tol: float | None = None,
    output: OutputSelector = None,
) -> IdentityResult:
    """Check seed 003's identities for ``transformation`` at θ (and g); see the module docstring.

    Args:
        model: the network; f(θ) = ``model(x)`` at the parameters θ, one tensor (see
            ``output``).
        loss_fn: ``loss_fn(output, target) -> scalar`` (ℓ), given what the model returns: a
            tensor, or the model's tuple or ``ModelOutput`` with f(θ) in its place and every
            other field held fixed (detached), so that L = ℓ∘f. When a callable ``output``
            computes a new tensor, ``loss_fn`` receives that tensor.
        batch: ``(x, target)``; x a tensor, a tuple of positional inputs or a mapping of
            keyword inputs (``{"input_ids": ids}``, a tokenizer's ``BatchEncoding``), passed
            as :func:`paramsym.functional_call` does (``use_cache=False`` for a decoder).
        transformation: an :class:`Equivariance` (Theorem 1), a :class:`DiscreteSymmetry`
            (Theorem 2, at a fixed point), or a continuous catalogue :class:`~paramsym.Symmetry`
            (converted by :meth:`Equivariance.from_symmetry`).
        g: the group coordinate, shape ``(k,)`` (default g₀); Theorem 1 only. Any good position
            (A and C invertible) works.
        params: θ (default: the model's trainable parameters), in the dtype the check runs in.
        identities: names to check (default all of the theorem): ``"item1"``, ``"item2a"``,
            ``"item2b_gg"``, ``"item2b_mixed"``, ``"consistency"`` (``"item2b"`` = the last
            three); ``"thm2_item1"``, ``"thm2_item2"`` (or ``"item1"``, ``"item2"``).
        solver: ``"auto"``, ``"direct"`` or ``"gmres"`` for J = A⁻¹B and K = C⁻¹D (see
            :mod:`paramsym.equivariance.jacobians`; never conjugate gradients).
        sanity: run the sanity check f(T(θ, g)) = S(f(θ), g) first (at g₀, a random g and g)
            and watch the forward for activations on a kink; ``False`` skips both (for timing).
        sanity_tol: its relative tolerance (default √eps of the dtype).
        sanity_scale: size of the random g (g₀ + scale·N(0, I)) and of the random perturbation
            used for discrete symmetries.
        generator: seed or generator for the random g, perturbations and probes (default 0).
        hessian_norm: an estimate of ‖H‖ (e.g. λ_max) for the HJ terms of the scales of items
            2a and 2b (see :mod:`paramsym.equivariance.result`).
        operator_norms: estimate ‖H‖, ‖F‖ and ‖∇²ℓ‖ by one random product each for the scales
            of items 2a and 2b: ``True`` always, ``False`` never, ``None`` (default) only when
            a second-order residual exceeds 1e3·eps with the product norms (2e-13 in float64;
            so a generic point costs nothing extra; see :mod:`paramsym.equivariance.result`).
        fused: compute item 2a's HJ − Fᵀu in one backward pass (the output-side VJP folded
            into the Hessian-vector product), saving one backward pass through the model (about
            0.6 gradients) when S ≠ id. ``lhs["item2a"]`` is then HJ − Fᵀu, ``rhs["item2a"]``
            the parameter-side term, and the scale ‖HJ − Fᵀu‖ + ‖t‖ (with the operator-norm
            fallback). Ignored for a symmetry (no output term) and when items 2b, which need
            HJ alone, are checked too.
        probes: Theorem 2 item 2 is checked on these vectors: a number of Gaussian probes or a
            ``(m, P)`` tensor.
        fixed_tol: largest relative distance ‖T(θ) − θ‖/‖θ‖ from the fixed set accepted for
            Theorem 2 (default 1e3·eps).
        output: f(θ) when the forward returns more than a tensor
            (:data:`~paramsym.tangent_kernel.outputs.OutputSelector`): a tuple index, a key or
            attribute name (``"logits"``) or a callable of the raw output. ``None`` (default):
            the output itself when it is a tensor, or the field of a mapping output with one
            field that is a tensor (a ``ModelOutput`` such as ``BaseModelOutputWithPast``
            holding only ``last_hidden_state``); otherwise an
            :class:`~paramsym.errors.InvalidArgumentError` names the fields and ``output=``.

    Returns:
        an :class:`IdentityResult` (``.residuals``, ``.lhs``, ``.rhs``, ``.holds(tol)``).

    Raises:
        EquivarianceError: the sanity check failed (the message gives the residual).
        NotAGoodPositionError: A or C is singular at (θ, g).
        FixedPointError: Theorem 2 asked off the fixed set.

    Warns:
        NonSmoothWarning: an activation input sits exactly on a kink (f is not C² at θ).
        ApproximateEquivarianceWarning: an approximate transformation failed the sanity check.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 4, 2], activation="relu", bias=False, seed=0).double()
    >>> batch = (torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64))
    >>> eq = ps.equivariance.homogeneity(model)     # T = e^g θ, S = e^{2g} y
    >>> result = ps.check_identities(model, torch.nn.MSELoss(), batch, eq, g=[0.3])
    >>> result.holds(1e-9), sorted(result.residuals)
    (True, ['consistency', 'item1', 'item2a', 'item2b_gg', 'item2b_mixed'])
    """
    check_output_selector(output, "check_identities")
    point, x, target = prepare(model, batch, params, "check_identities")
    check_solver(solver)
    floating = next(t for t in point.values() if t.is_floating_point())
    dtype, device = floating.dtype, floating.device
    rng = make_generator(generator)
    tol = default_tolerance(dtype) if sanity_tol is None else float(sanity_tol)
    if isinstance(transformation, Symmetry):
        if transformation.dim == 0:
            raise InvalidArgumentError(
                f"check_identities: {transformation.name} is discrete; wrap one element, "
                "ps.DiscreteSymmetry.from_symmetry(sym, element), and check it at a fixed point"
            )
        transformation = Equivariance.from_symmetry(
            transformation, x=x if transformation.data_dependent else None
        )
    if isinstance(transformation, DiscreteSymmetry):
        if g is not None:
            raise InvalidArgumentError(
                "check_identities: g is for continuous equivariances; a DiscreteSymmetry is one "
                "fixed element"
            )
        distance_tol = 1e3 * torch.finfo(dtype).eps if fixed_tol is None else float(fixed_tol)
        return theorem2(
            model,
            loss_fn,
            x,
            target,
            point,
            transformation,
            _wanted(identities, 2),
            sanity=sanity,
            tol=tol,
            scale=sanity_scale,
            generator=rng,
            probes=probes,
            fixed_tol=distance_tol,
            output=output,
        )
    if not isinstance(transformation, Equivariance):
        raise InvalidArgumentError(
            "check_identities: transformation must be a ps.Equivariance, a ps.DiscreteSymmetry "
            f"or a continuous ps.Symmetry, got {type(transformation).__name__}"
        )
    element = _group_element(g, transformation, dtype, device)
    return _theorem1(
        model,
        loss_fn,
        x,
        target,
        point,
        transformation,
        element,
        _wanted(identities, 1),
        solver=solver,
        sanity=sanity,
        tol=tol,
        scale=sanity_scale,
        generator=rng,
        hessian_norm=hessian_norm,
        operator_norms=operator_norms,
        fused=fused,
        output=output,
    )


def _second_order_scale(
    j_norm: float, k_norm: float, rest: float
) -> Callable[[float, float, float], float]:
    """Item 2b's scale from operator-norm estimates: ‖J‖²‖H‖ + ‖K‖²‖∇²ℓ‖ + the T, S terms."""

    def scale(h: float, f: float, l2: float) -> float:
        return j_norm**2 * h + k_norm**2 * l2 + rest

    return scale


def _theorem1(
    model: nn.Module,
    loss_fn: LossFn,
    x: Any,
    target: Tensor,
    params: Params,
    eq: Equivariance,
    g: Tensor,
    wanted: tuple[str, ...],
    *,
    solver: str,
    sanity: bool,
    tol: float,
    scale: float,
    generator: torch.Generator,
    hessian_norm: float | None,
    operator_norms: bool | None,
    fused: bool,
    output: OutputSelector,
) -> IdentityResult:
    leaves, y, loss, hits, where, ell = forward(
        model, loss_fn, x, target, params, "check_identities", detect_kinks=sanity, output=output
    )
    warn_kinks(hits, where, eq.name)
    y0 = y.detach()
    sanity_residuals: dict[str, float] = {}
    output_identity = True
    if sanity:
        sanity_residuals, output_identity = continuous_sanity(
            model, x, eq, params, y0, g, scale=scale, generator=generator, tol=tol, output=output
        )
    second = any(name in wanted for name in ("item2a", "item2b_gg", "item2b_mixed"))
    point = gradient_point(leaves, y, loss, hits, create_graph=second)
    grad_L = point.flat_gradient
    size = grad_L.numel()
    k = eq.dim
    at_identity = torch.equal(g, eq.identity_element(g.dtype, g.device))

    def transform_flat(zz: Tensor, gg: Tensor) -> Tensor:
        return flatten(eq.apply(unflatten(zz, params), gg))

    method_T = pick_method(solver, at_identity, size)
    side_T = Side(
        transform_flat,
        params,
        g,
        grad_L,
        method=method_T,
        what="A = ∂_θT(θ, g)",
        sign=1.0,
        tangent=eq.apply_tangent if eq.tangent is not None else None,
        dict_map=eq.apply,
    )
    J, a = side_T.solved.columns, side_T.solved.covector
    terms: dict[str, Tensor] = {"J": J, "a": a}
    yz = y0.reshape(-1)
    d = yz.numel()
    K = torch.zeros(k, d, dtype=y0.dtype, device=y0.device)
    c = torch.zeros(d, dtype=y0.dtype, device=y0.device)
    grad_l = torch.zeros_like(c)
    solver_used = method_T
    output_flat: Callable[[Tensor, Tensor], Tensor] | None = None
    side_S: Side | None = None
    hess_l: Callable[[Tensor], Tensor] | None = None
    if not eq.symmetry:
        y_leaf = y0.clone().requires_grad_(True)
        with torch.enable_grad():
            loss_out = ell(y_leaf)
            (dl,) = torch.autograd.grad(loss_out, y_leaf, create_graph=second)
        grad_l = dl.detach().reshape(-1)

        def output_flat(yy: Tensor, gg: Tensor) -> Tensor:
            return eq.apply_output(yy.reshape(y0.shape), gg).reshape(-1)

        def hess_l(v: Tensor) -> Tensor:
            if not dl.requires_grad:
                return torch.zeros_like(v)
            (out,) = torch.autograd.grad(
                dl,
                y_leaf,
                grad_outputs=v.reshape(y0.shape),
                retain_graph=True,
                allow_unused=True,
                materialize_grads=True,
            )
            return out.detach().reshape(-1)

        method_S = pick_method(solver, at_identity and output_identity, d)
        side_S = Side(
            output_flat, yz, g, grad_l, method=method_S, what="C = ∂_yS(f(θ), g)", sign=-1.0
        )
        K, c = side_S.solved.columns, side_S.solved.covector
        if method_S != method_T:
            solver_used = f"A: {method_T}, C: {method_S}"
        terms.update(K=K, c=c)

    lhs: dict[str, Tensor] = {}
    rhs: dict[str, Tensor] = {}
    scales: dict[str, float] = {}
    robust: dict[str, Callable[[float, float, float], float]] = {}
    if "item1" in wanted:
        lhs["item1"], rhs["item1"] = J @ grad_L, K @ grad_l
        scales["item1"] = norm(J) * norm(grad_L) + norm(K) * norm(grad_l)

    HJ = hK = None
    hj_scale = 0.0
    if second and hess_l is not None:
        hK = torch.stack([hess_l(K[j]) for j in range(k)])
    fuse = fused and hK is not None and not any(n in wanted for n in ("item2b_gg", "item2b_mixed"))
    if second and not fuse:
        HJ = rows([point.hvp(unflatten(J[j], params)) for j in range(k)])
        hj_scale = norm(HJ) if hessian_norm is None else max(norm(HJ), hessian_norm * norm(J))
    if "item2a" in wanted:
        t_part = rows([side_T.term(j) for j in range(k)])
        t_norm = norm(t_part)
        c_part = torch.zeros_like(K)
        u: Tensor | None = None
        if side_S is not None and hK is not None:
            c_part = torch.stack([side_S.term(j) for j in range(k)])
            u = hK + c_part  # the output-side terms, folded into one VJP per generator
        c_norm = norm(c_part)
        if fuse:
            assert u is not None
            folded = rows(
                [
                    point.hvp_minus_output_vjp(unflatten(J[j], params), u[j].reshape(y0.shape))
                    for j in range(k)
                ]
            )
            lhs["item2a"], rhs["item2a"] = folded, t_part
            fold_scale = norm(folded)
            if hessian_norm is not None:
                fold_scale = max(fold_scale, hessian_norm * norm(J))
            scales["item2a"] = fold_scale + t_norm
            terms["item2a_hessian_minus_output"] = folded
        else:
            assert HJ is not None
            out_part: Tensor | None = None
            if u is not None:
                out_part = rows([point.output_vjp(u[j].reshape(y0.shape)) for j in range(k)])
                terms["item2a_output"] = out_part
            lhs["item2a"] = HJ
            rhs["item2a"] = t_part if out_part is None else out_part + t_part
            out_norm = 0.0 if out_part is None else norm(out_part)
            scales["item2a"] = hj_scale + out_norm + t_norm
        robust["item2a"] = lambda h, f, l2: h * norm(J) + f * (l2 * norm(K) + c_norm) + t_norm
        terms["item2a_parameter"] = t_part

    forms = [name for name in ("item2b_gg", "item2b_mixed", "consistency") if name in wanted]
    if forms:
        T2 = SecondDerivatives(transform_flat, flatten(params), g, J, a)
        S2 = SecondDerivatives(output_flat, yz, g, K, c) if output_flat is not None else None
        zero = torch.zeros(k, k, dtype=g.dtype, device=g.device)

        def s_term(kind: str) -> tuple[Tensor, float]:
            if S2 is None:
                return zero, 0.0
            value, norms = S2.get(kind)
            return value, norm(c) * norm(norms)

        def t_term(kind: str) -> tuple[Tensor, float]:
            value, norms = T2.get(kind)
            return value, norm(a) * norm(norms)

        if "item2b_gg" in forms or "item2b_mixed" in forms:
            assert HJ is not None
            JHJ = J @ HJ.T
            gauss = K @ hK.T if hK is not None else zero
            base_scale = norm(J) * hj_scale + (norm(K) * norm(hK) if hK is not None else 0.0)
            s_yy, s_yy_scale = s_term("zz")
            t_tt, t_tt_scale = t_term("zz")
            terms["item2b_gauss_newton"] = gauss
            for name, s_kind, t_kind in (("item2b_gg", "gg", "gg"), ("item2b_mixed", "zg", "zg")):
                if name not in forms:
                    continue
                s_val, s_scale = s_term(s_kind)
                t_val, t_scale = t_term(t_kind)
                out_term, par_term = s_val - s_yy, t_tt - t_val
                lhs[name], rhs[name] = JHJ, gauss + out_term + par_term
                rest = s_scale + s_yy_scale + t_tt_scale + t_scale
                scales[name] = base_scale + rest
                robust[name] = _second_order_scale(norm(J), norm(K), rest)
                suffix = name.removeprefix("item2b_")
                terms[f"item2b_output_{suffix}"] = out_term
                terms[f"item2b_parameter_{suffix}"] = par_term
        if "consistency" in forms:
            t_gg, t_gg_scale = t_term("gg")
            t_tg, t_tg_scale = t_term("zg")
            s_gg, s_gg_scale = s_term("gg")
            s_yg, s_yg_scale = s_term("zg")
            lhs["consistency"], rhs["consistency"] = t_gg - t_tg, s_gg - s_yg
            scales["consistency"] = t_gg_scale + t_tg_scale + s_gg_scale + s_yg_scale

    residuals = {name: ratio(distance(lhs[name], rhs[name]), scales[name]) for name in wanted}
    if robust and (
        operator_norms
        or (
            operator_norms is None
            and max(residuals[n] for n in robust) > 1e3 * torch.finfo(g.dtype).eps
        )
    ):
        h_norm, f_norm, l_norm = operator_estimates(
            point, params, y0, hess_l, generator, hessian_norm
        )
        for name, estimate in robust.items():
            scales[name] = max(scales[name], estimate(h_norm, f_norm, l_norm))
            residuals[name] = ratio(distance(lhs[name], rhs[name]), scales[name])
    return IdentityResult(
        residuals=residuals,
        scales={name: scales[name] for name in wanted},
        checked=wanted,
        theorem=1,
        transformation=eq.name,
        exact=eq.exact,
        g=[float(v) for v in g.tolist()],
        solver=solver_used,
        sanity=sanity_residuals,
        lhs=lhs,
        rhs=rhs,
        terms=terms,
    )
