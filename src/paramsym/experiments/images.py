"""The image data sets of the vision experiments (``vit-merging``, ``quantize-cnn``): scikit-learn's
digits, bundled, for the quick presets; MNIST and CIFAR-10 read from ``--data-dir`` for the paper
presets; as float32 tensors of shape (n, channels, side, side) in [0, 1]."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import functional

import paramsym.data
from paramsym.errors import InvalidArgumentError

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
