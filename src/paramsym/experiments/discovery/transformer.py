"""``discovery-transformer`` (seed 001, dissertation §6.5.5, Fig 6.7).

Learned symmetry discovery (:class:`paramsym.LearnedSymmetry`, §6.5) on a tiny transformer, and
what the text leaves unmeasured: how much of the learned symmetries the known ones explain.

**Model** (notes 001c §4.3 (C), §9.9): f_θ: R^{B×T×d} → R^{B×T×d}, B = 8 sequences, T = 2, d = 2;
f(X) = FFN(X + Attn(X)), Attn(X) = softmax(QKᵀ/√d) V with Q, K, V = XW_Q, XW_K, XW_V (2 × 2),
FFN(Z) = Z W1 W2 (W1 ∈ R^{2×4}, W2 ∈ R^{4×2}). The text's Z W2 W1 does not compose; with no layer
norm, biases or output projection θ = (W_Q, W_K, W_V, W1, W2) has P = **28** entries, not the
text's "p = 32" (a W_O ∈ R^{2×2} or d_ff = 5 would give 32; neither is described). θ is flattened
in that order, row-major. Loss: MSE to Y per **sequence** (a "point" of L: Param × D^8 → R^8,
§6.3, is a sequence: attention mixes its tokens, so a token is no point of its own).

**Training** (the text's numbers): each step fresh θ and X, Y ~ N(0, 1), 8 generators, an action
MLP (3 × 128) that sees X (data_dim 32; not Y, the library's convention), 2000 steps of Adam at
10⁻³. Chosen here: θ ~ N(0, 1/rows) per matrix (``theta_init="fan_in"``, LeCun scale of x ↦ xW;
``"standard"``: N(0, 1)); 100 θ draws per step in ``paper`` (the library's batch; one draw per
step left the invariance at 0.4-1.0× random after 2000 steps in a trial); §6.5.4's weights
(:data:`~paramsym.discovery.DATA_DEPENDENT_WEIGHTS`; §6.5.3's γ₁ = 10, γ₄ = 1 let the fields
shrink to ‖v‖ ≈ 0.03 in a trial); the library's residual action and β = 1. ``quick``: 1000
steps × 16 draws (≈ 17 ms per step on a free core; vec(g) has 784 inputs), ≈ 26 s in all.

**Measured.** (1) Fig 6.7: h_i and exp(h_i) over the 28 parameters. (2) The known symmetries
(:func:`known_generators`): GL(2) on (W_Q, W_K) ↦ (W_Q M, W_K M^{-T}) and GL(4) on
(W1, W2) ↦ (W1 N, N^{-1} W2), tangents (W_Q m, −W_K mᵀ) and (W1 n, −n W2): a 4 + 16 = 20-dim
algebra of 28 × 28 matrices, with 4 + 12 = 16-dim orbits (n with W1 n = 0 = n W2 moves nothing).
Exact discovery in gl(28) (784 unknowns, fresh data) gives the true linear algebra. Why 20: f
depends on θ through A = W_Q W_Kᵀ, W_V and M = W1 W2 only, and generically determines them (a
second token −x₁ gives the row x₁M, then W_V M, then A from the scores), so a linear field keeps
A, W_V, M for all θ; Ẇ_Q W_Kᵀ + W_Q Ẇ_Kᵀ = 0 for all (W_Q, W_K) forces (W_Q m, −W_K mᵀ), and a term
coupling blocks (e.g. W_V into the FFN) could not cancel. (3) For the learned fields v_i(θ, X)
at ``eval_points`` fresh samples: ‖Πv_i‖/‖v_i‖ inside the known (and exact) algebra's tangent
space at θ, against random directions; principal angles at each θ (orbit level: a θ-dependent
combination of known generators still moves along known orbits) and of the fields stacked over
the points (field level). (4) Mean |dℓ_j/dt| along v_i against random directions of the same
norm, for v_i and for its part outside the known tangent space (against random directions in
that complement).

**What can exist at all.** The action does not see Y, which is independent of θ and X, so a
field keeps every sequence's loss for all Y only if it keeps f(X): it lies in the null space of
J_f(θ, X) ∈ R^{32×28}, measured 16-dim and equal to the known orbit's tangent space. At B = 8
there is no first-order data-dependent symmetry of this kind beyond the known ones. (A field
that sees Y may also move along the 28 − 8 = 20-dim loss level set.)

Quick, seeds 0-3: the learned fields change the loss 0.27-0.41× as fast as random directions
(mean over generators), yet lie *less* in the known tangent space than random directions
(‖Πv‖/‖v‖ 0.65-0.69 against 0.75); their part outside it changes the loss 0.28-0.36× as fast as
random directions there. Exact discovery finds dim 20 = gl(2) ⊕ gl(4) (sine 1e-14). So the
"unexplained coupling" of Fig 6.7 is the residual of an approximate fit, not a new symmetry.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.core.tables import append_row, empty_table, table_rows
from paramsym.discovery import (
    DATA_DEPENDENT_WEIGHTS,
    FlatLoss,
    LearnedSymmetry,
    LearnedSymmetryConfig,
    flat_loss,
)
from paramsym.discovery.compare import SPAN_RTOL, orthonormal_basis, principal_angles
from paramsym.discovery.learned_losses import Sampler, Samples, loss_derivatives
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.discovery.plotting import generator_heatmaps
from paramsym.experiments.discovery.transformer_model import (
    TinyTransformer,
    block_sizes,
    cosines,
    inside_fraction,
    known_generators,
    make_sampler,
    tangent_spaces,
)
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

F64 = torch.float64
TEXT_P = 32
"""The parameter count the text states (§6.5.5); the model it describes has 28."""
INVARIANCE_MAX = 0.5
"""Claim (a): the learned fields keep the loss when their mean |dℓ/dt| ≤ this × random's (and
every generator's is below random's, Fig 6.6's "consistently lower")."""
UNEXPLAINED_MIN = 0.5
"""Claim (b): "not explained by known symmetries" needs ≥ this share of ‖v‖ outside them ..."""
OUTSIDE_INVARIANCE_MAX = 0.1
"""... and that outside part to keep the loss: |dℓ/dt| ≤ this × random's at matched norm."""
ANGLE_ROWS = ("pointwise", "pointwise_random", "stacked_known", "stacked_exact", "stacked_random")
"""The principal-angle comparisons of the ``principal_angles`` table."""


