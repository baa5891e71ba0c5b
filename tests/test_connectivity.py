"""Mode connectivity (dissertation ch. 3) in float64 against closed forms and dense oracles:
interpolation barriers (hand-evaluated chords, Prop. 3.3.3's closed form), weight matching
(planted permutations, brute force over all permutations, monotone objective), symmetry
curves (tangent-field oracle for γ' and γ'', circles for the curvature and the chord bound of
Thm 3.4.2, its erratum), Prop. 3.4.1 against a dense projector, and the components of minima
(Prop. 3.2.1, 3.2.3, 3.3.2 with its worked example)."""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from helpers import params_relative_error, randomize_, relative_error
from paramsym.connectivity import (
    PermutationSpec,
    WeightMatchingConfig,
    align_components,
    apply_permutations,
    chord_bound,
    chord_distance,
    component_label,
    curve_derivatives,
    curve_geometry,
    group_log,
    layer_output_change,
    linear_interpolation,
    linear_path,
    losses_along,
    matching_objective,
    max_rescaling_barrier,
    minimum_path,
    nested_derivatives,
    permutation_spec,
    rescaling_barrier,
    rescaling_factor,
    rescaling_pair,
    residual_minimum_components,
    square_linear_chain,
    square_linear_minimum,
    symmetry_path,
    weight_matching,
)
from paramsym.errors import (
    InvalidArgumentError,
    InvalidGroupElementError,
    MissingParameterError,
    NotConvergedWarning,
    ShapeError,
    UnsupportedModuleError,
)

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _mlp(widths, activation="relu", bias=True, seed=0, std=0.7) -> nn.Sequential:
    model = ps.mlp(list(widths), activation, bias=bias, dtype=F64)
    randomize_(model, _gen(seed), std=std)
    return model


def _sum_of_squares(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out - y) ** 2).sum()


def _random_permutations(spec: PermutationSpec, params, seed: int) -> dict[str, torch.Tensor]:
    widths = spec.resolve_widths(params)
    g = _gen(seed)
    return {name: torch.randperm(w, generator=g) for name, w in widths.items()}


# -- paths and the interpolation barrier -----------------------------------------------------


def test_linear_interpolation_matches_hand_evaluated_chord() -> None:
    model = _mlp([3, 6, 2], "tanh", seed=0)
    a = ps.params_of(model)
    b = ps.params_of(_mlp([3, 6, 2], "tanh", seed=1))
    x = torch.randn(10, 3, generator=_gen(2), dtype=F64)
    y = torch.randn(10, 2, generator=_gen(3), dtype=F64)
    loss_fn = nn.MSELoss()
    alphas = [0.0, 0.1, 0.35, 0.5, 0.8, 1.0]
    result = linear_interpolation(model, loss_fn, (x, y), a, b, alphas)
    oracle = []
    for alpha in alphas:
        point = {k: (1 - alpha) * a[k] + alpha * b[k] for k in a}
        oracle.append(float(loss_fn(torch.func.functional_call(model, point, (x,)), y)))
    assert result.losses == pytest.approx(oracle, rel=1e-13, abs=0)
    excess = [
        loss - ((1 - t) * oracle[0] + t * oracle[-1])
        for t, loss in zip(alphas, oracle, strict=True)
    ]
    assert result.barrier == pytest.approx(max(excess), rel=1e-12)
    assert result.barrier_alpha == alphas[excess.index(max(excess))]
    assert result.max_loss == pytest.approx(max(oracle), rel=1e-13)


def test_losses_along_averages_batches_by_size() -> None:
    model = _mlp([3, 5, 2], "relu", seed=4)
    x = torch.randn(12, 3, generator=_gen(5), dtype=F64)
    y = torch.randn(12, 2, generator=_gen(6), dtype=F64)
    path = linear_path(ps.params_of(model), ps.params_of(_mlp([3, 5, 2], "relu", seed=7)))
    whole = losses_along(model, nn.MSELoss(), (x, y), path, 5)
    split = losses_along(model, nn.MSELoss(), [(x[:4], y[:4]), (x[4:], y[4:])], path, 5)
    assert relative_error(split, whole) < 1e-14


def test_interpolation_rejects_different_architectures() -> None:
    model = _mlp([3, 5, 2])
    other = _mlp([3, 6, 2])
    with pytest.raises(ShapeError, match=r"0\.weight"):
        linear_interpolation(
            model, nn.MSELoss(), (torch.zeros(1, 3), torch.zeros(1, 2)), model, other
        )


# -- Prop. 3.3.3: the closed-form barrier ------------------------------------------------------


@pytest.mark.parametrize(
    ("activation", "degree"),
    [("leaky_relu", 1.0), ("relu", 1.0), ("identity", 1.0), (ps.nn.Monomial(3), 3.0)],
)
@pytest.mark.parametrize("bias", [False, True])
def test_rescaling_barrier_measured_equals_closed_form(activation, degree, bias) -> None:
    model = _mlp([3, 5, 4, 2], activation, bias=bias, seed=11, std=0.6)
    x = torch.randn(7, 3, generator=_gen(12), dtype=F64)
    y = model(x).detach()  # a zero-loss minimum
    bias_out = ps.params_of(model)["4.bias"] if bias else torch.zeros(2, dtype=F64)
    target = float(((y - bias_out) ** 2).sum())
    alphas = torch.linspace(0, 1, 9, dtype=F64)
    for scale in (0.3, 2.0, 10.0, 100.0):
        pair = rescaling_pair(model, scale)
        assert pair.degree == degree
        # W' is a minimum too (the rescaling preserves the function)
        assert relative_error(ps.functional_call(model, pair.params_b, x), y) < 1e-12
        measured = losses_along(
            model, _sum_of_squares, (x, y), linear_path(pair.params_a, pair.params_b), alphas
        )
        closed = torch.tensor(
            [rescaling_barrier(float(a), scale, degree, target) for a in alphas], dtype=F64
        )
        assert float((measured - closed).abs().max()) <= 1e-10 * max(1.0, float(closed.max()))


