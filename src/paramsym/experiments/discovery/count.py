"""``symmetry-count``: how many linear data-dependent symmetries, as the batch grows and along
training (dissertation ch. 6.6 and 7: "does the number of symmetries change during training?",
data-dependent symmetry "as the batch size varies"; notes 001c §5).

The count is the dimension of the algebra that exact discovery finds
(:func:`paramsym.discover_symmetries` with ``data_dependent=True``): linear generators A with
⟨∇_θ ℓ(θ; x_p), Aθ⟩ = 0 for every example x_p of one fixed batch X and every θ drawn. MLP
(widths n-h-o, biases, MSE), layer-pair ansatz (with its input and output blocks).

(a) Batch size k = 1, 2, … past the input dimension n and the width h. A fixed batch adds
the right multiplications W₁ ↦ W₁N with NX = 0: n(n − rank X) (the input term). With MSE
there is a second term on the output side (found here, since added to ``linear.py``'s
docstring): a rotation
of the outputs that fixes every target, ŷ ↦ Mŷ with M antisymmetric and My_p = 0, keeps
½‖ŷ_p − y_p‖² (⟨ŷ − y, Mŷ⟩ = −y_pᵀMŷ = 0); it acts on (W_L, b_L) as the output block, so

    dim(k) = D + n(n − rank X) + (o − r)(o − r − 1)/2,   r = rank Y,

with D the data-independent dimension (Σh for ReLU, 0 for tanh). The curve reaches D once
rank X = n, i.e. k ≥ n (and r ≥ o − 1): the threshold is the input dimension, not the width;
the width-dependent data-dependent GL(h) of Ex. 1.3.5 is nonlinear in θ and outside every
linear ansatz. The gl(P) formula of ``linear.py``, D + P·h₁(n + 1 − rank[X; 1]), is checked on
a tiny net with one output (no output term).

(b) Along training. Discovery needs θ drawn *around* the point, and "the symmetries at a
trained point" is the algebra valid for θ in a neighbourhood of it. Two neighbourhoods:

* broad: θ ~ θ_t + s·rms·N(0, I) per tensor (``theta="gaussian"``, s = ``theta_scale``). For
  tanh the loss is analytic, so an identity on an open set holds everywhere: the count cannot
  change. For ReLU such a ball crosses many activation regions of the batch and gives the
  same count as (a);
* ReLU activation region (one hidden layer): θ restricted to the set where every hidden
  unit's sign pattern on X is θ_t's. W₂, b₂ are unconstrained, each row (w_i, b_i) lies in a
  polyhedral cone: drawn as a random positive rescaling of the row plus a Gaussian step that
  is halved until the pattern is kept. Within the region the loss on X is a polynomial, and
  the layer-pair condition splits per entry (i, j) of the pair (M on the rows of W₁, N on
  the columns of W₂) into M_ij a_p + N_ij b_p = 0 for the patterns a, b of units i, j at every
  point p. Counting: every unit gives 1 (its rescaling), 2 if it is dead on the whole batch;
  an off-diagonal pair gives 2 if both units are dead, 1 if one is, 1 if both have the same
  non-empty pattern (a GL over units that are linear on the batch), else 0; plus the input
  term over the points where some unit is active and the output term:

      dim = h + d + 2d(d − 1) + 2d(h − d) + Σ_groups m(m − 1) + n(n − rank X_alive) + out,

  d dead units, groups of m alive units with identical patterns. This changes whenever
  training kills a unit or makes two units' patterns coincide (or separate).

Choices (the text gives no numbers): widths 4-6-3 (n = 4, h = 6, o = 3; 97 unknowns), batches
of N(0, 1) inputs and targets, k = 1 … 12; the gl(P) check on 2-3-1 nets; training on a
synthetic teacher task (a random tanh 4-8-3 teacher plus noise 0.1, 256 points) with Adam
(lr 10⁻², full batch) for 300 steps; the dimension at 7 checkpoints on a fixed probe batch of
``probe_size`` = 4 training points, broad scale s = 0.5. Paper: 6-10-4 widths, k to 20, 2-3-2
gl(P) nets with both activations, 1000 steps, 11 checkpoints, a probe of 6.

Measured (quick, seeds 0-3, ≈ 15 s): (a) layer pairs, k = 1, 2, 3, ≥ 4: relu 19, 14, 10, 6 and
tanh 13, 8, 4, 0, all as predicted; the input term alone is 1 short at k = 1 (so(2)
of the 3 outputs); gl(P) on a 2-3-1 tanh net: 78, 39, 0, 0 as predicted. (b) broad: 6 (relu) and
0 (tanh) at every checkpoint; region: the pattern count at every checkpoint, and it changes
(seed 0: 6, 17, 28, 28, 28, 34, 34 at the 7 checkpoints as units die on the probe batch; seed 2:
19, 19, 30, 6, 12, 14, 14), no sampler fallback.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.core.params import Params
from paramsym.core.tables import append_row, empty_table
from paramsym.discovery import discover_symmetries
from paramsym.errors import AmbiguousDimensionWarning, InvalidArgumentError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

F64 = torch.float64
INDEPENDENT = {"relu": lambda h: h, "leaky_relu": lambda h: h, "tanh": lambda h: 0,
               "sigmoid": lambda h: 0, "identity": lambda h: h * h}  # fmt: skip
"""Data-independent dimension per hidden layer of width h with MSE (``linear-discovery``)."""
RECTIFIERS = ("relu", "leaky_relu")
"""Activations with an activation-region count in (b)."""


@dataclass(frozen=True)
class SymmetryCountConfig:
    """Settings of ``symmetry-count`` (module docstring for the choices).

    Attributes:
        seed: data, models, training and discovery draws.
        widths: the MLP (n, h…, o) of (a) and (b); (b)'s region count needs one hidden layer.
        activations: activations compared in (a) and (b).
        batch_sizes: k in (a).
        full_widths, full_activations, full_batch_sizes: the gl(P) check of (a).
        train_size, steps, lr: the teacher task and Adam (full batch) of (b).
        checkpoints: steps at which the dimension is measured (0 is the initialisation).
        probe_size: the fixed batch of (b): the first ``probe_size`` training points.
        theta_scale: relative scale of the broad neighbourhood in (b).
        region_steps: tries per hidden unit to keep its sign pattern (:class:`RegionSampler`).
    """

    seed: int = 0
    widths: tuple[int, ...] = (4, 6, 3)
    activations: tuple[str, ...] = ("relu", "tanh")
    batch_sizes: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)
    full_widths: tuple[int, ...] = (2, 3, 1)
    full_activations: tuple[str, ...] = ("tanh",)
    full_batch_sizes: tuple[int, ...] = (1, 2, 3, 4)
    train_size: int = 256
    steps: int = 300
    lr: float = 1e-2
    checkpoints: tuple[int, ...] = (0, 10, 25, 50, 100, 200, 300)
    probe_size: int = 4
    theta_scale: float = 0.5
    region_steps: int = 40


# -- predictions -------------------------------------------------------------------------------


def rank(matrix: Tensor) -> int:
    return int(torch.linalg.matrix_rank(matrix)) if matrix.numel() else 0


def output_rotations(y: Tensor) -> int:
    """dim so(o − rank Y): rotations of the outputs fixing every target (MSE only)."""
    free = y.shape[1] - rank(y)
    return free * (free - 1) // 2


def predicted_pairs(
    widths: tuple[int, ...], activation: str, x: Tensor, y: Tensor
) -> dict[str, int]:
    """Layer-pair dimension on a fixed batch: the input term alone and with the output term
    (module docstring)."""
    n = widths[0]
    independent = sum(INDEPENDENT[activation](h) for h in widths[1:-1])
    stated = independent + n * (n - rank(x))
    return {
        "independent": independent,
        "input_term": stated,
        "derived": stated + output_rotations(y),
    }


def predicted_full(widths: tuple[int, ...], activation: str, x: Tensor, p: int) -> int:
    """``linear.py``'s gl(P) formula D + P·h₁(n + 1 − rank[X; 1]) (one output: no output term)."""
    n, h = widths[0], widths[1]
    ones = torch.ones(x.shape[0], 1, dtype=x.dtype)
    independent = sum(INDEPENDENT[activation](w) for w in widths[1:-1])
    return independent + p * h * (n + 1 - rank(torch.cat([x, ones], dim=1)))


