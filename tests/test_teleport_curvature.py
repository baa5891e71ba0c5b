"""Sharpness φ (Eq. 5.1), orbit curvature κ and ψ (Eq. 5.2) and their teleport objectives
(dissertation §5.2-5.3, Algorithm 2), in float64: exact curves, nested derivatives against finite
differences (test oracle only), gradients against autograd through the explicit average, ascent
and descent under the loss guard, bad input."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

import paramsym as ps
from helpers import random_batch, random_mlp, seeded
from paramsym.landscapes import Quadratic, value_loss
from paramsym.teleportation import Curvature, Sharpness, sharpness_directions

F64 = torch.float64


def _find(model: nn.Module, prefix: str, data_dependent: bool = False, loss_fn=None):
    found = ps.symmetries(model, loss_fn=loss_fn, data_dependent=data_dependent)
    chosen = [s for s in found if s.dim > 0 and s.name.startswith(prefix)]
    assert chosen, [s.name for s in found]
    return chosen


def _unit(dim: int, seed: int) -> torch.Tensor:
    v = torch.randn(dim, generator=seeded(seed), dtype=F64)
    return v / v.norm()


# -- exact curves ------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 0.01, -3.0, 100.0])
def test_circle_orbit_has_curvature_one_over_radius(scale):
    """O(2) on the identity quadratic moves w on the circle of radius ‖w‖: κ = 1/‖w‖."""
    w = torch.tensor([0.3, -1.7], dtype=F64)
    model = Quadratic(torch.eye(2, dtype=F64), w)
    s = model.symmetry()
    kappa = ps.orbit_curvature(model, s, torch.full((1,), scale, dtype=F64))
    assert abs(float(kappa) - 1.0 / float(w.norm())) <= 1e-10


def test_straight_orbit_has_zero_curvature_and_finite_gradient():
    """The softmax translation is affine in θ: γ(t) = θ + tv, κ = 0, ∇_θκ finite."""
    model = random_mlp("relu")
    (s,) = _find(model, "translation", loss_fn=nn.CrossEntropyLoss())
    params = {k: v.detach().requires_grad_() for k, v in ps.params_of(model).items()}
    kappa = ps.orbit_curvature(model, s, _unit(s.dim, 3), params=params)
    assert abs(float(kappa)) <= 1e-10
    if kappa.requires_grad:  # γ′ does not depend on θ here: κ may carry no graph at all
        grads = torch.autograd.grad(kappa, list(params.values()), allow_unused=True)
        assert all(g is None or bool(torch.isfinite(g).all()) for g in grads)
    result = ps.teleport(
        model, nn.CrossEntropyLoss(), random_batch(8, classes=True), [s], "curvature", steps=2
    )
    assert math.isfinite(result.objective_after)
    assert result.objective_after == pytest.approx(0.0, abs=1e-10)


def test_curvature_gradient_is_finite_where_the_curve_is_straight():
    """γ″⊥ = 0 with γ′, γ″ depending on θ: the gradient of ‖γ″⊥‖/‖γ′‖² stays finite where
    the text's √(‖γ′‖²‖γ″‖² − ⟨γ′, γ″⟩²)/‖γ′‖³ gives NaN."""
    from paramsym.teleportation.orbit_geometry import _curvature

    class Line(ps.Symmetry):  # γ(t) = w + (t + t²)‖w‖²·1: γ″ ∥ γ′, both depending on w
        def __init__(self) -> None:
            super().__init__(name="line", group="R", dim=1, linear=False)

        @property
        def parameter_names(self) -> tuple[str, ...]:
            return ("w",)

        def exp(self, xi):
            return xi

        def compose(self, g1, g2):
            return g1 + g2

        def inverse(self, g):
            return -g

        def check_element(self, g):
            return g

        def act(self, params, g, x=None):
            w = params["w"]
            return {**params, "w": w + (g[0] + g[0] ** 2) * (w * w).sum() * torch.ones_like(w)}

    w = torch.tensor([0.4, -1.2, 2.0], dtype=F64, requires_grad=True)
    kappa = _curvature([Line()], [torch.ones(1, dtype=F64)], {"w": w}, None)
    assert float(kappa.detach()) <= 1e-12
    (grad,) = torch.autograd.grad(kappa, [w])
    assert bool(torch.isfinite(grad).all())


