"""Curvature primitives: Hessian-vector products, dense Hessians, Lanczos, traces, orbit dimensions.

Everything here is about the loss ``L(θ) = loss_fn(model(x; θ), y)`` of one batch ``(x, y)`` as
a function of the parameters θ (a params dict, default the model's own).

Method choice for Hessian-vector products (``method=``):

``"reverse_over_reverse"`` (what ``"auto"`` picks)
    Differentiate the gradient ⟨∇L, v⟩ once more with ``torch.autograd`` (Pearlmutter's
    trick). Supports every loss with a double backward. On CPU it measured 2.1-3.0 gradient
    evaluations per product across the MLPs in ``benchmarks/`` against 2.8-4.5 for
    forward-over-reverse.
``"reverse_over_forward"`` (opt-in, not what ``"auto"`` picks)
    ⟨∇L, v⟩ in forward mode (``torch.func.jvp``), then its gradient in reverse mode
    (``torch.func.grad``). The gradient ∇L itself is never formed: per linear map 8 matrix
    products instead of 9, and no P-sized gradient. Measured with ``bench_real_size``'s models
    (one thread, float32, round-robin in one run on a busy 2-core machine), in gradients:
    GPT-2-small 2.86 against 3.21 for reverse-over-reverse, BERT-base 2.76 against 3.39.
    Only graphs made of autograd nodes whose forward-mode formulas reverse mode differentiates
    exactly are accepted (``paramsym.core.forward_mode.VETTED_NODES``, each met in a model
    that the tests compare with reverse-over-reverse and a dense Hessian);
    ``F.layer_norm``/``F.rms_norm`` are written with elementary ops for it (the fused kernels'
    formulas read saved statistics as constants: 13 % wrong on GPT-2, torch 2.13). Any other
    graph (batch norm, custom ``autograd.Function``)
    raises :class:`~paramsym.errors.AutodiffError`. Not the default, because a node list cannot
    see every way PyTorch's forward mode departs from its reverse mode: forward mode ignores
    ``torch.no_grad()`` blocks inside the model (pytorch/pytorch#128600; a statistic of a weight
    taken under ``no_grad`` put both forward-mode methods 44 % off reverse-over-reverse, with
    only vetted nodes), and it differentiated embedding padding rows (pytorch/pytorch#93950)
    until :func:`~paramsym.core.backends.fixed_padding_rows`; and the saving is for single
    products only, :class:`HessianOperator` (Lanczos, traces) reuses the gradient's graph.
``"forward_over_reverse"``
    ``torch.func.jvp`` of ``torch.func.grad``: composable with other ``torch.func``
    transforms. PyTorch 2.3-2.13 cannot push a tangent through ``nn.MSELoss``/``F.mse_loss``
    with ``reduction="mean"`` in this mode (pytorch/pytorch#123996, "ZeroTensors are
    immutable"); paramsym reports that as :class:`~paramsym.errors.AutodiffError`. Like
    reverse-over-forward it does not see ``torch.no_grad()`` blocks inside the model.

Every method differentiates the function PyTorch's reverse mode differentiates: the loss is
evaluated inside :func:`~paramsym.core.backends.differentiable_attention`, which selects the
math attention kernel (the fused CPU kernels have no double backward) and makes embedding
rows named by ``padding_idx`` constants in forward mode as they are in reverse mode. Without
the latter, forward mode moves the padding row and reverse mode does not
(pytorch/pytorch#93950): wherever the padding token occurs in the input, forward-over-reverse,
reverse-over-forward and finite differences of the gradient departed from reverse-over-reverse
(tiny OPT 4 %, Gemma 9 %, ``BertForMaskedLM`` 5 %) and gave non-symmetric products on a
``BertModel`` (torch 2.13). The Hessian is that of the loss with the looked-up padding rows
held at their values (an output layer tied to the embedding still differentiates them):
symmetric, and the derivative of the gradient that :class:`HessianOperator` and
``loss.backward()`` report.

For many products at one point, :class:`HessianOperator` computes the gradient once with
its graph kept (``create_graph=True``) and then costs one backward pass through that graph per
product (about 1.5 gradient evaluations on the benchmark MLP); :func:`top_eigenvalues` and
:func:`hutchinson_trace` use it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.linalg
import scipy.sparse.linalg
import torch
from torch import Tensor, nn

from paramsym.core.backends import differentiable_attention
from paramsym.core.forward_mode import (
    UnvettedGraphError,
    hvp_reverse_over_forward,
    raise_without_forward_mode,
)
from paramsym.core.model_checks import check_deterministic, check_input_dtype, require_module
from paramsym.core.params import (
    Params,
    check_finite,
    flatten,
    functional_call,
    resolve_params,
    resolve_trainable,
    to_dtype,
    unflatten,
)
from paramsym.core.seeding import make_generator
from paramsym.errors import (
    AutodiffError,
    InvalidArgumentError,
    NotConvergedWarning,
    ShapeError,
)
from paramsym.symmetry.base import Symmetry

LossFn = Callable[[Tensor, Tensor], Tensor]
Batch = tuple[Any, Tensor]
HVPMethod = Literal["auto", "reverse_over_forward", "reverse_over_reverse", "forward_over_reverse"]
Which = Literal["largest", "smallest", "magnitude"]


def _unpack(batch: Any) -> tuple[Any, Tensor]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise InvalidArgumentError(
            f"batch must be an (inputs, targets) tuple, got {type(batch).__name__}"
            + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
        )
    return batch[0], batch[1]


def _scalar_loss(loss_fn: LossFn, output: Tensor, target: Tensor) -> Tensor:
    loss = loss_fn(output, target)
    if not isinstance(loss, Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, Tensor) else type(loss).__name__
        raise InvalidArgumentError(
            f"loss_fn must return a scalar tensor, got {shape}; use reduction='mean' or 'sum'"
        )
    return loss.reshape(())


def loss_function(model: nn.Module, loss_fn: LossFn, batch: Batch) -> Callable[[Params], Tensor]:
    """``θ ↦ loss_fn(model(x; θ), y)`` for one batch, as a function of a params dict."""
    x, y = _unpack(batch)
    require_module(model, "curvature")
    check_deterministic(model, "curvature")

    def loss(p: Params) -> Tensor:
        floating = next((t.dtype for t in p.values() if t.is_floating_point()), None)
        check_input_dtype(x, floating, "curvature", "the batch's inputs")
        # the math attention kernel (the fused CPU kernels have no double backward), and
        # padding rows of embeddings constant in forward mode as in reverse mode (#93950)
        with differentiable_attention(model):
            return _scalar_loss(loss_fn, functional_call(model, p, x), y)

    return loss


def _check_vector(v: Mapping[str, Tensor], params: Mapping[str, Tensor]) -> None:
    for name, t in params.items():
        if name not in v:
            raise ShapeError(f"the vector v has no entry for parameter '{name}'")
        if v[name].shape != t.shape:
            raise ShapeError(
                f"v['{name}'] has shape {tuple(v[name].shape)}, expected {tuple(t.shape)}"
            )
    extra = sorted(set(v) - set(params))
    if extra:
        raise ShapeError(
            f"the vector v has entries for unknown parameters {extra} (frozen parameters, "
            "requires_grad=False, are left out unless params= names them)"
        )
    check_finite(v, "v")


class HessianOperator:
    """The Hessian of one batch's loss as a symmetric linear operator of shape ``(P, P)``.

    The gradient is computed once, with its graph kept; every product is then one backward
    pass through that graph (reverse-over-reverse). The graph, with the activations it holds,
    lives as long as the operator.

    Args:
        model: the network.
        loss_fn: ``loss_fn(output, target) -> scalar``.
        batch: ``(x, y)``.
        params: point θ (default: the model's trainable parameters; frozen ones,
            ``requires_grad=False``, stay fixed and are not rows of H; pass
            ``params=ps.params_of(model)`` to include them).

    Attributes:
        loss: L(θ) (detached).
        gradient: ∇L(θ) as a params dict (detached).
        num_matvecs: products computed so far.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([2, 3, 1], activation="tanh", seed=0).double()
    >>> batch = (torch.randn(4, 2, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64))
    >>> H = HessianOperator(model, torch.nn.MSELoss(), batch)
    >>> dense = ps.hessian(model, torch.nn.MSELoss(), batch)
    >>> v = torch.randn(H.shape[0], dtype=torch.float64)
    >>> torch.allclose(H @ v, dense @ v)
    True
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        batch: Batch,
        params: Mapping[str, Tensor] | None = None,
    ) -> None:
        require_module(model, "HessianOperator")
        point = resolve_trainable(model, params)
        check_finite(point, "HessianOperator: params")
        self._leaves = {k: t.detach().requires_grad_(True) for k, t in point.items()}
        leaves = list(self._leaves.values())
        with torch.enable_grad():
            loss = loss_function(model, loss_fn, batch)(self._leaves)
            grads = torch.autograd.grad(
                loss, leaves, create_graph=True, allow_unused=True, materialize_grads=True
            )
        self.loss = loss.detach()
        self.gradient: Params = {k: g.detach() for k, g in zip(self._leaves, grads, strict=True)}
        # Gradient entries that do not depend on θ (the loss is affine in them) have zero rows.
        self._curved = [(i, g) for i, g in enumerate(grads) if g.requires_grad]
        numel = sum(t.numel() for t in leaves)
        self.shape = (numel, numel)
        self.dtype = leaves[0].dtype if leaves else torch.get_default_dtype()
        self.device = leaves[0].device if leaves else torch.device("cpu")
        self.num_matvecs = 0

    def hvp(self, v: Mapping[str, Tensor]) -> Params:
        """H v for a params dict ``v`` (same keys and shapes as the parameters)."""
        _check_vector(v, self._leaves)
        return self._product(v)

    def _product(self, v: Mapping[str, Tensor], *, last: bool = False) -> Params:
        """H v; ``last=True`` for an operator's only product (:func:`hvp`): the graph's saved
        tensors are then freed node by node as the backward pass runs, so that later nodes
        reuse their memory (the same values; the peak, reached before, is unchanged)."""
        names = list(self._leaves)
        self.num_matvecs += 1
        if not self._curved:
            return {k: torch.zeros_like(t) for k, t in self._leaves.items()}
        outputs = [g for _, g in self._curved]
        cotangents = [v[names[i]].to(g.dtype) for i, g in self._curved]
        with torch.enable_grad():
            products = torch.autograd.grad(
                outputs,
                list(self._leaves.values()),
                grad_outputs=cotangents,
                retain_graph=not last,
                allow_unused=True,
                materialize_grads=True,
            )
        return {k: p.detach() for k, p in zip(names, products, strict=True)}

    def matvec(self, v: Tensor) -> Tensor:
        """H v for a flat vector of shape ``(P,)``."""
        if v.shape != (self.shape[0],):
            raise ShapeError(f"matvec: v has shape {tuple(v.shape)}, expected ({self.shape[0]},)")
        return flatten(self.hvp(unflatten(v.to(self.dtype), self._leaves)))

    def __matmul__(self, v: Tensor) -> Tensor:
        if v.ndim == 1:
            return self.matvec(v)
        if v.ndim == 2:
            return torch.stack([self.matvec(col) for col in v.T], dim=1)
        raise ShapeError(f"HessianOperator @ v: v must be 1-d or 2-d, got {v.ndim}-d")

    def to_dense(self) -> Tensor:
        """The ``(P, P)`` matrix, column by column (P products; for small models)."""
        return self @ torch.eye(self.shape[0], dtype=self.dtype, device=self.device)

    def to_scipy(self) -> scipy.sparse.linalg.LinearOperator:
        """A ``scipy.sparse.linalg.LinearOperator`` (float64 NumPy in and out)."""

        def mv(v: np.ndarray) -> np.ndarray:
            t = torch.as_tensor(np.asarray(v).reshape(-1), device=self.device)
            return self.matvec(t).double().cpu().numpy()

        return scipy.sparse.linalg.LinearOperator(self.shape, matvec=mv, dtype=np.float64)


