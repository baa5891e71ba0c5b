"""Experiments: registered functions that reproduce a figure or table of a seed paper.

An experiment is a function ``run(config, progress) -> Result`` registered with
:func:`experiment`, together with

* two presets of a frozen dataclass config: ``quick`` (seconds to minutes on a 2-core CPU,
  data that is always available) and ``paper`` (the seed's own sizes);
* the seed's **claims**: what the paper reports (a number, an ordering) and a check that
  measures the same quantity on the result and says whether it holds, or that it cannot be
  evaluated in this run (``holds=None``: an optional peer is not installed, the run has nothing
  the claim is about); reports show such a claim as "not evaluated" and count it neither as
  holding nor as failing;
* an optional ``plot(result) -> {filename: Figure}`` drawing the figure with the seed's axes,
  and an ``aggregate(results) -> Result`` combining runs over several seeds (default: mean and
  standard deviation of every numeric metric, series from the first seed).

The config must have an integer ``seed`` field; ``--seeds N`` runs seeds ``seed … seed+N−1``.
A config field named ``data_dir`` receives ``--data-dir``.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import fnmatch
import importlib
import math
import re
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from paramsym.errors import ExperimentError

Number = float | int


@dataclass
class Result:
    """What one run of an experiment produced.

    Attributes:
        metrics: named measurements (numbers, strings, or lists of them), JSON-serialisable.
        series: the data behind each figure: ``{table: {column: [values...]}}``, written as
            one CSV per table; all columns of a table have the same length.
        notes: free-text remarks worth keeping in the report (approximations, skipped parts).
    """

    metrics: dict[str, Any] = field(default_factory=dict)
    series: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "series": self.series, "notes": self.notes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        return cls(
            dict(data["metrics"]),
            {k: dict(v) for k, v in data["series"].items()},
            list(data["notes"]),
        )


@dataclass(frozen=True)
class Claim:
    """A result reported in a seed paper, and how to check it on a :class:`Result`.

    Attributes:
        text: the claim in words, e.g. ``"at a minimum, 700 of the 750 Hessian eigenvalues are 0"``.
        source: where the paper says it, e.g. ``"seed 001, Fig 2.7"``.
        expected: the reported value or ordering, e.g. ``"≥ 700 of 750 with |λ| ≤ 1e-3"``.
        check: ``result -> (measured, holds)``; ``measured`` is shown as is in reports.
            ``holds`` is ``True`` or ``False``, or ``None`` when the claim cannot be evaluated on
            this run (say why in ``measured``, e.g. ``"not evaluated: rebasin not installed"``);
            a check that raises gives ``holds=False`` with ``"check failed: …"``.
    """

    text: str
    source: str
    expected: str
    check: Callable[[Result], tuple[Any, bool | None]]

    def evaluate(self, result: Result) -> ClaimOutcome:
        try:
            measured, holds = self.check(result)
        except Exception as error:  # a failing check is a finding, not a crash of the report
            return ClaimOutcome(
                self.text, self.source, self.expected, f"check failed: {error}", False
            )
        return ClaimOutcome(
            self.text,
            self.source,
            self.expected,
            _plain(measured),
            None if holds is None else bool(holds),
        )


@dataclass(frozen=True)
class ClaimOutcome:
    """A claim with its measured value: one row of ``metrics.json["claims"]``.

    ``holds`` is ``True`` (the measurement supports the claim), ``False`` (it does not) or
    ``None`` (not evaluated: the run could not measure it; ``null`` in JSON). A claim that is
    not evaluated counts neither as holding nor as failing (see :class:`ClaimTally`).
    """

    claim: str
    source: str
    expected: str
    measured: Any
    holds: bool | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ClaimTally:
    """How many claims hold, fail and were not evaluated, for summaries such as
    ``"5 / 6, 1 not evaluated"`` (``total`` counts every claim)."""

    holding: int
    failing: int
    not_evaluated: int

    @classmethod
    def of(cls, holds: Iterable[bool | None]) -> ClaimTally:
        """Tally ``ClaimOutcome.holds`` values (or the ``"holds"`` of ``metrics.json``)."""
        values = list(holds)
        return cls(
            holding=sum(v is True for v in values),
            failing=sum(v is False for v in values),
            not_evaluated=sum(v is None for v in values),
        )

    @property
    def total(self) -> int:
        return self.holding + self.failing + self.not_evaluated

    def __str__(self) -> str:
        text = f"{self.holding} / {self.total}"
        return text + (f", {self.not_evaluated} not evaluated" if self.not_evaluated else "")


T = TypeVar("T")


class Progress(Protocol):
    """How an experiment reports progress (a progress bar in the CLI, nothing in tests)."""

    def track(
        self, items: Iterable[T], total: int | None = None, description: str = ""
    ) -> Iterator[T]:
        """Iterate over ``items``, advancing a bar named ``description``."""
        ...

    def log(self, message: str) -> None:
        """A one-line message for the user."""
        ...


class SilentProgress:
    """A :class:`Progress` that shows nothing (tests, worker processes)."""

    def track(
        self, items: Iterable[T], total: int | None = None, description: str = ""
    ) -> Iterator[T]:
        yield from items

    def log(self, message: str) -> None:
        pass


Config = Any
RunFunction = Callable[[Config, Progress], Result]


@dataclass(frozen=True)
class Experiment:
    """A registered experiment (see the module docstring)."""

    name: str
    seed_ref: str
    description: str
    data: str
    run: RunFunction
    presets: Mapping[str, Config]
    claims: tuple[Claim, ...]
    plot: Callable[[Result], dict[str, Any]] | None
    aggregate: Callable[[list[Result]], Result]
    module: str

    @property
    def config_type(self) -> type:
        return type(self.presets["quick"])

    def config(self, preset: str = "quick", overrides: Mapping[str, str] | None = None) -> Config:
        """The preset's config with ``key=value`` string overrides parsed by field type."""
        if preset not in self.presets:
            raise ExperimentError(
                f"experiment '{self.name}' has no preset {preset!r}; "
                f"choose one of {sorted(self.presets)}"
            )
        return apply_overrides(self.presets[preset], overrides or {}, self.name)

    def evaluate(self, result: Result) -> list[ClaimOutcome]:
        return [claim.evaluate(result) for claim in self.claims]