def test_stabiliser_direction_gives_zero():
    """γ′ = 0 (ξ fixes θ: a dead unit's rescaling) is defined as κ = 0."""
    model = random_mlp("leaky_relu")
    (s,) = [t for t in _find(model, "rescaling") if "0->2" in t.name or t.name.endswith("[0]")][:1]
    with torch.no_grad():
        model[0].weight[2].zero_()
        model[0].bias[2].zero_()
        model[2].weight[:, 2].zero_()
    xi = torch.zeros(s.dim, dtype=F64)
    xi[2] = 1.0
    params = {k: v.detach().requires_grad_() for k, v in ps.params_of(model).items()}
    kappa = ps.orbit_curvature(model, s, xi, params=params)
    assert float(kappa.detach()) == 0.0
    (grad,) = torch.autograd.grad(kappa, [params["0.weight"]], allow_unused=True)
    assert grad is None or float(grad.abs().max()) == 0.0


# -- nested derivatives against finite differences ------------------------------------------


def _fd_curvature(symmetries, xis, params, x) -> float:
    """κ from a 5-point stencil of the composed action (the test oracle)."""
    names = [k for k in params if any(k in s.parameter_names for s in symmetries)]

    def curve(t: float) -> torch.Tensor:
        current = dict(params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ps.ApproximateActionWarning)
            for s, xi in zip(symmetries, xis, strict=True):
                current = s.act(current, s.exp(t * xi), x if s.data_dependent else None)
        return torch.cat([current[k].reshape(-1) for k in names])

    h = 1e-3
    p2, p1, z, m1, m2 = (curve(c * h) for c in (2, 1, 0, -1, -2))
    a = (-p2 + 8 * p1 - 8 * m1 + m2) / (12 * h)
    b = (-p2 + 16 * p1 - 30 * z + 16 * m1 - m2) / (12 * h * h)
    a2 = float(a @ a)
    return math.sqrt(max(a2 * float(b @ b) - float(a @ b) ** 2, 0.0)) / a2**1.5


@pytest.mark.parametrize(
    ("activation", "prefix", "n", "pairs"),
    [
        ("tanh", "nonlinear_GL", 1, 1),  # σ⁻¹″ ≠ 0: the closed form is 89% off here
        ("tanh", "nonlinear_GL", 1, 2),  # two pairs sharing the middle weight
        ("leaky_relu", "pinv_GL", 5, 2),
    ],
)
def test_nested_derivatives_match_finite_differences(activation, prefix, n, pairs):
    model = random_mlp(activation)
    x, _ = random_batch(n)
    symmetries = _find(model, prefix, data_dependent=True)[:pairs]
    assert len(symmetries) == pairs
    xis = [_unit(s.dim, 10 + i) for i, s in enumerate(symmetries)]
    theta = ps.params_of(model)
    with warnings.catch_warnings():  # start from a fixed point of the batch action
        warnings.simplefilter("ignore", ps.ApproximateActionWarning)
        for s in symmetries:
            theta = s.act(theta, s.identity(dtype=F64), x)
    kappa = float(ps.orbit_curvature(model, symmetries, xis, params=theta, x=x))
    reference = _fd_curvature(symmetries, xis, theta, x)
    assert kappa > 1e-3
    assert kappa == pytest.approx(reference, rel=1e-6)


def test_curvature_gradient_matches_finite_differences():
    """∇_θκ (reverse over forward over forward) against central differences in θ."""
    model = random_mlp("leaky_relu")
    (s,) = _find(model, "rescaling")[:1]
    xi = _unit(s.dim, 4)
    theta = ps.params_of(model)
    leaves = {k: v.clone().requires_grad_() for k, v in theta.items()}
    (grad,) = torch.autograd.grad(
        ps.orbit_curvature(model, s, xi, params=leaves), [leaves["0.weight"]]
    )
    direction = torch.randn(theta["0.weight"].shape, generator=seeded(8), dtype=F64)
    h = 1e-5

    def at(c: float) -> float:
        moved = dict(theta)
        moved["0.weight"] = theta["0.weight"] + c * direction
        return float(ps.orbit_curvature(model, s, xi, params=moved))

    fd = (at(h) - at(-h)) / (2 * h)
    assert float((grad * direction).sum()) == pytest.approx(fd, rel=1e-6)