def hvp(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    v: Mapping[str, Tensor],
    params: Mapping[str, Tensor] | None = None,
    *,
    method: HVPMethod = "auto",
) -> Params:
    """Hessian-vector product ``∇²L(θ) v`` for one batch; ``v`` and the result are params dicts.

    See the module docstring for the methods; ``"auto"`` is reverse-over-reverse.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([2, 3, 1], activation="tanh", seed=0)
    >>> batch = (torch.randn(4, 2), torch.randn(4, 1))
    >>> v = {k: torch.ones_like(t) for k, t in model.named_parameters()}
    >>> sorted(ps.hvp(model, torch.nn.MSELoss(), batch, v))
    ['0.bias', '0.weight', '2.bias', '2.weight']
    """
    require_module(model, "hvp")
    point = resolve_trainable(model, params)
    _check_vector(v, point)
    if method not in (
        "auto",
        "reverse_over_forward",
        "reverse_over_reverse",
        "forward_over_reverse",
    ):
        raise InvalidArgumentError(
            "hvp: method must be 'auto', 'reverse_over_forward', 'reverse_over_reverse' or "
            f"'forward_over_reverse', got {method!r}"
        )
    if method == "reverse_over_forward" and point:
        check_finite(point, "hvp: params")
        try:
            loss = loss_function(model, loss_fn, batch)
            return hvp_reverse_over_forward(loss, v, point)
        except UnvettedGraphError as unvetted:
            raise AutodiffError(
                "hvp(method='reverse_over_forward'): the loss's graph holds autograd nodes "
                f"whose forward-mode formulas are not checked in reverse mode ({unvetted}); "
                "use method='reverse_over_reverse'"
            ) from None
        except RuntimeError as err:
            raise_without_forward_mode(err, method)
            raise
    if method in ("auto", "reverse_over_reverse", "reverse_over_forward"):
        return HessianOperator(model, loss_fn, batch, point)._product(v, last=True)
    check_finite(point, "hvp: params")
    loss = loss_function(model, loss_fn, batch)
    try:
        product = torch.func.jvp(torch.func.grad(loss), (point,), (dict(v),))[1]
    except RuntimeError as err:
        if "ZeroTensors are immutable" in str(err):
            raise AutodiffError(
                "hvp(method='forward_over_reverse'): PyTorch cannot push a tangent through "
                "this loss in forward-over-reverse mode (pytorch/pytorch#123996, typically "
                "nn.MSELoss/F.mse_loss with reduction='mean'); use method='reverse_over_reverse' "
                "or write the loss with elementary operations"
            ) from err
        raise_without_forward_mode(err, method)
        raise
    return dict(product)


