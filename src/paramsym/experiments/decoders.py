"""The groups of Hugging Face architecture families (issue 28; notes 005 §1–§5).

``decoder-catalogue``: for one small model of each family of :data:`paramsym.nn.hf.HF_KINDS`
(Llama, Mistral, Qwen2 and Gemma with rotary embeddings and grouped-query attention, Phi with
partial rotary embeddings, GPT-2 base and LM head, OPT, BLOOM with ALiBi, the T5 encoder, Swin),
built by :func:`~paramsym.nn.hf.hf_tiny` as users have them (default settings, ``use_cache``
on, the default attention kernel, weights off their initialisation, float64, eval mode): the
symmetries ``ps.symmetries(model, example_input=x)`` finds, counted per family (the name up to
``[``) with their summed Lie-algebra dimensions; the largest relative change of the first output
field (``last_hidden_state`` or ``logits``) under random non-identity elements; and detection
time. The expected structure (heads, key/value heads, head dimension, rotated coordinates,
position-bias tables) is read from each model's config and parameters, not from detection.

Needs the optional package ``transformers``; without it the run reports every claim as not
evaluated and says what to install.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.core.calls import call_arguments
from paramsym.core.params import stateless_call
from paramsym.core.precision import KeepFloat64
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.architectures import (
    EXACT_TOLERANCE,
    family,
    plot_invariance_errors,
)
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import torch_threads
from paramsym.nn.hf import HF_KINDS, hf_example_input, hf_tiny
from paramsym.symmetry import HeadPermutation
from paramsym.symmetry.base import Symmetry

F64 = torch.float64
ROPE_KINDS = ("llama", "mistral", "qwen2", "gemma", "phi")
"""Families with rotary position embeddings (Phi on part of each head)."""
BIAS_TABLE_KINDS = ("t5", "swin")
"""Families whose per-head position biases are parameters (T5's relative_attention_bias,
Swin's relative_position_bias_table)."""
ALIBI_KINDS = ("bloom",)
"""Families whose per-head biases are slopes computed from the head index (ALiBi)."""
TABLE_NAMES = ("relative_attention_bias", "relative_position_bias_table")
"""Parameter names (substrings) of per-head position-bias tables."""
FAMILIES = ("attention_QK_rotary", "attention_QK", "attention_VO", "head_permutation",
            "permutation", "sign_flip", "rescaling", "mean_translation",
            "norm_scaling")  # fmt: skip
"""Families in the order of the tables (others found are appended)."""
MISSING = "transformers is not installed (pip install transformers)"


@dataclass(frozen=True)
class DecoderCatalogueConfig:
    """Settings of ``decoder-catalogue``.

    Attributes:
        seed: the models' weights (``hf_tiny(seed=seed)``); the example input is drawn from
            seed + 1, the group elements from seed + 2.
        kinds: architectures to catalogue (names of ``HF_KINDS``); empty: all of them.
        width: hidden width (Swin: twice its embedding width); 4 heads, 2 key/value heads.
        layers: transformer blocks (Swin: blocks of its one stage).
        elements: random non-identity elements drawn per symmetry (the largest change is kept).
        scale: size of the Lie-algebra element of continuous samples (``Symmetry.sample``).
        threads: torch intra-op threads during the run (0: unchanged).
    """

    seed: int = 0
    kinds: tuple[str, ...] = ()
    width: int = 32
    layers: int = 1
    elements: int = 2
    scale: float = 0.5
    threads: int = 1


def is_exact(symmetry: Symmetry) -> bool:
    """Exact and function-preserving (norm-layer rescalings with eps > 0 are approximate)."""
    return bool(symmetry.exact) and symmetry.preserves == "function"


@dataclass(frozen=True)
class Expected:
    """What a model's config and parameters say detection should find (independent of it)."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rotated: int  # rotated coordinates per head (0 without rotary embeddings)
    tables: tuple[str, ...]  # per-head position-bias tables that are parameters


def expected_structure(kind: str, model: nn.Module) -> Expected:
    """Heads, key/value heads, head dimension and rotated coordinates from the config;
    position-bias tables from the parameter names."""
    c: Any = model.config
    if kind == "swin":
        layers, heads, width = sum(c.depths), c.num_heads[0], c.embed_dim
    elif kind == "t5":
        layers, heads, width = c.num_layers, c.num_heads, c.num_heads * c.d_kv
    else:
        layers, heads, width = c.num_hidden_layers, c.num_attention_heads, c.hidden_size
    head_dim = getattr(c, "head_dim", None) or width // heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    rotated = 0
    if kind in ROPE_KINDS:
        rope = getattr(c, "rope_parameters", None) or {}
        factor = rope.get("partial_rotary_factor", getattr(c, "partial_rotary_factor", 1.0))
        rotated = int(head_dim * factor)
    tables = tuple(n for n, _ in model.named_parameters() if any(t in n for t in TABLE_NAMES))
    return Expected(layers, heads, kv_heads, head_dim, rotated, tables)


def first_output(model: nn.Module, state: dict[str, Tensor], x: dict[str, Tensor]) -> Tensor:
    """The first field of the output (``last_hidden_state`` or ``logits``) at ``state``, called
    as detection calls the model (cache off)."""
    args, kwargs = call_arguments(model, x)
    with torch.no_grad():
        return stateless_call(model, state, args, kwargs)[0]


def largest_change(
    model: nn.Module,
    symmetry: Symmetry,
    x: dict[str, Tensor],
    elements: int,
    scale: float,
    generator: torch.Generator,
) -> float:
    """Largest ‖f(g·θ) − f(θ)‖/‖f(θ)‖ of the first output field over ``elements`` random
    non-identity elements (0 for a group with only the identity), the model's float32 casts
    kept in float64 (:class:`~paramsym.core.precision.KeepFloat64`: BLOOM's float32 softmax
    moves by 5e-9 under a key-bias shift that is exact in exact arithmetic)."""
    state = {k: v.detach() for k, v in [*model.named_parameters(), *model.named_buffers()]}
    if getattr(symmetry, "order", None) == 1:
        return 0.0
    with KeepFloat64():
        reference = first_output(model, state, x)
    worst = 0.0
    for _ in range(elements):
        g = symmetry.sample(scale=scale, generator=generator, dtype=F64, non_identity=True)
        with KeepFloat64():
            moved = first_output(model, symmetry.act(state, g), x)
        worst = max(worst, float((moved - reference).norm() / reference.norm().clamp_min(1e-300)))
    return worst


def output_resolution(model: nn.Module, x: dict[str, Tensor], relative: float = 1e-12) -> float:
    """Relative change of the first output field when every parameter is multiplied by
    ``1 + relative·randn``: 0 where the output is rounded to float32 after the last norm
    (Gemma's RMSNorm), so that changes of this size cannot show there."""
    state = {k: v.detach() for k, v in [*model.named_parameters(), *model.named_buffers()]}
    draw = torch.Generator().manual_seed(0)
    params = dict(model.named_parameters())
    moved = {
        k: v * (1 + relative * torch.randn(v.shape, generator=draw, dtype=v.dtype))
        if k in params and v.is_floating_point()
        else v
        for k, v in state.items()
    }
    reference = first_output(model, state, x)
    return float((first_output(model, moved, x) - reference).norm() / reference.norm())


@contextlib.contextmanager
def _collected(into: list[str]) -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    into.extend(f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught)


def _head_check(
    model: nn.Module, found: list[Symmetry], expected: Expected, x: dict[str, Tensor]
) -> dict[str, Any]:
    """The exact query–key / value–output groups against the config, and the position-bias
    tables in the exact head permutations (with the smallest change when the tables are left
    out of one)."""
    exact: list[Any] = [s for s in found if is_exact(s)]  # neuron symmetries: slots, width
    qk = [s for s in exact if family(s) in ("attention_QK_rotary", "attention_QK")]
    rotary = [s for s in exact if family(s) == "attention_QK_rotary"]
    vo = [s for s in exact if family(s) == "attention_VO"]
    heads = [s for s in exact if family(s) == "head_permutation"]
    d, r = expected.head_dim, expected.rotated
    on_rotated = 0  # QK GL groups acting on rotated coordinates
    for s in qk:
        if family(s) == "attention_QK_rotary" or not r:
            continue
        starts = {(slot.offset or 0) % d for slot in s.slots}
        if s.width > d - r or any(start < r for start in starts):
            on_rotated += 1
    moved = {slot.name for s in heads for slot in s.slots} & set(expected.tables)
    planted = []  # each head permutation with its tables left out: not a symmetry
    for s in heads:
        kept = [slot for slot in s.slots if slot.name not in expected.tables]
        if len(kept) < len(s.slots):
            broken = HeadPermutation(s.width, kept, (), site="without tables")
            draw = torch.Generator().manual_seed(0)
            planted.append(largest_change(model, broken, x, 1, 0.5, draw))
    return {
        "qk_groups": len({s.name.split("[", 1)[-1] for s in qk}),
        "rotary_groups": len(rotary),
        "rotary_dims": sorted({s.dim for s in rotary}),
        "rotary_widths": sorted({s.width for s in rotary}),
        "qk_gl_on_rotated": on_rotated,
        "vo_groups": len(vo),
        "vo_dims": sorted({s.dim for s in vo}),
        "head_permutations": len(heads),
        "head_permutations_inexact": sum(family(s) == "head_permutation" for s in found)
        - len(heads),
        "tables": len(expected.tables),
        "tables_moved": len(moved),
        "change_without_tables": min(planted, default=0.0),
    }


SYMMETRY_COLUMNS = ("kind", "symmetry", "family", "group", "dim", "exact", "max_relative_change")
FAMILY_COLUMNS = ("kind", "family", "count", "dim", "exact_count")
MODEL_COLUMNS = (
    "kind", "model_class", "parameters", "layers", "heads", "kv_heads", "head_dim", "rotated",
    "symmetries", "exact", "approximate", "exact_dim", "max_change_exact",
    "max_change_approximate", "detect_seconds", "warnings", "output_change_at_1e-12",
    "qk_groups", "rotary_groups", "rotary_dims", "rotary_widths", "qk_gl_on_rotated",
    "vo_groups", "vo_dims", "head_permutations", "head_permutations_inexact", "tables",
    "tables_moved", "change_without_tables",
)  # fmt: skip


def _catalogue_kind(
    kind: str, config: DecoderCatalogueConfig, draw: torch.Generator
) -> tuple[dict[str, list[Any]], dict[str, Any], list[str]]:
    """One architecture: its symmetry rows, its summary row and the warnings detection raised."""
    model = hf_tiny(kind, seed=config.seed, width=config.width, layers=config.layers)
    x = hf_example_input(kind, seed=config.seed + 1)
    raised: list[str] = []
    with _collected(raised):
        start = time.perf_counter()
        found = list(ps.symmetries(model, example_input=x))
        seconds = time.perf_counter() - start
    expected = expected_structure(kind, model)
    rows: dict[str, list[Any]] = {k: [] for k in SYMMETRY_COLUMNS}
    for s in found:
        change = largest_change(model, s, x, config.elements, config.scale, draw)
        values = (kind, s.name, family(s), s.group, s.dim, is_exact(s), change)
        for key, value in zip(SYMMETRY_COLUMNS, values, strict=True):
            rows[key].append(value)
    exact = [c for c, e in zip(rows["max_relative_change"], rows["exact"], strict=True) if e]
    approx = [c for c, e in zip(rows["max_relative_change"], rows["exact"], strict=True) if not e]
    summary = {
        "kind": kind,
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "layers": expected.layers,
        "heads": expected.heads,
        "kv_heads": expected.kv_heads,
        "head_dim": expected.head_dim,
        "rotated": expected.rotated,
        "symmetries": len(found),
        "exact": len(exact),
        "approximate": len(approx),
        "exact_dim": sum(s.dim for s in found if is_exact(s)),
        "max_change_exact": max(exact, default=0.0),
        "max_change_approximate": max(approx, default=0.0),
        "detect_seconds": seconds,
        "warnings": len(raised),
        "output_change_at_1e-12": output_resolution(model, x),
        **_head_check(model, found, expected, x),
    }
    return rows, summary, raised


def _family_table(rows: dict[str, list[Any]], kinds: list[str]) -> dict[str, list[Any]]:
    found = list(dict.fromkeys(rows["family"]))
    families = [f for f in FAMILIES if f in found] + [f for f in found if f not in FAMILIES]
    table: dict[str, list[Any]] = {k: [] for k in FAMILY_COLUMNS}
    pairs = list(zip(rows["kind"], rows["family"], strict=True))
    for kind in kinds:
        for fam in families:
            at = [i for i, pair in enumerate(pairs) if pair == (kind, fam)]
            exact = sum(bool(rows["exact"][i]) for i in at)
            values = (kind, fam, len(at), sum(rows["dim"][i] for i in at), exact)
            for key, value in zip(FAMILY_COLUMNS, values, strict=True):
                table[key].append(value)
    return table


def run_decoder_catalogue(config: DecoderCatalogueConfig, progress: Progress) -> Result:
    kinds = list(config.kinds) or list(HF_KINDS)
    unknown = [k for k in kinds if k not in HF_KINDS]
    if unknown:
        raise InvalidArgumentError(
            f"decoder-catalogue: unknown kinds {unknown}; known: {', '.join(HF_KINDS)}"
        )
    if importlib.util.find_spec("transformers") is None:
        progress.log(f"decoder-catalogue: nothing to catalogue, {MISSING}")
        return Result(
            {"kinds": [], "skipped": kinds, "transformers": "not installed"},
            {},
            [f"every architecture skipped: {MISSING}; claims not evaluated"],
        )
    import transformers

    rows: dict[str, list[Any]] = {k: [] for k in SYMMETRY_COLUMNS}
    models: dict[str, list[Any]] = {k: [] for k in MODEL_COLUMNS}
    notes: list[str] = []
    draw = torch.Generator().manual_seed(config.seed + 2)
    with torch_threads(config.threads):
        with warnings.catch_warnings():  # torch.export's one-off start-up, untimed
            warnings.simplefilter("ignore")
            ps.symmetries(hf_tiny("gpt2", layers=1), example_input=hf_example_input("gpt2"))
        for kind in progress.track(kinds, description="architectures"):
            symmetry_rows, summary, raised = _catalogue_kind(kind, config, draw)
            for key in SYMMETRY_COLUMNS:
                rows[key].extend(symmetry_rows[key])
            for key in MODEL_COLUMNS:
                models[key].append(summary[key])
            notes += [f"{kind}: detection warned: {w}" for w in dict.fromkeys(raised)]
    exact_rows = [i for i, e in enumerate(rows["exact"]) if e]
    worst = max(exact_rows, key=lambda i: rows["max_relative_change"][i], default=None)
    changes = rows["max_relative_change"]
    metrics: dict[str, Any] = {
        "kinds": kinds,
        "transformers": transformers.__version__,
        "width": config.width,
        "layers": config.layers,
        "symmetries": len(rows["symmetry"]),
        "families": sorted(set(rows["family"])),
        "exact_symmetries": len(exact_rows),
        "max_change_exact": max((changes[i] for i in exact_rows), default=0.0),
        "max_change_exact_at": (
            "none" if worst is None else f"{rows['kind'][worst]}:{rows['symmetry'][worst]}"
        ),
        "exact_over_tolerance": [
            f"{rows['kind'][i]}:{rows['symmetry'][i]} ({changes[i]:.1e})"
            for i in exact_rows
            if not changes[i] <= EXACT_TOLERANCE
        ],
        "approximate_symmetries": len(rows["symmetry"]) - len(exact_rows),
        "max_change_approximate": max(
            (c for c, e in zip(changes, rows["exact"], strict=True) if not e), default=0.0
        ),
        "detect_seconds_total": sum(models["detect_seconds"]),
        "detect_seconds_max": max(models["detect_seconds"]),
        "detection_warnings": sum(models["warnings"]),
        "float32_outputs": [
            k for k, c in zip(kinds, models["output_change_at_1e-12"], strict=True) if c == 0
        ],
    }
    notes += [
        "models: paramsym.nn.hf.hf_tiny(kind, width, layers) (4 heads; Llama, Mistral, Qwen2, "
        "Gemma with 2 key/value heads; Phi partial_rotary_factor 0.5), weights + 0.1·randn, "
        "float64, eval mode, use_cache and attention kernel at their defaults",
        "invariance: ‖f(g·θ, x) − f(θ, x)‖ / ‖f(θ, x)‖ of the first output field "
        "(last_hidden_state or logits; cache off, as detection calls the model), "
        f"{config.elements} random non-identity elements per symmetry (continuous: exp of an "
        f"algebra element of scale {config.scale:g}); exact = Symmetry.exact and preserves the "
        "function; norm_scaling (LayerNorm/RMSNorm eps > 0) is approximate and reported apart",
        "resolution: output_change_at_1e-12 is the relative output change when every parameter "
        "is multiplied by 1 + 1e-12·randn; where it is 0 (float32_outputs: the last norm rounds "
        "to float32, notes 005 §4) the invariance check there resolves float32 rounding only; "
        "Llama, Mistral and Qwen2 round their stream to float32 inside RMSNorm but multiply by "
        "the norm weight in float64, so exact groups often measure 0.0 there",
        "expected structure from each config (heads, key/value heads, head_dim, "
        "partial_rotary_factor) and parameter names (relative_attention_bias, "
        "relative_position_bias_table), not from detection",
        "detection time: one call of ps.symmetries(model, example_input=x) per model after an "
        "untimed detection of GPT-2 (torch.export start-up)",
    ]
    series = {
        "symmetries": rows,
        "models": models,
        "families": _family_table(rows, kinds),
    }
    return Result(metrics, series, notes)


def plot_decoder_catalogue(result: Result) -> dict[str, Any]:
    """(left) summed Lie-algebra dimension per continuous family and architecture, (middle)
    count per family of the discrete groups, (right) largest invariance error."""
    if not result.series.get("families"):
        return {}
    table, models = result.series["families"], result.series["models"]
    kinds = list(models["kind"])
    families = list(dict.fromkeys(table["family"]))
    dims = np.zeros((len(kinds), len(families)), dtype=int)
    counts = np.zeros_like(dims)
    for kind, fam, count, dim in zip(
        table["kind"], table["family"], table["count"], table["dim"], strict=True
    ):
        dims[kinds.index(kind), families.index(fam)] = dim
        counts[kinds.index(kind), families.index(fam)] = count
    continuous = [j for j in range(len(families)) if dims[:, j].any()]
    discrete = [j for j in range(len(families)) if counts[:, j].any() and not dims[:, j].any()]
    figure, (left, middle, right) = plt.subplots(
        1, 3, figsize=(16, 0.45 * len(kinds) + 2.8), gridspec_kw={"width_ratios": [2, 1.1, 1]}
    )
    for axes, columns, grid, title, cmap in (
        (left, continuous, dims, "total symmetry dimension per family (count)", "Blues"),
        (middle, discrete, counts, "discrete groups (count per family)", "Oranges"),
    ):
        shown = np.log1p(grid[:, columns].astype(float))
        axes.imshow(np.where(shown > 0, shown, np.nan), cmap=cmap, aspect="auto")
        for i in range(len(kinds)):
            for jj, j in enumerate(columns):
                if counts[i, j]:
                    text = f"{dims[i, j]}\n({counts[i, j]})" if grid is dims else str(counts[i, j])
                    dark = shown[i, jj] > 0.6 * shown.max()
                    axes.text(jj, i, text, ha="center", va="center", fontsize=7,
                              color="white" if dark else "black")  # fmt: skip
        axes.set_xticks(range(len(columns)), [families[j] for j in columns], rotation=35,
                        ha="right", fontsize=8)  # fmt: skip
        axes.set_yticks(range(len(kinds)), kinds, fontsize=8)
        axes.set_title(title, fontsize=10)
    plot_invariance_errors(right, models, kinds)
    figure.tight_layout()
    return {"decoder_catalogue.png": figure}


# -- claims -----------------------------------------------------------------------------------


def _per_kind(result: Result, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of the models table whose kind is in ``names``."""
    models = result.series.get("models", {})
    return [
        {k: column[i] for k, column in models.items()}
        for i, kind in enumerate(models.get("kind", []))
        if kind in names
    ]


def _not_run(m: dict[str, Any], names: tuple[str, ...]) -> tuple[str, None] | None:
    """Why a claim about the architectures ``names`` cannot be evaluated on this run, if so."""
    if m.get("transformers") == "not installed":
        return f"not evaluated: {MISSING}", None
    if not any(kind in names for kind in m["kinds"]):
        return f"not evaluated: none of {', '.join(names)} in this run", None
    return None


def _exactness_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if skipped := _not_run(m, HF_KINDS):
        return skipped
    text = (
        f"max {m['max_change_exact']:.1e} over {m['exact_symmetries']} exact symmetries on "
        f"{len(m['kinds'])} models (worst: {m['max_change_exact_at']}); the "
        f"{m['approximate_symmetries']} approximate ones: up to {m['max_change_approximate']:.1e}"
    )
    if m["exact_over_tolerance"]:
        text += f"; over 1e-10: {m['exact_over_tolerance'][:6]}"
    if m.get("float32_outputs"):
        text += f"; output rounded to float32 on {m['float32_outputs']}"
    return text, m["exact_symmetries"] > 0 and not m["exact_over_tolerance"]


def _rotary_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if skipped := _not_run(m, ROPE_KINDS):
        return skipped
    parts, ok = [], True
    for row in _per_kind(result, ROPE_KINDS):
        want = row["kv_heads"] * row["layers"]
        good = (
            row["rotary_groups"] == want
            and row["rotary_dims"] == row["rotary_widths"] == [row["rotated"]]
            and row["qk_gl_on_rotated"] == 0
        )
        ok &= good
        parts.append(
            f"{row['kind']}: {row['rotary_groups']}/{want} of dim {row['rotary_dims']} "
            f"(rotated {row['rotated']} of {row['head_dim']}), GL on rotated "
            f"{row['qk_gl_on_rotated']}"
        )
    return "; ".join(parts), ok


def _grouped_query_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if m.get("transformers") == "not installed":
        return f"not evaluated: {MISSING}", None
    rows = [r for r in _per_kind(result, HF_KINDS) if r["kv_heads"] < r["heads"]]
    if not rows:
        return "not evaluated: no grouped-query model in this run", None
    parts, ok = [], True
    for row in rows:
        want = row["kv_heads"] * row["layers"]
        vo_dims = [row["head_dim"] ** 2]
        good = row["qk_groups"] == row["vo_groups"] == want and row["vo_dims"] == vo_dims
        ok &= good
        parts.append(
            f"{row['kind']}: {row['qk_groups']} QK / {row['vo_groups']} VO for "
            f"{row['kv_heads']}×{row['layers']} key/value heads ({row['heads']} query heads)"
        )
    return "; ".join(parts), ok


def _position_bias_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if skipped := _not_run(m, BIAS_TABLE_KINDS + ALIBI_KINDS):
        return skipped
    parts, ok = [], True
    for row in _per_kind(result, BIAS_TABLE_KINDS):
        good = (
            row["head_permutations"] > 0
            and row["tables"] > 0
            and row["tables_moved"] == row["tables"]
            and row["change_without_tables"] > 1e-3
        )
        ok &= good
        parts.append(
            f"{row['kind']}: exact head permutations {row['head_permutations']}, moving "
            f"{row['tables_moved']}/{row['tables']} tables (without them: "
            f"{row['change_without_tables']:.1e})"
        )
        if row["head_permutations_inexact"]:
            parts[-1] += f", {row['head_permutations_inexact']} marked inexact"
    for row in _per_kind(result, ALIBI_KINDS):
        count = row["head_permutations"] + row["head_permutations_inexact"]
        ok &= count == 0
        parts.append(f"{row['kind']}: head permutations {count}")
    return "; ".join(parts), ok


SOURCE = "issue 28; notes 005"

experiment(
    "decoder-catalogue",
    seed_ref="issue 28 (notes 005 §1–§5: groups of modern transformers)",
    description=(
        "one small Hugging Face model per architecture family (Llama, Mistral, Qwen2, Gemma, "
        "Phi, GPT-2, GPT-2 LM head, OPT, BLOOM, T5 encoder, Swin) as users have it: the "
        "symmetries ps.symmetries finds per family with their summed dimensions, the relative "
        "change of the first output under random elements (float64), detection time. Needs "
        "the optional package transformers"
    ),
    data="none (tiny models built from configs; needs transformers, nothing is downloaded)",
    quick=DecoderCatalogueConfig(),
    paper=DecoderCatalogueConfig(width=64, layers=2, elements=5),
    claims=[
        Claim(
            "every exact symmetry found on a Hugging Face model leaves its output unchanged",
            f"{SOURCE} §1–§5",
            f"max relative change of the first output ≤ {EXACT_TOLERANCE:g} (float64)",
            _exactness_claim,
        ),
        Claim(
            "rotary models get the rotary query-key group, never a GL on rotated coordinates",
            f"{SOURCE} §1",
            "(C*)^{r/2} of dimension r = rotated coordinates (head_dim; Phi: its rotated part) "
            "per key/value head",
            _rotary_claim,
        ),
        Claim(
            "grouped-query attention gets one query-key and one value-output group per "
            "key/value head",
            f"{SOURCE} §2",
            "#QK = #VO = key/value heads × layers, VO = GL(head_dim)",
            _grouped_query_claim,
        ),
        Claim(
            "head permutations move per-head position-bias tables; ALiBi forbids them",
            f"{SOURCE} §5",
            "T5 and Swin: exact head permutations include every table (left out: change "
            "> 1e-3); BLOOM: none",
            _position_bias_claim,
        ),
    ],
    plot=plot_decoder_catalogue,
)(run_decoder_catalogue)
