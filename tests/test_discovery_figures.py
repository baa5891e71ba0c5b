"""The learned-discovery experiments of §6.5 (``discovery-rescaling``, ``discovery-data-
dependent``, ``discovery-curves``): their target networks against hand-written forward passes,
the measurement helpers against closed forms (a learned action whose network outputs zero is
the linear action gθ, so its vector field is hθ), the claim checks on synthetic results, and a
tiny smoke run of each experiment."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from helpers import csv_rows, run_quick
from paramsym.discovery import LearnedSymmetry, LearnedSymmetryConfig
from paramsym.discovery.learned_losses import trivial_dimension
from paramsym.experiments.discovery import curves, data_dependent, rescaling
from paramsym.experiments.discovery import learned_common as lc
from paramsym.experiments.registry import Result

F64 = torch.float64


def forward(name: str, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The networks by hand, θ = (vec W1, vec W2, …) row-major in (out, in) layout."""
    if name == "linear":
        return theta[1] * theta[0] * x
    if name == "sigmoid":
        w1, w2 = theta[:9].reshape(3, 3), theta[9:].reshape(1, 3)
        return torch.sigmoid(x @ w1.T) @ w2.T
    w1, w2, w3 = theta[:4].reshape(2, 2), theta[4:8].reshape(2, 2), theta[8:].reshape(1, 2)
    return torch.tanh(torch.tanh(x @ w1.T) @ w2.T) @ w3.T


@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("linear", {"W1": 1, "W2": 1}),
        ("sigmoid", {"W1": 9, "W2": 3}),
        ("tanh", {"W1": 4, "W2": 4, "W3": 2}),
    ],
)
def test_networks_flat_loss_and_blocks(name: str, sizes: dict[str, int]) -> None:
    model = lc.make_network(name)
    assert lc.block_sizes(model) == sizes
    loss = lc.squared_error(model)
    P = sum(sizes.values())
    theta, x, y = lc.sample_set(P, lc.input_dim(model), 4, seed=1)
    assert theta.shape == (4, P)
    assert x.shape == (4, 1, lc.input_dim(model))
    assert y.shape == (4, 1, 1)
    for b in range(4):
        expected = (forward(name, theta[b], x[b]) - y[b]) ** 2
        torch.testing.assert_close(loss(theta[b], x[b], y[b]), expected.reshape(1))
    grads = lc.loss_gradients(loss, theta, x, y)
    for b in range(4):
        t = theta[b].clone().requires_grad_(True)
        ((forward(name, t, x[b]) - y[b]) ** 2).sum().backward()
        torch.testing.assert_close(grads[b], t.grad)
    assert trivial_dimension(loss, theta, x, y).tolist() == [P - 1] * 4
    # at an exact fit the gradient vanishes: every direction keeps the loss to first order
    exact = forward(name, theta[0], x[0]).detach().reshape(1, 1, 1)
    assert trivial_dimension(loss, theta[:1], x[:1], exact).tolist() == [P]
    with pytest.raises(Exception, match="unknown network"):
        lc.make_network("relu")


def test_block_shares_closed_forms() -> None:
    sizes = {"W1": 2, "W2": 1}
    m = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]], dtype=F64)
    shares = lc.block_shares(m, sizes)
    torch.testing.assert_close(shares, torch.tensor([[1.0, 4.0], [9.0, 0.0]], dtype=F64) / 14)
    uniform = lc.uniform_shares({"W1": 4, "W2": 4, "W3": 2})
    torch.testing.assert_close(uniform.sum(), torch.tensor(1.0, dtype=F64))
    assert float(uniform[0, 2] + uniform[2, 0]) == pytest.approx(0.16)
    assert data_dependent.coupling([uniform.tolist()], 0, 2) == pytest.approx([0.16])
    # the shares of an i.i.d. matrix approach the uniform shares
    big = torch.randn(400, 400, generator=torch.Generator().manual_seed(0), dtype=F64)
    torch.testing.assert_close(
        lc.block_shares(big, {"a": 200, "b": 150, "c": 50}),
        lc.uniform_shares({"a": 200, "b": 150, "c": 50}),
        atol=0.01,
        rtol=0,
    )


