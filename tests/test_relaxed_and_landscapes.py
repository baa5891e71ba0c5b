"""Relaxed symmetries (Ex. 1.3.2, 1.3.7) and the test functions of ch. 4 (App. C.1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import paramsym as ps
from helpers import relative_error
from paramsym.landscapes import Booth, Ellipse, Quadratic, Rosenbrock, value_loss
from paramsym.symmetry import DistributionSymmetry, OutputRotation, spectral_contrastive_loss

# -- relaxed symmetries ------------------------------------------------------------------------


@given(st.integers(2, 6), st.integers(0, 999))
def test_self_supervised_rotation_preserves_the_loss_not_the_embeddings(m, seed):
    """Ex. 1.3.2: f = W x, a loss of inner products only, O(m) on W alone."""
    generator = torch.Generator().manual_seed(seed)
    encoder = torch.nn.Linear(5, m).double()
    x = torch.randn(8, 5, generator=generator, dtype=torch.float64)
    x_positive = x + 0.1 * torch.randn(8, 5, generator=generator, dtype=torch.float64)
    rotation = OutputRotation(m, ["weight", "bias"], site="encoder")
    assert (rotation.preserves, rotation.group, rotation.dim) == (
        "loss",
        f"O({m})",
        m * (m - 1) // 2,
    )
    theta = ps.params_of(encoder)
    moved = rotation.act(
        theta, rotation.sample(scale=1.0, generator=generator, dtype=torch.float64)
    )

    def loss(p):
        return spectral_contrastive_loss(
            ps.functional_call(encoder, p, x), ps.functional_call(encoder, p, x_positive)
        )

    assert relative_error(loss(moved), loss(theta)) <= 1e-12
    assert relative_error(ps.functional_call(encoder, moved, x), encoder(x)) > 1e-3


@given(st.integers(2, 5), st.integers(1, 3), st.integers(0, 999))
def test_distribution_symmetry_preserves_the_expected_residual_only(n, m, seed):
    """Ex. 1.3.7: E[W x − W* x] = (W − W*) x̄ is invariant under W ↦ W A⁻¹ with A x̄ = x̄;
    the expected squared error is not."""
    generator = torch.Generator().manual_seed(seed)
    mean = torch.randn(n, generator=generator, dtype=torch.float64)
    x = torch.randn(50, n, generator=generator, dtype=torch.float64)
    x = x - x.mean(0) + mean  # the batch's mean is exactly x̄
    teacher = torch.randn(m, n, generator=generator, dtype=torch.float64)
    model = torch.nn.Linear(n, m, bias=False).double()
    s = DistributionSymmetry("weight", mean)
    assert (s.preserves, s.dim) == ("distribution", n * (n - 1))
    a = s.sample(scale=1.0, generator=generator, dtype=torch.float64)
    assert torch.allclose(a @ mean, mean, atol=1e-12)
    theta = ps.params_of(model)
    moved = s.act(theta, a)
    assert torch.allclose(moved["weight"], theta["weight"] @ torch.linalg.inv(a), atol=1e-12)

    def residual(p):
        return ps.functional_call(model, p, x) - x @ teacher.T

    assert relative_error(residual(moved).mean(0), residual(theta).mean(0)) <= 1e-10
    assert relative_error((residual(moved) ** 2).mean(), (residual(theta) ** 2).mean()) > 1e-6


def test_distribution_symmetry_rejects_elements_that_move_the_mean():
    s = DistributionSymmetry("weight", torch.tensor([1.0, 2.0], dtype=torch.float64))
    with pytest.raises(ps.InvalidGroupElementError, match="data mean"):
        s.check_element(torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
    with pytest.raises(ps.InvalidArgumentError, match="nonzero"):
        DistributionSymmetry("weight", torch.zeros(3))


# -- test functions ----------------------------------------------------------------------------

ANGLES = torch.linspace(0, 2 * math.pi, 73, dtype=torch.float64)


@pytest.mark.parametrize(
    ("landscape", "minimum"),
    [
        (Rosenbrock(torch.tensor([-1.2, 1.0], dtype=torch.float64)), [1.0, 1.0]),
        (Booth(torch.tensor([3.0, -2.0], dtype=torch.float64)), [1.0, 3.0]),
    ],
    ids=["rosenbrock", "booth"],
)
def test_change_of_variables_rotations_preserve_the_function_for_every_angle(landscape, minimum):
    (s,) = ps.symmetries(landscape)
    assert (s.group, s.dim, s.linear) == ("O(2)", 1, False)
    w = landscape.w.detach()
    assert torch.allclose(landscape.from_latent(landscape.to_latent(w)), w, atol=1e-14)
    assert float(landscape.value(torch.tensor(minimum, dtype=torch.float64))) == 0.0
    theta = ps.params_of(landscape)
    values = []
    for angle in ANGLES:
        moved = s.act(theta, s.exp(angle.reshape(1)))
        values.append(float(ps.functional_call(landscape, moved, None)))
    assert max(values) == pytest.approx(float(landscape(None).detach()), rel=1e-12)
    assert min(values) == pytest.approx(float(landscape(None).detach()), rel=1e-12)
    reflection = torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)  # O(2), not SO(2)
    moved = s.act(theta, reflection)
    assert float(ps.functional_call(landscape, moved, None)) == pytest.approx(
        float(landscape(None).detach()), rel=1e-12
    )


def test_landscape_symmetry_is_a_group_action_with_orthogonal_gradients():
    landscape = Rosenbrock(torch.tensor([0.3, -0.4], dtype=torch.float64))
    (s,) = ps.symmetries(landscape)
    theta = ps.params_of(landscape)
    g1, g2 = (
        s.exp(torch.tensor([0.4], dtype=torch.float64)),
        s.exp(torch.tensor([-1.1], dtype=torch.float64)),
    )
    two_steps = s.act(s.act(theta, g2), g1)
    assert torch.allclose(s.act(theta, s.compose(g1, g2))["w"], two_steps["w"], atol=1e-13)
    gradient = torch.func.grad(lambda p: ps.functional_call(landscape, p, None))(theta)
    tangent = s.tangent(theta, torch.tensor([1.0], dtype=torch.float64))
    assert abs(float(ps.inner(gradient, tangent))) <= 1e-12 * float(
        ps.norm(gradient) * ps.norm(tangent)
    )


@given(st.integers(2, 5), st.integers(0, 999))
def test_quadratic_orthogonal_action_is_transitive_on_level_sets(n, seed):
    """Lemma 4.5.5: A^{-1/2} O(n) A^{1/2} preserves wᵀAw and reaches all of each level set."""
    generator = torch.Generator().manual_seed(seed)
    b = torch.randn(n, n, generator=generator, dtype=torch.float64)
    a = b @ b.T + 0.5 * torch.eye(n, dtype=torch.float64)
    w1 = torch.randn(n, generator=generator, dtype=torch.float64)
    quadratic = Quadratic(a, w1)
    (s,) = ps.symmetries(quadratic)
    theta = ps.params_of(quadratic)
    g = s.sample(scale=1.0, generator=generator, dtype=torch.float64)
    assert float(ps.functional_call(quadratic, s.act(theta, g), None)) == pytest.approx(
        float(quadratic(None).detach()), rel=1e-12
    )
    # Any w2 with the same value is g·w1 for g mapping A^{1/2} w1 to A^{1/2} w2 (a reflection).
    w2 = torch.randn(n, generator=generator, dtype=torch.float64)
    w2 = w2 * torch.sqrt((w1 @ a @ w1) / (w2 @ a @ w2))
    u = s.sqrt @ w1 - s.sqrt @ w2
    reflection = torch.eye(n, dtype=torch.float64) - 2 * torch.outer(u, u) / (u @ u)
    assert torch.allclose(s.act(theta, reflection)["w"], w2, atol=1e-10)


def test_ellipse_action_and_the_top_eigenvector_maximises_the_gradient():
    """The ellipse x² + a y² has the action diag(1, 1/√a) R diag(1, √a) (App. C.2); on a level
    set of wᵀAw, ‖∇L‖² = 4‖Aw‖² is largest (4 c λ_max) on the top eigenvector (Lemma 4.5.6)."""
    ellipse = Ellipse(4.0, torch.tensor([1.0, 0.5], dtype=torch.float64))
    (s,) = ps.symmetries(ellipse)
    angle = torch.tensor([0.3], dtype=torch.float64)
    rotation = s.exp(angle)
    expected = (
        torch.diag(torch.tensor([1.0, 0.5], dtype=torch.float64))
        @ rotation
        @ torch.diag(torch.tensor([1.0, 2.0], dtype=torch.float64))
    )
    theta = ps.params_of(ellipse)
    assert torch.allclose(s.act(theta, rotation)["w"], expected @ theta["w"], atol=1e-14)
    level = float(ellipse(None).detach())
    gradients = []
    for t in ANGLES:
        w = s.act(theta, s.exp(t.reshape(1)))["w"]
        gradients.append(float((2 * ellipse.matrix @ w).square().sum()))
    assert max(gradients) == pytest.approx(4 * level * 4.0, rel=1e-3)  # λ_max(A) = a = 4


def test_landscapes_work_with_the_curvature_tools():
    rosenbrock = Rosenbrock(torch.tensor([1.0, 1.0], dtype=torch.float64))
    hessian = ps.hessian(rosenbrock, value_loss, (None, None))
    assert torch.allclose(
        hessian, torch.tensor([[802.0, -400.0], [-400.0, 200.0]], dtype=torch.float64)
    )
    top = ps.top_eigenvalues(rosenbrock, value_loss, (None, None), k=2, tol=1e-12)
    assert top.eigenvalues == pytest.approx(
        torch.linalg.eigvalsh(hessian).flip(0).tolist(), rel=1e-10
    )


def test_landscape_arguments_are_checked():
    with pytest.raises(ps.InvalidArgumentError, match="length 2"):
        Rosenbrock(torch.zeros(3))
    with pytest.raises(ps.InvalidArgumentError, match="a must be > 0"):
        Ellipse(0.0, [1.0, 1.0])
    with pytest.raises(ps.InvalidArgumentError, match="positive definite"):
        Quadratic(torch.diag(torch.tensor([1.0, -1.0])), [1.0, 1.0])
