"""Experiments of seed 001 (Zhao, "Symmetry in Neural Networks"), chapters 1-2.

* ``symmetry-catalogue`` (ch. 1, Table 1.1; §2.3, App. A.2): every symmetry paramsym finds on a
  zoo of random models, its measured invariance error and orbit dimension against the
  predicted one.
* ``flat-minimum`` (Fig 2.7, linear case): the Hessian spectrum at minima of a two-layer
  linear network; 700 of its 750 eigenvalues vanish, the dimension of the GL(50) orbit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import torch
from torch import nn

import paramsym as ps
from paramsym.core.tables import append_row, empty_table
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.symmetry.base import NeuronSymmetry, Symmetry
from paramsym.symmetry.change_of_variables import ChangeOfVariablesRotation, QuadraticOrthogonal
from paramsym.symmetry.gl import GeneralLinearGroup, MatrixNeuronSymmetry
from paramsym.symmetry.nonlinear import DataDependentGL
from paramsym.symmetry.orthogonal import HiddenOrthogonal
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.symmetry.translation import SoftmaxTranslation

# -- symmetry-catalogue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogueConfig:
    """Settings of ``symmetry-catalogue``.

    Attributes:
        seed: randomness of models, inputs and group elements.
        width: hidden width of the MLP zoo.
        batch: inputs on which invariance is measured.
        scale: size of the random group elements (see ``Symmetry.sample``).
    """

    seed: int = 0
    width: int = 5
    batch: int = 16
    scale: float = 0.5


Model = tuple[str, nn.Module, Any, Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None]


def _randomize(model: nn.Module, generator: torch.Generator, std: float = 0.6) -> nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(std * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return model


def _zoo(config: CatalogueConfig, generator: torch.Generator) -> list[Model]:
    """(label, model, input, loss_fn for loss symmetries) for every family of the catalogue."""
    h, k = config.width, config.batch

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    models: list[Model] = []
    for activation in ("identity", "relu", "leaky_relu", "tanh", "sigmoid", "gelu", "radial"):
        model = _randomize(ps.mlp([3, h, h, 4], activation=activation).double(), generator)
        models.append((f"mlp-{activation}", model, randn(k, 3), nn.CrossEntropyLoss()))
    models.append(
        (
            "mlp-cubic",
            _randomize(ps.mlp([3, h, 2], activation=ps.nn.Monomial(3)).double(), generator),
            randn(k, 3),
            None,
        )
    )
    norms = nn.Sequential(
        nn.Linear(3, h),
        nn.BatchNorm1d(h),
        nn.ReLU(),
        nn.Linear(h, h),
        nn.LayerNorm(h, eps=0.0),
        nn.Tanh(),
        nn.Linear(h, 3),
        nn.Softmax(dim=-1),
    ).double()
    models.append(("norm-layers", _randomize(norms, generator), randn(k, 3), None))
    transformer = ps.nn.TinyTransformer(
        vocab_size=7, d_model=6, num_heads=2, num_layers=1, d_ff=8, d_k=2, d_v=3
    )
    tokens = torch.randint(0, 7, (2, 5), generator=generator)
    models.append(
        (
            "tiny-transformer",
            _randomize(transformer.double(), generator, 0.4),
            tokens,
            nn.CrossEntropyLoss(),
        )
    )
    lora = ps.nn.LoRALinear(5, 4, rank=2).double()
    models.append(("lora", _randomize(lora, generator), randn(k, 5), None))
    rbf = ps.nn.RBFNetwork(2, 4, out_features=2, dtype=torch.float64)
    models.append(("rbf", _randomize(rbf, generator), randn(k, 2), None))
    models.append(("rosenbrock", ps.landscapes.Rosenbrock(randn(2)), None, None))
    models.append(("booth", ps.landscapes.Booth(randn(2)), None, None))
    spd = randn(3, 3)
    models.append(
        (
            "quadratic",
            ps.landscapes.Quadratic(spd @ spd.T + torch.eye(3, dtype=torch.float64), randn(3)),
            None,
            None,
        )
    )
    return models


def _slot_columns(
    symmetry: NeuronSymmetry, params: dict[str, torch.Tensor], power_sign: int
) -> int:
    """Entries per neuron in the slots of one side (incoming: +, outgoing: −)."""
    total = 0
    for slot in symmetry.slots:
        if (slot.power > 0) == (power_sign > 0):
            t = params[slot.name]
            total += t.numel() // t.shape[slot.axis]  # entries per index along the neuron axis
    return total


def predicted_orbit_dimension(symmetry: Symmetry, params: dict[str, torch.Tensor]) -> int | None:
    """The generic orbit dimension the theory predicts, or ``None`` where it has no formula.

    Matrix groups on a hidden layer with n incoming and m outgoing entries per neuron:
    GL(h) ``h² − max(0,h−n)·max(0,h−m)`` (Prop A.2.9, also for attention and LoRA), O(h)
    ``C(h,2) − C(max(0,h−m−n),2)`` and per-neuron scaling ``h`` (Thm 2.3.8 as corrected in
    notes 001a §6.10). Landscapes: SO(2) by change of variables moves along a curve (1); O(n) on
    a quadratic is transitive on an (n−1)-sphere.
    """
    if isinstance(symmetry, MatrixNeuronSymmetry):
        h = symmetry.width
        n, m = _slot_columns(symmetry, params, +1), _slot_columns(symmetry, params, -1)
        if isinstance(symmetry, HiddenOrthogonal):
            return math.comb(h, 2) - math.comb(max(0, h - m - n), 2)
        if isinstance(symmetry, GeneralLinearGroup):
            return h * h - max(0, h - n) * max(0, h - m)
    if isinstance(symmetry, PositiveScaling):
        return symmetry.dim
    if isinstance(symmetry, SoftmaxTranslation):
        return symmetry.dim
    if isinstance(symmetry, ChangeOfVariablesRotation):
        return 1
    if isinstance(symmetry, QuadraticOrthogonal):
        return symmetry.width - 1
    return None


def _invariance_error(
    model: nn.Module,
    symmetry: Symmetry,
    params: dict[str, torch.Tensor],
    moved: dict[str, torch.Tensor],
    x: Any,
    loss_fn: Any,
    generator: torch.Generator,
) -> float:
    with torch.no_grad():
        before, after = ps.functional_call(model, params, x), ps.functional_call(model, moved, x)
        if symmetry.preserves == "loss":
            logits_before = before.reshape(-1, before.shape[-1])
            targets = torch.randint(
                0, before.shape[-1], (logits_before.shape[0],), generator=generator
            )
            before = loss_fn(logits_before, targets)
            after = loss_fn(after.reshape(-1, after.shape[-1]), targets)
        return float((after - before).norm() / before.norm().clamp_min(1e-300))


def run_catalogue(config: CatalogueConfig, progress: Progress) -> Result:
    generator = torch.Generator().manual_seed(config.seed)
    rows = empty_table(
        "model symmetry group dim exact preserves invariance_error orbit_measured orbit_predicted"
    )
    for label, model, x, loss_fn in progress.track(
        _zoo(config, generator), description="catalogue models"
    ):
        model.train()
        params = ps.params_of(model)
        for s in ps.symmetries(model, loss_fn=loss_fn, strict=True):
            g = s.sample(scale=config.scale, generator=generator, dtype=torch.float64)
            error = _invariance_error(model, s, params, s.act(params, g), x, loss_fn, generator)
            measured = (
                ps.orbit_dimension(model, s)
                if s.dim and s.dim * sum(p.numel() for p in params.values()) < 5_000_000
                else 0
            )
            predicted = predicted_orbit_dimension(s, params) if s.dim else 0
            append_row(
                rows,
                label,
                s.name,
                s.group,
                s.dim,
                s.exact,
                s.preserves,
                error,
                measured,
                -1 if predicted is None else predicted,
            )
    data_rows = _data_dependent_rows(config, generator)
    exact = [e for e, ok in zip(rows["invariance_error"], rows["exact"], strict=True) if ok]
    approximate = [
        e for e, ok in zip(rows["invariance_error"], rows["exact"], strict=True) if not ok
    ]
    checked = [
        (m, p)
        for m, p in zip(rows["orbit_measured"], rows["orbit_predicted"], strict=True)
        if p >= 0
    ]
    metrics = {
        "symmetries": len(rows["symmetry"]),
        "families": len({n.split("[")[0] for n in rows["symmetry"]}),
        "max_invariance_error_exact": max(exact),
        "max_invariance_error_approximate": max(approximate) if approximate else 0.0,
        "orbit_dimensions_checked": len(checked),
        "orbit_dimensions_matching": sum(m == p for m, p in checked),
        **data_rows["metrics"],
    }
    notes = [
        "approximate symmetries (BatchNorm scale invariance with eps > 0) are measured but "
        "excluded from the exactness claim"
    ]
    return Result(metrics, {"catalogue": rows, "data_dependent": data_rows["series"]}, notes)


def _data_dependent_rows(config: CatalogueConfig, generator: torch.Generator) -> dict[str, Any]:
    """The nonlinear GL(h) actions on a LeakyReLU layer (nonzero off zero, invertible onto R,
    so all three apply for any g): exact at one input, and on k ≤ h (k ≤ n + 1) samples."""
    h = config.width
    model = _randomize(ps.mlp([3, h, 2], activation="leaky_relu").double(), generator)
    params = ps.params_of(model)
    table: dict[str, list[Any]] = {"action": [], "samples": [], "exact": [], "output_change": []}
    for s in ps.symmetries(model, data_dependent=True):
        if not isinstance(s, DataDependentGL):
            continue
        sizes = {
            "nonlinear_GL": [1],
            "pinv_GL": [max(1, h // 2), h, 2 * h],
            "inverse_GL": [2, 4, 2 * h],
        }[s.name.split("[")[0]]
        for k in sizes:
            x = torch.randn(k, 3, generator=generator, dtype=torch.float64)
            g = s.sample(scale=0.05, generator=generator, dtype=torch.float64)
            _, report = s.act_with_report(params, g, x)
            table["action"].append(s.name)
            table["samples"].append(k)
            table["exact"].append(report.exact)
            table["output_change"].append(report.relative_change)
    exact_changes = [c for c, e in zip(table["output_change"], table["exact"], strict=True) if e]
    inexact_changes = [
        c for c, e in zip(table["output_change"], table["exact"], strict=True) if not e
    ]
    metrics = {
        "data_dependent_max_change_when_exact": max(exact_changes),
        "data_dependent_min_change_when_inexact": min(inexact_changes) if inexact_changes else 0.0,
    }
    return {"metrics": metrics, "series": table}


def plot_catalogue(result: Result) -> dict[str, Any]:
    rows = result.series["catalogue"]
    figure, (left, middle, right) = plt.subplots(
        1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1.5, 1, 1]}
    )
    families = sorted({n.split("[")[0] for n in rows["symmetry"]})
    floor = 1e-18  # exact zeros are drawn here
    for exact, marker, label in (
        (True, "o", "exact"),
        (False, "x", "approximate (BatchNorm eps > 0)"),
    ):
        xs, ys = [], []
        for name, error, is_exact in zip(
            rows["symmetry"], rows["invariance_error"], rows["exact"], strict=True
        ):
            if is_exact == exact:
                xs.append(families.index(name.split("[")[0]))
                ys.append(max(error, floor))
        if xs:
            left.scatter(xs, ys, s=16, marker=marker, label=label)
    left.axhline(1e-10, color="red", linestyle="--", linewidth=1, label="1e-10")
    left.set_yscale("log")
    left.set_xticks(range(len(families)), families, rotation=60, ha="right", fontsize=8)
    left.set_ylabel("relative change of output (or loss)")
    left.set_title("invariance under a random group element (0 drawn at 1e-18)")
    left.legend(loc="upper left", fontsize=8)

    pairs = [
        (p, m)
        for p, m in zip(rows["orbit_predicted"], rows["orbit_measured"], strict=True)
        if p >= 0
    ]
    predicted, measured = [p for p, _ in pairs], [m for _, m in pairs]
    middle.scatter(predicted, measured, s=16)
    top = max(predicted + measured + [1])
    middle.plot([0, top], [0, top], color="gray", linewidth=1, label="measured = predicted")
    middle.set_xlabel("predicted orbit dimension")
    middle.set_ylabel("measured orbit dimension (rank of tangents)")
    middle.set_title("orbit dimensions at generic points")
    middle.legend(loc="upper left", fontsize=8)

    table = result.series["data_dependent"]
    for action in dict.fromkeys(table["action"]):
        points = [
            (k, max(c, floor))
            for a, k, c in zip(
                table["action"], table["samples"], table["output_change"], strict=True
            )
            if a == action
        ]
        right.plot([k for k, _ in points], [c for _, c in points], marker="o", label=action)
    right.axhline(1e-10, color="red", linestyle="--", linewidth=1)
    right.set_yscale("log")
    right.set_xlabel("samples k in the batch")
    right.set_ylabel("relative change of the layer output on the batch")
    right.set_title("data-dependent GL(h) on a LeakyReLU layer")
    right.legend(fontsize=8)
    figure.tight_layout()
    return {"catalogue.png": figure}


experiment(
    "symmetry-catalogue",
    seed_ref="seed 001, ch. 1 Table 1.1; Prop A.2.9, Thm 2.3.8",
    description=(
        "every catalogued symmetry on random models: invariance error, orbit dimension vs predicted"
    ),
    quick=CatalogueConfig(),
    paper=CatalogueConfig(width=12, batch=64),
    claims=[
        Claim(
            "every exact symmetry of the catalogue leaves the function (or loss) unchanged",
            "seed 001, Table 1.1, Def 1.2.1, 1.3.1",
            "relative change ≤ 1e-10 (float64)",
            lambda r: (
                r.metrics["max_invariance_error_exact"],
                r.metrics["max_invariance_error_exact"] <= 1e-10,
            ),
        ),
        Claim(
            "orbit dimensions at generic points: GL h²−(h−n)(h−m), scaling h, "
            "O(h) C(h,2)−C(h−m−n,2)",
            "seed 001, Prop A.2.9; Thm 2.3.8 as corrected (notes 001a §6.10)",
            "measured = predicted for every symmetry with a formula",
            lambda r: (
                f"{r.metrics['orbit_dimensions_matching']} / "
                f"{r.metrics['orbit_dimensions_checked']}",
                r.metrics["orbit_dimensions_matching"] == r.metrics["orbit_dimensions_checked"],
            ),
        ),
        Claim(
            "the nonlinear GL(h) action is exact at its input, the batch action when σ(gVX) "
            "has full column rank",
            "seed 001, Thm 2.4.1, Eq. 2.54",
            "relative change ≤ 1e-10 where exact",
            lambda r: (
                r.metrics["data_dependent_max_change_when_exact"],
                r.metrics["data_dependent_max_change_when_exact"] <= 1e-10,
            ),
        ),
    ],
    plot=plot_catalogue,
)(run_catalogue)


# -- flat-minimum ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlatMinimumConfig:
    """Settings of ``flat-minimum`` (Fig 2.7(a): U ∈ R^{10×50}, V ∈ R^{5×50}, X = I).

    Attributes:
        seed: randomness of targets and initialisations.
        inputs, hidden, outputs: n, h, m (the figure's 5, 50, 10).
        init_scales: (s_U, s_V) pairs; weights start N(0, s²/fan_in), so each pair starts at a
            different conserved quantity Q = ½ Tr(UᵀU − VVᵀ).
        learning_rate, max_steps, loss_tolerance: full-batch gradient descent until the loss
            ½‖UVᵀX − Y‖² is below the tolerance.
        threshold: |λ| at or below which an eigenvalue counts as zero (the figure's 1e-3).
    """

    seed: int = 0
    inputs: int = 5
    hidden: int = 50
    outputs: int = 10
    init_scales: tuple[tuple[float, float], ...] = ((0.5, 1.5), (1.0, 1.0), (1.5, 0.5))
    learning_rate: float = 0.05
    max_steps: int = 20_000
    loss_tolerance: float = 1e-14
    threshold: float = 1e-3


def _linear(model: nn.Sequential, index: int) -> nn.Linear:
    layer = model[index]
    assert isinstance(layer, nn.Linear)
    return layer


def _train_to_minimum(
    config: FlatMinimumConfig,
    scales: tuple[float, float],
    targets: torch.Tensor,
    generator: torch.Generator,
) -> tuple[nn.Sequential, list[float]]:
    n, h, m = config.inputs, config.hidden, config.outputs
    model = ps.mlp([n, h, m], activation="identity", bias=False).double()
    first, second = _linear(model, 0), _linear(model, 2)
    with torch.no_grad():
        first.weight.copy_(
            scales[1] * torch.randn(h, n, generator=generator, dtype=torch.float64) / math.sqrt(n)
        )
        second.weight.copy_(
            scales[0] * torch.randn(m, h, generator=generator, dtype=torch.float64) / math.sqrt(h)
        )
    x = torch.eye(n, dtype=torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.learning_rate)
    losses = []
    for _ in range(config.max_steps):
        optimizer.zero_grad()
        loss = 0.5 * ((model(x) - targets) ** 2).sum()
        losses.append(float(loss.detach()))
        if losses[-1] <= config.loss_tolerance:
            break
        loss.backward()
        optimizer.step()
    return model, losses


def run_flat_minimum(config: FlatMinimumConfig, progress: Progress) -> Result:
    generator = torch.Generator().manual_seed(config.seed)
    n, h, m = config.inputs, config.hidden, config.outputs
    targets = torch.randn(n, m, generator=generator, dtype=torch.float64)
    x = torch.eye(n, dtype=torch.float64)
    spectrum: dict[str, list[Any]] = {"init": [], "index": [], "eigenvalue": []}
    training: dict[str, list[Any]] = {"init": [], "step": [], "loss": []}
    near_zero, charges, final_losses, orbit = [], [], [], 0
    for scales in progress.track(config.init_scales, description="inits"):
        model, losses = _train_to_minimum(config, scales, targets, generator)
        label = f"s_U={scales[0]:g}, s_V={scales[1]:g}"
        u, v = _linear(model, 2).weight.detach(), _linear(model, 0).weight.detach().T
        charges.append(0.5 * float((u.T @ u).trace() - (v @ v.T).trace()))
        loss_fn = lambda f, y: 0.5 * ((f - y) ** 2).sum()  # noqa: E731
        eigenvalues = torch.linalg.eigvalsh(ps.hessian(model, loss_fn, (x, targets)))
        near_zero.append(int((eigenvalues.abs() <= config.threshold).sum()))
        final_losses.append(losses[-1])
        orbit = ps.orbit_dimension(model, ps.symmetries(model)[0])
        spectrum["init"] += [label] * eigenvalues.numel()
        spectrum["index"] += list(range(eigenvalues.numel()))
        spectrum["eigenvalue"] += eigenvalues.tolist()
        stride = max(1, len(losses) // 200)
        for step in range(0, len(losses), stride):
            training["init"].append(label)
            training["step"].append(step)
            training["loss"].append(losses[step])
    predicted = h * (n + m) - n * m
    metrics = {
        "parameters": h * (n + m),
        "near_zero_eigenvalues": near_zero,
        "min_near_zero_eigenvalues": min(near_zero),
        "orbit_dimension": orbit,
        "predicted_orbit_dimension": predicted,
        "conserved_Q": charges,
        "final_losses": final_losses,
    }
    return Result(metrics, {"spectrum": spectrum, "training": training})


def plot_flat_minimum(result: Result) -> dict[str, Any]:
    spectrum = result.series["spectrum"]
    threshold = 1e-3
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    labels = list(dict.fromkeys(spectrum["init"]))
    for label, q in zip(labels, result.metrics["conserved_Q"], strict=True):
        values = [
            abs(e)
            for init, e in zip(spectrum["init"], spectrum["eigenvalue"], strict=True)
            if init == label
        ]
        left.hist(
            [max(v, 1e-18) for v in values],
            bins=[10**e for e in torch.linspace(-18, 3, 64).tolist()],
            histtype="step",
            label=f"{label} (Q = {q:.2f})",
        )
        right.plot(sorted(values), label=label)
    left.set_xscale("log")
    left.axvline(threshold, color="red", linestyle="--", linewidth=1)
    left.set_xlabel("|eigenvalue| of the Hessian")
    left.set_ylabel("count")
    left.set_title("Hessian spectrum at minima (Fig 2.7a, linear)")
    left.legend(fontsize=8)
    right.set_yscale("log")
    right.axvline(
        result.metrics["predicted_orbit_dimension"],
        color="red",
        linestyle="--",
        linewidth=1,
        label="orbit dimension 700",
    )
    right.set_xlabel("eigenvalue index (sorted by |λ|)")
    right.set_ylabel("|eigenvalue|")
    right.set_title("700 of 750 directions are flat")
    right.legend(fontsize=8)
    figure.tight_layout()
    return {"spectrum.png": figure}


experiment(
    "flat-minimum",
    seed_ref="seed 001, Fig 2.7(a); §2.3.3, Prop A.2.9",
    description=(
        "Hessian spectrum at minima of a 10×50 / 5×50 linear net: 700 of 750 eigenvalues vanish"
    ),
    quick=FlatMinimumConfig(),
    paper=FlatMinimumConfig(
        init_scales=((0.25, 2.0), (0.5, 1.5), (1.0, 1.0), (1.5, 0.5), (2.0, 0.25))
    ),
    claims=[
        Claim(
            "at a minimum of the linear net, most Hessian eigenvalues are zero",
            "seed 001, Fig 2.7(a)",
            "≥ 700 of 750 with |λ| ≤ 1e-3",
            lambda r: (
                r.metrics["min_near_zero_eigenvalues"],
                r.metrics["min_near_zero_eigenvalues"] >= 700,
            ),
        ),
        Claim(
            "the flat directions are the GL(50) orbit: h(n+m) − nm = 700",
            "seed 001, §2.3.3, Prop A.2.9",
            "700 zero eigenvalues = orbit dimension = 700",
            lambda r: (
                f"{r.metrics['min_near_zero_eigenvalues']} zero, "
                f"orbit {r.metrics['orbit_dimension']}",
                r.metrics["min_near_zero_eigenvalues"]
                == r.metrics["orbit_dimension"]
                == r.metrics["predicted_orbit_dimension"],
            ),
        ),
    ],
    plot=plot_flat_minimum,
)(run_flat_minimum)
