"""Weight matching between two independently trained CNNs with BatchNorm (dissertation §3.3.1;
Ainsworth et al., "Git Re-Basin", the dissertation's ref. [3]), on a small ResNet.

``cnn-weight-matching`` trains two small ResNets (the zoo's torchvision-layout
:class:`~paramsym.nn.zoo.ResNet` with a 3×3 stem, one input channel) with different seeds, aligns
the second to the first with ``ps.weight_matching(model_a, model_b, example_input=x)`` (the
permutation groups come from the traced graph, residual stages included, and the BatchNorm
running statistics are permuted with the channels) and measures the test loss along the chord
θ(α) = (1 − α) θ_A + α θ_B before and after the alignment:

* **with BatchNorm statistics reset** (the standard evaluation of interpolated networks with
  BatchNorm, Git Re-Basin §4 / Jordan et al. "REPAIR"): every interpolated network's running
  statistics are recomputed on training batches (:func:`reset_batchnorm_statistics`) before it
  is evaluated; the claims use this barrier;
* **without the reset**: the running statistics are interpolated like the parameters.

In the same run, rebasin's ``PermutationCoordinateDescent`` (rebasin 0.0.47, the benchmarks'
peer) aligns the same pair when the package is importable; rebasin leaves the running statistics
unpermuted (its aligned network computes a different function in eval mode), so its aligned
network's statistics are recomputed on training batches before anything is measured, and its
function change before that is reported. Without rebasin (or when it fails on the model) its
metrics say ``"not installed"`` (or ``"failed: …"``) and the claim comparing with it is not
evaluated (``holds=None``: reports count it neither as holding nor as failing).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.connectivity import WeightMatchingConfig, linear_path
from paramsym.connectivity.merging import reset_batchnorm_statistics
from paramsym.connectivity.paths import barrier_of
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.connectivity.common import error_rate, spread
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport.training import image_split
from paramsym.experiments.threads import torch_threads
from paramsym.nn.zoo import ResNet

FUNCTION_TOLERANCE = 1e-4
"""Largest |f(π·θ_B) − f(θ_B)| (eval mode, float32) for "the same function"."""


# -- helpers ---------------------------------------------------------------------------------------


def model_state(model: nn.Module) -> dict[str, Tensor]:
    """Parameters and floating buffers (BatchNorm running statistics; ``num_batches_tracked``,
    an integer counter, is left out), detached copies."""
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return {k: v.detach().clone() for k, v in state.items() if v.is_floating_point()}


@dataclass
class Chord:
    """Test loss and error along θ(α) = (1 − α) θ_A + α θ_B."""

    alphas: list[float]
    losses: list[float]
    errors: list[float]

    @property
    def loss_barrier(self) -> float:
        return barrier_of(torch.tensor(self.alphas), torch.tensor(self.losses))[0]

    @property
    def error_barrier(self) -> float:
        return barrier_of(torch.tensor(self.alphas), torch.tensor(self.errors))[0]


def chord(
    model: nn.Module,
    state_a: Mapping[str, Tensor],
    state_b: Mapping[str, Tensor],
    test: tuple[Tensor, Tensor],
    alphas: int,
    reset_inputs: Tensor | None,
) -> Chord:
    """The chord between two states (parameters and running statistics, interpolated alike);
    with ``reset_inputs`` every point's BatchNorm statistics are recomputed on them first."""
    path = linear_path(state_a, state_b)
    loss_fn = nn.CrossEntropyLoss()
    points = torch.linspace(0.0, 1.0, alphas)
    losses, errors = [], []
    x, y = test
    with torch.no_grad():
        for alpha in points:
            state = path(alpha)
            if reset_inputs is None:
                logits = ps.functional_call(model, state, x)
            else:
                logits = reset_batchnorm_statistics(model, state, reset_inputs)(x)
            losses.append(float(loss_fn(logits, y)))
            errors.append(float(error_rate(logits, y)))
    return Chord([float(a) for a in points], losses, errors)


def rebasin_peer() -> Callable[..., Any] | None:
    """rebasin's ``PermutationCoordinateDescent`` when the package imports, else ``None``."""
    try:
        module = importlib.import_module("rebasin")
    except ImportError:
        return None
    return getattr(module, "PermutationCoordinateDescent", None)