@dataclass(frozen=True)
class TransformerDiscoveryConfig:
    """Settings of ``discovery-transformer`` (paper preset: §6.5.5's numbers; the module
    docstring says what is chosen where the text is silent).

    Attributes:
        seed: seeds the generators, the action network, the θ/X/Y draws and exact discovery.
        batch, seq_len, d_model, d_ff: B, T, d and d_ff (§6.5.5: 8, 2, 2, 4).
        theta_init: θ's distribution, ``"fan_in"`` (N(0, 1/rows) per matrix) or ``"standard"``.
        generators: n_h (8).
        hidden: the action MLP's hidden widths ((128, 128, 128)).
        steps: training steps (2000); a multiple of ``steps_per_epoch``.
        steps_per_epoch: steps per recorded epoch of the fit history.
        samples_per_step: fresh (θ, X, Y) draws per step (unstated).
        lr: Adam's learning rate (10⁻³), decayed by the library's cosine schedule.
        weights: ``"data_dependent"`` (§6.5.4's γ's) or ``"sanity"`` (§6.5.3's, the library
            default).
        action: the library's ``"residual"`` action or the text's bare ``"mlp"``.
        eval_points: fresh (θ, X, Y) at which the learned fields are measured.
        random_directions: random directions per (generator, point) for the baselines.
        discovery_batches: batches of B sequences per θ draw in exact discovery.
    """

    seed: int = 0
    batch: int = 8
    seq_len: int = 2
    d_model: int = 2
    d_ff: int = 4
    theta_init: str = "fan_in"
    generators: int = 8
    hidden: tuple[int, ...] = (128, 128, 128)
    steps: int = 1000
    steps_per_epoch: int = 20
    samples_per_step: int = 16
    lr: float = 1e-3
    weights: str = "data_dependent"
    action: str = "residual"
    eval_points: int = 64
    random_directions: int = 32
    discovery_batches: int = 4


def _validate(config: TransformerDiscoveryConfig) -> None:
    problems = []
    if config.steps < 1 or config.steps % config.steps_per_epoch:
        problems.append(f"steps ({config.steps}) must be a multiple of steps_per_epoch")
    if config.weights not in ("data_dependent", "sanity"):
        problems.append(f"weights must be 'data_dependent' or 'sanity', not {config.weights!r}")
    if min(config.eval_points, config.random_directions, config.discovery_batches) < 1:
        problems.append("eval_points, random_directions and discovery_batches must be ≥ 1")
    if problems:
        raise InvalidArgumentError("discovery-transformer: " + "; ".join(problems))


