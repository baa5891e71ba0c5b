"""The image data sets of the vision experiments (``vit-merging``, ``quantize-cnn``): scikit-learn's
digits, bundled, for the quick presets; MNIST and CIFAR-10 read from ``--data-dir`` for the paper
presets; as float32 tensors of shape (n, channels, side, side) in [0, 1]. Also the classifiers'
training loop they share (:func:`train_image_classifier`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor, nn
from torch.nn import functional

import paramsym.data
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.merging.char_lm import decay_groups, learning_rate

IMAGE_DATASETS = ("digits", "mnist", "cifar10")
"""Image data sets: digits is bundled; MNIST and CIFAR-10 read their files from ``data_dir``."""


def image_split(
    dataset: str, *, seed: int, data_dir: str | None, where: str, side: int | None = None
) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """``((x, y), (x_test, y_test))`` of ``dataset`` (digits split by ``seed``), images of
    shape (n, channels, side, side), resized bilinearly to ``side`` × ``side`` when given;
    an unknown name raises naming ``where``."""
    if dataset not in IMAGE_DATASETS:
        raise InvalidArgumentError(
            f"{where}: dataset must be one of {', '.join(IMAGE_DATASETS)}, got {dataset!r}"
        )
    if dataset == "digits":
        data = paramsym.data.digits(seed=seed, dtype=torch.float32)
    else:
        data = paramsym.data.load(dataset, data_dir=data_dir)
    channels = 3 if dataset == "cifar10" else 1
    (x, y), x_test = data.train, data.x_test

    def shaped(images: Tensor) -> Tensor:
        own = math.isqrt(images[0].numel() // channels)
        images = images.reshape(-1, channels, own, own).float()
        if side and side != own:
            images = functional.interpolate(
                images, size=(side, side), mode="bilinear", align_corners=False
            )
        return images

    return (shaped(x), y), (shaped(x_test), data.y_test)


class ImageTraining(Protocol):
    """The training fields an image experiment's config has (``VitMergingConfig``,
    ``QuantizeCnnConfig``): AdamW steps, peak learning rate, images per step, decoupled weight
    decay, steps of linear warm-up."""

    @property
    def steps(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def warmup_steps(self) -> int: ...


def train_image_classifier(
    model: nn.Module,
    data: tuple[Tensor, Tensor],
    config: ImageTraining,
    seed: int,
    *,
    decay_matrices_only: bool = False,
    logits: Callable[[nn.Module, Tensor], Tensor] | None = None,
    clip_grad_norm: float | None = None,
) -> None:
    """Train ``model`` in place by AdamW on the cross-entropy of ``steps`` shuffled batches.

    The batches are drawn without replacement from one ``torch.randperm`` of ``seed``'s
    generator, redrawn when fewer than ``batch_size`` images are left (a partial batch is never
    used). The learning rate warms up linearly over ``warmup_steps`` and then decays along a
    cosine to ``lr / 10`` at the last step (:func:`~paramsym.experiments.merging.char_lm.
    learning_rate`). The model is put in training mode for the loop and ends in eval mode.

    Args:
        model: the classifier (trained in place).
        data: ``(x, y)``: images of shape (n, channels, side, side) and integer labels of shape
            (n,).
        config: the run's ``steps``, ``lr``, ``batch_size``, ``weight_decay`` and
            ``warmup_steps`` (:class:`ImageTraining`).
        seed: the batch order's seed.
        decay_matrices_only: the weight decay only on parameters of two or more axes
            (:func:`~paramsym.experiments.merging.char_lm.decay_groups`), else on every one.
        logits: ``logits(model, x) -> (batch, classes)``; ``model(x)`` when not given (e.g. a
            Hugging Face model: ``lambda m, x: m(pixel_values=x).logits``).
        clip_grad_norm: when given, the gradients' total norm is clipped to it before each step.

    Returns:
        Nothing; ``model`` is trained and in eval mode.
    """
    x, y = data
    steps, lr, batch_size = config.steps, config.lr, config.batch_size
    weight_decay, warmup_steps = config.weight_decay, config.warmup_steps
    if decay_matrices_only:
        groups = decay_groups(list(model.parameters()), weight_decay)
        optimizer = torch.optim.AdamW(groups, lr=lr)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(seed)
    order, position = torch.randperm(x.shape[0], generator=generator), 0
    model.train()
    for step in range(steps):
        if position + batch_size > x.shape[0]:
            order, position = torch.randperm(x.shape[0], generator=generator), 0
        index = order[position : position + batch_size]
        position += batch_size
        rate = learning_rate(step, steps, lr, "cosine", warmup_steps, 0.1)
        for group in optimizer.param_groups:
            group["lr"] = rate
        optimizer.zero_grad(set_to_none=True)
        output = model(x[index]) if logits is None else logits(model, x[index])
        functional.cross_entropy(output, y[index]).backward()
        if clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
        optimizer.step()
    model.eval()