def test_rescaling_barrier_reproduces_the_notes_numbers_and_grows_without_bound() -> None:
    # notes 001a §4: LeakyReLU, m = 2, 10, 100 gave 10.009, 2626.7, 384580 for one ‖Y‖²;
    # the ratios do not depend on ‖Y‖².
    b2, b10, b100 = (rescaling_barrier(0.5, m, 1.0, 1.0) for m in (2.0, 10.0, 100.0))
    assert b10 / b2 == pytest.approx(2626.7 / 10.009, rel=1e-4)
    assert b100 / b2 == pytest.approx(384580 / 10.009, rel=1e-4)
    assert rescaling_factor(0.5, 2.0, 1.0) == pytest.approx(9 / 8, rel=1e-15)
    values = [rescaling_barrier(0.5, m, 2.0, 1.0) for m in (1.0, 10.0, 1e2, 1e3, 1e4)]
    assert values[0] == 0.0
    assert all(u < v for u, v in itertools.pairwise(values))
    alpha, top = max_rescaling_barrier(10.0, 1.0, 1.0)  # k = 1: symmetric, peak at α = 1/2
    assert alpha == pytest.approx(0.5, abs=1e-6)
    assert top == pytest.approx(rescaling_barrier(0.5, 10.0, 1.0, 1.0), rel=1e-12)
    with pytest.raises(InvalidArgumentError, match="scale"):
        rescaling_barrier(0.5, -1.0, 1.0, 1.0)


def test_rescaling_pair_needs_a_rescaling_symmetry() -> None:
    with pytest.raises(UnsupportedModuleError, match="no rescaling symmetry"):
        rescaling_pair(_mlp([3, 4, 2], "tanh"), 2.0)


# -- weight matching -----------------------------------------------------------------------------

# Coordinate descent reaches a coordinate-wise optimum; on narrow networks that can be a local
# one even for an exact permuted copy (e.g. 3 of 10 random [4, 6, 7, 5, 3] LeakyReLU nets), so
# the planted cases are wide enough for the assignment signal to dominate.
MATCHING_CASES = [
    ([5, 16, 2], "relu", True),
    ([8, 16, 16, 3], "tanh", True),
    ([8, 16, 16, 16, 4], "leaky_relu", False),
    ([6, 24, 24, 2], "sigmoid", True),
]


@pytest.mark.parametrize(("widths", "activation", "bias"), MATCHING_CASES)
def test_weight_matching_recovers_a_planted_permutation(widths, activation, bias) -> None:
    model = _mlp(widths, activation, bias=bias, seed=21)
    spec = permutation_spec(model)
    assert len(spec.slots) == len(widths) - 2  # one group per hidden layer
    theta = ps.params_of(model)
    planted = _random_permutations(spec, theta, seed=22)
    permuted = apply_permutations(theta, spec, planted)
    x = torch.randn(6, widths[0], generator=_gen(23), dtype=F64)
    assert relative_error(ps.functional_call(model, permuted, x), model(x)) < 1e-13
    result = weight_matching(model, permuted, config=WeightMatchingConfig(order="random"))
    assert result.converged
    for name, p in planted.items():
        assert torch.equal(result.permutations[name], torch.argsort(p))  # the inverse
    assert all(torch.equal(result.params[k], theta[k]) for k in theta)
    assert result.distance_after == 0.0
    assert result.objective_after == pytest.approx(float(ps.norm(theta)) ** 2, rel=1e-13)


def test_weight_matching_recovers_a_planted_permutation_under_noise() -> None:
    model = _mlp([6, 16, 16, 3], "relu", seed=31)
    spec = permutation_spec(model)
    theta = ps.params_of(model)
    noisy = {
        k: t + 0.01 * torch.randn(t.shape, generator=_gen(32), dtype=F64) for k, t in theta.items()
    }
    planted = _random_permutations(spec, theta, seed=33)
    result = weight_matching(theta, apply_permutations(noisy, spec, planted), spec=spec)
    for name, p in planted.items():
        assert torch.equal(result.permutations[name], torch.argsort(p))


def _objective_with(spec, theta_a, theta_b, permutations) -> float:
    return matching_objective(theta_a, apply_permutations(theta_b, spec, permutations), spec)


@pytest.mark.parametrize("order", ["random", "forward"])
def test_weight_matching_never_decreases_the_objective(order) -> None:
    widths = [4, 7, 6, 5, 3]
    model_a = _mlp(widths, "relu", seed=41)
    model_b = _mlp(widths, "relu", seed=42)
    result = weight_matching(model_a, model_b, config=WeightMatchingConfig(order=order, seed=3))
    assert result.converged
    assert len(result.history) >= 2  # independent networks: the identity is not optimal
    assert all(u <= v for u, v in itertools.pairwise(result.history))
    assert result.objective_after > result.objective_before
    assert result.distance_after < result.distance_before
    a, b = ps.params_of(model_a), ps.params_of(model_b)
    spec = permutation_spec(model_a)
    # the reported objective, distance and params agree with a recomputation from scratch
    assert result.objective_after == pytest.approx(
        _objective_with(spec, a, b, result.permutations), rel=1e-13
    )
    aligned = apply_permutations(b, spec, result.permutations)
    assert all(torch.equal(aligned[k], result.params[k]) for k in aligned)
    distance = float(ps.norm(ps.sub(a, aligned)))
    assert result.distance_after == pytest.approx(distance, rel=1e-12)
    assert result.distance_before == pytest.approx(float(ps.norm(ps.sub(a, b))), rel=1e-12)
    x = torch.randn(9, widths[0], generator=_gen(43), dtype=F64)
    assert relative_error(ps.functional_call(model_b, result.params, x), model_b(x)) < 1e-13


def test_a_distance_that_norms_and_objective_would_cancel_is_computed_directly() -> None:
    """‖θ_A − π·θ_B‖² = ‖θ_A‖² + ‖θ_B‖² − 2J loses every digit when θ_B is a permuted θ_A
    moved by 1e-9: weight matching then reports the distance of a direct float64 difference."""
    widths = [8, 16, 16, 4]
    model = _mlp(widths, seed=71)
    spec = permutation_spec(model)
    theta = ps.params_of(model)
    g = _gen(72)
    nudged = {k: v + 1e-9 * torch.randn(v.shape, generator=g, dtype=F64) for k, v in theta.items()}
    permuted = apply_permutations(nudged, spec, _random_permutations(spec, theta, seed=73))
    result = weight_matching(model, permuted)
    exact = float(ps.norm(ps.sub(theta, result.params)))
    assert 0 < exact < 1e-7
    assert result.distance_after == pytest.approx(exact, rel=1e-6)