def test_mean_orbit_curvature_uses_unit_orthant_elements():
    model = random_mlp("leaky_relu")
    symmetries = _find(model, "rescaling")
    elements = ps.teleportation.random_algebra_elements(symmetries, 3, seeded(0))
    for xis in elements:
        for xi in xis:
            assert float(xi.norm()) == pytest.approx(1.0, abs=1e-12)
            assert bool((xi >= 0).all())
    psi = ps.mean_orbit_curvature(model, symmetries, 3, seeded(0))
    direct = sum(float(ps.orbit_curvature(model, symmetries, xis)) for xis in elements) / 3
    assert float(psi) == pytest.approx(direct, rel=1e-12)


# -- sharpness -----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["vmap", "loop"])
def test_sharpness_and_gradient_match_the_explicit_average(method):
    model = random_mlp("tanh")
    loss_fn, batch = nn.MSELoss(), random_batch(6)
    radii = [0.05, 0.2]
    theta = ps.params_of(model)
    leaves = {k: v.clone().requires_grad_() for k, v in theta.items()}
    value = ps.sharpness(model, loss_fn, batch, radii, 7, seeded(2), leaves, method=method)
    fast = torch.autograd.grad(value, list(leaves.values()))

    slow_leaves = {k: v.clone().requires_grad_() for k, v in theta.items()}
    total = 0.0
    for d in sharpness_directions(theta, 7, seeded(2)):
        assert math.sqrt(sum(float((t * t).sum()) for t in d.values())) == pytest.approx(1.0)
        for t in radii:
            moved = {k: slow_leaves[k] + t * d[k] for k in slow_leaves}
            total = total + loss_fn(ps.functional_call(model, moved, batch[0]), batch[1])
    explicit = total / (7 * len(radii))
    slow = torch.autograd.grad(explicit, list(slow_leaves.values()))
    assert float(value.detach()) == pytest.approx(float(explicit.detach()), rel=1e-12)
    for f, s in zip(fast, slow, strict=True):
        assert torch.allclose(f, s, rtol=1e-10, atol=1e-13)


def test_sharpness_is_deterministic_per_generator_and_above_the_loss_at_a_minimum():
    model = random_mlp("identity", widths=(4, 3))
    x, _ = random_batch(10)
    with torch.no_grad():
        y = model(x)  # θ is a global minimum (L = 0): every perturbation raises the loss
    a = ps.sharpness(model, nn.MSELoss(), (x, y), 0.1, 20, seeded(1))
    b = ps.sharpness(model, nn.MSELoss(), (x, y), 0.1, 20, seeded(1))
    assert float(a) == float(b) > 0.0


# -- teleport objectives ---------------------------------------------------------------------


def _curvature_of(model, symmetries, objective: Curvature, x) -> float:
    assert objective._elements is not None
    values = [float(ps.orbit_curvature(model, symmetries, xis, x=x)) for xis in objective._elements]
    return sum(values) / len(values)


@pytest.mark.parametrize("ascend", [True, False])
def test_curvature_teleport_moves_kappa_in_the_asked_direction(ascend):
    model = random_mlp("leaky_relu")
    loss_fn, batch = nn.MSELoss(), random_batch(8)
    symmetries = _find(model, "rescaling")
    objective = Curvature(k=2, generator=seeded(5))
    result = ps.teleport(
        model, loss_fn, batch, symmetries, objective, steps=5, lr=0.5, ascend=ascend,
        max_step_norm=0.5, max_loss_drift=1e-9,
    )  # fmt: skip
    assert result.objective == "curvature"
    assert result.steps >= 1
    assert abs(result.loss_after - result.loss_before) <= 1e-9 * result.loss_before
    after = _curvature_of(model, symmetries, objective, batch[0])
    assert after == pytest.approx(result.objective_after, rel=1e-10)
    if ascend:
        assert result.objective_after > result.objective_before * 1.01
    else:
        assert result.objective_after < result.objective_before * 0.99


