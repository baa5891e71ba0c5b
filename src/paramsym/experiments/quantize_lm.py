"""``quantize-lm``: character language models quantized to W8A8, W4A8 and W4A4 as trained, after
SmoothQuant's migration, after QuaRot's randomized Hadamard rotation, after a SpinQuant-style
learned rotation and after a general teleport on the quantized loss (issue 31; notes 005 §7).

The models are the GPT-2-style (learned positions, LayerNorm, GELU, untied head) and Llama-style
(RoPE, grouped-query attention, RMSNorm, SwiGLU) character models of ``transformer-merging``
(:mod:`~paramsym.experiments.merging.char_lm`), each trained from ``seeds`` seeds on the
standard library's source (a text file from ``--data-dir`` in the paper preset). Every linear
map computes with fake-quantized weights (symmetric, per output channel, round-to-nearest) and
fake-quantized inputs (symmetric, per token) (:func:`paramsym.quantization.quantized_call`);
embeddings, norms, biases and the LM head stay in floating point, as QuaRot and SpinQuant keep
them. Methods, each a move along exact symmetries of the float model (its function checked):

* ``rtn``: the model as trained, round-to-nearest;
* ``smoothquant``: :func:`paramsym.quantization.smooth` at α = 0.5 on a calibration batch;
* ``hadamard`` / ``random``: :func:`paramsym.quantization.rotate` (stream and value–output
  rotations of the folded model) with a randomized Hadamard / a Haar-random matrix;
* ``learned``: :func:`paramsym.quantization.learn_rotation` from the Hadamard start, on the
  W4A4 loss of ``learned_batches`` training batches (one learned model serves every scheme);
* ``teleport``: :func:`paramsym.teleport` from the Hadamard-rotated model with
  :class:`~paramsym.quantization.QuantizedLoss` (W4A4) on every exact symmetry it finds (the
  stream rotation, per-head maps, gated-MLP scalings).

Outliers are trained in, not planted (an outlier made by acting with the very symmetry a method
moves along is undone by it exactly and tests nothing). With ``outlier_site="stream"`` (the
default) channel ``outlier_channel`` of the token embedding is set to ``outlier_gain`` before
training and held against the gradient: every token writes that constant into one feature of
the residual stream, the "massive activation" of large language models (Sun et al. 2024) that
QuaRot and SpinQuant rotate away; the network learns around it (decoupled weight decay still
shrinks it a little; the value left is reported). With ``"norm"`` the channel of every norm's
gain is held at ``outlier_gain`` instead (norm gains take no weight decay), SmoothQuant's
setting of outliers at the inputs of the query/key/value and up projections. ``outlier_gain =
0`` trains the models as they come.

The score is the perplexity exp(mean next-character loss) on ``eval_blocks`` test blocks.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import matplotlib.pyplot as plt
import torch
from matplotlib import ticker
from torch import Tensor, nn

import paramsym as ps
from paramsym.core.params import output_change
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.merging.char_lm import char_model, train_char_lm
from paramsym.experiments.merging.transformer_merging import (
    corpus_of,
    evenly_spaced_batches,
    next_char_loss,
)
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import torch_threads
from paramsym.quantization import (
    LearnedRotationConfig,
    QuantizedLoss,
    Quantizer,
    learn_rotation,
    quantized_call,
    rotate,
    smooth,
)

FAMILIES = ("gpt2", "llama")
"""The character models of ``quantize-lm``."""
METHODS = ("float", "rtn", "smoothquant", "hadamard", "random", "learned", "teleport")
"""The rows of ``quantize-lm``'s table (``float``: no quantization)."""
SCHEMES = ("W8A8", "W4A8", "W4A4")
"""Weight and activation widths, ``W{bits}A{bits}``."""
OUTLIER_SITES = ("stream", "norm")
"""Where ``quantize-lm`` trains its outlier in: an embedding channel or every norm gain's."""


