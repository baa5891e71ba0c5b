"""Kernel-target alignment (Cortes et al. 2012; seed 000 Eq. 26) and the loss alignment of
seed 000 (Eq. 28)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import check_finite, functional_call, resolve_params
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.tangent_kernel.kernel import kernel_matrix
from paramsym.tangent_kernel.outputs import OutputSelector, check_output_selector, select_output


def _as_gram(kernel: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """The kernel as a square matrix and the targets as columns (Y with K ~ Y Yᵀ)."""
    if kernel.ndim == 4:
        n, _, o, _ = kernel.shape
        if y.ndim == 1 and not y.is_floating_point():
            y = torch.nn.functional.one_hot(y, o).to(kernel.dtype)
        if tuple(y.shape) != (n, o):
            raise ShapeError(
                f"kernel_alignment: a full kernel {tuple(kernel.shape)} needs targets of shape "
                f"({n}, {o}) (or {n} class indices), got {tuple(y.shape)}"
            )
        return kernel_matrix(kernel), y.reshape(-1, 1).to(kernel.dtype)
    if kernel.ndim != 2 or kernel.shape[0] != kernel.shape[1]:
        raise ShapeError(
            "kernel_alignment: K must be (n, n) or a full (n, n, O, O) kernel, "
            f"got {tuple(kernel.shape)}"
        )
    if y.shape[0] != kernel.shape[0] or y.ndim > 2:
        raise ShapeError(
            f"kernel_alignment: targets {tuple(y.shape)} do not match K {tuple(kernel.shape)}"
        )
    return kernel, (y.reshape(-1, 1) if y.ndim == 1 else y).to(kernel.dtype)


def kernel_alignment(kernel: Tensor, y: Tensor, centered: bool = True) -> float:
    """Alignment ``⟨K, L⟩_F / (‖K‖_F ‖L‖_F)`` of a kernel with the target kernel L = Y Yᵀ.

    Args:
        kernel: ``(n, n)`` (e.g. ``ntk(..., mode="trace")``) or a full ``(n, n, O, O)`` kernel,
            which is used as the ``(n·O, n·O)`` Gram matrix with targets ``vec(y)``.
        y: targets ``(n,)`` or ``(n, k)``; with a full kernel ``(n, O)`` or class indices.
        centered: center both kernels with H = I − 11ᵀ/N first (Cortes, Mohri, Rostamizadeh
            2012); ``False`` gives seed 000's uncentered Eq. 26 with the Frobenius norm.

    Returns a number in [−1, 1] (in [0, 1] for PSD kernels when uncentered).
    """
    matrix, targets = _as_gram(kernel, y)
    target = targets @ targets.T
    if centered:
        n = matrix.shape[0]
        h = torch.eye(n, dtype=matrix.dtype, device=matrix.device) - 1.0 / n
        matrix, target = h @ matrix @ h, h @ target @ h
    denominator = torch.linalg.matrix_norm(matrix) * torch.linalg.matrix_norm(target)
    if float(denominator) == 0.0:
        raise InvalidArgumentError(
            "kernel_alignment: the kernel or the targets are zero (after centering)"
        )
    return float((matrix * target).sum() / denominator)


def loss_alignment(
    model: nn.Module,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    batch: tuple[Any, Tensor],
    params: Mapping[str, Tensor] | None = None,
    *,
    learning_rate: float = 1.0,
    output: OutputSelector = None,
) -> float:
    """Seed 000's modified alignment ``A = fᵀ Θ f / ‖f‖²`` (Eq. 28) with one VJP and no kernel.

    ``f`` stacks the per-sample loss derivatives C′(F(x), y) and ``Θ = η J Jᵀ``. For a loss that
    is a mean over the samples, ``L = (1/|X|) Σ C``, the gradient is ``∇L = Jᵀ f / |X|``, so
    ``A = η ‖Jᵀ f‖² / ‖f‖² = η ‖∇L‖² / ‖∂L/∂F‖²`` (Prop 5.1): one backward pass to the outputs and
    one VJP to the parameters. A is the Rayleigh quotient of Θ at f, so
    λ_min(Θ) ≤ A ≤ λ_max(Θ), and on a symmetry orbit (where f is invariant) it moves exactly
    like ‖∇L‖².

    ``output`` selects the tensor passed to ``loss_fn`` when the forward returns a tuple or a
    ``ModelOutput``: a tuple index, a key or attribute name, or a callable of the raw output
    (as in :func:`~paramsym.tangent_kernel.ntk`); ``None`` requires a tensor.
    """
    check_output_selector(output, "loss_alignment")
    x, y = batch
    point = resolve_params(model, params)
    check_finite(point, "loss_alignment: params")
    leaves = {k: t.detach().requires_grad_(True) for k, t in point.items()}
    with torch.enable_grad():
        outputs = select_output(functional_call(model, leaves, x), output, model, "loss_alignment")
        loss = loss_fn(outputs, y)
        if loss.numel() != 1:
            raise InvalidArgumentError(
                "loss_alignment: loss_fn must return a scalar (a mean over samples)"
            )
        (to_outputs,) = torch.autograd.grad(loss, outputs, retain_graph=True)
        gradient = torch.autograd.grad(
            outputs,
            list(leaves.values()),
            grad_outputs=to_outputs,
            allow_unused=True,
            materialize_grads=True,
        )
    denominator = float((to_outputs**2).sum())
    if denominator == 0.0:
        raise InvalidArgumentError(
            "loss_alignment: the loss does not depend on the outputs here (f = 0)"
        )
    numerator = float(sum((g.detach() ** 2).sum() for g in gradient))
    return learning_rate * numerator / denominator