def test_a_float32_pair_takes_the_float64_pairs_steps() -> None:
    """A float32 model's cost matrices are float32 products summed in float64 (each step's
    gain is exact, see the next test): the descent takes the steps of the float64 copies of
    the same models, and J stays non-decreasing and equal to its recomputation."""
    widths = [8, 48, 48, 3]
    a64, b64 = _mlp(widths, seed=51), _mlp(widths, seed=52)
    a32, b32 = (ps.params_of(m.float()) for m in (_mlp(widths, seed=51), _mlp(widths, seed=52)))
    spec = permutation_spec(a64)
    result32 = weight_matching(a32, b32, spec=spec)
    result64 = weight_matching(a64, b64)
    assert result32.converged
    assert len(result32.history) >= 3
    for name, p in result64.permutations.items():
        assert torch.equal(result32.permutations[name], p)
    assert all(u <= v for u, v in itertools.pairwise(result32.history))
    assert result32.objective_after == pytest.approx(
        _objective_with(spec, a32, b32, result32.permutations), rel=1e-13
    )
    # the distances, from the norms and J, against float64 differences of the models
    wide = {k: v.double() for k, v in a32.items()}
    aligned = apply_permutations(
        {k: v.double() for k, v in b32.items()}, spec, result32.permutations
    )
    assert result32.distance_after == pytest.approx(
        float(ps.norm(ps.sub(wide, aligned))), rel=1e-12
    )
    moved = {k: v.double() for k, v in b32.items()}
    assert result32.distance_before == pytest.approx(float(ps.norm(ps.sub(wide, moved))), rel=1e-12)


@pytest.mark.parametrize("moved", [1, 2, 40])
def test_a_steps_gain_is_exact_against_the_recomputed_objective(moved) -> None:
    """``_exact_gain`` (float64 dots of the moved rows of a float32 model) is J(new) − J(old),
    J recomputed in float64 from scratch (exact products), whether a few or all rows move."""
    from paramsym.connectivity.matching_descent import _CostMatrices, _exact_gain, _Solved

    widths = [8, 40, 40, 3]
    model = _mlp(widths, seed=61).float()
    a32, b32 = ps.params_of(model), ps.params_of(_mlp(widths, seed=62).float())
    spec = permutation_spec(model)
    actions = spec.actions(b32)
    others = _random_permutations(spec, b32, seed=63)
    group = next(iter(actions))
    old = others.pop(group)
    new = old.clone()
    g = _gen(64)
    chosen = torch.randperm(len(old), generator=g)[:moved]
    new[chosen] = old[chosen[torch.randperm(moved, generator=g)]]
    base = apply_permutations(b32, spec, others)
    current = actions[group].act(base, old)
    matched = _matched_slots(spec, actions)
    costs = _CostMatrices(_Solved(actions, matched))
    _, rows = costs(group, a32, current, len(old), old)
    gain = _exact_gain(rows, old, new)
    before = matching_objective(a32, current, spec)
    after = matching_objective(a32, actions[group].act(base, new), spec)
    assert (gain == 0.0) == torch.equal(new, old)
    assert gain == pytest.approx(after - before, rel=1e-12, abs=1e-14 * abs(before))


def _matched_slots(spec: PermutationSpec, actions) -> dict[str, list]:
    return {
        group: [slot for slot in action.slots if slot.name not in spec.unmatched]
        for group, action in actions.items()
    }