def patterns(center: Params, x: Tensor) -> Tensor:
    """Sign pattern (k, h) of the first layer's pre-activations on the batch."""
    return (x @ center["0.weight"].T + center["0.bias"]) > 0


def predicted_region(center: Params, x: Tensor, y: Tensor) -> dict[str, int]:
    """The activation-region count of the module docstring, with its ingredients."""
    active = patterns(center, x)
    h, n = active.shape[1], x.shape[1]
    alive = active.any(dim=0)
    dead = int((~alive).sum())
    groups: dict[tuple[bool, ...], int] = {}
    for i in range(h):
        if alive[i]:
            key = tuple(active[:, i].tolist())
            groups[key] = groups.get(key, 0) + 1
    same = sum(m * (m - 1) for m in groups.values())
    points = active.any(dim=1)
    value = h + dead + 2 * dead * (dead - 1) + 2 * dead * (h - dead) + same
    value += n * (n - rank(x[points])) + output_rotations(y)
    return {"predicted": value, "dead": dead, "shared_patterns": same}


class RegionSampler:
    """θ in the activation region of ``center`` on ``x`` (one hidden layer, module docstring):
    every row (w_i, b_i) of the first layer rescaled by e^{N(0, ¼)} (the region is a cone) plus
    a Gaussian step of relative size ``scale``, halved until the unit's sign pattern on ``x`` is
    kept (after ``tries`` failures the rescaled row alone, counted in ``fallbacks``); the other
    parameters Gaussian around ``center`` with relative scale 1 (the region leaves them free).
    """

    def __init__(self, center: Params, x: Tensor, scale: float = 1.0, tries: int = 40) -> None:
        self.rows = torch.cat([center["0.weight"], center["0.bias"][:, None]], dim=1)
        self.inputs = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)
        self.target = (self.inputs @ self.rows.T) > 0
        self.center, self.scale, self.tries = center, scale, tries
        self.fallbacks = 0

    def __call__(self, generator: torch.Generator) -> Params:
        out: Params = {}
        for name, t in self.center.items():
            if name not in ("0.weight", "0.bias"):
                rms = float(t.pow(2).mean().sqrt()) or 1.0
                out[name] = t + rms * torch.randn(t.shape, generator=generator, dtype=t.dtype)
        drawn = []
        for i, row in enumerate(self.rows):
            base = row * math.exp(0.5 * float(torch.randn((), generator=generator, dtype=F64)))
            step = self.scale * float(base.norm()) / math.sqrt(base.numel())
            for _ in range(self.tries):
                candidate = base + step * torch.randn(base.shape, generator=generator, dtype=F64)
                if bool((((self.inputs @ candidate) > 0) == self.target[:, i]).all()):
                    break
                step /= 2
            else:
                candidate, self.fallbacks = base, self.fallbacks + 1
            drawn.append(candidate)
        stacked = torch.stack(drawn)
        out["0.weight"], out["0.bias"] = stacked[:, :-1].contiguous(), stacked[:, -1].contiguous()
        return out