# -- experiment -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CnnMatchingConfig:
    """Settings of ``cnn-weight-matching``.

    Attributes:
        seed: base seed; pair p trains networks with seeds ``seed·1000 + 2p`` and ``… + 2p + 1``
            (initialisation and mini-batch order).
        dataset, data_dir: ``"digits"`` (8×8, 1347 train / 450 test) or ``"mnist"`` (IDX files
            in ``data_dir``; 50 000 train / the 10 000 test images).
        layers, widths: the ResNet's basic blocks per stage and stage widths (3×3 stem, no
            max-pool, BatchNorm after every convolution, global average pool, linear head).
        pairs: independently trained pairs.
        epochs, batch_size, lr, momentum: SGD with momentum, the lr decayed linearly to 0.
        alphas: chord points.
        matching_restarts: paramsym's weight matching from this many random group orders.
        bn_samples: training samples for recomputing BatchNorm statistics (0: all of them).
        rebasin_samples: training samples passed to rebasin as its ``input_data``.
        threads: torch intra-op threads (0: unchanged).
    """

    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    layers: tuple[int, ...] = (1, 1)
    widths: tuple[int, ...] = (16, 32)
    pairs: int = 3
    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    alphas: int = 11
    matching_restarts: int = 1
    bn_samples: int = 0
    rebasin_samples: int = 64
    threads: int = 1


def image_data(config: CnnMatchingConfig) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """(train, test) with images shaped (n, 1, side, side), float32 in [0, 1]."""
    if config.dataset not in ("digits", "mnist"):
        raise InvalidArgumentError(
            f"cnn-weight-matching: dataset must be 'digits' or 'mnist' (2-D images), got "
            f"{config.dataset!r}"
        )
    split, _, _ = image_split(config.dataset, config.data_dir, config.seed, holdout="test")
    return (split.x_train, split.y_train), (split.x_val, split.y_val)


