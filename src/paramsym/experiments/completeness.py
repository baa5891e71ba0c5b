"""Is the catalogue complete? (issue 44; notes 006; seed 004 as the yardstick).

``catalogue-completeness``: for one small model of each architecture the library supports
(:data:`~paramsym.experiments.completeness_models.ARCHITECTURES`: decoders with multi-head,
grouped-query and multi-query attention, encoders, vision transformers, CNNs with BatchNorm in
evaluation mode, a ResNet block, LSTM and GRU, the papers' MLPs), called directly and from
inside a user's module, :func:`paramsym.audit` measures

    P,  FD = rank J,  flat = P − FD,  catalogue = dim(local orbit) = rank[T₁; T₂; …],
    named = dim(null J ∩ span T),  missing = flat − named,

with the missing directions split into *unreached* ones (parameters no input reaches: a dead
ReLU unit, a relative-position bucket no pair of positions falls in) and *point-degenerate*
ones (missing at θ but not at a perturbed point); the rest would be a symmetry the catalogue
does not name. Seed 004 (Grigsby and Lindsey, Cor. 4.3) bounds FD ≤ P − dim(local orbit); the
catalogue is complete exactly when the bound holds with equality, up to the degenerate
directions of ReLU models.

Needs ``transformers`` for the Hugging Face models; without it they are skipped and said so.
"""

from __future__ import annotations

import importlib.util
import time
import warnings
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

import paramsym as ps
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.completeness_models import ARCHITECTURES, wrapped
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import torch_threads

COLUMNS = ("model", "kind", "call", "smooth", "parameters", "fd", "flat", "catalogue", "named",
           "missing", "unreached", "point_degenerate", "unexplained", "determined",
           "not_flat", "carriers", "seconds")  # fmt: skip
MISSING_TRANSFORMERS = "transformers is not installed (pip install transformers)"


@dataclass(frozen=True)
class CompletenessConfig:
    """Settings of ``catalogue-completeness``.

    Attributes:
        models: architectures to audit (names of ``ARCHITECTURES``); empty: all of them.
        width: hidden width of every model (2 heads; the zoo models keep their own sizes).
        seed: the models' weights; the example input from seed + 1, the audit's data from seed.
        points: 2 audits a second, perturbed point of the models with ReLU units (separates
            point-degenerate directions); 1 audits θ only. Smooth models are audited at θ
            only: at a random point they have no degenerate directions to separate.
        wrapped: also audit each Hugging Face model inside a user's module (what changes
            there is the model's own cache and input handling; the zoo's and the MLPs'
            forwards are traced the same way from anywhere, and are audited once).
        threads: torch intra-op threads during the run (0: unchanged).
    """

    models: tuple[str, ...] = ()
    width: int = 8
    seed: int = 0
    points: int = 2
    wrapped: bool = True
    threads: int = 1


def _row(name: str, call: str, report: Any, seconds: float) -> dict[str, Any]:
    arch = ARCHITECTURES[name]
    degenerate = report.unreached + (report.point_degenerate or 0)
    return {
        "model": name,
        "kind": arch.kind,
        "call": call,
        "smooth": arch.smooth,
        "parameters": report.parameters,
        "fd": report.functional_dimension,
        "flat": report.flat,
        "catalogue": report.ranks["catalogue"]["rank"],
        "named": report.named,
        "missing": report.missing,
        "unreached": report.unreached,
        "point_degenerate": report.point_degenerate or 0,
        "unexplained": max(report.missing - degenerate, 0),
        "determined": report.determined,
        "not_flat": len(report.not_flat),
        "carriers": "; ".join(f"{k} {v}" for k, v in list(report.carriers.items())[:4]),
        "seconds": round(seconds, 2),
    }