# -- measuring -----------------------------------------------------------------------------------


def _discover(model: nn.Module, batch: tuple[Tensor, Tensor], seed: int, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmbiguousDimensionWarning)
        return discover_symmetries(
            model, nn.MSELoss(), batch, data_dependent=True, generator=seed, **kwargs
        )


@dataclass
class Trajectory:
    """A training run: the model, its checkpoints, and the losses and pattern counts."""

    model: nn.Module
    saved: dict[int, Params]
    losses: dict[int, float]
    probe: tuple[Tensor, Tensor]
    counts: list[tuple[int, int]]
    """(step, activation-region count on the probe batch) at every step (ReLU only)."""


def train(config: SymmetryCountConfig, activation: str) -> Trajectory:
    """Adam (full batch) on the teacher task, keeping the checkpoints."""
    g = torch.Generator().manual_seed(1000 + config.seed)
    n, o = config.widths[0], config.widths[-1]
    teacher = ps.mlp([n, 8, o], "tanh", seed=config.seed + 500, dtype=F64)
    x = torch.randn(config.train_size, n, generator=g, dtype=F64)
    with torch.no_grad():
        y = teacher(x) + 0.1 * torch.randn(config.train_size, o, generator=g, dtype=F64)
    probe = (x[: config.probe_size], y[: config.probe_size])
    model = ps.mlp(list(config.widths), activation, seed=config.seed, dtype=F64)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    run = Trajectory(model, {}, {}, probe, [])
    for step in range(config.steps + 1):
        loss = nn.functional.mse_loss(model(x), y)
        current = {k: v.clone() for k, v in ps.params_of(model).items()}
        if activation in RECTIFIERS:
            run.counts.append((step, predicted_region(current, *probe)["predicted"]))
        if step in config.checkpoints:
            run.saved[step] = current
            run.losses[step] = float(loss.detach())
        if step == config.steps:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return run