def small_resnet(config: CnnMatchingConfig, seed: int) -> ResNet:
    """The zoo's ResNet for one input channel and 10 classes, initialised (torchvision's
    scheme) from ``seed`` without touching the global generator."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return ResNet(
            layers=config.layers,
            widths=config.widths,
            in_channels=1,
            num_classes=10,
            small_stem=True,
        )


def train_resnet(config: CnnMatchingConfig, train: tuple[Tensor, Tensor], seed: int) -> ResNet:
    """SGD with momentum and a linearly decaying lr on shuffled mini-batches; eval mode after."""
    model = small_resnet(config, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    x, y = train
    steps = config.epochs * math.ceil(x.shape[0] / config.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: max(0.0, 1 - k / steps))
    loss_fn = nn.CrossEntropyLoss()
    order = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(config.epochs):
        permutation = torch.randperm(x.shape[0], generator=order)
        for start in range(0, x.shape[0], config.batch_size):
            index = permutation[start : start + config.batch_size]
            optimizer.zero_grad()
            loss_fn(model(x[index]), y[index]).backward()
            optimizer.step()
            schedule.step()
    return model.eval()


@dataclass
class PairResult:
    """Everything measured on one trained pair."""

    naive: Chord
    matched: Chord
    naive_raw: Chord
    matched_raw: Chord
    seconds: float
    distance_before: float
    distance_after: float
    function_change: float
    rebasin: Chord | None = None
    rebasin_raw: Chord | None = None
    rebasin_seconds: float = math.nan
    rebasin_function_change: float = math.nan
    rebasin_status: str = "not installed"
    warnings: list[str] = field(default_factory=list)


def _max_change(
    model: nn.Module, state: Mapping[str, Tensor], reference: Tensor, x: Tensor
) -> float:
    with torch.no_grad():
        return float((ps.functional_call(model, state, x) - reference).abs().max())


def measure_pair(
    config: CnnMatchingConfig,
    model_a: nn.Module,
    model_b: nn.Module,
    train: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
) -> PairResult:
    """Align B to A with paramsym (and rebasin when importable) and measure the chords."""
    x_train = train[0]
    reset_inputs = x_train[: config.bn_samples] if config.bn_samples > 0 else x_train
    state_a, state_b = model_state(model_a), model_state(model_b)
    with torch.no_grad():
        reference = model_b(test[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        matched = ps.weight_matching(
            model_a,
            model_b,
            config=WeightMatchingConfig(restarts=config.matching_restarts),
            example_input=x_train[:8],
        )
    aligned = {**state_b, **{k: v for k, v in matched.params.items() if k in state_b}}

    def both(end: Mapping[str, Tensor]) -> tuple[Chord, Chord]:
        return (
            chord(model_a, state_a, end, test, config.alphas, reset_inputs),
            chord(model_a, state_a, end, test, config.alphas, None),
        )

    naive, naive_raw = both(state_b)
    matched_chord, matched_raw = both(aligned)
    out = PairResult(
        naive=naive,
        matched=matched_chord,
        naive_raw=naive_raw,
        matched_raw=matched_raw,
        seconds=matched.seconds,
        distance_before=matched.distance_before,
        distance_after=matched.distance_after,
        function_change=_max_change(model_b, aligned, reference, test[0]),
        warnings=[f"{w.category.__name__}: {w.message}" for w in caught],
    )
    peer = rebasin_peer()
    if peer is None:
        return out
    moved = copy.deepcopy(model_b)
    try:
        start = time.perf_counter()
        peer(model_a, moved, x_train[: config.rebasin_samples]).rebasin()
        out.rebasin_seconds = time.perf_counter() - start
    except Exception as error:  # the peer failing on this model is a finding, not a crash
        out.rebasin_status = f"failed: {type(error).__name__}: {error}"[:300]
        return out
    moved.eval()
    out.rebasin_function_change = _max_change(moved, model_state(moved), reference, test[0])
    recomputed = model_state(reset_batchnorm_statistics(moved, None, reset_inputs))
    out.rebasin, out.rebasin_raw = both(recomputed)
    out.rebasin_status = "measured"
    return out


def warm_up(config: CnnMatchingConfig, inputs: Tensor) -> None:
    """One untimed alignment of two fresh networks by each implementation, so that the timed
    ones do not pay one-off start-up costs (``torch.export``'s first trace, torchview's)."""
    model_a, model_b = small_resnet(config, -1).eval(), small_resnet(config, -2).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ps.weight_matching(model_a, model_b, example_input=inputs[:8])
        peer = rebasin_peer()
        if peer is not None:
            with contextlib.suppress(Exception):  # measure_pair records the peer's failures
                peer(model_a, model_b, inputs[: config.rebasin_samples]).rebasin()


def run_cnn_matching(config: CnnMatchingConfig, progress: Progress) -> Result:
    with torch_threads(config.threads):
        train, test = image_data(config)
        warm_up(config, train[0])
        pairs = []
        for p in progress.track(range(config.pairs), description="trained pairs"):
            seed = config.seed * 1000 + 2 * p
            model_a = train_resnet(config, train, seed)
            model_b = train_resnet(config, train, seed + 1)
            pairs.append(measure_pair(config, model_a, model_b, train, test))
    return _summarise(config, pairs, int(train[0].shape[0]), int(test[0].shape[0]))


CHORDS = ("naive", "matched", "naive_raw", "matched_raw", "rebasin", "rebasin_raw")


def _summarise(
    config: CnnMatchingConfig, pairs: Sequence[PairResult], train_size: int, test_size: int
) -> Result:
    measured = all(p.rebasin_status == "measured" for p in pairs)
    status = next((p.rebasin_status for p in pairs if p.rebasin_status != "measured"), "measured")
    kinds = CHORDS if measured else CHORDS[:4]
    table: dict[str, list[Any]] = {"pair": [], "alpha": []}
    for kind in kinds:
        table[f"loss_{kind}"], table[f"error_{kind}"] = [], []
    for index, pair in enumerate(pairs):
        table["pair"] += [index] * len(pair.naive.alphas)
        table["alpha"] += pair.naive.alphas
        for kind in kinds:
            curve = getattr(pair, kind)
            table[f"loss_{kind}"] += curve.losses
            table[f"error_{kind}"] += curve.errors

    def per_pair(get: Callable[[PairResult], float]) -> list[float]:
        return [float(get(p)) for p in pairs]

    metrics: dict[str, Any] = {
        "dataset": config.dataset,
        "train_size": train_size,
        "test_size": test_size,
        "parameters": sum(p.numel() for p in small_resnet(config, 0).parameters()),
        "endpoint_test_error": per_pair(lambda q: q.naive.errors[0])
        + per_pair(lambda q: q.naive.errors[-1]),
        "loss_barrier_naive": per_pair(lambda q: q.naive.loss_barrier),
        "loss_barrier_matched": per_pair(lambda q: q.matched.loss_barrier),
        "error_barrier_naive": per_pair(lambda q: q.naive.error_barrier),
        "error_barrier_matched": per_pair(lambda q: q.matched.error_barrier),
        "loss_barrier_naive_no_reset": per_pair(lambda q: q.naive_raw.loss_barrier),
        "loss_barrier_matched_no_reset": per_pair(lambda q: q.matched_raw.loss_barrier),
        "distance_before": per_pair(lambda q: q.distance_before),
        "distance_after": per_pair(lambda q: q.distance_after),
        "paramsym_seconds": per_pair(lambda q: q.seconds),
        "max_function_change": max(per_pair(lambda q: q.function_change)),
        "rebasin": status,
    }
    if measured:
        metrics.update(
            {
                "rebasin_loss_barrier": [p.rebasin.loss_barrier for p in pairs if p.rebasin],
                "rebasin_error_barrier": [p.rebasin.error_barrier for p in pairs if p.rebasin],
                "rebasin_loss_barrier_no_reset": [
                    p.rebasin_raw.loss_barrier for p in pairs if p.rebasin_raw
                ],
                "rebasin_seconds": per_pair(lambda q: q.rebasin_seconds),
                "rebasin_function_change": max(per_pair(lambda q: q.rebasin_function_change)),
                "rebasin_over_paramsym_seconds": statistics.fmean(
                    p.rebasin_seconds / p.seconds for p in pairs
                ),
            }
        )
    caught = [w for p in pairs for w in p.warnings]
    notes = [
        f"{config.dataset}: ResNet layers {tuple(config.layers)}, widths "
        f"{tuple(config.widths)}, 3×3 stem, BatchNorm ({metrics['parameters']} parameters); "
        f"SGD lr {config.lr:g} (linear decay to 0), momentum {config.momentum:g}, batch "
        f"{config.batch_size}, {config.epochs} epochs, float32 (chosen; the dissertation "
        "gives no CNN training details)",
        "barrier = max over α of the test metric above the straight line between the chord's "
        f"ends ({config.alphas} α). With reset (the claims): each interpolated network's "
        "BatchNorm statistics are recomputed on "
        + (f"the first {config.bn_samples}" if config.bn_samples else "all")
        + " training images (cumulative average, reset_batchnorm_statistics); without: the "
        "running statistics are interpolated like the parameters",
        "paramsym: ps.weight_matching(model_a, model_b, example_input=x) (groups from the "
        f"traced graph, running statistics permuted), {config.matching_restarts} random "
        "order(s); seconds include the trace; each implementation aligned one pair of fresh "
        "networks untimed first (start-up costs)",
        (
            "rebasin 0.0.47 PermutationCoordinateDescent(model_a, model_b, "
            f"{config.rebasin_samples} training images).rebasin(): it leaves BatchNorm running "
            "statistics unpermuted (rebasin_function_change: max |Δf| of its aligned network in "
            "eval mode before the fix), so its aligned network's statistics are recomputed on "
            "the training images before every measurement"
            if measured
            else f"rebasin: {status} — the comparison with it is not evaluated"
        ),
    ]
    if caught:
        notes.append(f"warnings during weight matching: {sorted(set(caught))[:3]}")
    return Result(metrics, {"chords": table}, notes)


def plot_cnn_matching(result: Result) -> dict[str, Any]:
    """Test loss and error along the chord between two trained ResNets, naive and after weight
    matching (Git Re-Basin's Fig. 2 axes; dissertation §3.3.1), mean ± std over pairs; solid:
    BatchNorm statistics recomputed at every point, dashed: interpolated statistics."""
    chords = result.series["chords"]
    pair = np.array(chords["pair"])
    alpha = np.array(chords["alpha"])[pair == pair[0]]
    styles = {
        "naive": ("tab:gray", "naive"),
        "matched": ("tab:green", "paramsym weight matching"),
        "rebasin": ("tab:purple", "rebasin"),
    }
    figure, axes = plt.subplots(1, 2, figsize=(11.5, 4.3))
    for ax, metric, label in (
        (axes[0], "loss", "test cross-entropy"),
        (axes[1], "error", "test error"),
    ):
        for kind, (colour, name) in styles.items():
            for suffix, line, extra in (("", "-", "BN reset"), ("_raw", "--", "no reset")):
                column = f"{metric}_{kind}{suffix}"
                if column not in chords:
                    continue
                values = np.array(chords[column], dtype=float)
                stacked = np.stack([values[pair == p] for p in sorted(set(pair.tolist()))])
                mean, std = stacked.mean(0), stacked.std(0)
                ax.plot(alpha, mean, color=colour, linestyle=line, label=f"{name} ({extra})")
                if not suffix:
                    ax.fill_between(alpha, mean - std, mean + std, color=colour, alpha=0.2)
        ax.set_xlabel("α (model A → model B)")
        ax.set_ylabel(label)
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
    axes[0].set_title("linear interpolation between two trained ResNets")
    axes[1].set_title(f"test error (rebasin: {result.metrics.get('rebasin')})"[:70])
    figure.tight_layout()
    return {"cnn_weight_matching.png": figure}


def _barrier_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    before, after = m["loss_barrier_naive"], m["loss_barrier_matched"]
    return (
        f"test-loss barrier {spread(before)} → {spread(after)} over {len(before)} pairs "
        f"(BN reset); without the reset {spread(m['loss_barrier_naive_no_reset'])} → "
        f"{spread(m['loss_barrier_matched_no_reset'])}; error barrier "
        f"{spread(m['error_barrier_naive'])} → {spread(m['error_barrier_matched'])}",
        all(a < b for a, b in zip(after, before, strict=True)),
    )


def _function_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    text = f"paramsym: max |Δf| = {m['max_function_change']:.1e}"
    if m["rebasin"] == "measured":
        text += f"; rebasin (statistics unpermuted): {m['rebasin_function_change']:.2g}"
    return text, m["max_function_change"] < FUNCTION_TOLERANCE


def _peer_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    ours = m["loss_barrier_matched"]
    if m["rebasin"] != "measured":
        return (
            f"not evaluated: rebasin {m['rebasin']} (paramsym alone: barrier {spread(ours)}, "
            f"{spread(m['paramsym_seconds'])} s)",
            None,
        )
    theirs = m["rebasin_loss_barrier"]
    return (
        f"barrier paramsym {spread(ours)} vs rebasin {spread(theirs)} (both BN reset); "
        f"seconds paramsym {spread(m['paramsym_seconds'])} vs rebasin "
        f"{spread(m['rebasin_seconds'])} (rebasin / paramsym ×"
        f"{m['rebasin_over_paramsym_seconds']:.3g})",
        statistics.fmean(ours) <= statistics.fmean(theirs),
    )


experiment(
    "cnn-weight-matching",
    seed_ref="seed 001, §3.3.1 (ref. [3] Git Re-Basin) on a ResNet with BatchNorm",
    description=(
        "test-loss barrier along the chord between two independently trained small ResNets "
        "(torchvision layout, 3×3 stem, BatchNorm), before and after aligning the second by "
        "ps.weight_matching(..., example_input=x), with every interpolated network's BatchNorm "
        "statistics recomputed on the training images (and without); rebasin's "
        "PermutationCoordinateDescent on the same pairs when installed (its statistics "
        "recomputed: it leaves them unpermuted). Chosen: SGD lr 0.05 (linear decay), momentum "
        "0.9, batch 64; quick: digits 8×8, widths (16, 32), 10 epochs, 3 pairs"
    ),
    data="digits (quick); MNIST IDX files in --data-dir (paper)",
    quick=CnnMatchingConfig(),
    paper=CnnMatchingConfig(
        dataset="mnist",
        layers=(2, 2, 2),
        widths=(16, 32, 64),
        pairs=3,
        epochs=10,
        batch_size=128,
        alphas=21,
        bn_samples=10_000,
        rebasin_samples=256,
        threads=0,
    ),
    claims=[
        Claim(
            "permuting one network by weight matching lowers the loss barrier between two "
            "independently trained CNNs",
            "seed 001, §3.3.1; Git Re-Basin [3] (Ainsworth et al.)",
            "test-loss barrier after matching < naive barrier, every pair (BatchNorm "
            "statistics recomputed)",
            _barrier_claim,
        ),
        Claim(
            "the aligned network computes the same function (BatchNorm running statistics "
            "permuted with the channels)",
            "seed 001, §1.2 (permutation symmetry); DESIGN.md (rebasin leaves them unpermuted)",
            f"max |f(π·θ_B) − f(θ_B)| < {FUNCTION_TOLERANCE:g} in eval mode (float32)",
            _function_claim,
        ),
        Claim(
            "paramsym's weight matching reaches a barrier no higher than rebasin's on the same "
            "pairs",
            "Git Re-Basin [3]; peer rebasin 0.0.47 PermutationCoordinateDescent",
            "mean barrier paramsym ≤ rebasin (both BN reset); seconds ratio reported; "
            "not evaluated without rebasin",
            _peer_claim,
        ),
    ],
    plot=plot_cnn_matching,
)(run_cnn_matching)
