"""``vit-merging``: the test-loss barrier between two vision transformers trained from different
seeds, naive and after each alignment (issue 30; Theus et al. 2025, Table 2, ViT columns).

The models are Hugging Face ``ViTForImageClassification`` built from a small ``ViTConfig``
(nothing downloaded; every other setting the config's default: pre-norm LayerNorm blocks, GELU
MLP of 4 × width, a class token and a learned position table, the default attention kernel),
trained with AdamW on a cosine schedule and called the Hugging Face way
(``model(pixel_values=x).logits``). The quick preset trains on scikit-learn's 8 × 8 digits
(patches of 2 × 2: 16 tokens and the class token); the paper preset on CIFAR-10 from
``--data-dir`` at Theus et al.'s size (6 layers, 8 heads, width 256, patches of 4 × 4). The
methods, claims and figure are those of :mod:`~paramsym.experiments.merging.pairs`; the stream's
writers here are the patch convolution, the class token and the position table, which the
detector reads off the graph like any other writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

import paramsym as ps
import paramsym.data
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.images import IMAGE_DATASETS, image_split, train_image_classifier
from paramsym.experiments.merging.pairs import (
    FUNCTION,
    LEARNED,
    REMOVED,
    PairTask,
    measure,
    plot_chords,
)
from paramsym.experiments.registry import Progress, Result, experiment
from paramsym.experiments.threads import torch_threads

DATASETS = IMAGE_DATASETS
"""Image datasets of ``vit-merging``: digits is bundled; MNIST and CIFAR-10 read ``--data-dir``."""


@dataclass(frozen=True)
class VitMergingConfig:
    """Settings of ``vit-merging``.

    Attributes:
        seed: base seed (pair p: seeds ``seed·1000 + 2p`` and ``+ 1``; same-init pair:
            initialisation ``seed·1000 + 999``, training seeds 1 and 2); also digits' split.
        dataset, data_dir: one of :data:`DATASETS`; MNIST and CIFAR-10 files in ``data_dir``.
        width, layers, heads, patch: the ViT (MLP 4 × width).
        steps, batch_size, lr, weight_decay, warmup_steps: AdamW on a cosine schedule to lr/10.
        pairs, alphas: seed pairs; chord points.
        eval_samples: test images scored at each α (the first ones; 0: all).
        learned_steps, learned_lr, learned_batches: ``ps.learn_alignment`` on that many
            training batches of ``batch_size`` images.
        threads: torch intra-op threads (0: unchanged).
    """

    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    width: int = 64
    layers: int = 2
    heads: int = 4
    patch: int = 2
    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_steps: int = 100
    pairs: int = 3
    alphas: int = 11
    eval_samples: int = 0
    learned_steps: int = 60
    learned_lr: float = 0.01
    learned_batches: int = 4
    threads: int = 1


def vit(config: VitMergingConfig, image: tuple[int, int], classes: int, seed: int) -> nn.Module:
    """``ViTForImageClassification(ViTConfig(…))`` for images of ``image`` = (channels, side),
    initialised from ``seed`` inside a forked random state; float32, training mode."""
    try:
        from transformers import ViTConfig, ViTForImageClassification
    except ImportError as error:
        raise InvalidArgumentError(
            "vit-merging needs Hugging Face transformers: pip install transformers"
        ) from error
    channels, side = image
    if side % config.patch or config.width % config.heads:
        raise InvalidArgumentError(
            f"vit-merging: patch {config.patch} must divide the image side {side} and heads "
            f"{config.heads} the width {config.width}"
        )
    settings = ViTConfig(
        hidden_size=config.width,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        intermediate_size=4 * config.width,
        image_size=side,
        patch_size=config.patch,
        num_channels=channels,
        num_labels=classes,  # type: ignore[call-arg]  # a PretrainedConfig kwarg the stub omits
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ViTForImageClassification(settings)


def classification_loss(output: Any, targets: Tensor) -> Tensor:
    """Mean cross-entropy of ``output.logits``."""
    return functional.cross_entropy(output.logits, targets)


def _batches(x: Tensor, y: Tensor, size: int) -> list[tuple[dict[str, Tensor], Tensor]]:
    return [({"pixel_values": x[i : i + size]}, y[i : i + size]) for i in range(0, len(x), size)]


def run_vit_merging(config: VitMergingConfig, progress: Progress) -> Result:
    if config.pairs < 1 or config.alphas < 3 or config.steps < 1:
        raise InvalidArgumentError("vit-merging: pairs ≥ 1, alphas ≥ 3 and steps ≥ 1 are needed")
    with torch_threads(config.threads):
        train, (x_test, y_test) = image_split(
            config.dataset, seed=config.seed, data_dir=config.data_dir, where="vit-merging"
        )
        if config.eval_samples:
            x_test, y_test = x_test[: config.eval_samples], y_test[: config.eval_samples]
        image = (train[0].shape[1], train[0].shape[-1])
        classes = int(max(train[1].max(), y_test.max())) + 1
        g = torch.Generator().manual_seed(config.seed)
        learn = []
        for _ in range(config.learned_batches):
            index = torch.randint(0, train[0].shape[0], (config.batch_size,), generator=g)
            learn.append(({"pixel_values": train[0][index]}, train[1][index]))
        task = PairTask(
            build=lambda seed: vit(config, image, classes, seed),
            train=lambda model, seed: train_image_classifier(
                model,
                train,
                config,
                seed,
                decay_matrices_only=True,
                logits=lambda m, x: m(pixel_values=x).logits,
                clip_grad_norm=1.0,
            ),
            loss=classification_loss,
            test=_batches(x_test, y_test, 256),
            train_batches=learn,
            alphas=config.alphas,
            learned=ps.LearnedAlignConfig(steps=config.learned_steps, lr=config.learned_lr),
        )
        notes = [
            f"{config.dataset}: {train[0].shape[0]} training and {x_test.shape[0]} test images "
            f"of {tuple(train[0].shape[1:])}"
        ]
        return measure(task, config.pairs, config.seed, progress, notes)


experiment(
    "vit-merging",
    seed_ref="dissertation ch. 3 (mode connectivity), beyond it: Theus et al. 2025",
    description=(
        "test-loss barrier between two Hugging Face ViTs (width 64, 2 layers, 4 heads) trained "
        "from different seeds on 8×8 digits, naive and after aligning B by ps.align: "
        "permutations alone (data-free; and from activations), every group (folded norms, "
        "orthogonal stream written by the patch convolution, class token and position table, "
        "per-head maps), and learned; a same-init pair's barrier reported beside them (on digits "
        "it is near 0: two batch orders from one initialisation end in one basin)"
    ),
    data="scikit-learn's digits (quick); CIFAR-10 in --data-dir (paper)",
    quick=VitMergingConfig(),
    paper=VitMergingConfig(
        dataset="cifar10",
        width=256,
        layers=6,
        heads=8,
        patch=4,
        steps=20000,
        batch_size=128,
        pairs=3,
        threads=0,
    ),
    claims=[REMOVED, LEARNED, FUNCTION],
    plot=plot_chords,
)(run_vit_merging)