def test_gradient_cosines_and_tangent_field() -> None:
    grads = torch.tensor([[1.0, 0.0], [3.0, 4.0]], dtype=F64)
    v = torch.tensor([[[1.0, 1.0], [4.0, -3.0]]], dtype=F64)
    torch.testing.assert_close(
        lc.gradient_cosines(grads, v), torch.tensor([[1 / math.sqrt(2), 0.0]], dtype=F64)
    )
    model = lc.make_network("sigmoid")
    loss = lc.squared_error(model)
    theta, x, y = lc.sample_set(12, 3, 1, seed=2)
    u = torch.randn(12, generator=torch.Generator().manual_seed(3), dtype=F64)
    field = lc.tangent_field(loss, theta[0], x[0], y[0], u)
    grad = lc.loss_gradients(loss, theta, x, y)[0]
    assert abs(float(field @ grad)) < 1e-12 * float(u.norm() * grad.norm())
    # the Jacobian in x against central differences
    jac = torch.func.jacrev(lambda d: lc.tangent_field(loss, theta[0], d, y[0], u))(x[0])
    eps = 1e-6
    for j in range(3):
        step = torch.zeros_like(x[0])
        step[0, j] = eps
        diff = (
            lc.tangent_field(loss, theta[0], x[0] + step, y[0], u)
            - lc.tangent_field(loss, theta[0], x[0] - step, y[0], u)
        ) / (2 * eps)
        torch.testing.assert_close(jac[:, 0, j], diff, rtol=1e-6, atol=1e-8)
    expected = float(jac.norm() * x[0].norm() / field.norm())
    assert lc.tangent_field_sensitivity(loss, theta[0], x[0], y[0], u) == pytest.approx(expected)
    assert lc.relative_data_sensitivity(field, jac, x[0]) == pytest.approx(expected)


def linear_action_symmetry(name: str, generators: int = 1) -> LearnedSymmetry:
    """A LearnedSymmetry whose network outputs zero: the residual action is exactly gθ."""
    model = lc.make_network(name)
    config = LearnedSymmetryConfig(generators=generators, hidden=(8,))
    sym = LearnedSymmetry(
        lc.squared_error(model), data_dim=lc.input_dim(model), config=config, dtype=F64
    )
    last = sym.network.linears[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()
    return sym


def test_helpers_on_the_linear_action() -> None:
    sym = linear_action_symmetry("tanh", generators=2)
    theta, x, y = lc.sample_set(10, 2, 3, seed=4)
    h = sym.generators()
    jac = lc.field_jacobians(sym, theta[0], x[0])
    torch.testing.assert_close(jac, h)  # v = hθ, ∂v/∂θ = h
    gen = torch.Generator().manual_seed(5)
    scaled = sym.random_generators(3, theta[0], x[0], speed=0.7, generator=gen)
    torch.testing.assert_close(
        torch.linalg.vector_norm(scaled @ theta[0], dim=-1), torch.full((3,), 0.7, dtype=F64)
    )
    default = sym.random_generators(2, theta[0], x[0], generator=gen)  # the learned mean speed
    torch.testing.assert_close(
        torch.linalg.vector_norm(default @ theta[0], dim=-1),
        torch.full((2,), float((h @ theta[0]).norm(dim=-1).mean()), dtype=F64),
    )
    # the exact rescaling of the linear net keeps the loss along its whole curve
    lin = linear_action_symmetry("linear")
    theta, x, y = lc.sample_set(2, 1, 1, seed=6)
    t = torch.linspace(-1, 1, 7, dtype=F64)
    change = lc.curve_variation(lin, rescaling.RESCALING, theta[0], x[0], y[0], t)
    assert float(change.max()) < 1e-13
    other = lc.curve_variation(lin, torch.eye(2, dtype=F64), theta[0], x[0], y[0], t)
    assert float(other.max()) > 1e-3
    # the mean-field line of discovery-curves: L(θ + t d) by hand
    d = torch.tensor([0.3, -0.5], dtype=F64)
    line = curves._line_variation(
        lc.Trained(lin, lc.squared_error(lc.make_network("linear")), {}, 0.0),
        d,
        theta[0],
        x[0],
        y[0],
        t,
    )
    points = theta[0] + t[:, None] * d
    by_hand = (points[:, 1] * points[:, 0] * x[0, 0, 0] - y[0, 0, 0]) ** 2
    start = (theta[0, 1] * theta[0, 0] * x[0, 0, 0] - y[0, 0, 0]) ** 2
    torch.testing.assert_close(line, (by_hand - start).abs())


def test_rescaling_element_structure() -> None:
    hat = rescaling.normalised(0.01 * rescaling.RESCALING)
    torch.testing.assert_close(hat, rescaling.RESCALING)
    s = rescaling.element_structure(torch.linalg.matrix_exp(hat))
    assert s["off_diagonal_relative"] == 0.0
    assert s["det"] == pytest.approx(1.0)
    assert s["diagonal_product"] == pytest.approx(1.0)
    assert s["log_diagonal_ratio"] == pytest.approx(2.0)
    rotation = rescaling.element_structure(
        torch.linalg.matrix_exp(torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=F64))
    )
    assert rotation["off_diagonal_relative"] == pytest.approx(math.tan(1.0))