def hessian(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    params: Mapping[str, Tensor] | None = None,
    *,
    max_params: int = 10_000,
) -> Tensor:
    """The dense Hessian, shape ``(P, P)`` in :func:`~paramsym.flatten` order.

    Computed row by row with ``torch.autograd.functional.hessian`` on the flattened
    parameters; the tests check it against ``torch.func.hessian`` and finite differences. It
    deliberately avoids ``torch.func.hessian`` / ``jacrev(jacrev(...))``: in PyTorch 2.13 they
    return a Hessian off by ~25% for networks with a training-mode BatchNorm (measured against
    finite differences; related: pytorch/pytorch#196699), while autograd's double backward is
    right. Refuses models with more than ``max_params`` parameters (P² memory).
    """
    require_module(model, "hessian")
    point = resolve_trainable(model, params)
    check_finite(point, "hessian: params")
    size = sum(t.numel() for t in point.values())
    if size > max_params:
        raise InvalidArgumentError(
            f"hessian: the model has {size} parameters > max_params={max_params}; the dense "
            f"Hessian needs {size}² entries. Use HessianOperator / top_eigenvalues, or raise "
            "max_params"
        )
    loss = loss_function(model, loss_fn, batch)
    flat = flatten(point).detach()
    with torch.enable_grad():
        dense = torch.autograd.functional.hessian(lambda z: loss(unflatten(z, point)), flat)
    return dense.detach()


