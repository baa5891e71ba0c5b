"""max_assignment (core/assignment.py): the certified sparse solve against scipy's dense one."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.optimize
import torch

from paramsym.core import assignment
from paramsym.core.assignment import max_assignment
from paramsym.errors import InvalidArgumentError


def dense(cost: np.ndarray) -> np.ndarray:
    return scipy.optimize.linear_sum_assignment(cost, maximize=True)[1]


def total(cost: np.ndarray, columns: np.ndarray) -> float:
    return float(cost[np.arange(len(columns)), columns].sum())


def normal(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, n))


def correlated(n: int, seed: int) -> np.ndarray:
    """A weight-matching-like cost: a planted permutation's entries stand out of noise."""
    rng = np.random.default_rng(seed)
    cost = rng.standard_normal((n, n))
    cost[np.arange(n), rng.permutation(n)] += 3.0
    return cost


def rank_one(n: int, seed: int) -> np.ndarray:
    """Every row ranks the columns alike: each row's largest entries lie in the same few
    columns, so the optimum (sorted rows matched to sorted columns) needs entries far down
    most rows."""
    rng = np.random.default_rng(seed)
    return np.outer(rng.uniform(1, 2, n), rng.uniform(1, 2, n)) + 1e-3 * rng.random((n, n))


@pytest.mark.parametrize("make", [normal, correlated])
@pytest.mark.parametrize("candidates", [1, 3, 32])
def test_same_optimum_as_the_dense_solver(make, candidates: int) -> None:
    cost = make(1100, seed=candidates)
    got = max_assignment(cost, candidates=candidates)
    want = dense(cost)
    assert np.array_equal(np.sort(got), np.arange(1100))
    np.testing.assert_array_equal(got, want)  # continuous random entries: one optimum


@pytest.mark.parametrize("make", [normal, correlated])
@pytest.mark.parametrize("candidates", [8, 16])
def test_the_certificate_adds_the_entries_the_candidates_missed(make, candidates: int) -> None:
    """With few candidates per row the sparse optimum is not the matrix's: the dual check
    finds the violated entries and a later round gets the dense answer (dropping the check
    fails this test)."""
    cost = make(1100, seed=7)
    start = torch.arange(1100)
    solved = assignment._certified(torch.from_numpy(cost), start, candidates)
    assert solved is not None
    columns, rounds = solved
    assert rounds > 1
    np.testing.assert_array_equal(columns, dense(cost))


def test_rows_that_rank_columns_alike_go_to_the_dense_solver() -> None:
    """Half the entries of a rank-one matrix violate the first potentials: the candidates
    would pass :data:`MAX_EDGES_PER_ROW`, and the dense solver (faster there) takes over."""
    cost = rank_one(1100, seed=0)
    assert assignment._certified(torch.from_numpy(cost), torch.arange(1100), 32) is None
    np.testing.assert_array_equal(max_assignment(cost), dense(cost))


def test_start_permutation_joins_the_candidates() -> None:
    cost = correlated(1100, seed=3)
    want = dense(cost)
    shuffled = np.random.default_rng(0).permutation(1100)
    np.testing.assert_array_equal(max_assignment(cost, start=want, candidates=1), want)
    np.testing.assert_array_equal(max_assignment(cost, start=shuffled, candidates=1), want)


def test_ties_reach_the_optimal_sum() -> None:
    """Small integers: many optima, so only the sum is compared."""
    cost = np.random.default_rng(1).integers(0, 4, (1100, 1100)).astype(np.float64)
    got = max_assignment(cost, candidates=4)
    assert np.array_equal(np.sort(got), np.arange(1100))
    assert total(cost, got) == total(cost, dense(cost))