def run_symmetry_count(config: SymmetryCountConfig, progress: Progress) -> Result:
    """(a) dimension against batch size, layer pairs and gl(P); (b) along training."""
    if len(config.widths) != 3:
        raise InvalidArgumentError("symmetry-count: widths must be (n, h, o), one hidden layer")
    g = torch.Generator().manual_seed(config.seed)
    n, o = config.widths[0], config.widths[-1]
    pool_x = torch.randn(max(config.batch_sizes), n, generator=g, dtype=F64)
    pool_y = torch.randn(max(config.batch_sizes), o, generator=g, dtype=F64)
    batch = empty_table(
        "activation ansatz k dim status gap samples rank_x predicted input_term independent"
    )
    for activation in config.activations:
        model: nn.Module = ps.mlp(list(config.widths), activation, seed=config.seed, dtype=F64)
        for k in progress.track(config.batch_sizes, description=f"batch sizes ({activation})"):
            x, y = pool_x[:k], pool_y[:k]
            found = _discover(model, (x, y), config.seed)
            p = predicted_pairs(config.widths, activation, x, y)
            append_row(batch, activation, "layer_pairs", k, found.dim_estimate, found.status,
                       float(found.gap), found.samples, rank(x), p["derived"], p["input_term"],
                       p["independent"])  # fmt: skip
    full_n, full_o = config.full_widths[0], config.full_widths[-1]
    full_x = torch.randn(max(config.full_batch_sizes), full_n, generator=g, dtype=F64)
    full_y = torch.randn(max(config.full_batch_sizes), full_o, generator=g, dtype=F64)
    for activation in config.full_activations:
        model = ps.mlp(list(config.full_widths), activation, seed=config.seed, dtype=F64)
        p_count = sum(t.numel() for t in model.parameters())
        for k in progress.track(config.full_batch_sizes, description=f"gl(P) ({activation})"):
            x, y = full_x[:k], full_y[:k]
            found = _discover(model, (x, y), config.seed, ansatz="full")
            stated = predicted_full(config.full_widths, activation, x, p_count)
            independent = sum(INDEPENDENT[activation](w) for w in config.full_widths[1:-1])
            append_row(batch, activation, "full", k, found.dim_estimate, found.status,
                       float(found.gap), found.samples, rank(x), stated + output_rotations(y),
                       stated, independent)  # fmt: skip

    trajectory = empty_table(
        "activation neighbourhood step loss dim status gap predicted dead shared_patterns"
    )
    counts = empty_table("activation step predicted")
    fallbacks = 0
    for activation in config.activations:
        run = train(config, activation)
        model, losses, probe = run.model, run.losses, run.probe
        for step, count in run.counts:
            append_row(counts, activation, step, count)
        expected = predicted_pairs(config.widths, activation, *probe)["derived"]
        for step in progress.track(sorted(run.saved), description=f"checkpoints ({activation})"):
            center = run.saved[step]
            broad = _discover(model, probe, config.seed, theta="gaussian", params=center,
                              theta_scale=config.theta_scale)  # fmt: skip
            append_row(trajectory, activation, "broad", step, losses[step], broad.dim_estimate,
                       broad.status, float(broad.gap), expected, None, None)  # fmt: skip
            if activation not in RECTIFIERS:
                continue
            sampler = RegionSampler(center, probe[0], 1.0, config.region_steps)
            region = _discover(model, probe, config.seed, theta=sampler)
            fallbacks += sampler.fallbacks
            pattern = predicted_region(center, *probe)
            append_row(trajectory, activation, "region", step, losses[step], region.dim_estimate,
                       region.status, float(region.gap), pattern["predicted"], pattern["dead"],
                       pattern["shared_patterns"])  # fmt: skip
    metrics = _metrics(config, batch, trajectory)
    metrics["region_fallbacks"] = fallbacks
    metrics["widths"] = list(config.widths)
    metrics["region_count_changes"] = {}
    for activation in dict.fromkeys(counts["activation"]):
        values = [r["predicted"] for r in _rows(counts, activation=activation)]
        changes = sum(1 for before, after in itertools.pairwise(values) if before != after)
        metrics["region_count_changes"][activation] = changes
    notes = [
        f"(a) MLP {list(config.widths)} with biases, MSE, layer pairs (input and output blocks), "
        f"θ from the initialisation, a fixed batch of the first k of {max(config.batch_sizes)} "
        f"N(0, 1) points and targets; gl(P) check on {list(config.full_widths)}.",
        f"(b) Adam (lr {config.lr:g}, full batch of {config.train_size}) on a tanh 4-8-3 teacher "
        f"plus noise 0.1; probe batch = the first {config.probe_size} training points; broad "
        f"θ ~ θ_t + {config.theta_scale:g}·rms·N(0, I); region: the ReLU activation region of "
        "θ_t on the probe batch.",
        "the input term n(n − rank X) of the layer pairs; with MSE the output rotations "
        "so(o − rank Y) add (o − r)(o − r − 1)/2 (1 at k = 1 for o = 3).",
    ]
    series = {"batch_size": batch, "training": trajectory, "pattern_count": counts}
    return Result(metrics, series, notes)