def test_claim_checks_on_synthetic_results() -> None:
    good = Result(
        {
            "abs_cosine": 0.99,
            "generator": [[0.01, 0.0], [0.0, -0.01]],
            "element_off_diagonal_relative": 0.0,
            "element_det": 1.0,
            "element_log_diagonal_ratio": 2.0,
            "element": [[2.7, 0.0], [0.0, 0.37]],
        }
    )
    assert rescaling.direction_claim(good)[1] is True
    assert rescaling.element_claim(good)[1] is True
    near_identity = Result({**good.metrics, "element_log_diagonal_ratio": 0.1})
    assert rescaling.element_claim(near_identity)[1] is False
    base = {
        "networks": ["sigmoid"],
        "sigmoid_exact_dim": 0,
        "sigmoid_exact_determined": True,
        "sigmoid_exact_dd_dim": 72,
        "sigmoid_sensitivity_median": 0.003,
        "sigmoid_sensitivity_reference_median": 0.3,
        "sigmoid_cos_learned_median": 0.1,
        "sigmoid_blind_cos_learned_median": 0.1,
    }
    assert data_dependent.no_symmetry_claim(Result(base))[1] is True
    assert data_dependent.no_symmetry_claim(Result({**base, "sigmoid_exact_dim": 1}))[1] is False
    assert data_dependent.sensitivity_claim(Result(base))[1] is False
    strong = {**base, "sigmoid_sensitivity_median": 0.1, "sigmoid_blind_cos_learned_median": 0.2}
    assert data_dependent.sensitivity_claim(Result(strong))[1] is True
    assert data_dependent.coupling_claim(Result(base))[1] is None


TINY = {"hidden": "8", "samples": "40", "epochs": "1", "batch_size": "20"}


def test_tiny_runs(tmp_path: Path) -> None:
    """Each experiment end to end (run, claims, report, CSVs, figures) at a tiny size."""
    small = {"eval_samples": "3", "random_generators": "2", "t_points": "5"}
    directory, metrics, claims = run_quick(tmp_path, "discovery-rescaling", {**TINY, **small})
    assert metrics["steps"] == 2
    assert len(claims) == 3
    assert (directory / "rescaling_generator.png").exists()
    small = {"networks": "tanh", "generators": "2", "eval_samples": "6", "detail_samples": "2"}
    _, metrics, claims = run_quick(tmp_path, "discovery-data-dependent", {**TINY, **small})
    assert metrics["tanh_exact_dim"] == 0
    assert metrics["tanh_trivial_dim"] == [9, 9]
    assert all(not str(c["measured"]).startswith("check failed") for c in claims.values())
    small = {"networks": "sigmoid", "generators": "1", "eval_samples": "2", "t_points": "5"}
    directory, metrics, claims = run_quick(
        tmp_path, "discovery-curves", {**TINY, **small, "random_curves": "2"}
    )
    assert metrics["sigmoid_pairs"] == 2
    rows = csv_rows(next(directory.rglob("curves.csv")))
    assert len(rows) == 2 * (1 + 1 + 2) * 5