def test_curvature_teleport_on_a_data_dependent_action():
    model = random_mlp("tanh")
    loss_fn, batch = nn.MSELoss(), random_batch(1)
    symmetries = _find(model, "nonlinear_GL", data_dependent=True)[:1]
    result = ps.teleport(
        model, loss_fn, batch, symmetries, Curvature(generator=seeded(6)), steps=2, lr=0.1,
        max_step_norm=0.2, max_loss_drift=1e-8,
    )  # fmt: skip
    assert result.steps >= 1
    assert result.objective_after > result.objective_before
    assert abs(result.loss_after - result.loss_before) <= 1e-8 * result.loss_before


@pytest.mark.parametrize("ascend", [True, False])
def test_sharpness_teleport_moves_phi_in_the_asked_direction(ascend):
    model = random_mlp("leaky_relu")
    loss_fn, batch = nn.MSELoss(), random_batch(8)
    objective = Sharpness(radii=[0.1, 0.3], directions=8, generator=seeded(7))
    result = ps.teleport(
        model, loss_fn, batch, _find(model, "rescaling"), objective, steps=4, lr=0.5,
        ascend=ascend, max_step_norm=0.5, max_loss_drift=1e-9,
    )  # fmt: skip
    assert result.steps >= 1
    assert abs(result.loss_after - result.loss_before) <= 1e-9 * result.loss_before
    if ascend:
        assert result.objective_after > result.objective_before
    else:
        assert result.objective_after < result.objective_before


def test_objective_names_resolve():
    assert isinstance(ps.teleportation.resolve_objective("sharpness"), Sharpness)
    assert isinstance(ps.teleportation.resolve_objective("curvature"), Curvature)
    model = random_mlp("leaky_relu")
    result = ps.teleport(
        model, nn.MSELoss(), random_batch(8), _find(model, "rescaling"), "curvature", steps=1,
        lr=0.1, ascend=False,
    )  # fmt: skip
    assert result.objective == "curvature"


# -- bad input ---------------------------------------------------------------------------------


def test_bad_input_raises_clear_errors():
    model = random_mlp("leaky_relu")
    batch = random_batch(4)
    discrete = [s for s in ps.symmetries(model) if s.dim == 0]
    assert discrete
    with pytest.raises(ps.InvalidArgumentError, match="continuous"):
        Curvature(symmetries=discrete)
    with pytest.raises(ps.InvalidArgumentError, match="continuous"):
        ps.teleport(model, nn.MSELoss(), batch, discrete, "curvature")
    with pytest.raises(ps.InvalidArgumentError, match="discrete"):
        ps.orbit_curvature(model, discrete[0], torch.zeros(0, dtype=F64))
    for radii in ([0.1, 0.0], -1.0, [], [math.nan]):
        with pytest.raises(ps.InvalidArgumentError, match="radii"):
            ps.sharpness(model, nn.MSELoss(), batch, radii)
        if radii != []:
            with pytest.raises(ps.InvalidArgumentError, match="radii"):
                Sharpness(radii=radii)
    for count in (0, -3):
        with pytest.raises(ps.InvalidArgumentError, match="directions"):
            ps.sharpness(model, nn.MSELoss(), batch, 0.1, directions=count)
        with pytest.raises(ps.InvalidArgumentError, match="directions"):
            Sharpness(directions=count)
    with pytest.raises(ps.InvalidArgumentError, match="k must"):
        Curvature(k=0)
    s = _find(model, "rescaling")[0]
    with pytest.raises(ps.InvalidArgumentError, match="one algebra element per symmetry"):
        ps.orbit_curvature(model, [s], [])
    data = _find(random_mlp("tanh"), "nonlinear_GL", data_dependent=True)[0]
    with pytest.raises(ps.InvalidArgumentError, match="pass the batch"):
        ps.orbit_curvature(random_mlp("tanh"), data, _unit(data.dim, 0))
    with pytest.raises(ps.InvalidArgumentError, match="distribution"):
        ps.sharpness(model, nn.MSELoss(), batch, 0.1, distribution="cube")  # type: ignore[arg-type]
    quadratic = Quadratic(torch.eye(2, dtype=F64), torch.ones(2, dtype=F64))
    with pytest.raises(ps.InvalidArgumentError, match="no symmetries"):
        Curvature()(ps.teleportation.TeleportContext(quadratic, {}, value_loss, (None, None)))