def _rows(table: dict[str, list[Any]], **where: Any) -> list[dict[str, Any]]:
    keys = list(table)
    count = len(table[keys[0]])
    rows = [{k: table[k][i] for k in keys} for i in range(count)]
    return [r for r in rows if all(r[k] == v for k, v in where.items())]


def _metrics(
    config: SymmetryCountConfig, batch: dict[str, list[Any]], trajectory: dict[str, list[Any]]
) -> dict[str, Any]:
    pairs = _rows(batch, ansatz="layer_pairs")
    full = _rows(batch, ansatz="full")
    n = config.widths[0]
    saturated = [r for r in pairs if r["k"] >= n]
    metrics: dict[str, Any] = {
        "pairs_matching": sum(
            r["dim"] == r["predicted"] and r["status"] == "determined" for r in pairs
        ),
        "pairs_total": len(pairs),
        "input_term_matching": sum(r["dim"] == r["input_term"] for r in pairs),
        "input_term_mismatches": [
            f"{r['activation']} k={r['k']}: {r['dim']} vs {r['input_term']}"
            for r in pairs
            if r["dim"] != r["input_term"]
        ],
        "saturated_matching": sum(r["dim"] == r["independent"] for r in saturated),
        "saturated_total": len(saturated),
        "full_matching": sum(
            r["dim"] == r["predicted"] and r["status"] == "determined" for r in full
        ),
        "full_total": len(full),
        "curves": {
            a: [r["dim"] for r in pairs if r["activation"] == a] for a in config.activations
        },
    }
    for kind in ("broad", "region"):
        rows = _rows(trajectory, neighbourhood=kind)
        metrics[f"{kind}_matching"] = sum(
            r["dim"] == r["predicted"] and r["status"] == "determined" for r in rows
        )
        metrics[f"{kind}_total"] = len(rows)
        metrics[f"{kind}_dims"] = {
            a: [r["dim"] for r in rows if r["activation"] == a]
            for a in config.activations
            if any(r["activation"] == a for r in rows)
        }
    return metrics