_REGISTRY: dict[str, Experiment] = {}


def experiment(
    name: str,
    *,
    seed_ref: str,
    description: str,
    quick: Config,
    paper: Config,
    claims: Sequence[Claim] = (),
    data: str = "synthetic (generated)",
    plot: Callable[[Result], dict[str, Any]] | None = None,
    aggregate: Callable[[list[Result]], Result] | None = None,
) -> Callable[[RunFunction], RunFunction]:
    """Register ``run(config, progress) -> Result`` as experiment ``name``.

    ``quick`` and ``paper`` are the two presets: instances of one frozen dataclass with an int
    ``seed`` field.
    """
    config_type = type(quick)
    if not (dataclasses.is_dataclass(config_type) and config_type.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise ExperimentError(f"experiment '{name}': presets must be frozen dataclass instances")
    if type(paper) is not config_type:
        raise ExperimentError(
            f"experiment '{name}': the paper preset is a {type(paper).__name__}, the quick "
            f"preset a {config_type.__name__}; both must be instances of one config class"
        )
    if "seed" not in {f.name for f in dataclasses.fields(config_type)}:
        raise ExperimentError(f"experiment '{name}': the config needs an int `seed` field")

    def register(run: RunFunction) -> RunFunction:
        if name in _REGISTRY and _REGISTRY[name].module != run.__module__:
            raise ExperimentError(
                f"experiment '{name}' is already registered by {_REGISTRY[name].module}"
            )
        _REGISTRY[name] = Experiment(
            name=name,
            seed_ref=seed_ref,
            description=description,
            data=data,
            run=run,
            presets={"quick": quick, "paper": paper},
            claims=tuple(claims),
            plot=plot,
            aggregate=aggregate or mean_over_seeds,
            module=run.__module__,
        )
        return run

    return register


LIBRARY_MODULES = (
    "paramsym.experiments.dissertation",
    "paramsym.experiments.ntk_alignment",
    "paramsym.experiments.functional_dimension.univariate",
    "paramsym.experiments.functional_dimension.bivariate",
    "paramsym.experiments.functional_dimension.weight_decay",
    "paramsym.experiments.functional_dimension.energy",
    "paramsym.experiments.teleport.testfunctions",
    "paramsym.experiments.teleport.regression",
    "paramsym.experiments.teleport.sweep",
    "paramsym.experiments.teleport.runtime",
    "paramsym.experiments.teleport.mnist",
    "paramsym.experiments.teleport.schedules",
    "paramsym.experiments.teleport.optimizers",
    "paramsym.experiments.teleport.curvature_intuition",
    "paramsym.experiments.teleport.flatness_correlation",
    "paramsym.experiments.teleport.learned_teleport",
    "paramsym.experiments.teleport.generalization",
    "paramsym.experiments.teleport_ntk.linearization",
    "paramsym.experiments.teleport_ntk.alignment",
    "paramsym.experiments.connectivity.components",
    "paramsym.experiments.connectivity.barrier",
    "paramsym.experiments.connectivity.curves",
    "paramsym.experiments.connectivity.alignment",
    "paramsym.experiments.conserved.q_distribution",
    "paramsym.experiments.conserved.q_convergence",
    "paramsym.experiments.conserved.q_sharpness",
    "paramsym.experiments.conserved.q_drift",
    "paramsym.experiments.group_ensemble",
    "paramsym.experiments.global_curvature.structure",
    "paramsym.experiments.global_curvature.spectrum",
    "paramsym.experiments.symo_training",
    "paramsym.experiments.architectures",
    "paramsym.experiments.decoders",
    "paramsym.experiments.completeness",
    "paramsym.experiments.teleport_cnn",
    "paramsym.experiments.cnn_matching",
    "paramsym.experiments.merging.transformer_merging",
    "paramsym.experiments.merging.vit_merging",
    "paramsym.experiments.quantize_cnn",
    "paramsym.experiments.quantize_lm",
    "paramsym.experiments.equivariance.identities",
    "paramsym.experiments.equivariance.sharpening",
    "paramsym.experiments.equivariance.subspace",
    "paramsym.experiments.equivariance.last_layer",
    "paramsym.experiments.equivariance.noether_flow",
    "paramsym.experiments.equivariance.null_space",
    "paramsym.experiments.discovery.rescaling",
    "paramsym.experiments.discovery.data_dependent",
    "paramsym.experiments.discovery.curves",
    "paramsym.experiments.discovery.transformer",
    "paramsym.experiments.discovery.zoo",
    "paramsym.experiments.discovery.count",
)
"""Modules whose import registers the library's experiments (one module per seed, or per figure
where a seed's experiments are split into a subpackage)."""


def _load_library_experiments() -> None:
    for module in LIBRARY_MODULES:
        importlib.import_module(module)


def get(name: str) -> Experiment:
    """The experiment called ``name``; an unknown name lists the known ones."""
    _load_library_experiments()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise ExperimentError(f"unknown experiment '{name}'; known experiments: {known}")
    return _REGISTRY[name]


def library_experiments() -> list[Experiment]:
    """The experiments the library itself registers (those of :data:`LIBRARY_MODULES`), sorted
    by name: what an installed ``paramsym`` lists, without ones a test or a user registered."""
    return [e for e in all_experiments() if e.module in LIBRARY_MODULES]


def all_experiments(pattern: str | None = None) -> list[Experiment]:
    """Every registered experiment (matching the shell-style ``pattern``), sorted by name."""
    _load_library_experiments()
    names = sorted(_REGISTRY)
    if pattern:
        names = [n for n in names if fnmatch.fnmatch(n, pattern)]
    return [_REGISTRY[n] for n in names]


# -- finding one's way: papers and names (read-only) ---------------------------------------------

SEED_TITLES: Mapping[str, str] = {
    "seed 000": "Neural Tangent Kernel perspective on parameter-space symmetries",
    "seed 001": "Zhao, Symmetry in Neural Networks (dissertation)",
    "seed 002": "Global curvature for second-order optimization of neural networks",
    "seed 003": "An Equivariance Toolbox for Learning Dynamics",
    "seed 004": "Empirical NTK tracks task complexity (functional dimension)",
}
"""Short titles of the seed papers, keyed like :func:`paper_of` answers."""

OTHER_PAPER = "other"
"""What :func:`paper_of` answers for an experiment whose ``seed_ref`` names no seed."""

_SEED_PATTERN = re.compile(r"\bseed (\d{3})\b")


def paper_of(experiment: Experiment) -> str:
    """The seed paper an experiment reproduces, ``"seed NNN"`` from the first ``seed NNN`` in
    its ``seed_ref``, or :data:`OTHER_PAPER` when it names none."""
    match = _SEED_PATTERN.search(experiment.seed_ref)
    return f"seed {match.group(1)}" if match else OTHER_PAPER


def reference_of(experiment: Experiment) -> str:
    """The figure or table part of ``seed_ref``: what follows ``seed NNN,`` (without a leading
    "dissertation"), or the whole ``seed_ref`` when it names no seed."""
    match = _SEED_PATTERN.search(experiment.seed_ref)
    rest = experiment.seed_ref[match.end() :] if match else experiment.seed_ref
    rest = rest.lstrip(",;: ").removeprefix("dissertation ").strip()
    return rest or experiment.seed_ref


def by_paper(experiments: Iterable[Experiment] | None = None) -> dict[str, list[Experiment]]:
    """``experiments`` (default: all) grouped by :func:`paper_of`: seeds in order, then
    :data:`OTHER_PAPER`; each group sorted by name."""
    groups: dict[str, list[Experiment]] = {}
    for experiment in all_experiments() if experiments is None else experiments:
        groups.setdefault(paper_of(experiment), []).append(experiment)
    order = sorted(groups, key=lambda paper: (paper == OTHER_PAPER, paper))
    return {paper: sorted(groups[paper], key=lambda e: e.name) for paper in order}


def close_matches(name: str, limit: int = 4) -> list[str]:
    """Registered names close to ``name`` (typos, or names containing it), best first."""
    _load_library_experiments()
    names = sorted(_REGISTRY)
    found = difflib.get_close_matches(name, names, n=limit, cutoff=0.6)
    found += [n for n in names if name and name in n and n not in found]
    return found[:limit]


# -- configs --------------------------------------------------------------------------------------


def _parse(value: str, current: Any, key: str, experiment_name: str) -> Any:
    """Parse ``value`` with the type of the field's current value."""
    try:
        if isinstance(current, bool):
            lowered = value.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError("expected true or false")
            return lowered in ("true", "1", "yes")
        if isinstance(current, int):
            return int(value)
        if isinstance(current, float):
            return float(value)
        if isinstance(current, tuple) and current and isinstance(current[0], tuple):
            return _parse_nested(value, current, key, experiment_name)
        if isinstance(current, tuple):
            parts = [p for p in value.strip("()[] ").split(",") if p.strip()]
            element = current[0] if current else ""
            return tuple(_parse(p.strip(), element, key, experiment_name) for p in parts)
        if current is None or isinstance(current, str):
            return None if value.lower() == "none" and current is None else value
    except ValueError as error:
        raise ExperimentError(
            f"--set {key}={value}: cannot parse for '{experiment_name}' "
            f"(expected {type(current).__name__}: {error})"
        ) from None
    raise ExperimentError(
        f"--set {key}: field type {type(current).__name__} cannot be set from the command line"
    )


def _parse_nested(value: str, current: tuple, key: str, experiment_name: str) -> tuple:
    """A tuple of tuples, written as a Python literal (``"((1, 2), (3, 4))"``), each entry
    parsed with the type of the current value's first entry."""
    try:
        parsed = ast.literal_eval(value.strip())
    except (SyntaxError, ValueError):
        parsed = None
    if not isinstance(parsed, tuple | list) or not all(
        isinstance(inner, tuple | list) for inner in parsed
    ):
        raise ValueError("expected a tuple of tuples, e.g. ((1, 2), (3, 4))")
    element = current[0][0] if current[0] else ""
    return tuple(
        tuple(_parse(str(entry), element, key, experiment_name) for entry in inner)
        for inner in parsed
    )


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` → ``{"a": "1", "b": "x"}``; a malformed item raises."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ExperimentError(f"--set {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def apply_overrides(config: Config, overrides: Mapping[str, str], experiment_name: str) -> Config:
    """A copy of ``config`` with string overrides parsed by each field's type."""
    fields = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ExperimentError(
            f"--set {unknown[0]}: '{experiment_name}' has no such setting; "
            f"settings: {', '.join(sorted(fields))}"
        )
    values = {k: _parse(v, getattr(config, k), k, experiment_name) for k, v in overrides.items()}
    return dataclasses.replace(config, **values)


def config_to_dict(config: Config) -> dict[str, Any]:
    """The config as plain JSON data."""
    return {k: _plain(v) for k, v in dataclasses.asdict(config).items()}


def config_from_dict(experiment: Experiment, data: Mapping[str, Any]) -> Config:
    """Rebuild a config (tuples restored from JSON lists)."""
    defaults = experiment.presets["quick"]
    values = {}
    for f in dataclasses.fields(defaults):
        if f.name in data:
            value = data[f.name]
            values[f.name] = tuple(value) if isinstance(getattr(defaults, f.name), tuple) else value
    return dataclasses.replace(defaults, **values)


def _plain(value: Any) -> Any:
    """Numbers, strings, bools, None and lists/dicts of them; floats rounded to 6 digits."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if not math.isfinite(value) else float(f"{value:.6g}")
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):  # numpy or torch scalar
        return _plain(value.item())
    return str(value)


# -- aggregation ----------------------------------------------------------------------------------


def mean_over_seeds(results: list[Result]) -> Result:
    """Default aggregate: numeric metrics become their mean (with ``<name>_std`` and
    ``<name>_per_seed``), except an integer that every seed shares (a size such as a parameter
    count), which stays that integer; other metrics and the series come from the first
    seed."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    metrics: dict[str, Any] = {}
    for key, value in first.metrics.items():
        values = [r.metrics.get(key) for r in results]
        if all(type(v) is int for v in values) and len(set(values)) == 1:
            metrics[key] = value
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            numbers = [float(v) for v in values]  # type: ignore[arg-type]
            metrics[key] = statistics.fmean(numbers)
            metrics[f"{key}_std"] = statistics.stdev(numbers)
            metrics[f"{key}_per_seed"] = numbers
        else:
            metrics[key] = value
    notes = [
        *first.notes,
        f"metrics averaged over {len(results)} seeds; series from the first seed",
    ]
    return Result(metrics, first.series, notes)
