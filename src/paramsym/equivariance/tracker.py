"""A training callback for seed 003's quantities: identity residuals, Noether charges with their
predicted drift, sharpness against its homogeneity bound and 2/η, and where the gradient sits.

Call it before each update (and it records at steps divisible by ``every``)::

    tracker = ps.IdentityTracker(model, loss_fn, (x, y), transformations=[eq],
                                 charges={"rescaling": A}, lr=0.05, sharpness=True, top_k=3)
    for step in range(steps + 1):
        tracker(step)
        ...one optimizer step...
    tracker.history["lambda_max"], tracker.history["residual/homogeneity/item2a"]

Everything is measured on the fixed ``batch`` (for full-batch gradient descent: the training
set) in the model's own dtype: train in float64 to read the residuals at the 1e-9 level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import flatten, functional_call, params_of
from paramsym.core.tables import append_row, empty_table
from paramsym.equivariance.discrete import DiscreteSymmetry
from paramsym.equivariance.homogeneous_spectrum import eigen_alignment, sharpness_bound
from paramsym.equivariance.identities import check_identities
from paramsym.equivariance.noether import noether_drift
from paramsym.equivariance.result import THEOREM1, THEOREM2
from paramsym.equivariance.stacked import Batch, LossFn
from paramsym.equivariance.transformations import Equivariance
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.symmetry.base import Symmetry
from paramsym.tangent_kernel.outputs import OutputSelector

Transformation = Equivariance | DiscreteSymmetry | Symmetry


class IdentityTracker:
    """Record seed 003's identities and predictions along training (see the module docstring).

    Args:
        model: the network being trained (read at each call).
        loss_fn, batch: L(θ) = ``loss_fn(model(x), y)`` on the fixed batch ``(x, y)``.
        transformations: equivariances, discrete symmetries (checked at fixed points only: the
            check raises elsewhere) or continuous catalogue symmetries whose identities
            (:func:`~paramsym.check_identities`, at g₀) are recorded as columns
            ``residual/<name>/<identity>``. The sanity check runs at the first record only.
        identities: which identities to check (default: all of the theorem).
        charges: name → a symmetric generator A of shape ``(P, P)`` (in
            :func:`~paramsym.flatten` order) of a symmetry of every per-sample loss; records
            Q = ½θᵀAθ as ``charge/<name>`` and, with ``lr``, the predicted change of the next
            step: ``gd_drift/<name>`` (½η²∇Lᵀ A ∇L, exact for full-batch GD) and, with
            ``batch_size``, ``sgd_drift/<name>`` (the expected change of one SGD step on
            batches of that size drawn without replacement, Corollary 2; see
            :func:`~paramsym.equivariance.noether.noether_drift`).
        lr: the step size η (also reported as ``two_over_lr`` = 2/η, the edge of stability).
        batch_size: the SGD batch size B for ``sgd_drift``.
        sharpness: record ``lambda_max`` (Lanczos) against the bound θᵀHθ/‖θ‖²
            (``sharpness_bound``) of an m-homogeneous net (eq. 4).
        top_k: record the fraction of ‖∇L‖² in the top-``top_k`` Hessian eigenspace
            (``top_k_gradient_fraction``) and the largest Corollary 1 residual over those
            eigenpairs (``top_k_pair_residual``); 0: not recorded.
        degree: the homogeneity degree m for ``sharpness`` and ``top_k`` (``None``: read from
            a bias-free ReLU/linear ``nn.Sequential``).
        every: record at steps divisible by ``every``.
        output: which tensor of the model's return value the identities take as f (a
            Hugging Face ``ModelOutput`` with several fields; see
            :func:`~paramsym.check_identities`). The loss always gets what the model returns,
            called as :func:`~paramsym.functional_call` calls it (dict inputs, the cache off).

    ``history`` is a long-format table (``step``, ``loss`` and the columns above), one row per
    record; :meth:`__call__` returns whether it recorded.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        batch: Batch,
        *,
        transformations: Sequence[Transformation] = (),
        identities: Sequence[str] | None = None,
        charges: Mapping[str, Tensor] | None = None,
        lr: float | None = None,
        batch_size: int | None = None,
        sharpness: bool = False,
        top_k: int = 0,
        degree: int | None = None,
        every: int = 1,
        output: OutputSelector = None,
    ) -> None:
        if every < 1:
            raise InvalidArgumentError(f"IdentityTracker: every must be >= 1, got {every}")
        if lr is not None and not lr > 0:
            raise InvalidArgumentError(f"IdentityTracker: lr must be > 0, got {lr}")
        if batch_size is not None and lr is None:
            raise InvalidArgumentError(
                "IdentityTracker: batch_size is for the predicted SGD drift, which needs lr"
            )
        if top_k < 0:
            raise InvalidArgumentError(f"IdentityTracker: top_k must be >= 0, got {top_k}")
        self.model, self.loss_fn, self.batch = model, loss_fn, batch
        self.transformations = list(transformations)
        self.identities = identities
        self.charges = dict(charges or {})
        self.lr, self.batch_size = lr, batch_size
        self.sharpness, self.top_k, self.degree, self.every = sharpness, top_k, degree, every
        self.output = output
        size = flatten(params_of(model)).numel()
        for name, matrix in self.charges.items():
            if tuple(matrix.shape) != (size, size):
                raise ShapeError(
                    f"IdentityTracker: charge '{name}' needs a ({size}, {size}) generator "
                    f"(the model's parameters, flattened), got {tuple(matrix.shape)}"
                )
            if not torch.allclose(matrix, matrix.T):
                raise InvalidArgumentError(
                    f"IdentityTracker: charge '{name}': the generator must be symmetric "
                    "(J = Aθ is then the gradient of Q = ½θᵀAθ, Corollary 2)"
                )
        self._checked_once: set[int] = set()
        self.history = empty_table(" ".join(self._columns()))

    def _identity_names(self, transformation: Transformation) -> tuple[str, ...]:
        if self.identities is not None:
            return tuple(self.identities)
        return THEOREM2 if isinstance(transformation, DiscreteSymmetry) else THEOREM1

    def _columns(self) -> list[str]:
        columns = ["step", "loss"]
        for t in self.transformations:
            columns += [f"residual/{t.name}/{i}" for i in self._identity_names(t)]
        for name in self.charges:
            columns.append(f"charge/{name}")
            if self.lr is not None:
                columns.append(f"gd_drift/{name}")
            if self.batch_size is not None:
                columns.append(f"sgd_drift/{name}")
        if self.lr is not None:
            columns.append("two_over_lr")
        if self.sharpness:
            columns += ["lambda_max", "sharpness_bound", "bound_holds"]
        if self.top_k:
            columns += ["top_k_gradient_fraction", "top_k_pair_residual"]
        return columns

    def __call__(self, step: int) -> bool:
        """Record at ``step`` if it is divisible by ``every``; return whether it recorded."""
        if step % self.every:
            return False
        params = params_of(self.model)
        x, y = self.batch
        with torch.no_grad():
            loss = float(self.loss_fn(functional_call(self.model, params, x), y))
        row: list[Any] = [step, loss]
        for index, transformation in enumerate(self.transformations):
            result = check_identities(
                self.model,
                self.loss_fn,
                self.batch,
                transformation,
                identities=self._identity_names(transformation),
                sanity=index not in self._checked_once,
                output=self.output,
            )
            self._checked_once.add(index)
            row += [result.residuals[i] for i in self._identity_names(transformation)]
        theta = flatten(params)
        for matrix in self.charges.values():
            row.append(0.5 * float(theta @ matrix.to(theta) @ theta))
            if self.lr is not None:
                n = len(y)
                drift = noether_drift(
                    self.model, self.loss_fn, self.batch, matrix, self.lr, self.batch_size or n
                )
                row.append(drift.gd_drift)
                if self.batch_size is not None:
                    row.append(drift.sgd_drift)
        if self.lr is not None:
            row.append(2.0 / self.lr)
        if self.sharpness:
            bound = sharpness_bound(self.model, self.loss_fn, self.batch, self.degree)
            row += [bound.lambda_max, bound.bound, bound.bound_holds]
        if self.top_k:
            alignment = eigen_alignment(
                self.model, self.loss_fn, self.batch, self.top_k, self.degree
            )
            row += [alignment.gradient_fraction, max(alignment.pair_residuals)]
        append_row(self.history, *row)
        return True