def _learned(
    config: TransformerDiscoveryConfig, loss: FlatLoss, sampler: Sampler, progress: Progress
) -> tuple[LearnedSymmetry, float]:
    """Train the generators and the action network; the symmetry and seconds per step."""
    weights: dict[str, Any] = (
        dict(DATA_DEPENDENT_WEIGHTS) if config.weights == "data_dependent" else {}
    )
    settings = LearnedSymmetryConfig(
        generators=config.generators,
        action=config.action,  # type: ignore[arg-type]
        hidden=tuple(config.hidden),
        lr=config.lr,
        epochs=config.steps // config.steps_per_epoch,
        steps_per_epoch=config.steps_per_epoch,
        batch_size=config.samples_per_step,
        seed=config.seed,
        **weights,
    )
    data_dim = config.batch * config.seq_len * config.d_model
    symmetry = LearnedSymmetry(loss, data_dim=data_dim, config=settings, dtype=F64)
    ticks = iter(progress.track(range(settings.epochs), description="learned discovery"))
    start = time.perf_counter()

    def tick(epoch: int, record: dict[str, float]) -> None:
        next(ticks, None)

    symmetry.fit(sampler, callback=tick)
    for _ in ticks:
        pass
    return symmetry, (time.perf_counter() - start) / config.steps