# -- eigenvalues -------------------------------------------------------------------------------


@dataclass
class EigenResult:
    """Extreme eigenvalues found by Lanczos.

    Attributes:
        eigenvalues: the k wanted Ritz values, in the order of ``which`` (largest first for
            ``"largest"`` and ``"magnitude"``, smallest first for ``"smallest"``).
        residuals: Ritz residual norms ‖H s − θ s‖: an eigenvalue of H lies within that
            distance of each Ritz value θ.
        num_hvps: Hessian-vector products used.
        converged: whether every residual met the tolerance.
        which: ``"largest"``, ``"smallest"`` or ``"magnitude"``.
        eigenvectors: ``(k, P)`` Ritz vectors (when requested), else ``None``.
    """

    eigenvalues: list[float]
    residuals: list[float]
    num_hvps: int
    converged: bool
    which: str
    eigenvectors: Tensor | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain-number fields, for JSON."""
        out = asdict(self)
        out.pop("eigenvectors")
        return out


def _wanted(theta: np.ndarray, k: int, which: Which) -> np.ndarray:
    if which == "largest":
        order = np.argsort(-theta)
    elif which == "smallest":
        order = np.argsort(theta)
    else:
        order = np.argsort(-np.abs(theta))
    return order[:k]


def lanczos(
    matvec: Callable[[Tensor], Tensor],
    size: int,
    k: int = 1,
    *,
    which: Which = "largest",
    tol: float = 1e-6,
    max_iter: int | None = None,
    generator: torch.Generator | int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    return_eigenvectors: bool = False,
) -> EigenResult:
    """Extreme eigenvalues of a symmetric operator by Lanczos with full reorthogonalisation.

    After every product the tridiagonal matrix is diagonalised (``scipy.linalg.
    eigh_tridiagonal``, float64) and iteration stops as soon as each wanted Ritz value θ has
    residual ``|β_m s_m| ≤ tol · max|θ|``, where max|θ| estimates ‖H‖. So the run costs only
    as many products as the spectrum needs; stopping on the residual (not on the change between
    iterations, as power iteration does) bounds the error: some eigenvalue lies within the
    residual of θ. Lanczos finds one copy of repeated eigenvalues.

    Args:
        matvec: ``v ↦ H v`` on vectors of shape ``(size,)``.
        size: P.
        k: number of eigenvalues.
        which: ``"largest"`` (algebraic), ``"smallest"`` or ``"magnitude"``.
        tol: relative residual tolerance.
        max_iter: most products (default ``min(size, max(100, 4k))``); the Lanczos basis
            holds ``max_iter`` vectors of length P.
        generator: for the random start vector (default seeded with 0: deterministic).
        dtype, device: of the Lanczos vectors.
        return_eigenvectors: also return the Ritz vectors.
    """
    if which not in ("largest", "smallest", "magnitude"):
        raise InvalidArgumentError(
            f"which must be 'largest', 'smallest' or 'magnitude', got {which!r}"
        )
    if not 1 <= k <= size:
        raise InvalidArgumentError(f"k must be between 1 and the operator size {size}, got {k}")
    steps = min(size, max_iter if max_iter is not None else max(100, 4 * k))
    if steps < k:
        raise InvalidArgumentError(f"max_iter={max_iter} is smaller than k={k}")
    gen = make_generator(generator)
    basis = torch.empty(steps, size, dtype=dtype, device=device)  # rows filled as we go

    def random_unit() -> Tensor:
        q = torch.randn(size, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)
        return q / torch.linalg.vector_norm(q)

    q = random_unit()
    alphas: list[float] = []
    betas: list[float] = []
    theta = np.zeros(0)
    s = np.zeros((0, 0))
    residuals = np.zeros(0)
    wanted = np.zeros(0, dtype=int)
    converged = False
    for j in range(steps):
        basis[j] = q
        w = matvec(q).to(dtype)
        alpha = float(torch.dot(q, w))
        w = w - alpha * q - (betas[-1] * basis[j - 1] if j > 0 else 0.0)
        for _ in range(2):  # full reorthogonalisation, twice is enough (Kahan-Parlett)
            w = w - basis[: j + 1].T @ (basis[: j + 1] @ w)
        beta = float(torch.linalg.vector_norm(w))
        alphas.append(alpha)
        theta, s = scipy.linalg.eigh_tridiagonal(np.array(alphas), np.array(betas))
        residuals = np.abs(beta * s[-1, :])
        wanted = _wanted(theta, min(k, j + 1), which)
        scale = max(float(np.max(np.abs(theta))), np.finfo(np.float64).tiny)
        if j + 1 >= k and bool(np.all(residuals[wanted] <= tol * scale)):
            converged = True
            break
        if j + 1 == steps:
            break
        if beta <= 1e3 * np.finfo(np.float64).eps * scale:
            # Invariant subspace found: continue in a fresh direction orthogonal to it.
            w = random_unit()
            for _ in range(2):
                w = w - basis[: j + 1].T @ (basis[: j + 1] @ w)
            betas.append(0.0)
            q = w / torch.linalg.vector_norm(w)
        else:
            betas.append(beta)
            q = w / beta
    m = len(alphas)
    if not converged:
        worst = float(np.max(residuals[wanted])) / max(float(np.max(np.abs(theta))), 1e-300)
        warnings.warn(
            f"Lanczos stopped after {m} products without meeting tol={tol:g} "
            f"(largest relative residual {worst:.2e}); "
            "the eigenvalues are approximate. Raise max_iter or tol.",
            NotConvergedWarning,
            stacklevel=2,
        )
    vectors = None
    if return_eigenvectors:
        coeffs = torch.as_tensor(s[:, wanted], dtype=dtype, device=device)  # (m, k)
        vectors = coeffs.T @ basis[:m]
        vectors = vectors / torch.linalg.vector_norm(vectors, dim=1, keepdim=True)
    return EigenResult(
        eigenvalues=[float(theta[i]) for i in wanted],
        residuals=[float(residuals[i]) for i in wanted],
        num_hvps=m,
        converged=converged,
        which=which,
        eigenvectors=vectors,
    )


def top_eigenvalues(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    k: int = 1,
    params: Mapping[str, Tensor] | None = None,
    *,
    which: Which = "largest",
    tol: float = 1e-6,
    max_iter: int | None = None,
    generator: torch.Generator | int | None = None,
    return_eigenvectors: bool = False,
) -> EigenResult:
    """The k extreme Hessian eigenvalues by Lanczos (:func:`lanczos` on a :class:`HessianOperator`).

    The result reports the number of Hessian-vector products used and the residual bound of
    each eigenvalue; if ``tol`` was not met it says so (``converged=False`` and a
    :class:`~paramsym.errors.NotConvergedWarning`).
    """
    operator = HessianOperator(model, loss_fn, batch, params)
    return lanczos(
        operator.matvec,
        operator.shape[0],
        k,
        which=which,
        tol=tol,
        max_iter=max_iter,
        generator=generator,
        dtype=operator.dtype,
        device=operator.device,
        return_eigenvectors=return_eigenvectors,
    )


# -- trace -------------------------------------------------------------------------------------


@dataclass
class TraceEstimate:
    """A Hutchinson estimate of tr(H): approximate, with its standard error.

    Attributes:
        estimate: mean of zᵀHz over the probes.
        stderr: standard error of the mean (sample std / sqrt(num_samples)).
        num_samples: probes drawn.
        num_hvps: Hessian-vector products used (= num_samples).
        distribution: ``"rademacher"`` or ``"gaussian"``.
    """

    estimate: float
    stderr: float
    num_samples: int
    num_hvps: int
    distribution: str
    approximate: bool = True


def hutchinson_trace(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    num_samples: int = 100,
    params: Mapping[str, Tensor] | None = None,
    *,
    distribution: Literal["rademacher", "gaussian"] = "rademacher",
    generator: torch.Generator | int | None = None,
) -> TraceEstimate:
    """Unbiased estimate of the Hessian trace, E[zᵀHz] = tr(H) for E[zzᵀ] = I (Hutchinson 1989).

    Rademacher probes have variance 2(‖H‖_F² − Σ H_ii²) per sample, Gaussian probes
    2‖H‖_F²; the result carries the empirical standard error.
    """
    if num_samples < 2:
        raise InvalidArgumentError(f"hutchinson_trace: num_samples must be >= 2, got {num_samples}")
    if distribution not in ("rademacher", "gaussian"):
        raise InvalidArgumentError(
            "hutchinson_trace: distribution must be 'rademacher' or 'gaussian', "
            f"got {distribution!r}"
        )
    operator = HessianOperator(model, loss_fn, batch, params)
    gen = make_generator(generator)
    size = operator.shape[0]
    values = []
    for _ in range(num_samples):
        if distribution == "rademacher":
            z = 2.0 * torch.randint(0, 2, (size,), generator=gen).to(torch.float64) - 1.0
        else:
            z = torch.randn(size, generator=gen, dtype=torch.float64)
        z = z.to(dtype=operator.dtype, device=operator.device)
        values.append(float(torch.dot(z, operator.matvec(z))))
    samples = np.array(values)
    return TraceEstimate(
        estimate=float(samples.mean()),
        stderr=float(samples.std(ddof=1) / math.sqrt(num_samples)),
        num_samples=num_samples,
        num_hvps=operator.num_matvecs,
        distribution=distribution,
    )


# -- orbits ------------------------------------------------------------------------------------


def tangent_matrix(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    x: Tensor | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    max_entries: int = 200_000_000,
) -> Tensor:
    """The ``(dim, P)`` matrix whose row k is ``flatten(tangent(θ, e_k))``: the infinitesimal
    action on the algebra basis. Its row space is the tangent space of the orbit at θ."""
    point = to_dtype(dict(params), dtype)
    size = sum(t.numel() for t in point.values())
    if symmetry.dim * size > max_entries:
        raise InvalidArgumentError(
            f"tangent_matrix: {symmetry.name} has dim {symmetry.dim} and the model {size} "
            f"parameters; the {symmetry.dim}×{size} matrix exceeds max_entries={max_entries}"
        )
    ref = next(iter(point.values()))
    basis = torch.eye(symmetry.dim, dtype=dtype, device=ref.device)
    rows = [flatten(symmetry.tangent(point, e, x)) for e in basis]
    return torch.stack(rows) if rows else torch.zeros(0, size, dtype=dtype, device=ref.device)


def orbit_dimension(
    model: nn.Module,
    symmetry: Symmetry,
    params: Mapping[str, Tensor] | None = None,
    x: Tensor | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    rtol: float | None = None,
) -> int:
    """Dimension of the orbit of θ: the rank of ξ ↦ tangent(θ, ξ) over the algebra basis.

    Rank counts singular values above ``rtol · σ_max`` with the default
    ``rtol = max(dim, P) · eps(dtype)`` (NumPy's ``matrix_rank`` rule), computed in float64 by
    default. At generic points (dissertation Prop. A.2.9 and notes 001a §6.10): GL(h) between
    n inputs and m outputs gives ``h² − max(0, h−n)·max(0, h−m)``; positive rescaling ``h``;
    O(h) ``C(h,2) − C(max(0, h−m−n), 2)`` (Thm 2.3.8's table holds only at special points).
    """
    point = resolve_params(model, params)
    if symmetry.dim == 0:
        return 0
    matrix = tangent_matrix(symmetry, point, x, dtype=dtype)
    singular = torch.linalg.svdvals(matrix)
    if singular.numel() == 0 or float(singular[0]) == 0.0:
        return 0
    threshold = rtol if rtol is not None else max(matrix.shape) * torch.finfo(dtype).eps
    return int((singular > threshold * singular[0]).sum())