def test_large_offset_and_float32() -> None:
    cost = correlated(1100, seed=5)
    want = dense(cost)
    np.testing.assert_array_equal(max_assignment(cost + 1e6), want)
    np.testing.assert_array_equal(max_assignment(-cost * 1e-8), dense(-cost * 1e-8))
    single = cost.astype(np.float32)
    np.testing.assert_array_equal(max_assignment(single), dense(single.astype(np.float64)))


@pytest.mark.parametrize("scale", [1e-12, 1.0, 1e12])
@pytest.mark.parametrize("shift", [0.0, 1e3])
def test_a_gain_of_one_millionth_outside_the_candidates_is_found(
    scale: float, shift: float
) -> None:
    """Identity optimal by a wide margin but for one swap of rows 0 and 1 that gains
    δ = 1e-6 (relative to the entries' spread), through an entry of row 0 that is not its
    largest. On one candidate per row the sparse optimum is the identity; the certificate's
    violation at that entry is at least δ, so it must be found at every scale and offset
    (a tolerance that is too loose or absolute, or weights rounded at the wrong scale, fail)."""
    n, delta = 60, 1e-6
    rng = np.random.default_rng(0)
    base = 0.1 * rng.standard_normal((n, n)) + np.eye(n)
    base[1, 0] = base[1, 1] + 0.5  # row 1's largest entry
    base[0, 1] = base[0, 0] + base[1, 1] - base[1, 0] + delta  # below row 0's largest
    want = np.arange(n)
    want[[0, 1]] = [1, 0]
    cost = scale * base + shift * scale
    np.testing.assert_array_equal(dense(cost), want)
    got = max_assignment(cost, candidates=1, dense_below=2)
    np.testing.assert_array_equal(got, want)


def test_read_only_input_without_warnings() -> None:
    cost = correlated(1100, seed=4)
    cost.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(max_assignment(cost), dense(cost))


def test_negative_cycle_gives_no_potentials() -> None:
    """Potentials exist only for a matching optimal on its candidates: for a worse one the
    residual graph has a negative cycle, Bellman-Ford does not settle, and None comes back."""
    c = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    rows, cols = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])
    weights = (1.0 - c[rows, cols]) + 2.0
    swapped, best, zero = torch.tensor([1, 0]), torch.tensor([0, 1]), torch.zeros(2).double()
    on_swapped = (1.0 - c[[0, 1], swapped]) + 2.0
    on_best = (1.0 - c[[0, 1], best]) + 2.0
    assert assignment._row_potentials(rows, cols, weights, swapped, on_swapped, zero) is None
    found = assignment._row_potentials(rows, cols, weights, best, on_best, zero)
    assert found is not None
    d, dcol = found
    reduced = weights + d[rows] - dcol[cols]
    assert bool((reduced >= 0).all())
    assert reduced[[0, 3]].abs().max() == 0


def test_dense_solver_takes_over_where_no_certificate(monkeypatch: pytest.MonkeyPatch) -> None:
    cost = normal(1100, seed=2)
    calls: list[int] = []

    def refused(*args: object) -> None:
        calls.append(1)
        return None

    monkeypatch.setattr(assignment, "_row_potentials", refused)
    np.testing.assert_array_equal(max_assignment(cost), dense(cost))
    assert calls


@pytest.mark.parametrize("shape", [(5, 7), (40, 40)])
def test_small_and_rectangular_are_solved_densely(shape: tuple[int, int]) -> None:
    cost = np.random.default_rng(0).standard_normal(shape)
    np.testing.assert_array_equal(max_assignment(cost), dense(cost))


@pytest.mark.parametrize(
    ("cost", "kwargs", "match"),
    [
        (np.full((1100, 1100), np.nan), {}, "non-finite"),
        (np.zeros(4), {}, "matrix"),
        (np.zeros((1100, 1100)), {"candidates": 0}, "candidates"),
        (np.zeros((1100, 1100)), {"start": np.zeros(1100, dtype=int)}, "start"),
    ],
)
def test_bad_input_is_named(cost: np.ndarray, kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        max_assignment(cost, **kwargs)