def _gpt_pair(seed_a: int = 1, seed_b: int = 2):
    from paramsym.nn import zoo

    def build(seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return zoo.GPTStyle(vocab=11, context=8, width=8, heads=2, layers=2).to(F64).eval()

    return build(seed_a), build(seed_b), torch.randint(0, 11, (2, 8), generator=_gen(3))


def test_kept_cost_matrix_parts_are_recomputed_when_a_neighbour_moves(monkeypatch) -> None:
    """A kept part of the residual stream's cost matrix (``_CostMatrices``) is reused while
    the groups acting on its tensors stand still and recomputed when one moves: the matrix
    then equals one computed from scratch, and its assignment sums give J's differences
    (oracle: J recomputed from scratch for two permutations of the stream)."""
    from paramsym.connectivity import matching_descent as descent

    monkeypatch.setattr(descent, "KEEP_RATIO", 0)  # keep every part of every linear group
    model_a, model_b, x = _gpt_pair()
    spec = permutation_spec(model_a, x)
    a, b = ps.params_of(model_a), ps.params_of(model_b)
    actions = spec.actions(b)
    matched = _matched_slots(spec, actions)
    solved = descent._Solved(actions, matched)
    costs = descent._CostMatrices(solved)
    stream = max(actions, key=lambda g: len(solved.neighbours[g]))  # reads every weight
    assert len(solved.neighbours[stream]) >= 4
    neighbour = solved.neighbours[stream][0]
    width = actions[stream].width
    identity = torch.arange(width)
    before, _ = costs(stream, a, b, width, identity)
    assert len(costs.kept) >= 2  # parts kept: some depend on the neighbour, some on nothing

    moved = torch.randperm(actions[neighbour].width, generator=_gen(5))
    current = actions[neighbour].act(b, moved)
    stale, _ = costs(stream, a, current, width, identity)
    assert (stale == before).all()  # nobody said the neighbour moved: the kept parts answer
    solved.changed(neighbour)
    after, _ = costs(stream, a, current, width, identity)
    fresh, _ = descent._CostMatrices(descent._Solved(actions, matched))(
        stream, a, current, width, identity
    )
    assert abs(after - before).max() > 1e-3 * abs(before).max()  # the neighbour mattered
    assert abs(after - fresh).max() <= 1e-13 * abs(fresh).max()
    p, q = (torch.randperm(width, generator=_gen(s)) for s in (6, 7))
    from_cost = float(sum(after[i, p[i]] - after[i, q[i]] for i in range(width)))
    others = {neighbour: moved}
    exact = _objective_with(spec, a, b, {**others, stream: p}) - _objective_with(
        spec, a, b, {**others, stream: q}
    )
    assert from_cost == pytest.approx(exact, rel=1e-10)


def test_kept_cost_matrix_parts_give_the_descent_without_them(monkeypatch) -> None:
    """Weight matching with every part of every cost matrix kept (``KEEP_RATIO = 0``) takes
    the same steps as with none kept, on a residual stack where the stream reads every
    weight, and computes fewer matrix products."""
    from paramsym.connectivity import matching_descent as descent

    model_a, model_b, x = _gpt_pair()
    products = []
    original = descent._product

    def counted(pairs, width, undo):
        products.append(sum(a.numel() for a, _ in pairs) * width)
        return original(pairs, width, undo)

    monkeypatch.setattr(descent, "_product", counted)
    runs = {}
    for ratio in (0, math.inf):
        monkeypatch.setattr(descent, "KEEP_RATIO", ratio)
        products.clear()
        runs[ratio] = (weight_matching(model_a, model_b, example_input=x), sum(products))
    (kept, kept_work), (fresh, fresh_work) = runs[0], runs[math.inf]
    assert kept.iterations == fresh.iterations >= 2
    assert kept.history == pytest.approx(fresh.history, rel=1e-14)
    assert all(torch.equal(kept.permutations[g], fresh.permutations[g]) for g in kept.permutations)
    assert kept_work < fresh_work


def test_skipping_solved_groups_gives_the_descent_without_it(monkeypatch) -> None:
    """A group solved on its cost matrix is skipped while no group acting on its tensors has
    changed (``_Solved``): the descent is the same, step for step, as one that recomputes
    every matrix and assignment, on a residual stack where one stream permutation reads every
    weight."""
    from paramsym.connectivity import matching_descent as descent

    a, b, x = _gpt_pair()
    calls = []
    original = descent._CostMatrices.__call__

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(descent._CostMatrices, "__call__", counted)
    kept = weight_matching(a, b, example_input=x)
    with_cache = len(calls)
    monkeypatch.setattr(descent._Solved, "current", lambda self, group: False)
    calls.clear()
    fresh = weight_matching(a, b, example_input=x)
    assert kept.history == fresh.history
    assert all(torch.equal(kept.permutations[g], fresh.permutations[g]) for g in kept.permutations)
    assert kept.iterations == fresh.iterations >= 2
    assert with_cache < len(calls)  # the last sweep, at least, skipped every group
    # a head's query and key rows of the packed projection are one axis of one tensor: J is
    # tracked by the assignments' gains, and the recomputed J at the end agrees
    assert all(u <= v * (1 + 1e-12) for u, v in itertools.pairwise(kept.history))
    spec = permutation_spec(a, x)
    recomputed = _objective_with(spec, ps.params_of(a), ps.params_of(b), kept.permutations)
    assert kept.objective_after == pytest.approx(recomputed, rel=1e-12)


def test_wide_groups_take_the_dense_solvers_steps(monkeypatch) -> None:
    """Groups of 1100 units go through the certified sparse assignment
    (:func:`paramsym.core.assignment.max_assignment`): the descent of two independent MLPs is
    the one scipy's dense solver gives, step for step."""
    import numpy as np
    import scipy.optimize

    from paramsym.connectivity import matching_descent as descent

    a, b = _mlp([16, 1100, 1100, 8], seed=0), _mlp([16, 1100, 1100, 8], seed=1)
    x = torch.randn(4, 16, generator=_gen(0), dtype=torch.float64)
    widths = []
    original = descent.max_assignment

    def recorded(cost, **kwargs):
        widths.append(cost.shape[0])
        return original(cost, **kwargs)

    monkeypatch.setattr(descent, "max_assignment", recorded)
    certified = weight_matching(a, b, example_input=x)
    assert max(widths) == 1100
    monkeypatch.setattr(
        descent,
        "max_assignment",
        lambda cost, **kwargs: np.asarray(
            scipy.optimize.linear_sum_assignment(cost, maximize=True)[1]
        ),
    )
    dense = weight_matching(a, b, example_input=x)
    assert certified.history == dense.history
    assert certified.iterations == dense.iterations >= 2
    assert all(
        torch.equal(certified.permutations[g], dense.permutations[g]) for g in dense.permutations
    )


def test_weight_matching_ends_at_a_coordinatewise_optimum_brute_force() -> None:
    """At convergence no permutation of any single group (all 4! of them) raises J."""
    widths = [3, 4, 4, 4, 2]
    model_a, model_b = _mlp(widths, "tanh", seed=51), _mlp(widths, "tanh", seed=52)
    spec = permutation_spec(model_a)
    a, b = ps.params_of(model_a), ps.params_of(model_b)
    result = weight_matching(a, b, spec=spec)
    best = result.objective_after
    for group in spec.slots:
        for candidate in itertools.permutations(range(4)):
            trial = dict(result.permutations)
            trial[group] = torch.tensor(candidate)
            assert _objective_with(spec, a, b, trial) <= best + 1e-12 * abs(best)


def test_weight_matching_with_one_group_is_the_global_optimum() -> None:
    """One hidden layer: J is linear in P, the assignment is exact; compare with all 5!."""
    model_a, model_b = _mlp([3, 5, 2], "relu", seed=61), _mlp([3, 5, 2], "relu", seed=62)
    spec = permutation_spec(model_a)
    a, b = ps.params_of(model_a), ps.params_of(model_b)
    (group,) = spec.slots
    brute = max(
        _objective_with(spec, a, b, {group: torch.tensor(p)})
        for p in itertools.permutations(range(5))
    )
    assert weight_matching(a, b, spec=spec).objective_after == pytest.approx(brute, rel=1e-13)


class TwoLayer(nn.Module):
    """Not an nn.Sequential: paramsym cannot see how its parts connect."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 6, dtype=F64)
        self.decoder = nn.Linear(6, 3, dtype=F64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.tanh(self.encoder(x)))


def test_weight_matching_with_a_hand_written_spec() -> None:
    model = TwoLayer()
    randomize_(model, _gen(71))
    spec = PermutationSpec.from_axes(
        {"encoder.weight": ("hidden", None), "encoder.bias": ("hidden",),
         "decoder.weight": (None, "hidden")}
    )  # fmt: skip
    theta = ps.params_of(model)
    planted = {"hidden": torch.randperm(6, generator=_gen(72))}
    permuted = apply_permutations(theta, spec, planted)
    x = torch.randn(5, 4, generator=_gen(73), dtype=F64)
    assert relative_error(ps.functional_call(model, permuted, x), model(x)) < 1e-13
    result = weight_matching(model, permuted, spec=spec)
    assert torch.equal(result.permutations["hidden"], torch.argsort(planted["hidden"]))
    assert result.distance_after == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_a_group_on_both_axes_of_a_recurrent_matrix_recovers_a_planted_permutation(seed) -> None:
    """A group that permutes both axes of one tensor (a recurrent matrix) makes J quadratic in
    its permutation: its cost matrix is the linearisation at the current one, recomputed at
    every visit and never kept; the descent still recovers a planted permutation, and J never
    decreases."""
    g = _gen(5)
    a = {
        "w_in": torch.randn(8, 3, generator=g, dtype=F64),
        "w_hh": torch.randn(8, 8, generator=g, dtype=F64),
        "w_out": torch.randn(2, 8, generator=g, dtype=F64),
    }
    spec = PermutationSpec.from_axes(
        {"w_in": ("h", None), "w_hh": ("h", "h"), "w_out": (None, "h")}
    )
    planted = torch.randperm(8, generator=_gen(seed))
    result = weight_matching(a, apply_permutations(a, spec, {"h": planted}), spec=spec)
    assert torch.equal(result.permutations["h"], torch.argsort(planted))
    assert result.distance_after == 0.0
    assert all(u <= v for u, v in itertools.pairwise(result.history))


def test_weight_matching_with_blocks_and_offsets() -> None:
    """A group of 3 neurons in blocks of 2 rows, stored from row 1 of a longer tensor."""
    g = _gen(74)
    a = {
        "w": torch.randn(8, 5, generator=g, dtype=F64),
        "v": torch.randn(4, 6, generator=g, dtype=F64),
    }
    spec = PermutationSpec(
        groups={"blocks": [ps.Slot("w", 0, offset=1, block=2), ps.Slot("v", 1, block=2)]},
        widths={"blocks": 3},
    )
    planted = {"blocks": torch.tensor([2, 0, 1])}
    b = apply_permutations(a, spec, planted)
    assert torch.equal(b["w"][0], a["w"][0])
    assert torch.equal(b["w"][7], a["w"][7])
    assert torch.equal(b["w"][1:3], a["w"][5:7])  # block 0 is the original block 2
    result = weight_matching(a, b, spec=spec)
    assert torch.equal(result.permutations["blocks"], torch.argsort(planted["blocks"]))


def test_weight_matching_permutes_batchnorm_running_statistics() -> None:
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3)).double()
    randomize_(model, _gen(81))
    model.train()
    for seed in range(3):  # non-trivial running statistics
        model(torch.randn(16, 4, generator=_gen(82 + seed), dtype=F64))
    model.eval()
    spec = permutation_spec(model)
    (group,) = spec.slots
    assert spec.unmatched == {"1.running_mean", "1.running_var"}
    state = {
        **ps.params_of(model),
        **{k: v for k, v in model.named_buffers() if k in spec.unmatched},
    }
    planted = {group: torch.randperm(6, generator=_gen(85))}
    permuted = apply_permutations(state, spec, planted)
    x = torch.randn(7, 4, generator=_gen(86), dtype=F64)
    assert relative_error(ps.functional_call(model, permuted, x), model(x)) < 1e-13
    result = weight_matching(model, permuted)
    assert torch.equal(result.permutations[group], torch.argsort(planted[group]))
    assert relative_error(ps.functional_call(model, result.params, x), model(x)) < 1e-13


def test_weight_matching_reports_non_convergence() -> None:
    widths = [6, 24, 24, 24, 3]
    config = WeightMatchingConfig(max_iterations=1, order="forward")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = weight_matching(_mlp(widths, seed=91), _mlp(widths, seed=92), config=config)
    flagged = [w for w in caught if issubclass(w.category, NotConvergedWarning)]
    assert not result.converged
    assert len(flagged) == 1


def test_weight_matching_rejects_different_architectures() -> None:
    with pytest.raises(ShapeError, match="same architecture"):
        weight_matching(_mlp([3, 5, 2]), _mlp([3, 6, 2]))
    with pytest.raises(ShapeError, match="module '1'"):
        weight_matching(_mlp([3, 5, 2], "relu"), _mlp([3, 5, 2], "tanh"))
    with pytest.raises(ShapeError, match=r"'0\.bias' is missing"):
        weight_matching(_mlp([3, 5, 2], bias=True), ps.params_of(_mlp([3, 5, 2], bias=False)))
    a = ps.params_of(_mlp([3, 5, 2]))
    with pytest.raises(InvalidArgumentError, match="spec="):
        weight_matching(a, a)


def test_permutation_spec_errors_name_the_problem() -> None:
    theta = ps.params_of(_mlp([3, 5, 2]))
    wrong_size = PermutationSpec.from_axes({"0.weight": ("h", "h")})  # 5 rows, 3 columns
    with pytest.raises(ShapeError, match="does not match the model's shapes"):
        weight_matching(theta, theta, spec=wrong_size)
    missing = PermutationSpec.from_axes({"1.weight": ("h",)})
    with pytest.raises(MissingParameterError, match=r"'1\.weight'"):
        weight_matching(theta, theta, spec=missing)
    bad_axis = PermutationSpec.from_axes({"0.bias": (None, "h")})
    with pytest.raises(ShapeError, match=r"axis 1 of '0\.bias'"):
        weight_matching(theta, theta, spec=bad_axis)
    overlap = PermutationSpec.from_axes({"0.weight": ("h", None), "0.bias": ("h",)})
    overlap = PermutationSpec(groups={**overlap.slots, "k": [("0.weight", 0)]})
    with pytest.raises(InvalidArgumentError, match="both permute"):
        weight_matching(theta, theta, spec=overlap)
    with pytest.raises(InvalidArgumentError, match="no slots"):
        PermutationSpec(groups={"h": []})
    with pytest.raises(UnsupportedModuleError, match="no neuron permutations"):
        permutation_spec(nn.Sequential(nn.Linear(3, 2)))


# -- symmetry-induced curves -------------------------------------------------------------------


def _symmetry(model: nn.Module, prefix: str, data_dependent: bool = False):
    return next(
        s for s in ps.symmetries(model, data_dependent=data_dependent) if s.name.startswith(prefix)
    )


def _log_cases():
    linear = _mlp([3, 4, 4, 2], "identity", seed=101)
    gl = [s for s in ps.symmetries(linear) if isinstance(s, ps.HiddenGL)]
    return [
        ("GL", gl[0], None),
        ("product", ps.ProductSymmetry(gl), None),
        ("orthogonal", _symmetry(_mlp([3, 4, 2], "radial", seed=102), "orthogonal"), None),
        ("scaling", _symmetry(_mlp([3, 4, 2], "relu", seed=103), "rescaling"), None),
        (
            "translation",
            _symmetry(nn.Sequential(nn.Linear(3, 4), nn.Softmax(-1)), "translation"),
            None,
        ),
        ("pinv", _symmetry(_mlp([3, 4, 2], "sigmoid", seed=104), "pinv_GL", True), None),
    ]


@pytest.mark.parametrize("case", _log_cases(), ids=lambda c: c[0])
def test_group_log_inverts_exp(case) -> None:
    _, symmetry, _ = case
    xi = 0.4 * torch.randn(symmetry.dim, generator=_gen(105), dtype=F64)
    g = symmetry.exp(xi)
    assert relative_error(group_log(symmetry, g), xi) < 1e-10


def test_group_log_rejects_elements_without_a_real_logarithm() -> None:
    gl = _symmetry(_mlp([3, 4, 2], "identity"), "GL")
    flip = torch.diag(torch.tensor([-1.0, 1.0, 1.0, 1.0], dtype=F64))
    with pytest.raises(InvalidGroupElementError, match="det"):
        group_log(gl, flip)
    rotation_pi = torch.diag(torch.tensor([-1.0, -1.0, 1.0, 1.0], dtype=F64))  # det +1, eig −1
    rotation_pi[0, 1] = 1.0  # a Jordan block at −1: no real logarithm at all
    with pytest.raises(InvalidGroupElementError, match="no real"):
        group_log(gl, rotation_pi)
    with pytest.raises(InvalidArgumentError, match="discrete"):
        group_log(_symmetry(_mlp([3, 4, 2], "relu"), "permutation"), torch.arange(4))


CURVE_CASES = [
    ("identity", "GL"),
    ("relu", "rescaling"),
    ("leaky_relu", "rescaling"),
    ("radial", "orthogonal"),
]


@pytest.mark.parametrize(("activation", "prefix"), CURVE_CASES)
def test_symmetry_curve_joins_w_to_g_w_at_constant_loss(activation, prefix) -> None:
    model = _mlp([3, 5, 4, 2], activation, seed=111)
    symmetry = _symmetry(model, prefix)
    theta = ps.params_of(model)
    g = symmetry.sample(scale=0.8, generator=_gen(112), dtype=F64)
    gamma = symmetry_path(symmetry, theta, g=g)
    assert params_relative_error(gamma(torch.tensor(0.0, dtype=F64)), theta) < 1e-14
    assert (
        params_relative_error(gamma(torch.tensor(1.0, dtype=F64)), symmetry.act(theta, g)) < 1e-12
    )
    x = torch.randn(8, 3, generator=_gen(113), dtype=F64)
    y = torch.randn(8, 2, generator=_gen(114), dtype=F64)
    losses = losses_along(model, nn.MSELoss(), (x, y), gamma, 11)
    assert float((losses - losses[0]).abs().max()) < 1e-12 * float(losses[0])
    # one-parameter group: γ(s + t) = exp(s ξ)·γ(t)
    s, t = torch.tensor(0.3, dtype=F64), torch.tensor(0.45, dtype=F64)
    moved = symmetry.act(gamma(t), gamma.element(s))
    assert params_relative_error(gamma(s + t), moved) < 1e-12


@pytest.mark.parametrize(("activation", "prefix"), CURVE_CASES)
def test_curve_derivatives_match_the_tangent_field(activation, prefix) -> None:
    """For a linear action γ' = X(γ) and γ'' = X(X(γ)), with X(θ) = tangent(θ, ξ) computed by
    the symmetry's closed form (not through the path)."""
    model = _mlp([3, 5, 4, 2], activation, seed=121)
    symmetry = _symmetry(model, prefix)
    xi = 0.5 * torch.randn(symmetry.dim, generator=_gen(122), dtype=F64)
    gamma = symmetry_path(symmetry, ps.params_of(model), xi=xi)
    for t in (0.0, 0.4, 1.0):
        point, velocity, acceleration = curve_derivatives(gamma, t)
        at = gamma(torch.tensor(t, dtype=F64))
        field = symmetry.tangent(at, xi)
        assert relative_error(point, ps.flatten(at)) < 1e-14
        assert relative_error(velocity, ps.flatten(field)) < 1e-11
        assert relative_error(acceleration, ps.flatten(symmetry.tangent(field, xi))) < 1e-10


def test_symmetry_path_jet_matches_nested_autodiff() -> None:
    """The closed-form element derivatives of SymmetryPath.jet against forward-over-forward
    autodiff through the whole path, for a product of GL factors and the nonlinear Eq. 3.6."""
    linear = _mlp([3, 4, 3, 2], "identity", seed=125)
    product = ps.ProductSymmetry([s for s in ps.symmetries(linear) if isinstance(s, ps.HiddenGL)])
    sigmoid = _mlp([3, 4, 2], "sigmoid", seed=126)
    pinv = _symmetry(sigmoid, "pinv_GL", data_dependent=True)
    x = torch.randn(6, 3, generator=_gen(127), dtype=F64)
    for symmetry, model, batch in ((product, linear, None), (pinv, sigmoid, x)):
        xi = 0.4 * torch.randn(symmetry.dim, generator=_gen(128), dtype=F64)
        gamma = symmetry_path(symmetry, ps.params_of(model), xi=xi, x=batch)
        fast = gamma.jet(0.6)
        assert fast is not None
        for a, b in zip(fast, nested_derivatives(gamma, 0.6), strict=True):
            assert relative_error(a, b) < 1e-11


def _circle(radius: float, half_angle: float, dim: int = 5, seed: int = 131):
    """An arc of a circle of ``radius`` in a random plane of R^dim, t ∈ [0, 1] ↦ angle in
    [−half_angle, half_angle], as a path of params dicts."""
    basis, _ = torch.linalg.qr(torch.randn(dim, 2, generator=_gen(seed), dtype=F64))
    centre = torch.randn(dim, generator=_gen(seed + 1), dtype=F64)

    def path(t: torch.Tensor) -> dict[str, torch.Tensor]:
        angle = (2 * t - 1) * half_angle
        point = centre + radius * (basis[:, 0] * torch.cos(angle) + basis[:, 1] * torch.sin(angle))
        return {"a": point[:2], "b": point[2:]}

    return path


@settings(max_examples=10)
@given(
    radius=st.floats(0.1, 10.0),
    half_angle=st.floats(0.05, math.pi / 2),
)
def test_chord_bound_is_the_sagitta_on_circles(radius: float, half_angle: float) -> None:
    path = _circle(radius, half_angle)
    geometry = curve_geometry(path, 9)
    assert geometry.curvature == pytest.approx([1 / radius] * 9, rel=1e-10)
    assert geometry.kappa_max == pytest.approx(1 / radius, rel=1e-10)
    assert geometry.length == pytest.approx(2 * radius * half_angle, rel=1e-12)
    chord = 2 * radius * math.sin(half_angle)
    assert geometry.chord_length == pytest.approx(chord, rel=1e-12)
    sagitta = radius * (1 - math.cos(half_angle))
    bound = geometry.chord_bound(lipschitz=3.0)
    assert bound.d_max == pytest.approx(sagitta, rel=1e-9)
    assert bound.loss_bound == pytest.approx(3.0 * sagitta, rel=1e-9)
    # the chord's farthest point (its midpoint) is exactly the sagitta from the arc
    assert chord_distance(path, 65, 257) == pytest.approx(sagitta, rel=1e-9)
    # and the first-order form κℓ²/8 agrees for short arcs, overestimating nothing at order 2
    if half_angle < 0.1:
        assert bound.first_order == pytest.approx(sagitta, rel=0.01)


def test_chord_bound_fails_beyond_a_half_circle_erratum() -> None:
    """[ERRATUM] Thm 3.4.2 without a length condition: a circle's major arc has κ = 1/R and a
    short chord, but the chord midpoint is ℓ/2 from the curve, beyond d_max."""
    radius, half_angle = 1.0, 0.8 * math.pi  # an arc of 288°
    path = _circle(radius, half_angle)
    geometry = curve_geometry(path, 33)
    chord = geometry.chord_length
    d_max = chord_bound(geometry.kappa_max, chord).d_max
    measured = chord_distance(path, 65, 1025)
    assert measured == pytest.approx(chord / 2, rel=1e-9)  # nearest curve points: the two ends
    assert measured > 2 * d_max  # the theorem's bound is violated
    with pytest.raises(InvalidArgumentError, match="longer than π/κ_max"):
        geometry.chord_bound()


@pytest.mark.parametrize(
    ("activation", "prefix", "size"), [("relu", "rescaling", 0.5), ("identity", "GL", 0.3)]
)
def test_chord_bound_holds_for_a_symmetry_curve(activation, prefix, size) -> None:
    model = _mlp([3, 5, 4, 2], activation, seed=141)
    symmetry = _symmetry(model, prefix)
    xi = size * torch.randn(symmetry.dim, generator=_gen(142), dtype=F64)
    gamma = symmetry_path(symmetry, ps.params_of(model), xi=xi)
    geometry = curve_geometry(gamma, 41)
    bound = geometry.chord_bound()
    assert bound.length_checked
    assert 0 < chord_distance(gamma, 41, 201) <= bound.d_max


def test_chord_bound_input_checks() -> None:
    assert chord_bound(0.0, 3.0).d_max == 0.0  # a straight curve
    with pytest.raises(InvalidArgumentError, match="≤ 2"):
        chord_bound(1.0, 2.5)


# -- Eq. 3.6 and Prop. 3.4.1 ---------------------------------------------------------------------


@given(
    hidden=st.integers(2, 6),
    samples=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    scale=st.floats(0.05, 2.0),
)
def test_pinv_map_output_change_is_a_projection(hidden, samples, seed, scale) -> None:
    """Prop. 3.4.1: ‖Uσ(H) − U'σ(gH)‖ = ‖Uσ(H)(I − σ(gH)⁺σ(gH))‖ ≤ ‖Uσ(H)‖ (column
    convention), against a dense projector; exact when k ≤ h (full column rank)."""
    model = _mlp([3, hidden, 2], "sigmoid", seed=seed, std=1.0)
    symmetry = _symmetry(model, "pinv_GL", data_dependent=True)
    x = torch.randn(samples, 3, generator=_gen(seed + 1), dtype=F64)
    g = symmetry.sample(scale=scale, generator=_gen(seed + 2), dtype=F64)
    change = layer_output_change(symmetry, ps.params_of(model), g, x)
    theta = ps.params_of(model)
    H = (x @ theta["0.weight"].T + theta["0.bias"]).T  # (h, k), samples as columns
    U = theta["2.weight"]
    S, Sg = torch.sigmoid(H), torch.sigmoid(g @ H)
    projector = torch.eye(samples, dtype=F64) - torch.linalg.pinv(Sg) @ Sg
    assert change.output_norm == pytest.approx(float(torch.linalg.norm(U @ S)), rel=1e-12)
    assert change.change_norm == pytest.approx(
        float(torch.linalg.norm(U @ S @ projector)), rel=1e-8, abs=1e-10 * change.output_norm
    )
    assert change.change_norm <= change.output_norm * (1 + 1e-12)
    if samples <= hidden:
        assert change.ratio < 1e-10


def test_pinv_curve_is_evaluated_without_per_point_warnings() -> None:
    model = _mlp([3, 4, 2], "leaky_relu", seed=151)
    symmetry = _symmetry(model, "pinv_GL", data_dependent=True)
    x = torch.randn(8, 3, generator=_gen(152), dtype=F64)  # k = 8 > h = 4: approximate
    g = symmetry.sample(scale=0.5, generator=_gen(153), dtype=F64)
    gamma = symmetry_path(symmetry, ps.params_of(model), g=g, x=x)
    assert not gamma.exact
    with pytest.warns(ps.ApproximateActionWarning):
        end = symmetry.act(ps.params_of(model), g, x)
    assert params_relative_error(gamma(torch.tensor(1.0, dtype=F64)), end) < 1e-12
    y = torch.randn(8, 2, generator=_gen(154), dtype=F64)
    losses = losses_along(model, nn.MSELoss(), (x, y), gamma, 5)  # ParamsymWarnings are errors
    assert bool(torch.isfinite(losses).all())
    assert curve_geometry(gamma, 3).kappa_max > 0
    with pytest.raises(InvalidArgumentError, match="pass the batch"):
        symmetry_path(symmetry, ps.params_of(model), g=g)


# -- components of minima ------------------------------------------------------------------------


def _square(h: int, depth: int) -> nn.Sequential:
    return ps.mlp([h] * (depth + 1), activation="identity", bias=False, dtype=F64)


def _data(h: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed)
    return torch.randn(h, h, generator=g, dtype=F64), torch.randn(h, h, generator=g, dtype=F64)


def _element(h: int, sign: int, seed: int) -> torch.Tensor:
    g = torch.randn(h, h, generator=_gen(seed), dtype=F64) + 2 * torch.eye(h, dtype=F64)
    if torch.linalg.det(g) * sign < 0:
        g[0] = -g[0]
    return g


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_square_linear_minima_have_2_to_the_l_minus_1_labels(depth) -> None:
    h = 3
    model = _square(h, depth)
    x, y = _data(h, depth)
    labels = set()
    for signs in itertools.product([1, -1], repeat=depth - 1):
        elements = [_element(h, s, 10 * depth + i) for i, s in enumerate(signs)]
        point = square_linear_minimum(model, elements, x, y)
        assert relative_error(ps.functional_call(model, point, x), y) < 1e-12  # zero loss
        label = component_label(model, point, x)
        assert label == signs  # the chart inverse: (W_1 X, W_2, …) = (g_1, g_2, …)
        labels.add(label)
    assert len(labels) == 2 ** (depth - 1)


def test_minimum_path_joins_same_label_minima_at_zero_loss() -> None:
    h, depth = 3, 3
    model = _square(h, depth)
    x, y = _data(h, 201)
    a = square_linear_minimum(model, [_element(h, 1, 202), _element(h, -1, 203)], x, y)
    b = square_linear_minimum(model, [_element(h, 1, 204), _element(h, -1, 205)], x, y)
    path = minimum_path(model, a, b, x, y)
    assert params_relative_error(path(torch.tensor(0.0, dtype=F64)), a) < 1e-12
    assert params_relative_error(path(torch.tensor(1.0, dtype=F64)), b) < 1e-12
    losses = losses_along(model, _sum_of_squares, (x, y), path, 21)
    assert float(losses.max()) < 1e-20 * float((y**2).sum())
    for t in (0.25, 0.5, 0.75):
        assert component_label(model, path(torch.tensor(t, dtype=F64)), x) == (1, -1)
    _, velocity, _ = curve_derivatives(path, 0.5)  # differentiable in t
    assert float(velocity.norm()) > 0
    c = square_linear_minimum(model, [_element(h, -1, 206), _element(h, -1, 207)], x, y)
    with pytest.raises(InvalidArgumentError, match="different components"):
        minimum_path(model, a, c, x, y)


def test_align_components_connects_every_pair_up_to_permutation() -> None:
    """Prop. 3.3.2: after the permutations, labels match and a zero-loss path joins them."""
    h, depth = 3, 3
    model = _square(h, depth)
    x, y = _data(h, 211)
    reference = square_linear_minimum(model, [_element(h, 1, 212 + i) for i in range(2)], x, y)
    for k, signs in enumerate(itertools.product([1, -1], repeat=depth - 1)):
        elements = [_element(h, s, 220 + 3 * k + i) for i, s in enumerate(signs)]
        point = square_linear_minimum(model, elements, x, y)
        aligned = align_components(model, point, reference)
        assert aligned.label_after == aligned.reference_label == component_label(model, reference)
        assert relative_error(ps.functional_call(model, aligned.params, x), y) < 1e-12
        assert sum(aligned.odd) > 0 or signs == (1, 1)
        path = minimum_path(model, aligned.params, reference, x, y)
        losses = losses_along(model, _sum_of_squares, (x, y), path, 5)
        assert float(losses.max()) < 1e-20 * float((y**2).sum())


def test_align_components_reproduces_the_worked_example_of_b2() -> None:
    model = _square(2, 2)
    W = {
        "0.weight": torch.eye(2, dtype=F64),
        "2.weight": torch.diag(torch.tensor([-1.0, 1.0], dtype=F64)),
    }
    W_prime = {
        "0.weight": torch.diag(torch.tensor([-1.0, 1.0], dtype=F64)),
        "2.weight": torch.eye(2, dtype=F64),
    }
    aligned = align_components(model, W, W_prime)
    assert aligned.odd == [True]
    swap = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=F64)
    assert torch.equal(aligned.params["0.weight"], swap)  # g·(W1, W2) of the text
    assert torch.equal(
        aligned.params["2.weight"], torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=F64)
    )
    assert aligned.label_before == (1,)
    assert aligned.label_after == (-1,) == aligned.reference_label