def _exact(config: TransformerDiscoveryConfig, model: TinyTransformer) -> ps.DiscoveryResult:
    """Exact linear discovery in gl(P) on fresh data: θ from the model's initialisation,
    ``discovery_batches`` fresh batches of B sequences per θ, per-sequence rows."""
    shape = (config.batch, config.seq_len, config.d_model)

    def data(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        x = torch.randn(shape, generator=generator, dtype=F64)
        return x, torch.randn(shape, generator=generator, dtype=F64)

    return ps.discover_symmetries(
        model, nn.MSELoss(), data, ansatz="full", theta="init",
        batches_per_sample=config.discovery_batches, generator=config.seed + 7919,
    )  # fmt: skip


def _matched(direction: Tensor, like: Tensor) -> Tensor:
    """``direction`` rescaled to the norm of ``like`` along the last axis."""
    unit = direction / direction.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return unit * like.norm(dim=-1, keepdim=True)


def _rate(loss: FlatLoss, theta: Tensor, x: Tensor, y: Tensor, v: Tensor) -> Tensor:
    """Mean |dℓ_j/dt| over points and sequences along fields v (m, S, P): shape (m,)."""
    return loss_derivatives(loss, theta, x, y, v).abs().mean(dim=(1, 2))


def _random_rate(
    loss: FlatLoss, samples: Samples, like: Tensor, count: int, gen: torch.Generator,
    within: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """The mean |dℓ/dt| along ``count`` random directions per field of ``like`` (m, S, P),
    each at that field's norm: shape (m,); with ``within`` (S, P, P), the random directions
    are first projected by these projectors (random directions within a subspace)."""
    rates = []
    for _ in range(count):
        u = torch.randn(like.shape, generator=gen, dtype=F64)
        u = u if within is None else torch.einsum("spq,ksq->ksp", within, u)
        rates.append(_rate(loss, *samples, _matched(u, like)))
    return torch.stack(rates).mean(dim=0)


def _rank(matrix: Tensor) -> int:
    s = torch.linalg.svdvals(matrix)
    return int((s > s[0] * SPAN_RTOL).sum())


def _mean(values: Tensor | list[float]) -> float:
    return float(torch.as_tensor(values, dtype=F64).mean())


def _overlap(v: Tensor, theta: Tensor, known: Tensor, exact: Tensor) -> dict[str, Tensor]:
    """Where the learned fields v (k, S, P) lie relative to the known and the exactly
    discovered algebras (generator matrices (·, P, P)) at the points θ (S, P)."""
    k, S, P = v.shape
    known_q, exact_q = tangent_spaces(known, theta), tangent_spaces(exact, theta)
    learned = orthonormal_basis(v.permute(1, 2, 0).reshape(S * P, k))

    def span(generators: Tensor) -> Tensor:  # the fields G_j θ stacked over the points
        return orthonormal_basis(torch.einsum("jpq,sq->spj", generators, theta).reshape(S * P, -1))

    noise = torch.randn(S, P, 64, generator=torch.Generator().manual_seed(S), dtype=F64)
    return {
        "inside_known": torch.stack([inside_fraction(known_q[s], v[:, s].T) for s in range(S)]),
        "inside_exact": torch.stack([inside_fraction(exact_q[s], v[:, s].T) for s in range(S)]),
        "inside_random": torch.stack([inside_fraction(q, noise[s]) for s, q in enumerate(known_q)]),
        "pointwise": torch.stack(
            [cosines(orthonormal_basis(v[:, s].T), known_q[s])[:k] for s in range(S)]
        ).mean(dim=0),
        "pointwise_random": torch.stack(
            [cosines(orthonormal_basis(noise[s, :, :k]), known_q[s])[:k] for s in range(S)]
        ).mean(dim=0),
        "stacked_known": cosines(learned, span(known)),
        "stacked_random": cosines(
            orthonormal_basis(noise[:, :, :k].reshape(S * P, k)), span(known)
        ),
        "stacked_exact": cosines(learned, span(exact)),
        "exact_vs_known": principal_angles(
            orthonormal_basis(exact.reshape(-1, P * P).T),
            orthonormal_basis(known.reshape(-1, P * P).T),
        ),
        "complement": torch.stack([torch.eye(P, dtype=F64) - q @ q.T for q in known_q]),
        "orbit_dim": torch.tensor(max(q.shape[1] for q in known_q)),
    }


def _structure(
    model: TinyTransformer, loss: FlatLoss, samples: Samples, known: Tensor, probes: int = 8
) -> dict[str, Any]:
    """At the first ``probes`` points: the null space of θ ↦ f(X) (its dimension and largest
    principal-angle sine to the known orbit's tangent space) and P − rank of the per-sequence
    loss Jacobian (the loss level set's dimension)."""
    dims, sines, levels = [], [], []
    for theta, x, y in zip(*(t[:probes] for t in samples), strict=True):
        out = torch.func.jacfwd(
            lambda t, x=x: torch.func.functional_call(model, loss.unflatten(t), (x,)).reshape(-1)
        )(theta)
        null = torch.linalg.svd(out).Vh[_rank(out) :].T
        angles = principal_angles(null, tangent_spaces(known, theta.unsqueeze(0))[0])
        dims.append(null.shape[1])
        sines.append(float(torch.sin(angles).max()) if angles.numel() else 1.0)
        levels.append(
            theta.numel() - _rank(torch.func.jacrev(lambda t, x=x, y=y: loss(t, x, y))(theta))
        )
    return {
        "output_null_dim": [min(dims), max(dims)],
        "output_null_vs_known_sine": max(sines),
        "level_set_dim": [min(levels), max(levels)],
    }


@single_threaded
def run_transformer(config: TransformerDiscoveryConfig, progress: Progress) -> Result:
    """Learned and exact discovery on the tiny transformer; overlap and invariance measures."""
    _validate(config)
    torch.manual_seed(config.seed)
    model = TinyTransformer(config.d_model, config.d_ff, config.theta_init)
    loss = flat_loss(model, nn.MSELoss())
    P = loss.num_params
    sampler = make_sampler(model, config.batch, config.seq_len)
    symmetry, per_step = _learned(config, loss, sampler, progress)
    progress.log("exact discovery in gl(28)")
    exact = _exact(config, model)
    known = known_generators(config.d_model, config.d_ff)
    exact_matrices = exact.coefficients.T.reshape(-1, P, P).to(F64)

    generator = torch.Generator().manual_seed(config.seed + 104_729)
    samples = sampler(config.eval_points, generator)
    theta, x, y = samples
    with torch.no_grad():
        v = symmetry.infinitesimal_action(theta, x).to(F64)  # (k, S, P)
    k = v.shape[0]
    o = _overlap(v, theta, known, exact_matrices)
    outside = torch.einsum("spq,ksq->ksp", o["complement"], v)
    count = config.random_directions
    ratio = (
        _rate(loss, theta, x, y, v) / _random_rate(loss, samples, v, count, generator)
    ).tolist()
    ratio_outside = (
        _rate(loss, theta, x, y, outside)
        / _random_rate(loss, samples, outside, count, generator, o["complement"])
    ).tolist()
    known_fields = torch.einsum("jpq,sq->jsp", known, theta)
    known_rate = _rate(loss, theta, x, y, known_fields) / _random_rate(
        loss, samples, known_fields, 1, generator
    )
    h = symmetry.generators().to(F64)
    h_inside = inside_fraction(orthonormal_basis(known.reshape(-1, P * P).T), h.reshape(k, -1).T)

    per_generator = empty_table(
        "generator inside_known inside_exact outside_known invariance_ratio "
        "outside_invariance_ratio h_inside_known speed"
    )
    inside = o["inside_known"]
    outside_share = (1 - inside**2).clamp_min(0).sqrt().mean(dim=0)
    for i in range(k):
        append_row(
            per_generator, i + 1, float(inside[:, i].mean()), float(o["inside_exact"][:, i].mean()),
            float(outside_share[i]), ratio[i], ratio_outside[i], float(h_inside[i]),
            float(v[i].norm(dim=-1).mean()),
        )  # fmt: skip
    angles = empty_table("comparison index cosine")
    for name in ANGLE_ROWS:
        for j, c in enumerate(o[name].tolist()):
            append_row(angles, name, j + 1, c)
    elements = symmetry.group_elements().to(F64)
    matrices = empty_table("generator row col h exp_h")
    for i, r, c in itertools.product(range(k), range(P), range(P)):
        append_row(matrices, i + 1, r, c, float(h[i, r, c]), float(elements[i, r, c]))
    history = symmetry.history.to_dict()
    training = empty_table("epoch " + " ".join(symmetry.history.last()))
    for epoch in range(symmetry.history.epochs):
        append_row(training, epoch, *(history[key][epoch] for key in list(training)[1:]))

    sines = torch.sin(o["exact_vs_known"])
    metrics: dict[str, Any] = {
        "num_params": P,
        "text_num_params": TEXT_P,
        "block_sizes": block_sizes(model),
        "known_dim": int(known.shape[0]),
        "known_orbit_dim": int(o["orbit_dim"]),
        "exact_dim": exact.dim,
        "exact_status": exact.status,
        "exact_samples": exact.samples,
        "exact_rank_per_sample": exact.rank_per_sample,
        "exact_seconds": exact.seconds,
        "exact_vs_known_max_sine": float(sines.max()) if sines.numel() else None,
        **_structure(model, loss, samples, known),
        "inside_known": inside.mean(dim=0).tolist(),
        "inside_known_mean": _mean(inside),
        "inside_exact_mean": _mean(o["inside_exact"]),
        "inside_random_mean": _mean(o["inside_random"]),
        "outside_random_mean": _mean((1 - o["inside_random"] ** 2).clamp_min(0).sqrt()),
        "outside_known_mean": _mean(outside_share),
        "outside_exact_mean": _mean((1 - o["inside_exact"] ** 2).clamp_min(0).sqrt()),
        "pointwise_cosines": o["pointwise"].tolist(),
        "stacked_cosines": o["stacked_known"].tolist(),
        "stacked_exact_cosines": o["stacked_exact"].tolist(),
        "pointwise_random_cosines": o["pointwise_random"].tolist(),
        "stacked_random_cosines": o["stacked_random"].tolist(),
        "invariance_ratio": ratio,
        "invariance_ratio_mean": _mean(ratio),
        "invariance_ratio_max": max(ratio),
        "outside_invariance_ratio": ratio_outside,
        "outside_invariance_ratio_mean": _mean(ratio_outside),
        "known_invariance_ratio_max": float(known_rate.max()),
        "h_inside_known": h_inside.tolist(),
        "field_norm_mean": _mean(v.norm(dim=-1)),
        "fit_seconds_per_step": per_step,
        "fit_final": symmetry.history.last(),
        "eval_points": config.eval_points,
    }
    notes = [
        f"model: P = {P} parameters (the text says p = {TEXT_P}; no output projection, "
        "biases or layer norm, FFN(Z) = Z W1 W2 since the text's Z W2 W1 does not compose)",
        f"learned: {config.generators} generators, action '{config.action}' seeing X, hidden "
        f"{list(config.hidden)}, {config.steps} steps × {config.samples_per_step} fresh "
        f"(θ, X, Y), Adam {config.lr:g} (cosine decay), weights {config.weights}; "
        f"{per_step * 1e3:.1f} ms per step (vec(g) has {P * P} inputs)",
        f"θ ~ {config.theta_init} init; a point of the per-point loss is one sequence "
        f"(B = {config.batch} points per sample)",
        f"exact discovery: {exact.reason}",
        "orbit-level measures compare at each θ with the tangent space of the known algebra "
        "(rank 16: 4 of the 16 gl(4) directions fix a generic (W1, W2)); field-level "
        "measures stack the fields over the evaluation points",
    ]
    series = {
        "per_generator": per_generator,
        "principal_angles": angles,
        "generators": matrices,
        "training": training,
    }
    return Result(metrics, series, notes)


# -- claims ------------------------------------------------------------------------------
def _g(value: Any) -> str:
    """A count as written (``20``, also after averaging over seeds made it ``20.0``)."""
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def invariance_claim(result: Result) -> tuple[str, bool]:
    """The learned fields' |dℓ/dt| is below random's at matched norm for every generator and
    at most INVARIANCE_MAX × random's on average."""
    m = result.metrics
    worst, mean = m["invariance_ratio_max"], m["invariance_ratio_mean"]
    text = (
        f"|dℓ/dt| along learned fields / random at matched norm: mean {mean:.3f}, max "
        f"{worst:.3f} over the generators (known fields: {m['known_invariance_ratio_max']:.1e})"
    )
    return text, worst < 1.0 and mean <= INVARIANCE_MAX


def unexplained_claim(result: Result) -> tuple[str, bool]:
    """A symmetry not explained by the known ones: most of ‖v‖ outside the exact algebra's
    tangent space, and that outside part keeps the loss."""
    m = result.metrics
    share = m["outside_exact_mean"]
    outside = m["outside_invariance_ratio_mean"]
    text = (
        f"share of ‖v‖ outside the exact algebra's tangent space {share:.2f} (random direction "
        f"{m['outside_random_mean']:.2f}); ‖Πv‖/‖v‖ inside "
        f"{m['inside_known_mean']:.2f} (exact {m['inside_exact_mean']:.2f}, random "
        f"{m['inside_random_mean']:.2f}); |dℓ/dt| of the outside part / random "
        f"{outside:.2f}; null space of θ ↦ f(X): dim {m['output_null_dim']}, known orbit "
        f"dim {_g(m['known_orbit_dim'])}, largest sine between them "
        f"{m['output_null_vs_known_sine']:.1e}"
    )
    return text, share >= UNEXPLAINED_MIN and outside <= OUTSIDE_INVARIANCE_MAX


def dimension_claim(result: Result) -> tuple[str, bool]:
    """Exact discovery's dimension equals the known algebra's and spans the same matrices."""
    m = result.metrics
    sine = m["exact_vs_known_max_sine"]
    text = (
        f"exact dim {_g(m['exact_dim'])} ({m['exact_status']}, {_g(m['exact_samples'])} θ "
        f"draws), known gl(2) ⊕ gl(4) dim {_g(m['known_dim'])}, max principal-angle sine "
        f"{'n/a' if sine is None else f'{sine:.1e}'}; orbit dim {_g(m['known_orbit_dim'])}"
    )
    holds = m["exact_dim"] == m["known_dim"] and sine is not None and sine <= 1e-8
    return text, holds


# -- figures -------------------------------------------------------------------------------
def plot_transformer(result: Result) -> dict[str, Any]:
    """Fig 6.7 (h_i and exp(h_i) − I over the flattened parameters), and the overlap of the
    learned fields with the known algebra and their invariance."""
    m = result.metrics
    table = result.series["generators"]
    per = result.series["per_generator"]
    k = len(per["generator"])
    P = int(m["num_params"])
    hs = [np.array(table_rows(table, generator=i + 1)["h"]).reshape(P, P) for i in range(k)]
    es = [np.array(table_rows(table, generator=i + 1)["exp_h"]).reshape(P, P) for i in range(k)]
    labels = [
        f"known {a:.2f}, inv {b:.2f}"
        for a, b in zip(per["inside_known"], per["invariance_ratio"], strict=True)
    ]
    heat = generator_heatmaps(
        hs, es, m["block_sizes"], labels=labels,
        title="Fig 6.7: learned generators h_i (top), exp(h_i) − I (bottom) over θ = (W_Q, W_K, "
        "W_V, W1, W2); known: ‖Πv‖/‖v‖ in the known algebra, inv: |dℓ/dt| / random",
    )  # fmt: skip
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    idx = np.arange(1, k + 1)
    left.bar(idx - 0.2, per["inside_known"], 0.4, label="learned ‖Πv‖/‖v‖ (known)")
    left.bar(idx + 0.2, per["h_inside_known"], 0.4, label="h_i in the known algebra (matrix)")
    left.axhline(m["inside_random_mean"], color="grey", ls=":", label="random direction")
    left.set(xlabel="generator", ylabel="fraction inside", ylim=(0, 1.05),
             title="(a) share of each learned field in the known algebra")  # fmt: skip
    left.legend(fontsize=7)
    middle.bar(idx - 0.2, per["invariance_ratio"], 0.4, label="whole field")
    middle.bar(
        idx + 0.2,
        per["outside_invariance_ratio"],
        0.4,
        label="part outside the known (vs random there)",
    )
    middle.axhline(1.0, color="grey", ls=":", label="random (matched norm)")
    middle.set(xlabel="generator", ylabel="|dℓ/dt| / random",
               title="(b) loss change along the learned fields")  # fmt: skip
    middle.legend(fontsize=7)
    angles = result.series["principal_angles"]
    styles = {
        "pointwise": ("o-", "C0", "at each θ vs known tangent space"),
        "pointwise_random": ("o:", "grey", "random directions, at each θ"),
        "stacked_known": ("s--", "C1", "stacked over θ vs known fields"),
        "stacked_exact": ("x:", "C2", "stacked over θ vs exact fields"),
        "stacked_random": ("s:", "silver", "random, stacked"),
    }
    for name, (style, color, label) in styles.items():
        rows = table_rows(angles, comparison=name)
        right.plot(rows["index"], rows["cosine"], style, color=color, label=label)
    right.set(xlabel="principal angle index", ylabel="cosine", ylim=(0, 1.05),
              title="(c) learned span vs known / exact algebra")  # fmt: skip
    right.legend(fontsize=7)
    figure.tight_layout()
    return {"transformer_generators.png": heat, "transformer_overlap.png": figure}


experiment(
    "discovery-transformer",
    seed_ref="seed 001, Fig 6.7; §6.5.5",
    description=(
        "learned symmetry discovery (8 generators, data-dependent MLP action) on a tiny "
        "one-block transformer (P = 28): heat maps of h_i and exp(h_i), the learned fields' "
        "share in the known GL(2) query-key and GL(4) feed-forward algebras and in the "
        "exactly discovered algebra (dim 20), principal angles, and their invariance against "
        "random directions"
    ),
    quick=TransformerDiscoveryConfig(),
    paper=TransformerDiscoveryConfig(steps=2000, samples_per_step=100),
    claims=[
        Claim(
            "the learned generators are symmetries: the loss varies less along them than "
            "along random directions",
            "seed 001, §6.5.5, Fig 6.7 (verified as in §6.5.4, Fig 6.6)",
            "mean |dℓ_j/dt| along the learned fields below that along random directions of "
            f"the same norm for every generator, and ≤ {INVARIANCE_MAX} × on average",
            invariance_claim,
        ),
        Claim(
            "the learned generators show structured, nontrivial coupling patterns not "
            "explained by known data-independent symmetries: novel data-dependent symmetries",
            "seed 001, §6.5.5, Fig 6.7",
            f"≥ {UNEXPLAINED_MIN} of ‖v‖ (mean) outside the tangent space of the exact linear "
            f"symmetry algebra, and that part keeps the loss (|dℓ/dt| ≤ "
            f"{OUTSIDE_INVARIANCE_MAX} × random at matched norm)",
            unexplained_claim,
        ),
        Claim(
            "the known data-independent symmetries are the whole linear symmetry algebra: "
            "GL(2) on (W_Q, W_K) and GL(4) on (W1, W2), dimension 4 + 16 = 20",
            "seed 001, §6.5.5 model; notes 001c §4.3 (C), derived in the module docstring",
            "exact discovery in gl(28) determines dim 20, spanning the same matrices as "
            "gl(2) ⊕ gl(4) (max principal-angle sine ≤ 1e-8)",
            dimension_claim,
        ),
    ],
    plot=plot_transformer,
)(run_transformer)
