"""Symmetries of real architectures (issue 12): what graph detection finds on the test zoo.

``architecture-catalogue`` (dissertation Table 1.1 on the zoo of :mod:`paramsym.nn.zoo`): for
every zoo model, the symmetries ``ps.symmetries(model, example_input=x)`` finds on its traced
graph, counted per family; the largest relative output change under random elements of the
exact, function-preserving ones (float64, eval mode, BatchNorm running statistics moved with the
parameters); each continuous symmetry's orbit dimension against its generic-point formula (Prop
A.2.9: ``h² − max(0, h−n)·max(0, h−m)`` for GL(h) with n, m the entries per neuron of the
incoming and outgoing slots; ``h`` for per-neuron rescaling); and detection time.

Teleportation on a CNN (``teleport-cnn``) is in :mod:`paramsym.experiments.teleport_cnn`.
Choices the dissertation does not make are in the experiment's description and notes.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.connectivity.common import generator
from paramsym.experiments.dissertation import predicted_orbit_dimension
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import torch_threads
from paramsym.nn.zoo import ZOO, CausalSelfAttention
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.gl import GeneralLinearGroup, MatrixNeuronSymmetry
from paramsym.symmetry.orthogonal import HiddenOrthogonal
from paramsym.symmetry.scaling import PositiveScaling

F64 = torch.float64
EXACT_TOLERANCE = 1e-10
"""Largest relative output change an exact symmetry may cause (float64 rounding is ~1e-16)."""

NO_HIDDEN_UNITS = {
    "lstm-raw": "a bare nn.LSTM returns its hidden states (output, (h_n, c_n)): every hidden "
    "unit is an output, so no permutation of them preserves the function",
}
"""Zoo models without hidden units (features that the output does not expose directly)."""


# == architecture-catalogue (Table 1.1 on the zoo) ================================================


@dataclass(frozen=True)
class ArchitectureCatalogueConfig:
    """Settings of ``architecture-catalogue``.

    Attributes:
        seed: randomness of the example inputs and the group elements.
        models: zoo names to catalogue; empty: every registered model (those whose optional
            packages are missing are skipped with a note).
        elements: random group elements drawn per symmetry (the largest change is kept).
        scale: size of the Lie-algebra element of continuous samples (``Symmetry.sample``).
        detection_repeats: detections timed per model, each on a fresh build (the median is
            reported); one untimed detection first pays ``torch.export``'s start-up cost.
        threads: torch intra-op threads during the run (0: unchanged).
    """

    seed: int = 0
    models: tuple[str, ...] = ()
    elements: int = 2
    scale: float = 0.5
    detection_repeats: int = 1
    threads: int = 1


def family(symmetry: Symmetry) -> str:
    """The family of a detected symmetry: its name up to ``[`` (``"attention_QK"``, …)."""
    return symmetry.name.split("[", 1)[0]


def _leaves(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, Mapping):  # dicts and Hugging Face ModelOutputs
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _leaves(item)


def flat_output(value: Any) -> Tensor:
    """Every floating tensor of a model's output (a tensor, tuple, dict or ``ModelOutput``),
    flattened and concatenated in float64."""
    tensors = [t.reshape(-1).to(F64) for t in _leaves(value) if t.is_floating_point()]
    if not tensors:
        raise InvalidArgumentError("architecture-catalogue: the model returned no float tensor")
    return torch.cat(tensors)


def relative_change(before: Tensor, after: Tensor) -> float:
    """‖after − before‖ / ‖before‖."""
    return float((after - before).norm() / before.norm().clamp_min(1e-300))


def attention_heads(model: nn.Module) -> tuple[int, int]:
    """(attention heads in the whole model, head dimension), read from the modules: the zoo's
    :class:`~paramsym.nn.zoo.CausalSelfAttention` or a Hugging Face model's config; (0, 0)
    without attention. Independent of detection: the expected counts of the QK/VO claim."""
    heads, dims = 0, set()
    for module in model.modules():
        if isinstance(module, CausalSelfAttention):
            heads += module.heads
            dims.add(module.width // module.heads)
    if heads:
        return heads, dims.pop() if len(dims) == 1 else -1
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "num_attention_heads"):
            per_layer = int(config.num_attention_heads)
            return per_layer * int(config.num_hidden_layers), int(config.hidden_size) // per_layer
    return 0, 0


def orbit_formula(symmetry: Symmetry, params: dict[str, Tensor]) -> tuple[int | None, str]:
    """The generic orbit dimension and the formula it comes from; ``(None, reason)`` where
    there is none. Uses :func:`paramsym.experiments.dissertation.predicted_orbit_dimension`
    (Prop A.2.9 for GL(h), corrected Thm 2.3.8 for O(h), h for (R>0)^h)."""
    predicted = predicted_orbit_dimension(symmetry, params)
    if predicted is None:
        return None, f"no formula for {type(symmetry).__name__}"
    if isinstance(symmetry, MatrixNeuronSymmetry):
        h = symmetry.width
        n = m = 0
        for slot in symmetry.slots:
            t = params[slot.name]
            entries = t.numel() // t.shape[slot.axis]
            n, m = (n + entries, m) if slot.power > 0 else (n, m + entries)
        if isinstance(symmetry, HiddenOrthogonal):
            return predicted, f"C(h,2) − C((h−n−m)₊,2), h={h}, n={n}, m={m}"
        if isinstance(symmetry, GeneralLinearGroup):
            return predicted, f"h² − (h−n)₊(h−m)₊, h={h}, n={n}, m={m}"
    if isinstance(symmetry, PositiveScaling):
        return predicted, f"h = {symmetry.dim} (one scale per neuron)"
    return predicted, "predicted_orbit_dimension"


@contextlib.contextmanager
def _collected(into: list[str]) -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    into.extend(f"{w.category.__name__}: {w.message}" for w in caught)


def _detect(name: str, seed: int, repeats: int) -> tuple[list[Symmetry], float, list[str]]:
    """Symmetries of a fresh build of zoo model ``name`` (the last of ``repeats`` detections,
    each on a fresh build), the median detection time, and the warnings it raised."""
    entry = ZOO[name]
    x = entry.example_input(generator(seed))
    seconds: list[float] = []
    found: list[Symmetry] = []
    raised: list[str] = []
    for _ in range(max(repeats, 1)):
        model = entry.build()
        with _collected(raised):
            start = time.perf_counter()
            found = ps.symmetries(model, example_input=x)
            seconds.append(time.perf_counter() - start)
    return found, statistics.median(seconds), raised


SYMMETRY_COLUMNS = (
    "model",
    "symmetry",
    "family",
    "group",
    "dim",
    "exact",
    "max_relative_change",
    "orbit_dimension",
    "orbit_formula",
    "formula",
)
MODEL_COLUMNS = (
    "model",
    "parameters",
    "symmetries",
    "detect_seconds",
    "exact",
    "approximate",
    "max_change_exact",
    "max_change_approximate",
    "permutations",
    "hidden_units",
    "attention_heads",
    "attention_QK",
    "attention_VO",
    "warnings",
)


def _catalogue_model(
    name: str, config: ArchitectureCatalogueConfig
) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """One zoo model: its symmetry rows and its summary row."""
    found, seconds, raised = _detect(name, config.seed, config.detection_repeats)
    entry = ZOO[name]
    x = entry.example_input(generator(config.seed))
    model = entry.build().to(F64).eval()
    x = x.to(F64) if x.is_floating_point() else x
    params = ps.params_of(model)
    state = {**params, **dict(model.named_buffers())}
    with torch.no_grad():
        before = flat_output(ps.functional_call(model, state, x))
    draw = generator(config.seed + 1)
    rows: dict[str, list[Any]] = {k: [] for k in SYMMETRY_COLUMNS}
    for symmetry in found:
        change = 0.0
        for _ in range(config.elements):
            g = symmetry.sample(scale=config.scale, generator=draw, dtype=F64)
            with torch.no_grad():
                after = flat_output(ps.functional_call(model, symmetry.act(state, g), x))
            change = max(change, relative_change(before, after))
        measured, (expected, formula) = -1, (None, "discrete")
        if symmetry.dim:
            measured = ps.orbit_dimension(model, symmetry)
            expected, formula = orbit_formula(symmetry, params)
        row = (
            name,
            symmetry.name,
            family(symmetry),
            symmetry.group,
            symmetry.dim,
            symmetry.exact and symmetry.preserves == "function",
            change,
            measured,
            -1 if expected is None else expected,
            formula,
        )
        for key, value in zip(SYMMETRY_COLUMNS, row, strict=True):
            rows[key].append(value)
    exact = [c for c, e in zip(rows["max_relative_change"], rows["exact"], strict=True) if e]
    approx = [c for c, e in zip(rows["max_relative_change"], rows["exact"], strict=True) if not e]
    heads, head_dim = attention_heads(model)
    families = rows["family"]
    summary = {
        "model": name,
        "parameters": sum(p.numel() for p in params.values()),
        "symmetries": len(found),
        "detect_seconds": seconds,
        "exact": len(exact),
        "approximate": len(approx),
        "max_change_exact": max(exact, default=0.0),
        "max_change_approximate": max(approx, default=0.0),
        "permutations": sum(f in ("permutation", "head_permutation") for f in families),
        "hidden_units": name not in NO_HIDDEN_UNITS,
        "attention_heads": heads,
        "attention_QK": _per_head_gl(rows, "attention_QK", head_dim),
        "attention_VO": _per_head_gl(rows, "attention_VO", head_dim),
        "warnings": len(raised),
    }
    return rows, summary


def _per_head_gl(rows: Mapping[str, list[Any]], name: str, head_dim: int) -> int:
    """How many symmetries of family ``name`` are GL(head_dim) (one per head expected)."""
    return sum(
        f == name and g == f"GL({head_dim})"
        for f, g in zip(rows["family"], rows["group"], strict=True)
    )


def run_architecture_catalogue(config: ArchitectureCatalogueConfig, progress: Progress) -> Result:
    names = list(config.models) or list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        raise InvalidArgumentError(
            f"architecture-catalogue: unknown zoo models {unknown}; known: {', '.join(ZOO)}"
        )
    notes: list[str] = []
    available = []
    for name in names:
        if ZOO[name].available:
            available.append(name)
        else:
            notes.append(f"{name}: skipped, needs {', '.join(ZOO[name].needs)} (not importable)")
    if not available:
        raise InvalidArgumentError("architecture-catalogue: no zoo model can be built here")
    rows: dict[str, list[Any]] = {k: [] for k in SYMMETRY_COLUMNS}
    models: dict[str, list[Any]] = {k: [] for k in MODEL_COLUMNS}
    with torch_threads(config.threads):
        _detect(available[0], config.seed, 1)  # torch.export's one-off start-up, untimed
        for name in progress.track(available, description="zoo models"):
            symmetry_rows, summary = _catalogue_model(name, config)
            for key in SYMMETRY_COLUMNS:
                rows[key].extend(symmetry_rows[key])
            for key in MODEL_COLUMNS:
                models[key].append(summary[key])
    counts: dict[str, list[Any]] = {"model": [], "family": [], "count": []}
    for name in available:
        per_model = [f for m, f in zip(rows["model"], rows["family"], strict=True) if m == name]
        for fam in dict.fromkeys(rows["family"]):
            counts["model"].append(name)
            counts["family"].append(fam)
            counts["count"].append(per_model.count(fam))

    continuous = [i for i, d in enumerate(rows["dim"]) if d > 0]
    checked = [i for i in continuous if rows["orbit_formula"][i] >= 0]
    mismatched = [
        f"{rows['model'][i]}:{rows['symmetry'][i]} ({rows['orbit_dimension'][i]} vs "
        f"{rows['orbit_formula'][i]})"
        for i in checked
        if rows["orbit_dimension"][i] != rows["orbit_formula"][i]
    ]
    exact = [c for c, e in zip(rows["max_relative_change"], rows["exact"], strict=True) if e]
    approx = [c for c, e in zip(rows["max_relative_change"], rows["exact"], strict=True) if not e]
    exact_rows = [i for i, e in enumerate(rows["exact"]) if e]
    worst = max(exact_rows, key=lambda i: rows["max_relative_change"][i], default=None)
    with_hidden = [m for m, h in zip(models["model"], models["hidden_units"], strict=True) if h]
    no_permutation = [
        m
        for m, h, p in zip(
            models["model"], models["hidden_units"], models["permutations"], strict=True
        )
        if h and p == 0
    ]
    attention = [i for i, h in enumerate(models["attention_heads"]) if h > 0]
    attention_ok = [
        models["model"][i]
        for i in attention
        if models["attention_QK"][i] == models["attention_VO"][i] == models["attention_heads"][i]
    ]
    metrics: dict[str, Any] = {
        "models": available,
        "skipped": [n for n in names if n not in available],
        "symmetries": len(rows["symmetry"]),
        "families": sorted(set(rows["family"])),
        "exact_symmetries": len(exact),
        "max_change_exact": max(exact, default=0.0),
        "max_change_exact_at": (
            "none" if worst is None else f"{rows['model'][worst]}:{rows['symmetry'][worst]}"
        ),
        "approximate_symmetries": len(approx),
        "max_change_approximate": max(approx, default=0.0),
        "continuous_symmetries": len(continuous),
        "orbit_checked": len(checked),
        "orbit_matching": len(checked) - len(mismatched),
        "orbit_mismatches": mismatched,
        "orbit_without_formula": sorted(
            {rows["formula"][i] for i in continuous if rows["orbit_formula"][i] < 0}
        ),
        "models_with_hidden_units": len(with_hidden),
        "models_with_permutations": len(with_hidden) - len(no_permutation),
        "models_without_permutations": no_permutation,
        "attention_models": [models["model"][i] for i in attention],
        "attention_models_ok": attention_ok,
        "attention_heads": [models["attention_heads"][i] for i in attention],
        "attention_QK": [models["attention_QK"][i] for i in attention],
        "attention_VO": [models["attention_VO"][i] for i in attention],
        "detect_seconds_total": sum(models["detect_seconds"]),
        "detect_seconds_max": max(models["detect_seconds"]),
        "detection_warnings": sum(models["warnings"]),
    }
    notes += [
        "invariance: ‖f(g·θ, x) − f(θ, x)‖ / ‖f(θ, x)‖ over every float output tensor, float64, "
        f"eval mode, on the zoo's example input; {config.elements} random elements per symmetry "
        f"(continuous: exp of an algebra element of scale {config.scale:g}); BatchNorm running "
        "statistics are in the acted-on dict ({**params_of(model), **named_buffers()})",
        "exact = Symmetry.exact and preserves the function; normalisation-layer rescalings "
        "(norm_scaling, LayerNorm/BatchNorm with eps > 0) are approximate and reported apart",
        "orbit dimension: rank of the tangent map at the zoo's random initialisation (a generic "
        "point), against h² − (h−n)₊(h−m)₊ for GL(h) (Prop A.2.9; n, m: entries per neuron of "
        "the slots acted on by g and by g⁻ᵀ) and h for (R>0)^h",
        "detection time: median of "
        f"{config.detection_repeats} call(s) of ps.symmetries(model, example_input=x) on a fresh "
        "build, after one untimed detection (torch.export start-up)",
        *(f"{n}: no hidden units ({why})" for n, why in NO_HIDDEN_UNITS.items() if n in available),
    ]
    return Result(metrics, {"symmetries": rows, "models": models, "family_counts": counts}, notes)


def plot_invariance_errors(axes: Any, models: dict[str, list[Any]], names: list[str]) -> None:
    """The largest output change under a random element, per model (rows ``names``), of its
    exact and of its not-exact symmetries, against the 1e-10 line (columns
    ``max_change_exact``/``max_change_approximate`` counted by ``exact``/``approximate``)."""
    positions = np.arange(len(names))
    floor = 1e-18  # an exact zero is drawn here
    for column, count, marker, colour, label in (
        ("max_change_exact", "exact", "o", "tab:green", "exact"),
        ("max_change_approximate", "approximate", "x", "tab:orange", "not exact (norm eps > 0, …)"),
    ):
        values = np.array([max(float(v), floor) for v in models[column]])
        keep = np.array([int(n) > 0 for n in models[count]])  # models with such symmetries
        axes.scatter(values[keep], positions[keep], marker=marker, color=colour, label=label)
    axes.axvline(EXACT_TOLERANCE, color="red", linestyle="--", linewidth=1, label="1e-10")
    axes.set_xscale("log")
    axes.set_yticks(positions, names, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("max ‖Δf‖/‖f‖ under a random element (float64; 0 drawn at 1e-18)")
    axes.set_title("invariance error", fontsize=10)
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)


def plot_architecture_catalogue(result: Result) -> dict[str, Any]:
    """Table 1.1 on the zoo: (left) symmetries found per architecture and family, (middle)
    largest relative output change of the exact and the approximate ones on a log axis,
    (right) detection time."""
    counts, models = result.series["family_counts"], result.series["models"]
    names = list(models["model"])
    families = list(dict.fromkeys(counts["family"]))
    grid = np.zeros((len(names), len(families)), dtype=int)
    for model, fam, count in zip(counts["model"], counts["family"], counts["count"], strict=True):
        grid[names.index(model), families.index(fam)] = count
    figure, (left, middle, right) = plt.subplots(
        1, 3, figsize=(17, 0.42 * len(names) + 2.6), gridspec_kw={"width_ratios": [2.2, 1, 0.8]}
    )
    shown = np.where(grid > 0, grid, np.nan)
    left.imshow(np.log1p(shown), cmap="Blues", aspect="auto", vmin=0)
    for (i, j), count in np.ndenumerate(grid):
        if count:
            left.text(j, i, str(count), ha="center", va="center", fontsize=8)
    left.set_xticks(range(len(families)), families, rotation=40, ha="right", fontsize=8)
    left.set_yticks(range(len(names)), names, fontsize=8)
    left.set_title("symmetries found on the traced graph (count per family)")
    positions = np.arange(len(names))
    plot_invariance_errors(middle, models, names)
    right.barh(positions, [1e3 * float(s) for s in models["detect_seconds"]], color="tab:blue")
    right.set_yticks(positions, [])
    right.invert_yaxis()
    right.set_xlabel("detection time (ms)")
    right.set_title("ps.symmetries(model, example_input=x)")
    figure.tight_layout()
    return {"architecture_catalogue.png": figure}


def _exactness_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    return (
        f"max {m['max_change_exact']:.1e} over {m['exact_symmetries']} exact symmetries on "
        f"{len(m['models'])} models (worst: {m['max_change_exact_at']}); the "
        f"{m['approximate_symmetries']} approximate ones: up to {m['max_change_approximate']:.1e}",
        m["exact_symmetries"] > 0 and m["max_change_exact"] <= EXACT_TOLERANCE,
    )


def _orbit_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    skipped = m["continuous_symmetries"] - m["orbit_checked"]
    text = f"{m['orbit_matching']}/{m['orbit_checked']} continuous symmetries match"
    if skipped:
        text += f" ({skipped} without a formula skipped: {m['orbit_without_formula']})"
    if m["orbit_mismatches"]:
        text += f"; mismatches: {m['orbit_mismatches'][:5]}"
    return text, m["orbit_checked"] > 0 and m["orbit_matching"] == m["orbit_checked"]


def _permutation_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    excluded = [n for n in m["models"] if n in NO_HIDDEN_UNITS]
    text = (
        f"{m['models_with_permutations']}/{m['models_with_hidden_units']} models with hidden "
        "units have a permutation symmetry"
    )
    if m["models_without_permutations"]:
        text += f"; none found on {m['models_without_permutations']}"
    if excluded:
        text += f" ({', '.join(excluded)}: no hidden units)"
    return text, m["models_with_hidden_units"] > 0 and not m["models_without_permutations"]


def _attention_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if not m["attention_models"]:
        return "not evaluated: no attention model in this run", None
    details = ", ".join(
        f"{n}: {q} QK / {v} VO for {h} heads"
        for n, h, q, v in zip(
            m["attention_models"],
            m["attention_heads"],
            m["attention_QK"],
            m["attention_VO"],
            strict=True,
        )
    )
    return (
        f"{len(m['attention_models_ok'])}/{len(m['attention_models'])} attention models "
        f"({details})",
        len(m["attention_models_ok"]) == len(m["attention_models"]),
    )


CATALOGUE_SOURCE = "issue 12 / dissertation Table 1.1"

experiment(
    "architecture-catalogue",
    seed_ref="issue 12 / seed 001, ch. 1 Table 1.1; Prop A.2.9 (graph detection on the zoo)",
    description=(
        "every model of the test zoo (CNNs with and without BatchNorm, Conv1d, ResNet blocks, "
        "a torchvision-layout ResNet-18, a residual MLP, nanoGPT-style decoders, LSTM/GRU, "
        "Hugging Face GPT-2 and BERT when transformers is installed): symmetries found by "
        "ps.symmetries(model, example_input=x) per family, relative output change under random "
        "elements (float64, eval mode), orbit dimensions against Prop A.2.9, detection time"
    ),
    data="none (the zoo's random models and example inputs)",
    quick=ArchitectureCatalogueConfig(),
    paper=ArchitectureCatalogueConfig(elements=5, detection_repeats=5, threads=0),
    claims=[
        Claim(
            "every exact symmetry found on a real architecture leaves its output unchanged",
            CATALOGUE_SOURCE,
            f"max relative output change ≤ {EXACT_TOLERANCE:g} (float64, eval mode)",
            _exactness_claim,
        ),
        Claim(
            "orbit dimensions at generic points equal the formula: h for (R>0)^h, "
            "h² − (h−n)₊(h−m)₊ for GL(h) and per-head attention GL(d)",
            f"{CATALOGUE_SOURCE}; Prop A.2.9",
            "measured rank of the tangent map = formula for every continuous symmetry with one",
            _orbit_claim,
        ),
        Claim(
            "detection finds permutations on every architecture with hidden units",
            CATALOGUE_SOURCE,
            "≥ 1 permutation symmetry per model with hidden units",
            _permutation_claim,
        ),
        Claim(
            "attention layers get one query-key GL(d) and one value-output GL(d) per head",
            f"{CATALOGUE_SOURCE} (attention rows)",
            "#attention_QK = #attention_VO = number of heads, each GL(head dim)",
            _attention_claim,
        ),
    ],
    plot=plot_architecture_catalogue,
)(run_architecture_catalogue)