# -- claims ------------------------------------------------------------------------------------


def _ratio(result: Result, key: str) -> tuple[str, bool | None]:
    total = result.metrics[f"{key}_total"]
    matching = result.metrics[f"{key}_matching"]
    if not total:
        return "not evaluated: no rows", None
    return f"{matching} / {total}", matching == total


def _pairs(result: Result) -> tuple[Any, bool | None]:
    measured, holds = _ratio(result, "pairs")
    mismatches = result.metrics["input_term_mismatches"]
    out = {"matching": measured, "curves": result.metrics["curves"],
           "input_term_only_mismatches": mismatches}  # fmt: skip
    return out, holds


def _trajectory(kind: str) -> Callable[[Result], tuple[Any, bool | None]]:
    def check(result: Result) -> tuple[Any, bool | None]:
        measured, holds = _ratio(result, kind)
        dims = result.metrics[f"{kind}_dims"]
        changes = {a: sorted(set(v)) for a, v in dims.items()}
        out = {"matching": measured, "dims_along_training": dims, "distinct": changes}
        if kind == "region":
            out["changes_of_the_count_over_all_steps"] = result.metrics["region_count_changes"]
            out["sampler_fallbacks"] = result.metrics["region_fallbacks"]
        return out, holds

    return check


def _broad(result: Result) -> tuple[Any, bool | None]:
    measured, holds = _trajectory("broad")(result)
    constant = all(len(v) == 1 for v in measured["distinct"].values())
    return measured, None if holds is None else holds and constant


CLAIMS = [
    Claim(
        "the data-dependent dimension on a batch of k points is D + n(n − rank X) + "
        "(o − rank Y)(o − rank Y − 1)/2 (the input term plus the MSE output rotations)",
        "seed 001, Def. 1.3.4, §6.6 and ch. 7 (batch size); linear.py docstring; derived here",
        "every k, both activations: determined, dim = formula",
        _pairs,
    ),
    Claim(
        "once the batch spans the inputs (k ≥ n) the count equals the data-independent one",
        "seed 001, Prop 6.4.4 (smaller batches can only add symmetries); notes 001c §5",
        "dim = D for every k ≥ n",
        lambda r: _ratio(r, "saturated"),
    ),
    Claim(
        "under gl(P) the batch adds P·h₁(n + 1 − rank[X; 1]) (every linear map into the "
        "first layer's directions the batch cannot see)",
        "linear.py docstring (data-dependent discovery)",
        "every k: dim = D + P·h₁(n + 1 − rank[X; 1])",
        lambda r: _ratio(r, "full"),
    ),
    Claim(
        "the number of symmetries does not change during training, for θ in a broad "
        "neighbourhood of each checkpoint",
        "seed 001, §6.6 open question; notes 001c §5",
        "one value along training per activation, = the formula of (a) at k = probe_size",
        _broad,
    ),
    Claim(
        "within a ReLU activation region of the batch the count is the pattern count "
        "(dead units, units with equal patterns), which training can change",
        "derived here (module docstring); seed 001, §6.6 open question",
        "dim = pattern count at every checkpoint (changes are reported, not required)",
        _trajectory("region"),
    ),
]


# -- the figure --------------------------------------------------------------------------------


