"""Recording the NTK's rank and spectrum during training (seed 004 Figs 2-6; seed 000 Fig 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError
from paramsym.tangent_kernel.alignment import loss_alignment
from paramsym.tangent_kernel.dimension import functional_dimension
from paramsym.tangent_kernel.kernel import kernel_matrix, ntk
from paramsym.tangent_kernel.outputs import OutputSelector, check_output_selector
from paramsym.tangent_kernel.regions import linear_regions


class NTKTracker:
    """A training callback: every ``every`` epochs, record the functional dimension, the linear
    regions (piecewise-linear models), the loss alignment (given a loss) and the top NTK
    eigenvalues on a fixed batch.

    Call it at the end of every epoch (and once before training with epoch 0)::

        tracker = NTKTracker(model, x, every=50, loss_fn=nn.MSELoss(), targets=y)
        for epoch in range(epochs + 1):
            tracker(epoch)
            ...train one epoch...
        tracker.history["functional_dimension"]

    Args:
        model: the network being trained.
        x: the inputs on which everything is measured (seed 004: the whole data set).
        every: record at epochs divisible by ``every``.
        loss_fn, targets: for the loss alignment A (seed 000 Eq. 28), optional.
        eigenvalues: how many top eigenvalues of the (m·O) × (m·O) Gram matrix to keep.
        dtype, tol: for :func:`~paramsym.tangent_kernel.functional_dimension`.
        output: which tensor of the forward's return value is f (a tuple index, a key or
            attribute name, or a callable; ``None``: the forward returns a tensor).
    """

    def __init__(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        every: int = 50,
        loss_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
        targets: Tensor | None = None,
        eigenvalues: int = 5,
        dtype: torch.dtype = torch.float64,
        tol: float | None = None,
        output: OutputSelector = None,
    ) -> None:
        if every < 1:
            raise InvalidArgumentError(f"NTKTracker: every must be >= 1, got {every}")
        if (loss_fn is None) != (targets is None):
            raise InvalidArgumentError("NTKTracker: give both loss_fn and targets, or neither")
        self.model, self.x, self.every = model, x, every
        self.loss_fn, self.targets = loss_fn, targets
        self.eigenvalues, self.dtype, self.tol = eigenvalues, dtype, tol
        check_output_selector(output, "NTKTracker")
        self.output = output
        self.piecewise_linear = any(isinstance(m, (nn.ReLU, nn.LeakyReLU)) for m in model.modules())
        self.history: dict[str, list[Any]] = {
            "epoch": [],
            "functional_dimension": [],
            "top_eigenvalues": [],
        }
        if self.piecewise_linear:
            self.history["linear_regions"] = []
        if loss_fn is not None:
            self.history["loss_alignment"] = []

    def __call__(self, epoch: int) -> bool:
        """Record at this epoch if it is due; return whether it recorded."""
        if epoch % self.every:
            return False
        training = self.model.training
        self.model.eval()
        try:
            fd = functional_dimension(
                self.model, self.x, dtype=self.dtype, tol=self.tol, output=self.output
            )
            gram = kernel_matrix(ntk(self.model, self.x, dtype=self.dtype, output=self.output))
            top = torch.linalg.eigvalsh(gram).flip(0)[: self.eigenvalues]
            self.history["epoch"].append(epoch)
            self.history["functional_dimension"].append(fd.rank)
            self.history["top_eigenvalues"].append(top.tolist())
            if self.piecewise_linear:
                self.history["linear_regions"].append(linear_regions(self.model, self.x).count)
            if self.loss_fn is not None:
                assert self.targets is not None
                self.history["loss_alignment"].append(
                    loss_alignment(
                        self.model, self.loss_fn, (self.x, self.targets), output=self.output
                    )
                )
        finally:
            self.model.train(training)
        return True
