"""``quantize-cnn``: cross-layer equalization (Nagel et al., ICCV 2019) of a MobileNetV2-style
CNN before per-tensor weight quantization (issue 31, section 3, first bullet).

The model (:class:`MobileNetV2Like`) is written the way people write it: an ``nn.Module`` with
its own ``forward``, a stem (3 × 3 conv of stride 2 as in MobileNetV2, BatchNorm, ReLU),
inverted-residual blocks (1 × 1
expansion conv + BN + ReLU, 3 × 3 depthwise conv (``groups`` = channels) + BN + ReLU, 1 × 1
projection conv + BN with no activation: the linear bottleneck; a residual add where input and
output shapes match), a 1 × 1 head conv + BN + ReLU, global average pooling and a linear
classifier. ReLU stands where MobileNetV2 has ReLU6, as Nagel et al. do for equalization:
ReLU6 clips at 6 and so does not commute with a rescaling, ReLU does.

Each training seed trains one model with AdamW on a cosine schedule. Then, in eval mode and
float64 (the analysis only; training is float32):

1. every BatchNorm is folded into the conv before it (``torch.nn.utils.fusion.
   fuse_conv_bn_eval``, :func:`fold_batchnorm`), and the folded model's logits are compared with
   the BN model's (relative change ``max|Δ| / max|logits|`` on the test set);
2. :func:`paramsym.quantization.equalize` equalizes every exact ReLU rescaling the detector finds
   on the folded model's graph (expansion → depthwise, depthwise → projection, head → classifier,
   and the stem's channels where no residual stream ties them), data-free (the example input only
   traces the graph and checks the function);
3. at each bit width, every weight (tensors of two or more axes: the convs and the classifier)
   is fake-quantized by round-to-nearest on a symmetric grid, one range per tensor
   (``Quantizer(bits)``), activations left in floating point and biases not quantized, for the
   folded model as trained ("rtn") and the equalized one ("equalized"); one range per output
   channel (``Quantizer(bits, "channel")``) on the folded model is the reference
   ("per_channel").

Measured per method and bit width: test accuracy and the logit error, the relative RMS
``‖logits_q − logits‖ / ‖logits‖`` (Frobenius norms over the whole test set) against the
float folded model. The quick preset upsamples scikit-learn's 8 × 8 digits to 16 × 16 by
bilinear interpolation (``align_corners=False``); the paper preset trains on CIFAR-10 from
``--data-dir`` at its own 32 × 32.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import torch
from torch import Tensor, nn
from torch.nn import functional
from torch.nn.utils.fusion import fuse_conv_bn_eval

from paramsym.errors import InvalidArgumentError
from paramsym.experiments.images import IMAGE_DATASETS, image_split, train_image_classifier
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import torch_threads
from paramsym.quantization import Quantizer, equalize, fake_quantize

DATASETS = IMAGE_DATASETS
"""Image datasets of ``quantize-cnn``: digits is bundled; MNIST and CIFAR-10 read ``--data-dir``."""

METHODS = ("float", "rtn", "equalized", "per_channel")
"""What is measured at each bit width: the float folded model, per-tensor round-to-nearest on
it, per-tensor round-to-nearest after equalization, per-channel round-to-nearest (reference)."""


@dataclass(frozen=True)
class QuantizeCnnConfig:
    """Settings of ``quantize-cnn``.

    Attributes:
        seed: base seed: training seeds ``seed·1000 + r`` for r < ``runs`` (initialisation and
            batch order); also digits' train/test split.
        dataset, data_dir: one of :data:`DATASETS`; MNIST and CIFAR-10 files in ``data_dir``.
        side: images resized to side × side by bilinear interpolation (0: kept as they are).
        stem, stem_stride: output channels and stride of the stem conv.
        blocks: the inverted-residual blocks, ``"out/stride"`` separated by commas.
        expand: expansion factor of every block.
        head: channels of the last 1 × 1 conv before pooling.
        steps, batch_size, lr, weight_decay, warmup_steps: AdamW on a cosine schedule to lr/10.
        runs: training seeds (models) measured.
        bits: per-tensor weight bit widths, comma separated.
        eval_samples: test images scored (the first ones; 0: all).
        threads: torch intra-op threads (0: unchanged).
    """

    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    side: int = 16
    stem: int = 16
    stem_stride: int = 2
    blocks: str = "16/1,24/2,24/1,32/2"
    expand: int = 4
    head: int = 64
    steps: int = 400
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.0
    warmup_steps: int = 20
    runs: int = 5
    bits: str = "8,6,5,4,3"
    eval_samples: int = 0
    threads: int = 1


class InvertedResidual(nn.Module):
    """MobileNetV2's block with ReLU: expand (1 × 1), depthwise (3 × 3), project (1 × 1, linear
    bottleneck), each conv followed by BatchNorm; ``x + block(x)`` when shapes match."""

    def __init__(self, inp: int, out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = inp * expand
        self.residual = stride == 1 and inp == out
        self.expand = nn.Conv2d(inp, hidden, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        self.bn2 = nn.BatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)

    def forward(self, x: Tensor) -> Tensor:
        h = functional.relu(self.bn1(self.expand(x)))
        h = functional.relu(self.bn2(self.depthwise(h)))
        h = self.bn3(self.project(h))
        return x + h if self.residual else h


class MobileNetV2Like(nn.Module):
    """A small MobileNetV2 (module docstring): stem, inverted residuals, head conv, pooling,
    linear classifier; ReLU in place of ReLU6."""

    def __init__(
        self,
        channels: int,
        classes: int,
        stem: int = 16,
        blocks: Sequence[tuple[int, int]] = ((16, 1), (24, 2), (24, 1), (32, 2)),
        expand: int = 4,
        head: int = 64,
        stem_stride: int = 2,
    ) -> None:
        super().__init__()
        self.stem = nn.Conv2d(channels, stem, 3, stem_stride, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(stem)
        layers, width = [], stem
        for out, stride in blocks:
            layers.append(InvertedResidual(width, out, stride, expand))
            width = out
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Conv2d(width, head, 1, bias=False)
        self.head_bn = nn.BatchNorm2d(head)
        self.classifier = nn.Linear(head, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = functional.relu(self.stem_bn(self.stem(x)))
        x = self.blocks(x)
        x = functional.relu(self.head_bn(self.head(x)))
        return self.classifier(x.mean(dim=(2, 3)))

    def conv_bn_pairs(self) -> list[tuple[str, str]]:
        """Names of every (conv, the BatchNorm right after it)."""
        pairs = [("stem", "stem_bn")]
        for i in range(len(self.blocks)):
            pairs += [(f"blocks.{i}.{c}", f"blocks.{i}.{b}") for c, b in _BLOCK_PAIRS]
        return [*pairs, ("head", "head_bn")]


_BLOCK_PAIRS = (("expand", "bn1"), ("depthwise", "bn2"), ("project", "bn3"))


def fold_batchnorm(model: MobileNetV2Like) -> MobileNetV2Like:
    """A new model in eval mode with every BatchNorm folded into its conv
    (``fuse_conv_bn_eval``) and replaced by ``nn.Identity``; ``model`` is unchanged."""
    folded = copy.deepcopy(model).eval()
    for conv_name, bn_name in model.conv_bn_pairs():
        conv, bn = folded.get_submodule(conv_name), folded.get_submodule(bn_name)
        assert isinstance(conv, nn.Conv2d)
        assert isinstance(bn, nn.BatchNorm2d)
        _replace(folded, conv_name, fuse_conv_bn_eval(conv, bn))
        _replace(folded, bn_name, nn.Identity())
    return folded


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, attribute = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attribute, module)


def _parse_blocks(spec: str) -> list[tuple[int, int]]:
    try:
        blocks = [tuple(int(v) for v in part.split("/")) for part in spec.split(",")]
    except ValueError:
        blocks = []
    if not blocks or any(len(b) != 2 or b[0] < 1 or b[1] not in (1, 2) for b in blocks):
        raise InvalidArgumentError(
            f"quantize-cnn: blocks must be 'out/stride' pairs separated by commas (stride 1 or "
            f"2), e.g. '16/1,24/2', got {spec!r}"
        )
    return blocks  # type: ignore[return-value]


def _parse_bits(spec: str) -> list[int]:
    try:
        bits = [int(b) for b in spec.split(",")]
    except ValueError as error:
        raise InvalidArgumentError(
            f"quantize-cnn: bits must be integers separated by commas, got {spec!r}"
        ) from error
    for b in bits:
        Quantizer(b)  # names a width out of range
    return bits


def _logits(model: nn.Module, x: Tensor) -> Tensor:
    with torch.no_grad():
        return torch.cat([model(x[i : i + 512]) for i in range(0, x.shape[0], 512)])


def _relative_max(new: Tensor, old: Tensor) -> float:
    return float((new - old).abs().max() / old.abs().max())


def measure_seed(
    config: QuantizeCnnConfig,
    train: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    classes: int,
    seed: int,
) -> dict[str, Any]:
    """Train one model from ``seed`` and measure every method at every bit width:
    ``{"fold_change", "equalization_change", "sweeps", "groups", "accuracy": {method: {bits:
    acc}}, "logit_error": {…}}`` (``"float"``'s entries are the same at every width)."""
    bits = _parse_bits(config.bits)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MobileNetV2Like(
            train[0].shape[1],
            classes,
            config.stem,
            _parse_blocks(config.blocks),
            config.expand,
            config.head,
            config.stem_stride,
        )
    train_image_classifier(model, train, config, seed)
    x, y = test[0].double(), test[1]
    model = model.double().eval()
    reference = _logits(model, x)
    folded = fold_batchnorm(model)
    logits = _logits(folded, x)
    fold_change = _relative_max(logits, reference)
    equalization = equalize(folded, x[:8])
    equalized = equalization.model
    equalization_change = _relative_max(_logits(equalized, x), logits)
    norm = float(logits.norm())

    def scores(m: nn.Module) -> tuple[float, float]:
        out = _logits(m, x)
        accuracy = float((out.argmax(dim=1) == y).double().mean())
        return accuracy, float((out - logits).norm()) / norm

    float_accuracy = float((logits.argmax(dim=1) == y).double().mean())
    accuracy: dict[str, dict[int, float]] = {m: {} for m in METHODS}
    error: dict[str, dict[int, float]] = {m: {} for m in METHODS}
    for b in bits:
        accuracy["float"][b], error["float"][b] = float_accuracy, 0.0
        for method, source, quantizer in (
            ("rtn", folded, Quantizer(b)),
            ("equalized", equalized, Quantizer(b)),
            ("per_channel", folded, Quantizer(b, "channel")),
        ):
            accuracy[method][b], error[method][b] = scores(fake_quantize(source, quantizer))
    return {
        "fold_change": fold_change,
        "equalization_change": equalization_change,
        "sweeps": equalization.sweeps,
        "groups": len(equalization.groups),
        "parameters": sum(p.numel() for p in model.parameters()),
        "accuracy": accuracy,
        "logit_error": error,
    }


def recovered(float_acc: float, rtn: float, equalized: float) -> float:
    """(equalized − rtn) / (float − rtn): the share of round-to-nearest's accuracy drop that
    equalization brings back (NaN when there is no drop)."""
    drop = float_acc - rtn
    return (equalized - rtn) / drop if drop > 0 else math.nan


def run_quantize_cnn(config: QuantizeCnnConfig, progress: Progress) -> Result:
    if config.runs < 1 or config.steps < 1:
        raise InvalidArgumentError("quantize-cnn: runs ≥ 1 and steps ≥ 1 are needed")
    bits = _parse_bits(config.bits)
    _parse_blocks(config.blocks)
    with torch_threads(config.threads):
        train, test = image_split(
            config.dataset, seed=config.seed, data_dir=config.data_dir, where="quantize-cnn",
            side=config.side,
        )  # fmt: skip
        if config.eval_samples:
            test = (test[0][: config.eval_samples], test[1][: config.eval_samples])
        classes = int(max(train[1].max(), test[1].max())) + 1
        seeds = [config.seed * 1000 + r for r in range(config.runs)]
        measured = [
            measure_seed(config, train, test, classes, s)
            for s in progress.track(seeds, total=len(seeds), description="quantize-cnn seeds")
        ]
    metrics: dict[str, Any] = {
        "seeds": seeds,
        "parameters": measured[0]["parameters"],
        "equalized_groups": measured[0]["groups"],
        "equalization_sweeps": [m["sweeps"] for m in measured],
        "fold_change": max(m["fold_change"] for m in measured),
        "equalization_change": max(m["equalization_change"] for m in measured),
        "bits": bits,
    }
    per_seed: dict[str, list[Any]] = {
        k: [] for k in ("seed", "bits", "method", "accuracy", "logit_error")
    }
    table: dict[str, list[Any]] = {"bits": bits}
    for method in METHODS:
        for b in bits:
            accs = [m["accuracy"][method][b] for m in measured]
            errs = [m["logit_error"][method][b] for m in measured]
            metrics[f"{method}_accuracy_{b}"] = statistics.fmean(accs)
            metrics[f"{method}_accuracy_{b}_seeds"] = accs
            metrics[f"{method}_logit_error_{b}"] = statistics.fmean(errs)
            for s, a, e in zip(seeds, accs, errs, strict=True):
                for key, value in zip(per_seed, (s, b, method, a, e), strict=True):
                    per_seed[key].append(value)
        for stat, f in (("mean", statistics.fmean), ("min", min), ("max", max)):
            table[f"{method}_{stat}"] = [f(metrics[f"{method}_accuracy_{b}_seeds"]) for b in bits]
        table[f"{method}_logit_error"] = [metrics[f"{method}_logit_error_{b}"] for b in bits]
    for b in bits:
        metrics[f"recovered_{b}"] = recovered(
            metrics[f"float_accuracy_{b}"],
            metrics[f"rtn_accuracy_{b}"],
            metrics[f"equalized_accuracy_{b}"],
        )
        metrics[f"recovered_{b}_seeds"] = [
            recovered(*(m["accuracy"][k][b] for k in ("float", "rtn", "equalized")))
            for m in measured
        ]
    notes = [
        f"{config.dataset}: {train[0].shape[0]} training and {test[0].shape[0]} test images of "
        f"{tuple(train[0].shape[1:])}"
        + (" (8×8 upsampled bilinearly)" if config.dataset == "digits" and config.side else ""),
        f"{metrics['parameters']} parameters; {metrics['equalized_groups']} rescaling groups "
        "equalized; analysis in float64, weights per tensor (or per channel) round-to-nearest, "
        "activations and biases in floating point",
        "recovered_b = (equalized − rtn) / (float − rtn) of the seed-mean accuracies "
        "(recovered_b_seeds: per seed, NaN where round-to-nearest lost nothing)",
    ]
    return Result(metrics, {"accuracy": table, "per_seed": per_seed}, notes)


def _format(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _function(result: Result) -> tuple[str, bool]:
    fold, eq = result.metrics["fold_change"], result.metrics["equalization_change"]
    return (
        f"BN fold {fold:.1e}, equalization {eq:.1e} (max relative logit change, float64)",
        max(fold, eq) <= 1e-10,
    )


def _recovers(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if 4 not in m["bits"]:
        return "not evaluated: 4 bits not among the widths", None
    share = m["recovered_4"]
    text = (
        f"4 bits: float {m['float_accuracy_4']:.3f}, RTN {m['rtn_accuracy_4']:.3f} "
        f"(seeds {_format(m['rtn_accuracy_4_seeds'])}), equalized "
        f"{m['equalized_accuracy_4']:.3f} (seeds {_format(m['equalized_accuracy_4_seeds'])}): "
        f"{share:.0%} recovered (per seed {_format(m['recovered_4_seeds'])})"
    )
    if 3 in m["bits"]:
        text += f"; 3 bits: {m['recovered_3']:.0%} recovered"
    return text, share >= 0.7


def _no_drop(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if 8 not in m["bits"]:
        return "not evaluated: 8 bits not among the widths", None
    drops = [
        f - r for f, r in zip(m["float_accuracy_8_seeds"], m["rtn_accuracy_8_seeds"], strict=True)
    ]
    text = f"8 bits: largest |float − RTN| over seeds {max(abs(d) for d in drops):.3f}"
    if 6 in m["bits"]:
        text += f"; 6 bits: mean drop {m['float_accuracy_6'] - m['rtn_accuracy_6']:.3f}"
    return text, max(abs(d) for d in drops) <= 0.01


FUNCTION = Claim(
    "folding BatchNorm and equalizing keep the float model's function",
    "Nagel et al. 2019 §4.1 (the rescaling is exact for ReLU); issue 31",
    "relative logit change ≤ 1e-10 (float64), every seed",
    _function,
)
RECOVERS = Claim(
    "equalization recovers most of the 4-bit per-tensor round-to-nearest accuracy drop, data-free",
    "Nagel et al. 2019 Table 1 (MobileNetV2, per-tensor INT8: near chance → within ~2 points); "
    "issue 31 (measured before filing: 81% at 4 bits on digits)",
    "(acc_eq − acc_rtn) / (acc_float − acc_rtn) ≥ 0.7 at 4 bits, of the seed means",
    _recovers,
)
NO_DROP_8 = Claim(
    "8-bit per-tensor weights lose nothing on this small model",
    "issue 31 (no drop at 8 and 6 bits; the ImageNet collapse needs real ImageNet weights)",
    "|acc_float − acc_rtn| ≤ 0.01 at 8 bits, every seed",
    _no_drop,
)

_COLORS = {"float": "black", "rtn": "tab:red", "equalized": "tab:blue", "per_channel": "tab:green"}
_LABELS = {
    "float": "float",
    "rtn": "per-tensor RTN",
    "equalized": "equalized + per-tensor RTN",
    "per_channel": "per-channel RTN",
}


def plot_accuracy(result: Result) -> dict[str, Any]:
    table, per_seed = result.series["accuracy"], result.series["per_seed"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for method in METHODS:
        color = _COLORS[method]
        ax.plot(
            table["bits"], table[f"{method}_mean"], marker="o", color=color, label=_LABELS[method]
        )
        ax.fill_between(
            table["bits"], table[f"{method}_min"], table[f"{method}_max"], color=color, alpha=0.12
        )
        points = [i for i, m in enumerate(per_seed["method"]) if m == method]
        ax.scatter(
            [per_seed["bits"][i] for i in points],
            [per_seed["accuracy"][i] for i in points],
            s=8,
            color=color,
            alpha=0.5,
        )
    ax.set_xlabel("weight bits (per tensor unless per-channel)")
    ax.set_ylabel("test accuracy")
    ax.invert_xaxis()
    ax.legend(fontsize=7)
    fig.tight_layout()
    return {"accuracy_vs_bits.png": fig}


experiment(
    "quantize-cnn",
    seed_ref="beyond the seeds: Nagel et al. 2019 (data-free quantization, cross-layer "
    "equalization), issue 31",
    description=(
        "a MobileNetV2-style CNN (ReLU, depthwise convs, 22k parameters) trained on digits "
        "upsampled to 16×16, BatchNorm folded into the convs; weights quantized per tensor by "
        "round-to-nearest at 8, 6, 5, 4, 3 bits, as trained and after ps.quantization.equalize "
        "(data-free), per-channel quantization as the reference: test accuracy and relative "
        "logit error over 5 training seeds"
    ),
    data="scikit-learn's digits (quick); CIFAR-10 in --data-dir (paper)",
    quick=QuantizeCnnConfig(),
    paper=QuantizeCnnConfig(
        dataset="cifar10",
        side=0,
        stem=32,
        stem_stride=1,
        blocks="16/1,24/2,24/1,32/2,32/1,32/1,64/2,64/1,64/1,96/1,96/1",
        expand=6,
        head=256,
        steps=20000,
        batch_size=128,
        lr=2e-3,
        weight_decay=1e-4,
        warmup_steps=500,
        eval_samples=0,
        threads=0,
    ),
    claims=[FUNCTION, RECOVERS, NO_DROP_8],
    plot=plot_accuracy,
)(run_quantize_cnn)