def plot_symmetry_count(result: Result) -> dict[str, Any]:
    """(a) dimension against batch size with the predictions; (b) against training step."""
    batch, trajectory = result.series["batch_size"], result.series["training"]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, ansatz in zip(axes[:2], ("layer_pairs", "full"), strict=True):
        for activation in dict.fromkeys(batch["activation"]):
            rows = _rows(batch, activation=activation, ansatz=ansatz)
            if not rows:
                continue
            k = [r["k"] for r in rows]
            (line,) = ax.plot(k, [r["dim"] for r in rows], "o", label=f"{activation}: discovered")
            ax.plot(k, [r["predicted"] for r in rows], "-", color=line.get_color(), lw=1,
                    label=f"{activation}: predicted")  # fmt: skip
            if ansatz == "layer_pairs":
                ax.plot(k, [r["input_term"] for r in rows], ":", color=line.get_color(), lw=1,
                        label=f"{activation}: input term only, n(n − rank X)")  # fmt: skip
            ax.axhline(rows[0]["independent"], color=line.get_color(), ls="--", lw=0.6)
        if ansatz == "layer_pairs" and "widths" in result.metrics:
            n, h = result.metrics["widths"][:2]
            ax.axvline(n, color="0.5", ls=":", lw=0.8)
            ax.axvline(h, color="0.8", ls=":", lw=0.8)
            ax.text(n, ax.get_ylim()[0], f" n = {n}", va="bottom", fontsize=7)
            ax.text(h, ax.get_ylim()[0], f" h = {h}", va="bottom", fontsize=7, color="0.5")
        ax.xaxis.get_major_locator().set_params(integer=True)
        name = "layer pairs" if ansatz == "layer_pairs" else "gl(P)"
        ax.set(xlabel="batch size k", ylabel="dimension (data-dependent)",
               title=f"(a) {name}: dimension vs batch size")  # fmt: skip
        ax.legend(fontsize=7)
    ax = axes[2]
    for activation in dict.fromkeys(trajectory["activation"]):
        for kind, marker in (("broad", "o-"), ("region", "s-")):
            rows = _rows(trajectory, activation=activation, neighbourhood=kind)
            if rows:
                step = [r["step"] for r in rows]
                (line,) = ax.plot(
                    step, [r["dim"] for r in rows], marker, label=f"{activation}, {kind}"
                )
                ax.plot(step, [r["predicted"] for r in rows], "x", color=line.get_color(), ms=9)
    counts = result.series.get("pattern_count", {})
    for activation in dict.fromkeys(counts.get("activation", [])):
        rows = _rows(counts, activation=activation)
        ax.step([r["step"] for r in rows], [r["predicted"] for r in rows], where="post",
                color="0.6", lw=0.8, label=f"{activation}: region count, every step")  # fmt: skip
    ax.set(xlabel="training step", ylabel="dimension on the probe batch",
           title="(b) along training (× predicted)")  # fmt: skip
    ax.legend(fontsize=7)
    figure.tight_layout()
    return {"symmetry_count.png": figure}


experiment(
    "symmetry-count",
    seed_ref="seed 001, §6.6 and ch. 7 (open questions); Def. 1.3.4",
    description=(
        "the number of linear data-dependent symmetries (exact discovery on a fixed batch) of a "
        "small MLP as the batch grows (n(n − rank X) input directions plus MSE output "
        "rotations, down to the data-independent count once k ≥ n) and along Adam training "
        "(broad neighbourhood: constant; ReLU activation region: a pattern count)"
    ),
    quick=SymmetryCountConfig(),
    paper=SymmetryCountConfig(
        widths=(6, 10, 4),
        batch_sizes=(1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20),
        full_widths=(2, 3, 2),
        full_activations=("relu", "tanh"),
        steps=1000,
        checkpoints=(0, 10, 25, 50, 100, 200, 300, 400, 600, 800, 1000),
        probe_size=6,
    ),
    claims=CLAIMS,
    plot=plot_symmetry_count,
)(single_threaded(run_symmetry_count))
