"""Exact linear symmetry discovery: the null space of the infinitesimal invariance constraint.

A linear generator A (a P × P matrix acting on the flattened parameters) generates a symmetry
of the loss, ℓ(exp(tA) θ; x) = ℓ(θ; x) for all t, θ and data x (dissertation Def. 1.3.1; for a
fixed batch X, the data-dependent Def. 1.3.4), only if

    ⟨∇_θ ℓ(θ; x), A θ⟩ = 0    for all θ and x                       (Thm 6.3.1)

which is linear in A. Under an ansatz A = Σ_j c_j B_j (:mod:`paramsym.discovery.ansatz`) every
sampled (θ, x) gives a row [⟨∇ℓ, B_j θ⟩]_j, and the symmetry algebra (within the ansatz) is the
null space of the stacked rows: its dimension is the number of zero singular values. This is
the idea of LieSD (Hu et al., "Symmetry discovery for neural networks via Lie derivatives",
where it discovers data symmetries) applied to the parameters.

How many samples (notes 001c §10): all rows from one θ share the factor θ, so one draw adds at
most rank{∇ℓ(θ; batches)} independent rows (6 for a bias-free linear 3-4-2 net with MSE and
batch gradients; there, 60 draws give a clean gap and the wrong dimension 40 instead of
dim gl(4) = 16). The number of draws is therefore chosen from the rank the first draw adds
(:func:`~paramsym.discovery.solve.draws_needed`), and the dimension is reported only when the
first half of the draws gives the same dimension as all of them (doubling the samples leaves
it unchanged); with ``samples=None`` the draws are doubled until it does. Otherwise the result
is undetermined, with the numbers (never rounded to a guess).

Data-dependent discovery (``data_dependent=True``) fixes one batch X of k examples and samples
only θ. A linear generator then also counts when it keeps the first layer's pre-activations
on X: every linear map of θ into {(ΔW₁, Δb₁) : ΔW₁ X + Δb₁ 1ᵀ = 0}, a subspace of dimension
h₁(n + 1 − rank[X; 1]). Under gl(P) that adds P · h₁(n + 1 − rank[X; 1]) dimensions; under the
layer pairs, whose input block is W₁ ↦ W₁N, it adds the N with N X = 0: n(n − rank X) (both
checked in the tests). With a squared-error loss and o outputs, the output block adds the
rotations of the outputs that fix every target of the batch, M antisymmetric with M Y = 0:
(o − r)(o − r − 1)/2 with r = rank Y (measured by the ``symmetry-count`` experiment). The
data-dependent GL actions of the catalogue (pseudo-inverse, inverse-activation; Eqs. 2.54,
4.13) move U nonlinearly in θ, so no linear ansatz contains them:
:func:`~paramsym.discovery.compare_to_catalogue` reports them as missed.

On shared cores, small systems run much faster on one torch thread
(``torch.set_num_threads(1)``): every LAPACK call here is small.

>>> import torch, paramsym as ps
>>> from paramsym.discovery import discover_symmetries
>>> model = ps.mlp([3, 4, 2], activation="relu", seed=0)
>>> def batch(generator):
...     return torch.randn(16, 3, generator=generator), torch.randn(16, 2, generator=generator)
>>> found = discover_symmetries(model, torch.nn.MSELoss(), batch)
>>> found.dim, found.determined          # the 4 neuron rescalings of the hidden layer
(4, True)
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from paramsym.core.model_checks import check_deterministic, require_module
from paramsym.core.params import Params
from paramsym.core.seeding import make_generator
from paramsym.discovery.ansatz import Ansatz, LayerPairAnsatz
from paramsym.discovery.basis import AnsatzSpec, make_ansatz
from paramsym.discovery.result import (
    Decision,
    DiscoveredGenerator,
    DiscoveryResult,
    Status,
    decide,
    relative,
)
from paramsym.discovery.sampling import (
    Batch,
    DataSpec,
    DataStream,
    LossFn,
    ParameterSampler,
    ThetaSpec,
    draw_sample,
    loss_gradients,
    points_to_keep,
)
from paramsym.discovery.solve import SAFETY, StackedSystem, compress, draws_needed
from paramsym.discovery.unitwise import unitwise_chain
from paramsym.discovery.unitwise_run import run_unitwise
from paramsym.errors import AmbiguousDimensionWarning, DiscoveryError, InvalidArgumentError

Solver = Literal["auto", "dense", "unitwise"]

DEFAULT_MAX_MEMORY = 2 * 1024**3
"""Bytes the dense solver may use (rows, R factor and SVD, ≈ 8 · (3K + 3K) · K for K
unknowns): the full ansatz fits up to P ≈ 85 parameters, K = P² ≈ 7000."""


@dataclass
class Outcome:
    """What a solver hands back for assembling the result."""

    values: Tensor
    decision: Decision
    half_dim: int
    coefficients: Tensor
    samples: int
    dims_by_samples: dict[int, int]
    rank_per_sample: int
    rows: int
    unknowns: int
    gradient_evaluations: int
    points: list[Params]
    notes: list[str] = field(default_factory=list)


def dense_memory(unknowns: int, columns: int) -> int:
    """Bytes the dense solver needs for ``unknowns`` coefficients (``columns`` before the
    redundant directions are removed)."""
    return 8 * (int(SAFETY * unknowns) * columns + 3 * unknowns * unknowns)


def _gib(size: int) -> str:
    return f"{size / 1024**3:.3g} GiB"


def _check_count(value: int | None, what: str, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(
            f"discover_symmetries: {what} must be an integer ≥ {minimum}, got {value!r}"
        )


def discover_symmetries(
    model: nn.Module,
    loss_fn: LossFn,
    data: DataSpec,
    ansatz: AnsatzSpec = "layer_pairs",
    *,
    data_dependent: bool = False,
    samples: int | None = None,
    generator: torch.Generator | int | None = None,
    theta: ThetaSpec = "init",
    theta_scale: float = 1.0,
    params: Mapping[str, Tensor] | None = None,
    per_example: bool = True,
    batches_per_sample: int = 1,
    solver: Solver = "auto",
    rtol: float | None = None,
    min_gap: float = 1e3,
    max_samples: int | None = None,
    max_memory: int = DEFAULT_MAX_MEMORY,
    dtype: torch.dtype = torch.float64,
) -> DiscoveryResult:
    """The linear symmetries of ``model``'s loss within ``ansatz``: the null space of the
    constraint ⟨∇_θ ℓ(θ; x), A θ⟩ = 0 stacked over sampled θ and data (module docstring).

    Args:
        model: the network; its trainable parameters are the unknowns' domain (P of them).
        loss_fn: ``loss_fn(output, target) -> scalar``, a sum or mean over examples;
            ``output`` is what the model returns.
        data: an ``(x, y)`` batch, a sequence/iterable of batches (cycled), or a callable
            returning a fresh batch (given the generator if it takes an argument); x is a
            tensor or a mapping of tensors with the batch axis first (keyword inputs:
            ``{"input_ids": ids}``, a tokenizer's ``BatchEncoding``), passed to the model as
            :func:`paramsym.functional_call` does, and ``loss_fn`` receives what the model
            returns (a ``ModelOutput`` too). Data-
            independent discovery should see fresh data at every draw: a callable, or many
            batches; with one batch it finds the symmetries *of that batch* (see
            ``data_dependent``).
        ansatz: ``"layer_pairs"`` (left/right multiplications of consecutive ``nn.Linear``
            layers; the input block when the model has ≤ 64 inputs, the output block when it
            has ≤ 64 outputs; on a model that is not such an MLP, the same blocks read off the
            traced graph: ``"channels"``), ``"channels"``
            (:class:`~paramsym.discovery.channels.ChannelAnsatz`: one block per module and
            feature space of the traced graph, for CNNs, BatchNorm, residual blocks),
            ``"full"`` (gl(P), P ≲ 60), an :class:`~paramsym.discovery.Ansatz`, or a basis:
            (P, P) matrices or linear maps of params dicts.
        data_dependent: fix the batch X (the first of ``data``) and sample only θ: the
            data-dependent symmetries of Def. 1.3.4 (per example of X).
        samples: parameter draws in the final system; ``None`` chooses them from the rank the
            first draw adds (3 rows per unknown) and doubles them until the dimension is stable.
            Given, the dimension is checked with the first half of them.
        generator: seeds θ draws (and callable data that takes it); default seed 0.
        theta: ``"init"`` (re-draw the model's initialisation), ``"gaussian"`` (around
            ``params`` or the model's point, relative scale ``theta_scale``) or a callable
            ``theta(generator) -> params``.
        params: centre of ``theta="gaussian"`` (default: the model's parameters).
        per_example: one row per example (the per-point loss of Def. 1.3.4; default; x and
            y are split along their first axis, a mapping x tensor by tensor) or one per
            batch.
        batches_per_sample: batches per θ draw (data-independent discovery).
        solver: ``"dense"`` (one SVD of the stacked rows), ``"unitwise"`` (the layer-pair
            ansatz of an MLP split by hidden unit, :mod:`paramsym.discovery.unitwise`), or
            ``"auto"``: dense when it fits in ``max_memory``, otherwise unit-wise.
        rtol, min_gap: the decision thresholds (:func:`~paramsym.discovery.result.decide`);
            ``rtol`` defaults to √eps of ``dtype``.
        max_samples: cap on the draws when ``samples`` is ``None`` (default 16 × the first
            choice).
        max_memory: bytes the dense solver may use; beyond it the full and basis ansätze are
            refused, naming what they would need.
        dtype: working precision (float64 recommended: the gap between zero and non-zero
            singular values is what decides the dimension).

    Returns:
        A :class:`~paramsym.discovery.DiscoveryResult`. When the dimension is not determined
        (ambiguous gap, or unstable under doubling) it also warns
        (:class:`~paramsym.errors.AmbiguousDimensionWarning`).

    Raises:
        InvalidArgumentError: no parameters, an all-zero input batch, a batch that is not an
            ``(x, y)`` pair of the forms above, an ansatz too large for ``max_memory`` (with
            the size it needs), bad arguments.
        ShapeError: a batch whose tensors differ in batch length, or (per example) a y
            without one row per example.
        DiscoveryError: every sampled loss gradient is zero against the ansatz.
    """
    start = time.perf_counter()
    model = require_module(model, "discover_symmetries")
    check_deterministic(model, "discover_symmetries")
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    if not names:
        raise InvalidArgumentError(
            f"discover_symmetries: {type(model).__name__} has no trainable parameters, so it "
            "has no parameter-space symmetries to discover"
        )
    _check_count(samples, "samples", 2)
    _check_count(batches_per_sample, "batches_per_sample", 1)
    _check_count(max_samples, "max_samples", 2)
    if not dtype.is_floating_point:
        raise InvalidArgumentError(f"discover_symmetries: dtype must be floating, got {dtype}")
    if rtol is None:
        rtol = float(torch.finfo(dtype).eps) ** 0.5
    if not (0 < rtol < 1) or not (min_gap > 1):
        raise InvalidArgumentError(
            f"discover_symmetries: need 0 < rtol < 1 and min_gap > 1, got {rtol}, {min_gap}"
        )
    if solver not in ("auto", "dense", "unitwise"):
        raise InvalidArgumentError(
            f"discover_symmetries: solver must be 'auto', 'dense' or 'unitwise', got {solver!r}"
        )
    rng = make_generator(generator)
    stream = DataStream(data, dtype, rng)
    the_ansatz = make_ansatz(model, names, ansatz, example_input=stream.peek()[0])
    sampler = ParameterSampler(model, names, theta, theta_scale, dtype, rng, center=params)
    sampler.keep = points_to_keep(the_ansatz.size, the_ansatz.numel)
    fixed = stream.next() if data_dependent else None
    if fixed is None and stream.kind == "batch":
        sampler.notes.append(
            "one fixed batch: the result holds the symmetries of the loss on that batch; pass "
            "a callable or many batches for data-independent symmetries"
        )

    chosen = _choose_solver(model, the_ansatz, solver, per_example, max_memory)
    if chosen == "dense":
        outcome = _run_dense(
            model, loss_fn, the_ansatz, stream, sampler, fixed, samples, max_samples,
            per_example, batches_per_sample, rtol, min_gap, max_memory,
        )  # fmt: skip
    else:
        assert isinstance(the_ansatz, LayerPairAnsatz)
        chain = unitwise_chain(model, the_ansatz)
        assert not isinstance(chain, str)
        run = run_unitwise(
            chain, the_ansatz, loss_fn, stream, sampler, fixed, samples, max_samples,
            batches_per_sample, rtol, min_gap,
        )  # fmt: skip
        outcome = Outcome(**run)
    return _assemble(
        outcome, the_ansatz, chosen, data_dependent, fixed, sampler, rtol, min_gap, start
    )


def _choose_solver(
    model: nn.Module, ansatz: Ansatz, solver: Solver, per_example: bool, max_memory: int
) -> Literal["dense", "unitwise"]:
    unknowns = ansatz.size - ansatz.redundancy().shape[0]
    needed = dense_memory(unknowns, ansatz.size)
    hint = "use ansatz='layer_pairs' on an MLP (solved unit-wise), a smaller basis"
    if solver == "unitwise" or (solver == "auto" and needed > max_memory):
        reason = (
            unitwise_chain(model, ansatz)
            if isinstance(ansatz, LayerPairAnsatz)
            else f"the {ansatz.kind} ansatz has no unit-wise form"
        )
        if not per_example:
            reason = "per_example=False (the unit-wise solver uses per-example rows)"
        if not isinstance(reason, str):
            return "unitwise"
        if solver == "unitwise":
            raise InvalidArgumentError(
                f"discover_symmetries: solver='unitwise' does not apply: {reason}"
            )
        if isinstance(ansatz, LayerPairAnsatz):
            hint = f"the unit-wise solver does not apply ({reason}); use a smaller model"
    if ansatz.kind == "channels":
        hint = (
            "the unit-wise solver covers MLP chains only; pass a basis that acts on the part "
            "of the model you want to study, or use a smaller model"
        )
    if needed > max_memory:
        raise InvalidArgumentError(
            f"discover_symmetries: the {ansatz.kind} ansatz has {ansatz.size} unknowns "
            f"({ansatz.numel} parameters); its dense system needs about {_gib(needed)} "
            f"(max_memory is {_gib(max_memory)}); {hint}, or raise max_memory"
        )
    return "dense"


def _run_dense(
    model: nn.Module,
    loss_fn: LossFn,
    ansatz: Ansatz,
    stream: DataStream,
    sampler: ParameterSampler,
    fixed: Batch | None,
    samples: int | None,
    max_samples: int | None,
    per_example: bool,
    batches_per_sample: int,
    rtol: float,
    min_gap: float,
    max_memory: int,
) -> Outcome:
    redundant = ansatz.redundancy()
    q = redundant.shape[0]
    complement = None
    if q:
        complement = torch.linalg.qr(redundant.T, mode="complete").Q[:, q:].to(sampler.dtype)
    unknowns = ansatz.size - q
    system = StackedSystem(unknowns)
    ranks: list[int] = []
    zero_gradients: list[int] = []
    points: list[Params] = []
    evaluations = 0

    def draw() -> None:
        nonlocal evaluations
        point, batches = draw_sample(sampler, stream, fixed, batches_per_sample, points)
        grads = loss_gradients(model, loss_fn, point, ansatz.names, batches, per_example)
        evaluations += len(batches)
        theta = ansatz.flatten(point)
        rows = ansatz.rows(theta, grads)
        if complement is not None:
            rows = rows @ complement
        block, rank = compress(rows, grads.norm(dim=1) * theta.norm(), rank=not ranks)
        system.add(block)
        ranks.append(rank)
        if not bool((grads != 0).any()):
            zero_gradients.append(len(ranks))

    draw()
    if zero_gradients:
        raise DiscoveryError(
            "discover_symmetries: every loss gradient at the first sampled θ is zero; check "
            "that the loss depends on the parameters and that the data are not degenerate"
        )
    # a first draw with rank 0 (every basis element a symmetry there) plans as if rank 1
    count = samples if samples is not None else draws_needed(unknowns, max(ranks[0], 1))
    cap = max_samples if max_samples is not None else 16 * count
    dims: dict[int, int] = {}
    while True:
        rows_needed = count * max(b.shape[0] for b in system.blocks) * unknowns * 8
        if rows_needed > max_memory:
            raise InvalidArgumentError(
                f"discover_symmetries: {count} draws of ≤ {system.blocks[0].shape[0]} rows over "
                f"{ansatz.size} unknowns need about {_gib(rows_needed)} "
                f"(max_memory is {_gib(max_memory)})"
            )
        while len(system.blocks) < count:
            draw()
        half = count // 2
        half_dim = decide(relative(system.singular_values(half), 1.0), rtol, min_gap).dim
        values, vh = system.svd(count)
        decision = decide(relative(values, 1.0), rtol, min_gap)
        dims[half] = half_dim
        dims[count] = decision.dim
        if half_dim == decision.dim or samples is not None or 2 * count > cap:
            break
        count *= 2
    basis = vh[unknowns - decision.dim :].T
    coefficients = complement @ basis if complement is not None else basis
    notes = []
    if q:
        notes.append(f"{q} redundant ansatz direction(s) (generating nothing) removed")
    return Outcome(
        values=relative(values, 1.0),
        decision=decision,
        half_dim=half_dim,
        coefficients=coefficients.contiguous(),
        samples=count,
        dims_by_samples=dims,
        rank_per_sample=ranks[0],
        rows=system.rows(count),
        unknowns=unknowns,
        gradient_evaluations=evaluations,
        points=points,
        notes=notes,
    )


def _assemble(
    outcome: Outcome,
    ansatz: Ansatz,
    solver: str,
    data_dependent: bool,
    fixed: Batch | None,
    sampler: ParameterSampler,
    rtol: float,
    min_gap: float,
    start: float,
) -> DiscoveryResult:
    decision = outcome.decision
    dims = outcome.dims_by_samples
    half = outcome.samples // 2
    status: Status
    if decision.ambiguous:
        status = "ambiguous"
    elif outcome.half_dim != decision.dim:
        status = "unstable"
    else:
        status = "determined"
    zero = f"{decision.largest_zero:.2e}" if decision.largest_zero is not None else "none"
    clear = f"{decision.smallest_nonzero:.2e}" if decision.smallest_nonzero is not None else "none"
    numbers = (
        f"{decision.dim} of {outcome.unknowns} relative singular values ≤ rtol = {rtol:.2e} "
        f"(largest {zero}), smallest above {clear}, gap {decision.gap:.3g}"
    )
    if status == "determined":
        reason = (
            f"dimension {decision.dim}: {numbers}; the same with {half} and {outcome.samples} "
            "parameter draws"
        )
    elif status == "ambiguous":
        reason = (
            f"ambiguous: {numbers}; a singular value lies within min_gap = {min_gap:g} of the "
            "threshold, so the dimension cannot be decided (an approximate symmetry, or rtol "
            "too tight for this precision)"
        )
    else:
        reason = (
            f"unstable: dimension {outcome.half_dim} with {half} draws but {decision.dim} with "
            f"{outcome.samples} ({numbers}); each draw adds ≤ {outcome.rank_per_sample} "
            f"independent rows for {outcome.unknowns} unknowns, so more draws are needed "
            "(samples=None grows them until the dimension is stable)"
        )
    determined = status == "determined"
    if not determined:
        warnings.warn(f"discover_symmetries: {reason}", AmbiguousDimensionWarning, stacklevel=3)
    generators = [
        DiscoveredGenerator(ansatz, column, j)
        for j, column in enumerate(_columns(outcome.coefficients, decision.dim))
    ]
    return DiscoveryResult(
        dim=decision.dim if determined else None,
        determined=determined,
        status=status,
        reason=reason,
        dim_estimate=decision.dim,
        generators=generators,
        coefficients=outcome.coefficients,
        singular_values=outcome.values,
        gap=decision.gap,
        rtol=rtol,
        min_gap=min_gap,
        samples=outcome.samples,
        dims_by_samples=dict(sorted(dims.items())),
        rank_per_sample=outcome.rank_per_sample,
        rows=outcome.rows,
        unknowns=outcome.unknowns,
        ansatz=ansatz.describe(),
        solver=solver,
        data_dependent=data_dependent,
        gradient_evaluations=outcome.gradient_evaluations,
        seconds=time.perf_counter() - start,
        notes=[*sampler.notes, *outcome.notes],
        ansatz_object=ansatz,
        points=outcome.points,
        batch=fixed,
    )


def _columns(coefficients: Tensor, count: int) -> list[Tensor]:
    """The first ``count`` columns of (K, d) coefficients; sparse ones stay sparse (K,)."""
    if not coefficients.is_sparse:
        return [coefficients[:, j] for j in range(count)]
    c = coefficients.coalesce()
    rows, cols = c.indices()
    order = torch.argsort(cols, stable=True)
    sizes = torch.bincount(cols, minlength=c.shape[1]).tolist()
    rows_by, values_by = rows[order].split(sizes), c.values()[order].split(sizes)
    return [
        torch.sparse_coo_tensor(
            rows_by[j][None], values_by[j], (c.shape[0],), check_invariants=False
        )
        for j in range(count)
    ]