@dataclass(frozen=True)
class QuantizeLMConfig:
    """Settings of ``quantize-lm``.

    Attributes:
        seed: base seed (model s of a family: seed ``seed·1000 + s``; calibration batches).
        families: model families (:data:`FAMILIES`).
        seeds: trained models per family.
        text_file, data_dir: a text file read from ``data_dir``; ``None``: the standard
            library's source.
        width, layers, heads: model sizes (the Llama: 2 key/value heads).
        steps, batch_size, block_size, lr: training (AdamW, cosine schedule).
        schemes: :data:`SCHEMES` to measure.
        eval_blocks: test blocks scored.
        alpha: SmoothQuant's migration strength.
        learned_steps, learned_lr, learned_batches: :func:`learn_rotation` on that many
            training batches of ``batch_size`` blocks (the first one is the calibration batch).
        teleport_steps, teleport_lr: the general teleport (0 steps: left out).
        outlier_site, outlier_gain, outlier_channel: the trained-in outlier (module
            docstring; :data:`OUTLIER_SITES`; gain 0: none).
        threads: torch intra-op threads (0: unchanged).
    """

    seed: int = 0
    families: tuple[str, ...] = FAMILIES
    seeds: int = 2
    text_file: str | None = None
    data_dir: str | None = None
    width: int = 64
    layers: int = 2
    heads: int = 4
    steps: int = 600
    batch_size: int = 32
    block_size: int = 64
    lr: float = 3e-3
    schemes: tuple[str, ...] = SCHEMES
    eval_blocks: int = 64
    alpha: float = 0.5
    learned_steps: int = 100
    learned_lr: float = 0.1
    learned_batches: int = 8
    teleport_steps: int = 10
    teleport_lr: float = 0.01
    outlier_site: str = "stream"
    outlier_gain: float = 8.0
    outlier_channel: int = 7
    threads: int = 1


def scheme(name: str) -> tuple[Quantizer, Quantizer]:
    """(weight, activation) quantizers of ``"W{b}A{b}"``: per output channel and per token,
    symmetric, round-to-nearest."""
    w, _, a = name.removeprefix("W").partition("A")
    if not (name.startswith("W") and w.isdigit() and a.isdigit()):
        raise InvalidArgumentError(
            f"quantize-lm: a scheme is written W<bits>A<bits> (e.g. W4A8), got {name!r}"
        )
    return Quantizer(int(w), "channel"), Quantizer(int(a), "channel")


def _check(config: QuantizeLMConfig) -> None:
    unknown = [f for f in config.families if f not in FAMILIES]
    if unknown or not config.families:
        raise InvalidArgumentError(
            f"quantize-lm: families must be among {FAMILIES}, got {config.families!r}"
        )
    if config.outlier_site not in OUTLIER_SITES:
        raise InvalidArgumentError(
            f"quantize-lm: outlier_site must be one of {OUTLIER_SITES}, got {config.outlier_site!r}"
        )
    if config.seeds < 1 or config.steps < 1 or not config.schemes or config.learned_batches < 1:
        raise InvalidArgumentError(
            "quantize-lm: seeds ≥ 1, steps ≥ 1, learned_batches ≥ 1 and one scheme are needed"
        )
    for name in config.schemes:
        scheme(name)


def _model(config: QuantizeLMConfig, family: str, vocab: int, seed: int) -> nn.Module:
    return char_model(
        family, vocab, config.block_size, width=config.width, layers=config.layers,
        heads=config.heads, seed=seed, where="quantize-lm",
    )  # fmt: skip


