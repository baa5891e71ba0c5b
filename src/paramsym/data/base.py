"""The :class:`Dataset` container shared by generators and loaders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

Task = Literal["regression", "classification"]


@dataclass
class Dataset:
    """A supervised data set split into train and test parts.

    Attributes:
        name: e.g. ``"teacher_student"``, ``"mnist"``, ``"sinusoid_1d/f2"``.
        x_train, y_train: inputs ``(n_train, ...)`` and targets (``(n_train, out)`` floats for
            regression, ``(n_train,)`` int64 class indices for classification).
        x_test, y_test: the same for the test part (may be empty, with zero rows).
        task: ``"regression"`` or ``"classification"``.
        num_classes: number of classes for classification, else ``None``.
        metadata: anything else worth keeping (generator arguments, teacher weights, source
            files); plain data only.
    """

    name: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    task: Task
    num_classes: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def train(self) -> tuple[Tensor, Tensor]:
        """``(x_train, y_train)``, a batch for ``loss_fn(model(x), y)``."""
        return self.x_train, self.y_train

    @property
    def test(self) -> tuple[Tensor, Tensor]:
        """``(x_test, y_test)``."""
        return self.x_test, self.y_test

    def to(
        self, dtype: torch.dtype | None = None, device: torch.device | str | None = None
    ) -> Dataset:
        """A copy with floating inputs (and regression targets) cast to ``dtype``/``device``."""

        def move(t: Tensor, cast: bool) -> Tensor:
            return t.to(device=device, dtype=dtype if cast and t.is_floating_point() else None)

        regression = self.task == "regression"
        return Dataset(
            self.name,
            move(self.x_train, True),
            move(self.y_train, regression),
            move(self.x_test, True),
            move(self.y_test, regression),
            self.task,
            self.num_classes,
            dict(self.metadata),
        )