def run_completeness(config: CompletenessConfig, progress: Progress) -> Result:
    names = list(config.models) or list(ARCHITECTURES)
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown:
        raise InvalidArgumentError(
            f"catalogue-completeness: unknown models {unknown}; known: {', '.join(ARCHITECTURES)}"
        )
    notes: list[str] = []
    if importlib.util.find_spec("transformers") is None:
        skipped = [n for n in names if ARCHITECTURES[n].needs_transformers]
        names = [n for n in names if n not in skipped]
        if skipped:
            notes.append(f"skipped {', '.join(skipped)}: {MISSING_TRANSFORMERS}")
    rows: dict[str, list[Any]] = {k: [] for k in COLUMNS}
    calls = ("direct", "wrapped") if config.wrapped else ("direct",)
    with torch_threads(config.threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # detection notes (cache off, ...) are in the reports
        for name in progress.track(names, description="architectures"):
            for call in calls if ARCHITECTURES[name].needs_transformers else ("direct",):
                model, x = ARCHITECTURES[name].build(config.width, config.seed)
                if call == "wrapped":
                    model, x = wrapped(model, x)
                start = time.perf_counter()
                points = config.points if not ARCHITECTURES[name].smooth else 1
                report = ps.audit(model, x, points=points, seed=config.seed)
                row = _row(name, call, report, time.perf_counter() - start)
                for key in COLUMNS:
                    rows[key].append(row[key])
                progress.log(
                    f"{name} ({call}): flat {report.flat} = named {report.named} + missing "
                    f"{report.missing} (unreached {report.unreached})"
                )
    smooth = [i for i, s in enumerate(rows["smooth"]) if s]
    metrics: dict[str, Any] = {
        "models": names,
        "calls": list(calls),
        "audits": len(rows["model"]),
        "unexplained_total": sum(rows["unexplained"]),
        "unexplained_at": [
            f"{m} ({c}): {u}"
            for m, c, u in zip(rows["model"], rows["call"], rows["unexplained"], strict=True)
            if u
        ],
        "not_determined": [
            f"{m} ({c})"
            for m, c, d in zip(rows["model"], rows["call"], rows["determined"], strict=True)
            if not d
        ],
        "not_determined_smooth": [
            f"{rows['model'][i]} ({rows['call'][i]})" for i in smooth if not rows["determined"][i]
        ],
        "not_flat": sum(rows["not_flat"]),
        "bound_violations": [
            rows["model"][i]
            for i in range(len(rows["model"]))
            if rows["fd"][i] > rows["parameters"][i] - rows["catalogue"][i]
        ],
        "smooth_unequal": [
            f"{rows['model'][i]} ({rows['call'][i]})"
            for i in smooth
            if rows["fd"][i] != rows["parameters"][i] - rows["catalogue"][i] - rows["unreached"][i]
        ],
        "smooth_audits": len(smooth),
        "wrapped_differs": _wrapped_differs(rows),
        "wrapped_models": sum(c == "wrapped" for c in rows["call"]),
        "seconds_total": round(sum(rows["seconds"]), 1),
    }
    notes += [
        f"models: completeness_models.ARCHITECTURES at width {config.width} (2 heads, one "
        "block, learned position tables as long as the example), weights + 0.1·randn, float64, "
        "evaluation mode, Hugging Face defaults otherwise (cache on, tied embeddings)",
        "wrapped: the model inside a user's module, forward(x) = model(input_ids=x)[0] (or "
        "pixel_values), the inner cache at its default",
        f"audit: ps.audit(model, x, points={config.points}) for ReLU models, points=1 for smooth "
        "ones: J in float64 over inputs drawn "
        "like the example (every token in each half), ranks at the widest gap; unexplained = "
        "missing − unreached − point_degenerate",
    ]
    return Result(metrics, {"audits": rows}, notes)


def _wrapped_differs(rows: dict[str, list[Any]]) -> list[str]:
    """Models whose wrapped audit names a different number of directions than the direct one."""
    direct = {
        m: n for m, c, n in zip(rows["model"], rows["call"], rows["named"], strict=True)
        if c == "direct"
    }  # fmt: skip
    return [
        f"{m}: {direct[m]} direct, {n} wrapped"
        for m, c, n in zip(rows["model"], rows["call"], rows["named"], strict=True)
        if c == "wrapped" and m in direct and n != direct[m]
    ]


def plot_completeness(result: Result) -> dict[str, Any]:
    """Flat dimension per model, split into named, degenerate (unreached or of the point)
    and unexplained, direct and wrapped side by side."""
    rows = result.series.get("audits")
    if not rows or not rows["model"]:
        return {}
    labels = [f"{m}{' (w)' if c == 'wrapped' else ''}" for m, c in zip(rows["model"],
              rows["call"], strict=True)]  # fmt: skip
    named = np.array(rows["named"], dtype=float)
    degenerate = np.array(rows["unreached"], dtype=float) + np.array(rows["point_degenerate"])
    unexplained = np.array(rows["unexplained"], dtype=float)
    figure, axes = plt.subplots(figsize=(max(8, 0.32 * len(labels) + 2), 4.2))
    at = np.arange(len(labels))
    axes.bar(at, named, color="tab:blue", label="named by the catalogue")
    axes.bar(at, degenerate, bottom=named, color="tab:gray", label="degenerate (data, point)")
    axes.bar(at, unexplained, bottom=named + degenerate, color="tab:red", label="unexplained")
    axes.set_xticks(at, labels, rotation=60, ha="right", fontsize=7)
    axes.set_ylabel("flat dimension P − FD")
    axes.set_yscale("symlog", linthresh=10)
    axes.set_title("flat directions of the function, and how many the catalogue names")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return {"completeness.png": figure}


def _not_run(m: dict[str, Any]) -> tuple[str, None] | None:
    if not m.get("audits"):
        return "not evaluated: no model audited", None
    return None


def _complete_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if skipped := _not_run(m):
        return skipped
    text = (
        f"{m['unexplained_total']} unexplained flat directions over {m['audits']} audits "
        f"({len(m['models'])} models, {' and '.join(m['calls'])})"
    )
    if m["unexplained_at"]:
        text += f"; at {', '.join(m['unexplained_at'][:8])}"
    if m["not_determined"]:
        text += f"; rank not determined at {', '.join(m['not_determined'][:6])}"
    if m["not_flat"]:
        text += f"; {m['not_flat']} catalogue entries leave the flat space"
    holds = m["unexplained_total"] == 0 and not m["not_determined_smooth"] and not m["not_flat"]
    return text, holds


def _bound_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if skipped := _not_run(m):
        return skipped
    if not m["smooth_audits"]:
        return "not evaluated: no smooth model in this run", None
    text = (
        f"FD ≤ P − dim(orbit) violated on {len(m['bound_violations'])} audits; equality on "
        f"{m['smooth_audits'] - len(m['smooth_unequal'])} of {m['smooth_audits']} audits of "
        "smooth models"
    )
    if m["smooth_unequal"]:
        text += f" (unequal: {', '.join(m['smooth_unequal'][:8])})"
    return text, not m["bound_violations"] and not m["smooth_unequal"]


def _wrapped_claim(result: Result) -> tuple[str, bool | None]:
    m = result.metrics
    if skipped := _not_run(m):
        return skipped
    if "wrapped" not in m["calls"]:
        return "not evaluated: wrapped=False", None
    if m["wrapped_differs"]:
        return f"differs: {', '.join(m['wrapped_differs'][:8])}", False
    count = m["wrapped_models"]
    return f"the same named dimension direct and wrapped on all {count} Hugging Face models", True


experiment(
    "catalogue-completeness",
    seed_ref="issue 44 (notes 006; seed 004: FD ≤ P − dim(local orbit))",
    description=(
        "the functional-dimension audit (ps.audit) on one small model per supported "
        "architecture (decoders with multi-head, grouped- and multi-query attention, "
        "encoders, ViT, Swin, CNN with BatchNorm, ResNet block, LSTM, GRU, MLPs), called "
        "directly and inside a user's module: P, FD, flat, the catalogue's orbit dimension, "
        "named and missing directions. Needs transformers for the Hugging Face models"
    ),
    data="none (tiny models built from configs; transformers for the Hugging Face ones)",
    quick=CompletenessConfig(),
    paper=CompletenessConfig(width=16),
    claims=[
        Claim(
            "the catalogue names every flat direction of the function",
            "issue 44; notes 006",
            "missing − unreached − point-degenerate = 0 on every model, direct and wrapped; "
            "every rank of a smooth model at a clean gap (a ReLU model's rank at θ may move "
            "with the data: units that inputs like the example almost never switch)",
            _complete_claim,
        ),
        Claim(
            "FD ≤ P − dim(local orbit), with equality on smooth models at random points",
            "seed 004 (Grigsby and Lindsey, Cor. 4.3)",
            "no violation; equality on every audit of a model without ReLU, counting the "
            "parameters the function never reads as flat (a wrapped BERT's unused pooler)",
            _bound_claim,
        ),
        Claim(
            "detection does not depend on how the model is called",
            "issue 44",
            "named directions equal direct and inside a user's module",
            _wrapped_claim,
        ),
    ],
    plot=plot_completeness,
)(run_completeness)
