"""Symmetry teleportation (dissertation ch. 4-5, seed 000) against its invariants and theory,
in float64: the loss guard, the ascent gradient against autograd through the action, state
policies, the quadratic and Newton theory checks, the Lie-bracket identity, bad input."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import paramsym as ps
from helpers import random_batch, random_mlp, randomize_, seeded
from paramsym.landscapes import Booth, Quadratic, Rosenbrock, value_loss
from paramsym.teleportation import (
    FunctionObjective,
    GradNorm,
    PreconditionedGradNorm,
    ScaledModel,
    Schedule,
    TeleportConfig,
    TeleportDriftWarning,
    Teleporter,
    fit_scales,
    gradient_hessian_cosine,
    level_set_teleport,
    lie_bracket_identity,
    newton_cosine,
    teleport,
)
from paramsym.teleportation.ascent import HessianAscent
from paramsym.teleportation.orbit import Orbit as _Orbit

F64 = torch.float64


def _token_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


@dataclass
class Case:
    """A model, its loss and batch, and the symmetry family to teleport along."""

    model: nn.Module
    loss_fn: Callable[..., torch.Tensor]
    batch: tuple[Any, Any]
    prefix: str
    data_dependent: bool = False
    # ‖∇L‖ is constant on the orbit: orthogonal actions on θ (Cor 4.5.2), and the softmax
    # translation, which leaves every gradient unchanged (Σ_o ∂L/∂F_o = 0 per sample)
    invariant_gradient: bool = False


def _cases() -> dict[str, Callable[[], Case]]:
    def transformer() -> Case:
        model = ps.nn.TinyTransformer(11, d_model=8, num_heads=2, num_layers=1, d_ff=8)
        model = model.double().eval()
        randomize_(model, seeded(3), std=0.4)
        g = seeded(4)
        tokens = torch.randint(0, 11, (3, 5), generator=g)
        return Case(model, _token_loss, (tokens, torch.randint(0, 11, (3, 5), generator=g)), "")

    def lora() -> Case:
        model = nn.Sequential(
            ps.nn.LoRALinear(4, 6, rank=2, dtype=F64), nn.Tanh(), nn.Linear(6, 3, dtype=F64)
        )
        randomize_(model, seeded(5))
        return Case(model, nn.MSELoss(), random_batch(8), "low_rank_GL")

    def scaled() -> Case:
        net = ps.mlp([4, 6, 3], "tanh", bias=False, dtype=F64)
        randomize_(net, seeded(6))
        return Case(ScaledModel(net), nn.MSELoss(), random_batch(8), "generalized_scaling")

    return {
        "rescaling": lambda: Case(
            random_mlp("leaky_relu"), nn.MSELoss(), random_batch(8), "rescaling"
        ),
        "GL": lambda: Case(random_mlp("identity"), nn.MSELoss(), random_batch(8), "GL"),
        "orthogonal": lambda: Case(
            random_mlp("radial"),
            nn.MSELoss(),
            random_batch(8),
            "orthogonal",
            invariant_gradient=True,
        ),
        "translation": lambda: Case(
            random_mlp("relu"),
            nn.CrossEntropyLoss(),
            random_batch(8, classes=True),
            "translation",
            invariant_gradient=True,
        ),
        "nonlinear_GL": lambda: Case(
            random_mlp("tanh"), nn.MSELoss(), random_batch(1), "nonlinear_GL", data_dependent=True
        ),
        "pinv_GL": lambda: Case(
            random_mlp("leaky_relu"), nn.MSELoss(), random_batch(5), "pinv_GL", data_dependent=True
        ),
        "inverse_GL": lambda: Case(
            random_mlp("leaky_relu"),
            nn.MSELoss(),
            random_batch(5),
            "inverse_GL",
            data_dependent=True,
        ),
        "attention_QK": lambda: _with_prefix(transformer(), "attention_QK"),
        "attention_VO": lambda: _with_prefix(transformer(), "attention_VO"),
        "low_rank_GL": lora,
        "latent_rotation": lambda: Case(
            Rosenbrock(torch.tensor([-1.0, -1.0], dtype=F64)), value_loss, (None, None), "latent"
        ),
        "quadratic_orthogonal": lambda: Case(
            Quadratic(
                torch.diag(torch.tensor([1.0, 2.0, 5.0], dtype=F64)), torch.ones(3, dtype=F64)
            ),
            value_loss,
            (None, None),
            "quadratic",
        ),
        "generalized_scaling": scaled,
    }


def _with_prefix(case: Case, prefix: str) -> Case:
    case.prefix = prefix
    return case


def _symmetries(case: Case) -> list[ps.Symmetry]:
    found = ps.symmetries(case.model, loss_fn=case.loss_fn, data_dependent=case.data_dependent)
    chosen = [s for s in found if s.dim > 0 and s.name.startswith(case.prefix)]
    assert chosen, [s.name for s in found]
    return chosen


CASES = _cases()


def _fresh_inputs(family: str) -> torch.Tensor:
    if family.startswith("attention"):
        return torch.randint(0, 11, (4, 5), generator=seeded(9))
    return torch.randn(6, 4, generator=seeded(9), dtype=F64)


@pytest.mark.parametrize("family", sorted(CASES))
def test_teleport_keeps_the_loss_and_raises_the_objective(family):
    case = CASES[family]()
    symmetries = _symmetries(case)
    x = case.batch[0]
    before = ps.params_of(case.model)
    result = teleport(
        case.model,
        case.loss_fn,
        case.batch,
        symmetries,
        steps=4,
        lr=0.05,
        line_search=True,
        max_step_norm=0.5,
        max_shrinks=30,
        max_loss_drift=1e-9,
    )
    assert abs(result.loss_after - result.loss_before) <= 1e-9 * abs(result.loss_before)
    if case.invariant_gradient:
        assert result.objective_after == pytest.approx(result.objective_before, rel=1e-10)
        return
    assert result.steps >= 1
    assert result.objective_after > result.objective_before
    assert result.grad_norm_after > result.grad_norm_before
    if x is None:
        return
    with torch.no_grad():
        on_batch = ps.functional_call(case.model, before, x)
        assert torch.allclose(case.model(x), on_batch, rtol=1e-9, atol=1e-11)
        exact = all(
            s.exact and not s.data_dependent and s.preserves == "function" for s in symmetries
        )
        if exact:  # exact symmetries keep the output at every input, not only on the batch
            fresh = _fresh_inputs(family)
            reference = ps.functional_call(case.model, before, fresh)
            assert torch.allclose(case.model(fresh), reference, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("family", sorted(CASES))
def test_ascent_gradient_equals_autograd_through_the_action(family):
    """The engine's ascent rates (reverse over reverse through the action) and the pullback
    T_sᵀ(2H∇L) through the tangent both equal ∂‖∇L(exp(ξ)·θ)‖²/∂ξ at 0, by autograd through
    act written out here."""
    case = CASES[family]()
    for s in _symmetries(case):
        orbit = _Orbit([s], case.batch[0], "exp", ps.params_of(case.model))
        theta = orbit.rebase(ps.params_of(case.model))
        path = HessianAscent(case.model, case.loss_fn, case.batch, GradNorm(), None, orbit)
        (fast,) = path.direction(path.evaluate(theta))
        hvp = _hessian_gradient_product(case, theta)
        (by_tangent,) = orbit.pullback(theta, hvp)

        xi = torch.zeros(s.dim, dtype=F64, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ps.ApproximateActionWarning)
            moved = s.act(theta, s.exp(xi), case.batch[0] if s.data_dependent else None)
        trained = [k for k, p in case.model.named_parameters() if p.requires_grad]
        leaves = {
            k: v if v.requires_grad else v.detach().requires_grad_() for k, v in moved.items()
        }
        loss = case.loss_fn(ps.functional_call(case.model, leaves, case.batch[0]), case.batch[1])
        grads = torch.autograd.grad(loss, [leaves[k] for k in trained], create_graph=True)
        objective = sum((g * g).sum() for g in grads)
        (slow,) = torch.autograd.grad(objective, xi)
        assert torch.allclose(
            fast, slow, rtol=1e-9, atol=1e-12 * float(slow.abs().max()) + 1e-14
        ), s.name
        assert torch.allclose(
            by_tangent, slow, rtol=1e-9, atol=1e-12 * float(slow.abs().max()) + 1e-14
        )


def _hessian_gradient_product(case, theta):
    """∇_θ‖∇L‖² = 2H∇L at θ (a params dict), by double backward."""
    leaves = {k: v.detach().requires_grad_() for k, v in theta.items()}
    trained = [k for k, p in case.model.named_parameters() if p.requires_grad]
    loss = case.loss_fn(ps.functional_call(case.model, leaves, case.batch[0]), case.batch[1])
    grads = torch.autograd.grad(loss, [leaves[k] for k in trained], create_graph=True)
    value = sum((g * g).sum() for g in grads)
    out = torch.autograd.grad(
        value, list(leaves.values()), allow_unused=True, materialize_grads=True
    )
    return dict(zip(leaves, out, strict=True))


# -- theory (dissertation §4.5, notes 001b §5) ------------------------------------------------


def _quadratic(seed: int = 0):
    g = seeded(seed)
    q = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=F64))[0]
    eigenvalues = torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=F64)
    matrix = q @ torch.diag(eigenvalues) @ q.T
    return Quadratic(matrix, torch.randn(4, generator=g, dtype=F64)), matrix, q, eigenvalues


def test_quadratic_teleport_reaches_the_top_eigenvector_and_one_step_lands_on_the_minimum():
    f, matrix, q, eigenvalues = _quadratic()
    level = float(f(None).detach())
    result = teleport(f, value_loss, (None, None), steps=200, lr=0.05, line_search=True)
    w = f.w.detach()
    top = float(eigenvalues[-1])
    assert abs(float(w @ q[:, -1])) / float(w.norm()) == pytest.approx(1.0, abs=1e-12)
    assert result.objective_after == pytest.approx(4 * level * top, rel=1e-12)  # max ‖∇L‖² = 4cλ
    assert float(f(None).detach()) == pytest.approx(level, rel=1e-12)
    # Newton connection: ∇L is a Hessian eigenvector, and parallel to H⁻¹∇L
    assert gradient_hessian_cosine(f, value_loss, (None, None)) == pytest.approx(1.0, abs=1e-12)
    assert newton_cosine(f, value_loss, (None, None)) == pytest.approx(1.0, abs=1e-12)
    # one GD step with lr 1/(2λ_max) lands on the minimum w* = 0 (notes 001b §5.9)
    landed = w - (1.0 / (2 * top)) * (2 * matrix @ w)
    assert float(landed.norm()) <= 1e-7 * float(w.norm())


@pytest.mark.parametrize("landscape", [Rosenbrock, Booth])
def test_converged_teleport_makes_the_gradient_a_hessian_eigenvector(landscape):
    """SO(2) is transitive on these level sets locally, so a converged teleport is a critical
    point of ‖∇L‖² on the level set (Lemma 4.5.10)."""
    start = [-1.0, -1.0] if landscape is Rosenbrock else [5.0, -5.0]
    f = landscape(torch.tensor(start, dtype=F64))
    assert abs(gradient_hessian_cosine(f, value_loss, (None, None))) < 0.999
    result = teleport(f, value_loss, (None, None), steps=300, lr=1e-4, line_search=True)
    assert result.gain > 1
    assert abs(gradient_hessian_cosine(f, value_loss, (None, None))) == pytest.approx(1.0, abs=1e-6)


def test_lie_bracket_identity():
    """[A, R]L = −A f for A = M∇L, M antisymmetric (Eq. 4.52), on three landscapes/models."""
    g = seeded(2)
    mlp = ps.mlp([2, 3, 1], "tanh", dtype=F64)
    randomize_(mlp, g)
    cases = [
        (Rosenbrock(torch.tensor([-1.0, 0.5], dtype=F64)), value_loss, (None, None)),
        (_quadratic()[0], value_loss, (None, None)),
        (mlp, lambda out, y: ((out - y) ** 2).mean(), random_batch(5, 2, 1)),
    ]
    for model, loss_fn, batch in cases:
        size = ps.flatten(ps.params_of(model)).numel()
        m = torch.randn(size, size, generator=g, dtype=F64)
        lhs, rhs = lie_bracket_identity(model, loss_fn, batch, m - m.T)
        assert lhs == pytest.approx(rhs, rel=1e-10)
        assert abs(lhs) > 0


def test_covector_transport_is_the_gradient_at_the_new_point():
    """Prop 4.5.1: ∇L(g·θ) = J⁻ᵀ ∇L(θ); transporting ∇L(θ) gives the gradient after teleport."""
    cases = [
        (random_mlp("leaky_relu"), nn.MSELoss(), random_batch(8), None),
        (random_mlp("identity"), nn.MSELoss(), random_batch(8), None),
        (Rosenbrock(torch.tensor([-1.0, -1.0], dtype=F64)), value_loss, (None, None), None),
    ]
    for model, loss_fn, batch, symmetries in cases:
        leaves = {k: v.requires_grad_() for k, v in ps.params_of(model).items()}
        loss = loss_fn(ps.functional_call(model, leaves, batch[0]), batch[1])
        gradient = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))
        result = teleport(
            model,
            loss_fn,
            batch,
            symmetries,
            steps=3,
            lr=1e-3,
            max_step_norm=0.05,
            covectors=[gradient],
        )
        assert result.steps == 3
        assert sum(float((g**2).sum()) for g in gradient.values()) > 0  # a nonzero covector
        leaves = {k: v.requires_grad_() for k, v in ps.params_of(model).items()}
        loss = loss_fn(ps.functional_call(model, leaves, batch[0]), batch[1])
        after = torch.autograd.grad(loss, list(leaves.values()))
        for (name, moved), expected in zip(result.covectors[0].items(), after, strict=True):
            assert torch.allclose(moved, expected, rtol=1e-9, atol=1e-12), name


# -- objectives --------------------------------------------------------------------------------


def test_loss_alignment_rises_in_the_ratio_of_the_gradient_norm():
    """Prop 5.1: f = ∂L/∂F is invariant on the orbit, so A ∝ ‖∇L‖² along it."""
    model, loss_fn, batch = random_mlp("relu"), nn.CrossEntropyLoss(), random_batch(8, classes=True)
    before = ps.loss_alignment(model, loss_fn, batch)
    result = teleport(
        model, loss_fn, batch, objective="loss_alignment", steps=5, lr=0.05, max_step_norm=0.2
    )
    after = ps.loss_alignment(model, loss_fn, batch)
    assert result.objective_before == pytest.approx(before, rel=1e-12)
    assert after / before == pytest.approx(
        (result.grad_norm_after / result.grad_norm_before) ** 2, rel=1e-9
    )
    assert after > before


@pytest.mark.parametrize(
    "make",
    [
        lambda p: torch.optim.Adagrad(p, lr=0.1),
        lambda p: torch.optim.RMSprop(p, lr=0.01),
        lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.0, 0.999)),  # no momentum: m = g
    ],
)
def test_preconditioned_objective_is_the_optimizers_own_rate(make):
    """‖∇L‖²_A with A from the optimizer's state is lr⁻¹ times the first-order loss decrease
    of that optimizer's step (Eq. 5.7, with the optimizer's own ε and bias correction)."""
    model, loss_fn, (x, y) = random_mlp("leaky_relu"), nn.MSELoss(), random_batch(8)
    optimizer = make(model.parameters())
    for _ in range(3):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    gradient = {k: p.grad.clone() for k, p in model.named_parameters()}
    saved = {k: v.clone() for k, v in ps.params_of(model).items()}
    optimizer.step()
    objective = PreconditionedGradNorm.from_optimizer(optimizer, model)  # what this step used
    lr = optimizer.param_groups[0]["lr"]
    rate = sum(
        float(((saved[k] - p.detach()) / lr * gradient[k]).sum())
        for k, p in model.named_parameters()
    )
    expected = sum(float((g * objective.preconditioner[k] * g).sum()) for k, g in gradient.items())
    assert rate == pytest.approx(expected, rel=1e-9)
    value = teleport(model, loss_fn, (x, y), objective=objective, steps=0).objective_before
    leaves = {k: v.requires_grad_() for k, v in ps.params_of(model).items()}
    now = torch.autograd.grad(
        loss_fn(ps.functional_call(model, leaves, x), y), list(leaves.values())
    )
    direct = sum(
        float((g * objective.preconditioner[k] * g).sum()) for k, g in zip(leaves, now, strict=True)
    )
    assert value == pytest.approx(direct, rel=1e-12)


def test_function_objective_and_descent():
    model, loss_fn, batch = random_mlp("leaky_relu"), nn.MSELoss(), random_batch(8)

    def squared_gradient(model, params, loss_fn, batch, optimizer):
        loss = loss_fn(ps.functional_call(model, params, batch[0]), batch[1])
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
        return sum((g * g).sum() for g in grads)

    reference = teleport(random_mlp("leaky_relu"), loss_fn, batch, steps=3, lr=0.05)
    result = teleport(model, loss_fn, batch, objective=squared_gradient, steps=3, lr=0.05)
    assert result.objective_after == pytest.approx(reference.objective_after, rel=1e-10)
    down = FunctionObjective(squared_gradient, maximize=False)
    lowered = teleport(
        random_mlp("leaky_relu"), loss_fn, batch, objective=down, steps=3, lr=0.05, line_search=True
    )
    assert lowered.objective_after < lowered.objective_before


# -- options -----------------------------------------------------------------------------------


def test_first_order_parameterization_agrees_to_first_order_and_keeps_the_loss():
    model, loss_fn, batch = random_mlp("identity"), nn.MSELoss(), random_batch(8)
    options = {"steps": 1, "lr": 1e-7, "max_step_norm": None}
    exp = teleport(random_mlp("identity"), loss_fn, batch, **options)
    first = teleport(model, loss_fn, batch, **options, parameterization="first_order")
    assert first.loss_after == pytest.approx(first.loss_before, rel=1e-12)
    gain_exp, gain_first = (
        exp.objective_after - exp.objective_before,
        first.objective_after - first.objective_before,
    )
    assert gain_first == pytest.approx(gain_exp, rel=1e-3)
    rotation = Rosenbrock(torch.tensor([-1.0, -1.0], dtype=F64))
    with pytest.raises(ps.InvalidArgumentError, match="first_order"):
        teleport(rotation, value_loss, (None, None), parameterization="first_order")


def test_caps_bounds_and_drift_policy():
    loss_fn, batch = nn.MSELoss(), random_batch(8)
    two = teleport(random_mlp("leaky_relu"), loss_fn, batch, steps=2, lr=0.01)
    capped = teleport(
        random_mlp("leaky_relu"),
        loss_fn,
        batch,
        steps=10,
        lr=0.01,
        max_objective=two.objective_after,
    )
    assert capped.stopped == "max_objective"
    assert capped.steps == 2
    bounded = teleport(
        random_mlp("leaky_relu"), loss_fn, batch, steps=5, lr=0.5, max_step_norm=1e-3
    )
    assert all(step.step_norm <= 1e-3 * (1 + 1e-12) for step in bounded.history)
    # an approximate action (more samples than the hidden width) is refused by default and
    # leaves the model where it was; allowed, it warns and the loss guard stops it; with
    # on_drift='warn' the drifting steps are kept and reported
    model = random_mlp("leaky_relu")
    wide_batch = random_batch(12)
    pinv = [s for s in ps.symmetries(model, data_dependent=True) if s.name.startswith("pinv_GL")]
    before = ps.params_of(model)
    with pytest.raises(ps.InvalidArgumentError, match=r"not exact on this batch \(12 samples"):
        teleport(model, loss_fn, wide_batch, pinv, steps=3, lr=0.01)
    for k, v in ps.params_of(model).items():
        assert torch.equal(v, before[k])
    with (
        pytest.warns(ps.ApproximateActionWarning, match="not exact on this batch"),
        pytest.warns(TeleportDriftWarning, match="broke the loss guard"),
    ):
        guarded = teleport(
            model, loss_fn, wide_batch, pinv, steps=50, lr=0.01, allow_approximate=True
        )
    assert guarded.stopped == "drift"
    assert guarded.max_loss_drift <= 1e-4 * guarded.loss_before
    with (
        pytest.warns(ps.ApproximateActionWarning),
        pytest.warns(TeleportDriftWarning, match="was kept"),
    ):
        kept = teleport(
            model,
            loss_fn,
            wide_batch,
            pinv,
            steps=50,
            lr=0.01,
            on_drift="warn",
            allow_approximate=True,
        )
    assert kept.max_loss_drift > 1e-4 * kept.loss_before


def test_result_serialises_to_json():
    result = teleport(random_mlp("leaky_relu"), nn.MSELoss(), random_batch(8), steps=2, lr=0.1)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["steps"] == 2
    assert len(data["history"]) == 2
    assert set(data) >= {
        "loss_before",
        "objective_after",
        "grad_norm_before",
        "stopped",
        "symmetries",
    }


# -- bad input ---------------------------------------------------------------------------------


def test_bad_input_is_refused_and_leaves_the_model_untouched():
    model, loss_fn, batch = random_mlp("leaky_relu"), nn.MSELoss(), random_batch(8)
    before = ps.params_of(model)
    discrete = [s for s in ps.symmetries(model) if s.dim == 0]
    with pytest.raises(ps.InvalidArgumentError, match="no continuous symmetry"):
        teleport(model, loss_fn, batch, discrete)
    with pytest.raises(ps.NonFiniteError, match="not finite"):
        teleport(model, loss_fn, batch, objective=lambda *a: torch.tensor(math.nan, dtype=F64))
    with pytest.raises(ps.InvalidArgumentError, match="unknown objective"):
        teleport(model, loss_fn, batch, objective="sharpest")
    with pytest.raises(ps.InvalidArgumentError, match="optimizer"):
        teleport(model, loss_fn, batch, objective="preconditioned_grad_norm")
    with pytest.raises(ps.InvalidArgumentError, match="batch must be"):
        teleport(model, loss_fn, batch[0])
    with pytest.raises(ps.InvalidArgumentError, match="lr"):
        teleport(model, loss_fn, batch, lr=-1.0)
    with pytest.raises(ps.InvalidArgumentError, match="scalar"):
        teleport(model, lambda out, y: (out - y) ** 2, batch)
    dropout = nn.Sequential(
        nn.Linear(4, 6, dtype=F64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(6, 3, dtype=F64)
    )
    with pytest.raises(ps.InvalidArgumentError, match=r"model\.eval"):
        teleport(dropout, loss_fn, batch)
    other = [s for s in ps.symmetries(random_mlp("leaky_relu", widths=(4, 5, 3))) if s.dim > 0]
    with pytest.raises(ps.ShapeError, match="has shape"):
        teleport(model, loss_fn, batch, other)
    tanh = random_mlp("tanh")
    with pytest.raises(ps.InvalidArgumentError, match="found no continuous symmetry"):
        teleport(tanh, nn.MSELoss(), batch)
    for k, v in ps.params_of(model).items():
        assert torch.equal(v, before[k])


# -- the generalized symmetry (seed 000 App. C, E) ---------------------------------------------


def test_generalized_scaling_is_a_function_symmetry_and_fit_matches_autograd():
    net = ps.mlp([4, 6, 3], "relu", bias=False, dtype=F64)
    randomize_(net, seeded(7))
    scaled = ScaledModel(net)
    x, y = random_batch(8)
    assert torch.allclose(scaled(x), net(x), rtol=0, atol=0)
    (symmetry,) = ps.symmetries(scaled)
    s = symmetry.sample(scale=0.3, generator=seeded(8), dtype=F64)
    moved = symmetry.act(ps.params_of(scaled), s)
    assert torch.allclose(ps.functional_call(scaled, moved, x), scaled(x), rtol=1e-12)
    outputs = scaled(x).detach()

    fit = fit_scales(
        scaled, nn.MSELoss(), (x, y), steps=40, lr=0.01, penalty=0.1, bounds=(0.5, 1.02)
    )
    assert torch.allclose(scaled(x), outputs, rtol=1e-12, atol=1e-14)  # F̃ unchanged
    assert fit.scale_min >= 0.5
    assert fit.scale_max <= 1.02
    assert fit.objective_after > fit.objective_before
    # the closed form ‖c ⊙ g‖ equals ‖∇_θ' L̃‖ by autograd through the wrapped model
    leaves = {k: v.requires_grad_() for k, v in ps.params_of(scaled).items()}
    loss = nn.MSELoss()(ps.functional_call(scaled, leaves, x), y)
    trained = [k for k in leaves if k.startswith("base.")]
    grads = torch.autograd.grad(loss, [leaves[k] for k in trained])
    assert math.sqrt(sum(float((g**2).sum()) for g in grads)) == pytest.approx(
        fit.grad_norm_after, rel=1e-12
    )
    # the optimizer trains θ' only; SGD on θ' is SGD on θ = c ⊙ θ' with per-entry lr η c²
    optimizer = torch.optim.SGD(scaled.parameters(), lr=0.1)
    theta = scaled.effective_params()
    gradient = torch.autograd.grad(
        nn.MSELoss()(
            ps.functional_call(net, {k: v.requires_grad_() for k, v in theta.items()}, x), y
        ),
        list(theta.values()),
    )
    optimizer.zero_grad()
    nn.MSELoss()(scaled(x), y).backward()
    optimizer.step()
    for (name, value), g in zip(theta.items(), gradient, strict=True):
        c = scaled.scales[name.replace(".", "__")]
        assert torch.allclose(scaled.effective_params()[name], value - 0.1 * c**2 * g, rtol=1e-12)


# -- the level-set baseline -------------------------------------------------------------------


def test_level_set_teleport_keeps_the_level_and_finds_the_top_eigenvector():
    """Without any symmetry, the level-set method solves the same problem on a quadratic:
    max ‖∇L‖² on {wᵀAw = c} is 4cλ_max at the top eigenvector."""
    f, _, q, eigenvalues = _quadratic(3)
    level = float(f(None).detach())
    result = level_set_teleport(
        f, value_loss, (None, None), steps=200, constraint_tol=1e-8, kkt_tol=1e-8
    )
    assert result.stopped in ("kkt", "line_search")  # converged to what float64 resolves
    assert result.kkt_residual < 1e-5
    assert abs(float(f(None).detach()) - level) <= 1e-8 * level
    w = f.w.detach()
    assert abs(float(w @ q[:, -1])) / float(w.norm()) == pytest.approx(1.0, abs=1e-8)
    assert result.grad_norm_after**2 == pytest.approx(4 * level * float(eigenvalues[-1]), rel=1e-8)
    model, loss_fn, batch = random_mlp("leaky_relu"), nn.MSELoss(), random_batch(8)
    mlp = level_set_teleport(model, loss_fn, batch, steps=10)
    assert mlp.grad_norm_after > mlp.grad_norm_before
    assert abs(mlp.loss_after - mlp.loss_before) <= 1e-4 * mlp.loss_before


# -- schedules and the Teleporter ---------------------------------------------------------------


def test_schedule():
    assert [k for k in range(10) if Schedule.every(3, start=1, stop=8).due(k)] == [1, 4, 7]
    assert [k for k in range(5) if Schedule.at([0, 3]).due(k)] == [0, 3]
    assert [k for k in range(12) if Schedule.first_epoch(5, every=2).due(k)] == [0, 2, 4]
    assert not any(Schedule.never().due(k) for k in range(10))
    with pytest.raises(ps.InvalidArgumentError):
        Schedule.every(0)


def _train(policy, optimizer_cls=torch.optim.SGD, steps=8, **optimizer_kwargs):
    model = random_mlp("leaky_relu")
    x, y = random_batch(32)
    batches = [(x[i : i + 8], y[i : i + 8]) for i in range(0, 32, 8)]
    optimizer = optimizer_cls(model.parameters(), **optimizer_kwargs)
    tele = Teleporter(
        model,
        nn.MSELoss(),
        optimizer,
        schedule=Schedule.at([3, 6]),
        data=batches,
        batches_per_teleport=2,
        state_policy=policy,
        config=TeleportConfig(steps=3, lr=1e-3, max_step_norm=0.1),
    )
    snapshots = {}
    for step in range(steps):
        xb, yb = batches[step % 4]
        before = {
            k: {n: v.clone() for n, v in s.items() if torch.is_tensor(v)}
            for k, s in optimizer.state.items()
        }
        tele.zero_grad()
        if step in (3, 6):
            after = {
                k: {n: v.clone() for n, v in s.items() if torch.is_tensor(v)}
                for k, s in optimizer.state.items()
            }
            snapshots[step] = (before, after)
        nn.MSELoss()(model(xb), yb).backward()
        tele.step()
    return model, optimizer, tele, snapshots


def test_teleporter_follows_the_schedule_and_draws_batches_in_turn():
    _, _, tele, _ = _train("keep", lr=0.05)
    assert [e.step for e in tele.history] == [3, 6]
    assert all(len(e.results) == 2 for e in tele.history)
    assert tele.step_count == 8
    assert tele.maybe_teleport(6) is None  # already teleported at step 6
    event = tele.teleport_now(99)
    assert event.step == 99
    assert tele.history[-1] is event
    assert len(tele.history) == 3


def test_state_policies():
    _, _, _, snapshots = _train("keep", lr=0.05, momentum=0.9)
    before, after = snapshots[3]
    for p, buffers in before.items():
        assert torch.equal(buffers["momentum_buffer"], after[p]["momentum_buffer"])

    _, _, _, snapshots = _train("reset", torch.optim.Adam, lr=0.01)
    before, after = snapshots[3]
    assert before  # the teleport emptied the state (as re-creating Adam does)
    assert not after

    # transform: momentum moves as a covector, J⁻ᵀm; second moments are kept
    _, _, _, snapshots = _train("transform", torch.optim.Adam, lr=0.01)
    before, after = snapshots[3]
    moved_any = False
    for p, buffers in before.items():
        assert torch.equal(buffers["exp_avg_sq"], after[p]["exp_avg_sq"])
        moved_any |= not torch.equal(buffers["exp_avg"], after[p]["exp_avg"])
    assert moved_any


def test_transform_policy_transports_like_the_engine():
    """The Teleporter's transform equals teleport(covectors=[buffer]) on the same batch."""
    model = random_mlp("leaky_relu")
    x, y = random_batch(8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(2):
        optimizer.zero_grad()
        nn.MSELoss()(model(x), y).backward()
        optimizer.step()
    buffers = {
        n: optimizer.state[p]["momentum_buffer"].clone() for n, p in model.named_parameters()
    }
    twin = random_mlp("leaky_relu")
    twin.load_state_dict(model.state_dict())
    config = TeleportConfig(steps=3, lr=1e-3, max_step_norm=0.1)
    expected = teleport(twin, nn.MSELoss(), (x, y), covectors=[buffers], **config.options())
    tele = Teleporter(
        model,
        nn.MSELoss(),
        optimizer,
        schedule=Schedule.at([0]),
        data=lambda: (x, y),
        state_policy="transform",
        config=config,
    )
    tele.maybe_teleport(0)
    for n, p in model.named_parameters():
        assert torch.allclose(
            optimizer.state[p]["momentum_buffer"], expected.covectors[0][n], rtol=1e-12
        )


def test_teleporter_bad_input():
    model = random_mlp("leaky_relu")
    with pytest.raises(ps.InvalidArgumentError, match="state_policy"):
        Teleporter(
            model, nn.MSELoss(), None, schedule=Schedule.never(), data=[], state_policy="move"
        )
    with pytest.raises(ps.InvalidArgumentError, match="needs the optimizer"):
        Teleporter(
            model, nn.MSELoss(), None, schedule=Schedule.never(), data=[], state_policy="reset"
        )
    tele = Teleporter(model, nn.MSELoss(), None, schedule=Schedule.at([0]), data=[])
    with pytest.raises(ps.InvalidArgumentError, match="no batches"):
        tele.maybe_teleport()

    class Custom(torch.optim.SGD):
        def step(self, closure=None):
            out = super().step(closure)
            for p in self.state:
                self.state[p]["trace"] = torch.zeros_like(p)
            return out

    optimizer = Custom(model.parameters(), lr=0.1, momentum=0.9)
    x, y = random_batch(8)
    optimizer.zero_grad()
    nn.MSELoss()(model(x), y).backward()
    optimizer.step()
    tele = Teleporter(
        model,
        nn.MSELoss(),
        optimizer,
        schedule=Schedule.at([1]),
        data=[(x, y)],
        state_policy="transform",
    )
    with pytest.raises(ps.InvalidArgumentError, match="'trace'"):
        tele.maybe_teleport(1)


def _max_element_error(a, b) -> float:
    if isinstance(a, tuple):
        return max(_max_element_error(p, q) for p, q in zip(a, b, strict=True))
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


@pytest.mark.parametrize("family", sorted(CASES))
def test_first_order_elements_match_the_derivative_of_exp(family):
    """Every family's closed-form I + ξ (parameterization="first_order") equals the
    identity plus the jvp of its exponential map."""
    for s in _symmetries(CASES[family]()):
        xi = 0.1 * torch.randn(s.dim, generator=seeded(11), dtype=F64)
        assert _max_element_error(s.linear_element(xi), ps.Symmetry.linear_element(s, xi)) <= 1e-14


def test_a_teleport_that_ends_worse_is_undone_unless_keep_worse():
    """With fewer samples than hidden units, the pseudo-inverse action's first move (the
    re-base, U ↦ U P onto the span of σ(H)) lowers ‖∇L‖² here, and one tiny step cannot regain
    it: by default the model stays at the start (stopped="no_improvement"); keep_worse=True
    keeps the end point, as the paper's Algorithm 1 does."""
    model = ps.mlp([4, 16, 3], "leaky_relu", seed=0, dtype=F64)
    g = seeded(0)
    batch = (torch.randn(5, 4, generator=g, dtype=F64), torch.randn(5, 3, generator=g, dtype=F64))
    symmetries = [
        s for s in ps.symmetries(model, data_dependent=True) if s.name.startswith("pinv_GL")
    ]
    before = {k: v.clone() for k, v in ps.params_of(model).items()}
    undone = teleport(model, nn.MSELoss(), batch, symmetries, steps=1, lr=1e-8)
    assert undone.stopped == "no_improvement"
    assert undone.objective_after == undone.objective_before
    assert all(torch.equal(p, before[k]) for k, p in ps.params_of(model).items())
    kept = teleport(model, nn.MSELoss(), batch, symmetries, steps=1, lr=1e-8, keep_worse=True)
    assert kept.objective_after < 0.9 * kept.objective_before
    assert abs(kept.loss_after - kept.loss_before) <= 1e-10 * kept.loss_before
    assert not all(torch.equal(p, before[k]) for k, p in ps.params_of(model).items())