def _held_tensors(model: nn.Module, site: str) -> list[nn.Parameter]:
    """The tensors whose channel the outlier is held in: the token embedding (``"stream"``)
    or every norm layer's gain (``"norm"``: LayerNorm, Hugging Face's RMSNorms)."""
    if site == "stream":
        # a Hugging Face model (char_gpt2, char_llama): its token embedding module
        get_embeddings = cast(Callable[[], nn.Module], model.get_input_embeddings)
        return [cast(nn.Parameter, get_embeddings().weight)]
    return [
        cast(nn.Parameter, m.weight)
        for m in model.modules()
        if isinstance(m, nn.LayerNorm) or type(m).__name__.endswith("RMSNorm")
    ]


def hold_outlier(model: nn.Module, site: str, gain: float, channel: int) -> list[Any]:
    """Set feature ``channel`` of the tensors of ``site`` to ``gain`` and zero its gradient
    from now on; returns the hook handles (remove them after training)."""
    held = _held_tensors(model, site)
    width = held[0].shape[-1] if held else 0
    if not 0 <= channel < width:
        raise InvalidArgumentError(
            f"quantize-lm: outlier_channel must index the features (width {width}), got {channel}"
        )
    handles = []
    with torch.no_grad():
        for weight in held:
            weight[..., channel] = gain
            mask = torch.ones_like(weight)
            mask[..., channel] = 0.0
            handles.append(weight.register_hook(lambda g, mask=mask: g * mask))
    return handles


def perplexity(
    model: nn.Module, batches: list[tuple[Any, Tensor]], name: str | None = None
) -> float:
    """exp(mean loss) of ``model`` on ``batches``, its readers quantized by the scheme
    ``name`` (``None``: in floating point); the LM head stays in floating point."""
    weights, activations = scheme(name) if name else (None, None)
    params = {k: v.detach() for k, v in model.named_parameters()}
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            output = quantized_call(
                model, params, x, weights=weights, activations=activations, skip=("lm_head",)
            )
            total += float(next_char_loss(output, y)) * y.numel()
            count += y.numel()
    return math.exp(total / count)