def test_square_linear_errors() -> None:
    with pytest.raises(UnsupportedModuleError, match="bias=False"):
        square_linear_chain(ps.mlp([3, 3, 3], activation="identity", bias=True))
    with pytest.raises(UnsupportedModuleError, match="no hidden GL"):
        square_linear_chain(ps.mlp([3, 3, 3], activation="relu", bias=False))
    with pytest.raises(ShapeError, match="square"):
        square_linear_chain(ps.mlp([3, 4, 3], activation="identity", bias=False))
    model = _square(1, 2)
    one = {"0.weight": torch.ones(1, 1, dtype=F64), "2.weight": torch.ones(1, 1, dtype=F64)}
    minus = {"0.weight": -torch.ones(1, 1, dtype=F64), "2.weight": -torch.ones(1, 1, dtype=F64)}
    with pytest.raises(InvalidArgumentError, match="h ≥ 2"):
        align_components(model, one, minus)
    singular = {"0.weight": torch.zeros(1, 1, dtype=F64), "2.weight": torch.ones(1, 1, dtype=F64)}
    with pytest.raises(InvalidArgumentError, match="singular"):
        component_label(model, singular)


@pytest.mark.parametrize(("epsilon", "expected"), [(0.0, 4), (1.0, 3), (-0.5, 3), (2.0, 3)])
def test_residual_network_minimum_components(epsilon, expected) -> None:
    """Prop. 3.2.3 / Fig. 3.1: 4 components without the skip connection, 3 with it."""
    result = residual_minimum_components(epsilon, x=1.0, y=1.0, box=3.0, resolution=241)
    assert result.count == expected
    w1, w2, w3 = result.points.T
    assert float((w3 * (w2 * w1 + epsilon) - 1.0).abs().max()) < 1e-12  # on the minimum
    assert float(w3.abs().max()) <= result.cap
    # each component lies on one side of the singular curve w1 w2 = −ε
    for c in range(result.count):
        side = torch.sign(w1[result.labels == c] * w2[result.labels == c] + epsilon)
        assert bool((side == side[0]).all())
    assert sorted(result.sizes, reverse=True) == result.sizes


def test_restarts_keep_the_best_of_the_random_orders():
    """restarts=k runs the descents of seeds 0..k-1 and returns the one with the largest J."""
    a = ps.mlp([4, 6, 7, 5, 3], activation="leaky_relu", seed=3)
    b = ps.mlp([4, 6, 7, 5, 3], activation="leaky_relu", seed=4)
    single = [
        ps.weight_matching(a, b, config=ps.WeightMatchingConfig(seed=s)).objective_after
        for s in range(4)
    ]
    best = ps.weight_matching(a, b, config=ps.WeightMatchingConfig(restarts=4))
    assert best.restart_objectives == pytest.approx(single, rel=1e-12)
    assert best.objective_after == pytest.approx(max(single), rel=1e-12)
    with pytest.raises(ps.InvalidArgumentError, match="restarts"):
        ps.WeightMatchingConfig(restarts=0)