def _moved(
    model: nn.Module, config: QuantizeLMConfig, train: list, progress: Progress
) -> dict[str, tuple[nn.Module, float]]:
    """Each method's model (a move of ``model`` along exact symmetries) and its relative
    output change against ``model`` on the calibration batch."""
    calibration = train[0][0]
    example = {"input_ids": calibration["input_ids"][:2]}  # detection needs no more
    w4, a4 = scheme("W4A4")
    out: dict[str, tuple[nn.Module, float]] = {"rtn": (model, 0.0)}
    smoothed = smooth(model, calibration, alpha=config.alpha)
    out["smoothquant"] = (smoothed.model, smoothed.output_change)
    for kind in ("hadamard", "random"):
        rotated = rotate(model, example, rotation=kind, seed=config.seed)
        out[kind] = (rotated.model, rotated.output_change)
    learned, record = learn_rotation(
        model, example, next_char_loss, train, w4, a4,
        LearnedRotationConfig(steps=config.learned_steps, lr=config.learned_lr,
                              eval_every=max(config.learned_steps // 4, 1), seed=config.seed,
                              skip=("lm_head",)),
    )  # fmt: skip
    progress.log(
        f"learned rotation: W4A4 training loss {record.loss_before:.3f} → {record.loss_after:.3f}"
        f" (orthogonal to {learned.orthogonality:.1e})"
    )
    out["learned"] = (learned.model, learned.output_change)
    if config.teleport_steps:
        teleported = copy.deepcopy(out["hadamard"][0])
        ps.teleport(
            teleported, next_char_loss, train[0],
            objective=QuantizedLoss(w4, a4, skip=("lm_head",)),
            steps=config.teleport_steps, lr=config.teleport_lr,
        )  # fmt: skip
        out["teleport"] = (teleported, output_change(model, teleported, example))
    return out


def run_quantize_lm(config: QuantizeLMConfig, progress: Progress) -> Result:
    _check(config)
    with torch_threads(config.threads):
        corpus = corpus_of(config.text_file, config.data_dir)
        g = torch.Generator().manual_seed(config.seed)
        train = []
        for _ in range(config.learned_batches):
            x, y = corpus.blocks("train", config.batch_size, config.block_size, generator=g)
            train.append(({"input_ids": x}, y))
        test = evenly_spaced_batches(corpus.test, config.block_size, config.eval_blocks, 32)
        rows: list[dict[str, Any]] = []
        changes: list[float] = []
        kept: list[float] = []
        runs = [(f, s) for f in config.families for s in range(config.seeds)]
        for family, s in progress.track(runs, description="models"):
            seed = config.seed * 1000 + s
            model = _model(config, family, len(corpus.vocabulary), seed)
            held = []
            if config.outlier_gain:
                held = hold_outlier(
                    model, config.outlier_site, config.outlier_gain, config.outlier_channel
                )
            train_char_lm(
                model, corpus, config.steps, config.batch_size, config.block_size, config.lr,
                seed, eval_every=config.steps, final_losses=False,
            )  # fmt: skip
            for handle in held:
                handle.remove()
            if held:
                value = _held_tensors(model, config.outlier_site)[0][..., config.outlier_channel]
                kept.append(float(value.detach().mean()))
            model.eval()
            float_ppl = perplexity(model, test)
            progress.log(f"{family} seed {seed}: float perplexity {float_ppl:.3f}")
            for method, (moved, change) in _moved(model, config, train, progress).items():
                changes.append(change)
                for name in config.schemes:
                    ppl = perplexity(moved, test, name)
                    row = {"family": family, "seed": seed, "scheme": name, "method": method}
                    rows.append({**row, "perplexity": ppl, "float": float_ppl})
                    progress.log(f"{family} {seed} {name} {method}: {ppl:.3f}")
    metrics: dict[str, Any] = {"max_output_change": max(changes), "outlier_after_training": kept}
    for family in config.families:
        for name in config.schemes:
            for method in METHODS:
                values = [
                    r["float"] if method == "float" else r["perplexity"]
                    for r in rows
                    if r["family"] == family
                    and r["scheme"] == name
                    and r["method"] == ("rtn" if method == "float" else method)
                ]
                if values:
                    key = f"{family}_{name}_{method}"
                    metrics[key] = statistics.fmean(values)
                    metrics[f"{key}_seeds"] = values
    series = {"table": {k: [r[k] for r in rows] for k in rows[0]}}
    notes = [
        f"corpus: {corpus.name}, vocabulary {len(corpus.vocabulary)}",
        "weights per output channel, activations per token, symmetric round-to-nearest; "
        "embeddings, norms, biases and the LM head in floating point",
    ]
    return Result(metrics, series, notes)


def plot_quantize_lm(result: Result) -> dict[str, Any]:
    table = result.series["table"]
    families = sorted(set(table["family"]))
    schemes = list(dict.fromkeys(table["scheme"]))
    methods = [m for m in METHODS if m != "float" and m in set(table["method"])]
    fig, axes = plt.subplots(1, len(families), figsize=(5 * len(families), 3.5), squeeze=False)
    for ax, family in zip(axes[0], families, strict=True):
        for i, method in enumerate(methods):
            values = [result.metrics.get(f"{family}_{name}_{method}", math.nan) for name in schemes]
            offsets = [j + (i - len(methods) / 2) * 0.8 / len(methods) for j in range(len(schemes))]
            ax.bar(offsets, values, width=0.8 / len(methods), label=method)
        floats = [result.metrics.get(f"{family}_{name}_float", math.nan) for name in schemes]
        ax.axhline(floats[0], color="black", lw=0.8, ls="--", label="float")
        ax.set_xticks(range(len(schemes)), schemes)
        ax.set_yscale("log")
        # plain numbers on the log axis (matplotlib's default labels minor ticks as 1.2×10¹)
        ax.yaxis.set_major_formatter(ticker.LogFormatter())
        ax.yaxis.set_minor_formatter(ticker.LogFormatter(labelOnlyBase=False))
        ax.set_ylabel("test perplexity")
        ax.set_title(family)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return {"perplexity.png": fig}


def _at_w4a4(result: Result, better: str, worse: str) -> tuple[str, bool | None]:
    """Whether ``better``'s W4A4 perplexity, averaged over the seeds, is below ``worse``'s in
    every family; the per-seed values are shown as the spread."""
    families = [f for f in FAMILIES if f"{f}_W4A4_{better}" in result.metrics]
    if not families:
        return "not evaluated: W4A4 not measured", None
    parts, holds = [], True
    for family in families:
        b, w = (result.metrics[f"{family}_W4A4_{m}"] for m in (better, worse))
        spread = (
            "/".join(f"{v:.2f}" for v in result.metrics[f"{family}_W4A4_{m}_seeds"])
            for m in (worse, better)
        )
        parts.append(f"{family}: {w:.2f} → {b:.2f} (seeds {' → '.join(spread)})")
        holds = holds and b < w
    return "; ".join(parts), holds


def _function(result: Result) -> tuple[str, bool]:
    change = result.metrics["max_output_change"]
    return f"max relative output change {change:.1e}", change <= 1e-4


CLAIMS = [
    Claim(
        "a rotation of the stream beats smoothing at 4-bit activations",
        "QuaRot (Ashkboos et al. 2024), Table 1; SpinQuant (Liu et al. 2024), Table 1",
        "W4A4 perplexity, mean over seeds: Hadamard rotation < SmoothQuant in each family",
        lambda r: _at_w4a4(r, "hadamard", "smoothquant"),
    ),
    Claim(
        "a learned rotation beats a random one",
        "SpinQuant (Liu et al. 2024), Fig. 1 (random rotations spread widely; learned is best)",
        "W4A4 perplexity, mean over seeds: learned < Haar-random rotation in each family",
        lambda r: _at_w4a4(r, "learned", "random"),
    ),
    Claim(
        "learning improves on its randomized Hadamard start",
        "SpinQuant (Liu et al. 2024), Table 1 (Cayley-learned vs Hadamard rotations)",
        "W4A4 perplexity, mean over seeds: learned < randomized Hadamard in each family",
        lambda r: _at_w4a4(r, "learned", "hadamard"),
    ),
    Claim(
        "every method keeps the float model's function",
        "notes 005 §7 (smoothing, the fold and rotations are exact symmetries)",
        "relative output change ≤ 1e-4 (float32)",
        _function,
    ),
]


_PAPER: dict[str, Any] = {
    "text_file": "input.txt", "threads": 0, "seeds": 3, "width": 256, "layers": 6, "heads": 8,
    "steps": 5000, "block_size": 128, "lr": 1e-3, "learned_steps": 800, "eval_blocks": 512,
}  # fmt: skip

experiment(
    "quantize-lm",
    seed_ref="notes 005 §7, beyond the seeds: QuaRot, SpinQuant, SmoothQuant",
    description=(
        "character GPT-2- and Llama-style models (width 64, 2 layers) trained on the standard "
        "library's source, quantized to W8A8 / W4A8 / W4A4 (per-channel weights, per-token "
        "activations) as trained, after SmoothQuant's migration, after a randomized Hadamard "
        "or random rotation of the folded model, after a learned (Cayley) rotation and after a "
        "teleport on the quantized loss: test perplexity"
    ),
    data="the Python standard library's source (quick); a text file in --data-dir (paper)",
    quick=QuantizeLMConfig(),
    paper=QuantizeLMConfig(
        text_file="input.txt",
        threads=0,
        seeds=3,
        width=256,
        layers=6,
        heads=8,
        steps=5000,
        block_size=128,
        lr=1e-3,
        learned_steps=800,
        eval_blocks=512,
    ),
    claims=CLAIMS,
    plot=plot_quantize_lm,
)(run_quantize_lm)
