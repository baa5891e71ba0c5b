"""Factor estimation and the SymO optimizer (seed 002 §3.4, Apps. K–M) in float64, against
dense oracles that never use the Kronecker form:

* the single-gradient factors (Eqs. 37–39, corrected) are the exact group average of g gᵀ;
* a SymO run equals θ ← θ − α_t Σ̂^{−1/2} g with Σ̂ the EMA of numerically projected g gᵀ and
  Σ̂^{−1/2} from ``torch.linalg.eigh`` of the dense P × P matrix — for deep, biased, ReLU, tanh
  and linear nets, with damping, flooring, centring, lr decay;
* the first step of a 2-layer odd net is √d_1 · polar([G_1ᵀ; G_2]) (notes 002 §2.7);
* SymO commutes with the group (a step on G·θ is G times the step);
* state dicts round-trip through ``torch.load(weights_only=True)``; closures, mini-batches,
  ``inverse_every``, the Teleporter, and bad input;
* the baselines (K-FAC, Shampoo) against their formulas with explicit inverses / SciPy powers.
"""

from __future__ import annotations

import copy
import io
import math
from typing import Any

import pytest
import scipy.linalg
import torch
from torch import nn

import paramsym as ps
from helpers import randomize_, relative_error
from paramsym.symo import (
    TABLE2,
    CurvatureStructure,
    Factors,
    FactorTracker,
    SimpleKFAC,
    SimpleShampoo,
    SymO,
    act,
    correlation,
    dense_action,
    gradient_mean,
    gradient_second_moment,
    group_elements,
    make_optimizer,
    numerical_commutant,
    random_element,
    reynolds_projection,
)
from paramsym.teleportation import Schedule, Teleporter

F64 = torch.float64
TOL = 1e-10


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _net(activation: str, widths, bias: bool, seed: int = 0, n: int = 9):
    model = ps.mlp(list(widths), activation, bias=bias, dtype=F64)
    randomize_(model, _gen(seed), std=0.6)
    x = torch.randn(n, widths[0], generator=_gen(seed + 1), dtype=F64)
    y = torch.randn(n, widths[-1], generator=_gen(seed + 2), dtype=F64)
    return model, (x, y)


def _flat_grad(model: nn.Module, batch, params=None) -> torch.Tensor:
    params = ps.params_of(model) if params is None else params

    def loss(p):
        return nn.functional.mse_loss(ps.functional_call(model, p, batch[0]), batch[1])

    return ps.flatten(torch.func.grad(loss)(params))


def _backward(model: nn.Module, batch) -> torch.Tensor:
    loss = nn.functional.mse_loss(model(batch[0]), batch[1])
    loss.backward()
    return loss


# -- estimation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("activation", "widths", "bias"),
    [("tanh", (2, 3, 2), True), ("relu", (2, 3, 2, 2), True), ("tanh", (3, 2, 2), False)],
)
def test_single_gradient_factors_are_the_exact_group_average(activation, widths, bias):
    """grad2par(g) = (1/|G|) Σ_G G g gᵀ Gᵀ = least-squares fit (Eqs. 37–39, 186–188)."""
    model, batch = _net(activation, widths, bias)
    s = CurvatureStructure.from_model(model)
    g = _flat_grad(model, batch)
    total, count = torch.zeros(len(g), len(g), dtype=F64), 0
    vector = torch.zeros_like(g)
    for element in group_elements(s):
        gg = dense_action(s, element) @ g
        total += torch.outer(gg, gg)
        vector += gg
        count += 1
    estimate = gradient_second_moment(s, s.unflatten(g))
    assert relative_error(estimate.to_dense(), total / count) < TOL
    mean = s.flatten(s.invariant_vector(gradient_mean(s, s.unflatten(g))))
    assert relative_error(mean, vector / count) < TOL


def test_corrected_equations_37_to_39_and_rank():
    """Φ_1 = G_1ᵀG_1/d_1, Φ_2 = G_2G_2ᵀ/d_1 (not Eq. 193's G_2ᵀG_2), Ψ_1 = G_1ᵀG_2ᵀ/d_1 (not
    Eq. 194's G_1ᵀG_2); Λ̂ = V Vᵀ/d_1 has rank ≤ d_1 (notes 002 §2.5)."""
    d0, d1, d2 = 5, 3, 4
    model, batch = _net("tanh", (d0, d1, d2), False)
    _backward(model, batch)
    g1, g2 = model[0].weight.grad, model[2].weight.grad
    s = CurvatureStructure.from_model(model)
    f = gradient_second_moment(s, {"0.weight": g1, "2.weight": g2})
    assert relative_error(f.block("def1", "0.weight", "0.weight"), g1.T @ g1 / d1) < TOL
    assert relative_error(f.block("def1", "2.weight", "2.weight"), g2 @ g2.T / d1) < TOL
    assert relative_error(f.block("def1", "0.weight", "2.weight"), g1.T @ g2.T / d1) < TOL
    assert (g2.T @ g2).shape == (d1, d1)  # the printed Eq. 193 is not even d_2 × d_2
    assert int(torch.linalg.matrix_rank(f.blocks["def1"])) == d1 < d0 + d2


def test_factor_tracker_ema_bias_correction_and_ensembles():
    s = CurvatureStructure.from_widths([3, 4, 2], "permutation", bias=True)
    grads = [s.unflatten(torch.randn(s.num_params, generator=_gen(k), dtype=F64)) for k in range(3)]
    beta = 0.8
    tracker = FactorTracker(s, beta=beta, center=True)
    for g in grads:
        tracker.update(g)
    weights = [(1 - beta) * beta ** (2 - k) / (1 - beta**3) for k in range(3)]
    second = sum(
        (gradient_second_moment(s, g).to_dense() * w for g, w in zip(grads, weights, strict=True)),
        start=torch.zeros(s.num_params, s.num_params, dtype=F64),
    )
    means = [s.flatten(s.invariant_vector(gradient_mean(s, g))) for g in grads]
    mean = sum(
        (m * w for m, w in zip(means, weights, strict=True)), start=torch.zeros_like(means[0])
    )
    expected = second - torch.outer(mean, mean)  # Σ = E ggᵀ − μμᵀ with the invariant μ
    assert relative_error(tracker.factors().to_dense(), expected) < TOL
    assert float(tracker.factors().spectrum().min()) > -1e-12  # a weighted covariance: PSD

    restored = FactorTracker(s)
    restored.load_state_dict(tracker.state_dict())
    assert torch.equal(restored.factors().flat(), tracker.factors().flat())

    # K models at once (e.g. from vmap): the average of the K single-model estimates
    stacked = {k: torch.stack([g[k] for g in grads]) for k in grads[0]}
    ensemble = FactorTracker(s, beta=0.0)
    ensemble.update(stacked)
    average = torch.stack([gradient_second_moment(s, g).to_dense() for g in grads]).mean(0)
    assert relative_error(ensemble.factors().to_dense(), average) < TOL
    per_model = Factors.random(s, _gen(5)).matvec(stacked)
    for k, g in enumerate(grads):
        single = Factors.random(s, _gen(5)).matvec(g)
        assert relative_error(s.flatten(per_model)[k], s.flatten(single)) < TOL


def test_correlation():
    a = torch.randn(20, generator=_gen(0), dtype=F64)
    assert abs(correlation(a, 3 * a + 1) - 1) < 1e-12
    assert abs(correlation(a, -a) + 1) < 1e-12
    with pytest.raises(ps.InvalidArgumentError, match="constant"):
        correlation(a, torch.ones(20))


# -- SymO against the dense oracle -------------------------------------------------------------


def _dense_symo(
    model, batch, steps, *, lr, lr_decay, beta_h, power=-0.5, damping=0.0, floor=0.0, center=False
):
    """θ ← θ − α_t Σ̂^{power} g with Σ̂ from dense projections of g gᵀ (no Kronecker form)."""
    s = CurvatureStructure.from_model(model)
    basis = numerical_commutant(s)
    invariant = [e for e in group_elements(s)] if center else []
    theta = ps.flatten(ps.params_of(model)).clone()
    second = torch.zeros(len(theta), len(theta), dtype=F64)
    mean = torch.zeros_like(theta)
    for t in range(1, steps + 1):
        g = _flat_grad(model, batch, s.unflatten(theta))
        second = beta_h * second + (1 - beta_h) * reynolds_projection(basis, torch.outer(g, g))
        sigma = second / (1 - beta_h**t)
        if center:  # the invariant part of the running mean, by the exact group average
            orbit = sum(dense_action(s, e) @ g for e in invariant) / len(invariant)
            mean = beta_h * mean + (1 - beta_h) * orbit
            m = mean / (1 - beta_h**t)
            sigma = sigma - torch.outer(m, m)
        vals, vecs = torch.linalg.eigh(sigma)
        vals = (vals + damping).clamp_min(floor)
        keep = (vals > 1e-10 * vals.max()) & (vals > 0)  # pinv_rcond=1e-10
        powered = torch.where(keep, vals.clamp_min(1e-300) ** power, torch.zeros_like(vals))
        theta = theta - lr * lr_decay ** (t - 1) * (vecs * powered) @ vecs.T @ g
    return theta


SYMO_CASES: dict[str, tuple[str, tuple[int, ...], bool, dict[str, Any]]] = {
    "tanh-2-nobias": ("tanh", (4, 3, 3), False, {}),
    "tanh-3-bias": ("tanh", (3, 3, 3, 2), True, {}),
    "relu-3-bias": ("relu", (2, 3, 3, 2), True, {}),
    "relu-2-nobias": ("relu", (3, 4, 2), False, {"damping": 1e-3}),
    "linear-2-bias": ("identity", (2, 2, 2), True, {"floor": 1e-4}),
    "gelu-2-bias-center": ("gelu", (2, 3, 2), True, {"center": True}),
    "tanh-power-1": ("tanh", (3, 2, 2, 2), True, {"power": -1.0, "damping": 1e-2}),
}


@pytest.mark.parametrize("case", SYMO_CASES, ids=list(SYMO_CASES))
def test_symo_equals_dense_inverse_square_root(case):
    activation, widths, bias, options = SYMO_CASES[case]
    model, batch = _net(activation, widths, bias, seed=3)
    reference = copy.deepcopy(model)
    hyper = {"lr": 0.07, "lr_decay": 0.9, "beta_h": 0.8}
    opt = SymO(
        model,
        lr=hyper["lr"],
        lr_decay=hyper["lr_decay"],
        beta_h=hyper["beta_h"],
        power=options.get("power", -0.5),
        damping=options.get("damping", 0.0),
        eigenvalue_floor=options.get("floor", 0.0),
        pinv_rcond=1e-10,
        center=options.get("center", False),
    )
    for _ in range(4):
        opt.zero_grad()
        _backward(model, batch)
        opt.step()
    expected = _dense_symo(reference, batch, 4, **hyper, **options)
    assert relative_error(ps.flatten(ps.params_of(model)), expected) < 1e-9
    assert opt.steps_taken == 4
    assert math.isclose(opt.learning_rate(), 0.07 * 0.9**4)


@pytest.mark.parametrize(("d0", "d1", "d2"), [(5, 3, 4), (2, 6, 3)])
def test_first_step_is_the_scaled_polar_factor(d0, d1, d2):
    """β_h = 0 (or any β_h at the first step) with the pseudo-inverse: [ΔW_1ᵀ; ΔW_2] =
    √d_1 · U Wᵀ for V = [G_1ᵀ; G_2] = U S Wᵀ (notes 002 §2.7)."""
    model, batch = _net("tanh", (d0, d1, d2), False, seed=5)
    before = {k: v.clone() for k, v in ps.params_of(model).items()}
    opt = SymO(model, lr=1.0, beta_h=0.95)
    _backward(model, batch)
    v = torch.cat([model[0].weight.grad.T, model[2].weight.grad])
    opt.step()
    u, _, wt = torch.linalg.svd(v, full_matrices=False)
    step = torch.cat(
        [(before["0.weight"] - model[0].weight).T, before["2.weight"] - model[2].weight]
    )
    assert relative_error(step, math.sqrt(d1) * u @ wt) < 1e-10


@pytest.mark.parametrize(
    ("activation", "widths"),
    [("identity", (3, 4, 2)), ("tanh", (3, 4, 3, 2)), ("relu", (3, 4, 3, 2)), ("silu", (2, 3, 2))],
)
def test_symo_commutes_with_the_group(activation, widths):
    """A SymO run from G·θ is G applied to the run from θ (App. F, notes 002 §5.3)."""
    model, batch = _net(activation, widths, True, seed=7)
    s = CurvatureStructure.from_model(model)
    element = random_element(s, _gen(8))
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for name, value in act(s, ps.params_of(model), element).items():
            moved.get_parameter(name).copy_(value)
    optimizers = [SymO(m, lr=0.1, lr_decay=0.95, beta_h=0.9) for m in (model, moved)]
    for _ in range(3):
        for m, opt in zip((model, moved), optimizers, strict=True):
            opt.zero_grad()
            _backward(m, batch)
            opt.step()
    expected = act(s, ps.params_of(model), element)
    assert relative_error(ps.flatten(ps.params_of(moved)), ps.flatten(expected)) < 1e-10


# -- the optimizer's plumbing ------------------------------------------------------------------


def test_state_dict_round_trip_and_closure():
    model, batch = _net("relu", (3, 5, 4, 2), True, seed=9)
    twin = copy.deepcopy(model)
    opt = SymO(model, lr=0.05, lr_decay=0.97, beta_h=0.9, damping=1e-6, center=True)

    def closure(m=model, o=opt):
        o.zero_grad()
        return _backward(m, batch)

    for _ in range(2):
        opt.step(closure)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)  # plain tensors and numbers only
    assert all(isinstance(v, torch.Tensor) for v in saved["state"][0].values())
    twin.load_state_dict(model.state_dict())
    resumed = SymO(twin, lr=1.0)  # hyperparameters come back with the state
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["lr"] == 0.05
    assert resumed.steps_taken == 2
    for _ in range(2):
        loss = opt.step(closure)
        resumed.step(lambda: (resumed.zero_grad(), _backward(twin, batch))[1])
    assert isinstance(loss, torch.Tensor)
    assert torch.equal(ps.flatten(ps.params_of(model)), ps.flatten(ps.params_of(twin)))


def test_inverse_every_reuses_the_preconditioner():
    model, batch = _net("tanh", (3, 4, 2), True)
    opt = SymO(model, lr=0.01, inverse_every=2)
    roots, seconds = [], []
    for _ in range(3):
        opt.zero_grad()
        _backward(model, batch)
        opt.step()
        roots.append(opt.preconditioner().flat().clone())
        seconds.append(opt.curvature().flat().clone())
    assert torch.equal(roots[0], roots[1])
    assert not torch.equal(roots[1], roots[2])
    assert not torch.equal(seconds[0], seconds[1])


def test_minibatch_training_decreases_the_loss():
    teacher = ps.mlp([6, 8, 3], "tanh", bias=True, seed=1, dtype=F64)
    x = torch.randn(256, 6, generator=_gen(2), dtype=F64)
    with torch.no_grad():
        y = teacher(x)
    model = ps.mlp([6, 8, 3], "tanh", bias=True, seed=3, dtype=F64)
    opt = SymO(model, lr=0.02, lr_decay=0.995, beta_h=0.95, damping=1e-8)
    with torch.no_grad():
        initial = float(nn.functional.mse_loss(model(x), y))
    for epoch in range(4):
        for k in torch.randperm(256, generator=_gen(epoch)).split(32):
            opt.zero_grad()
            _backward(model, (x[k], y[k]))
            opt.step()
    with torch.no_grad():
        assert float(nn.functional.mse_loss(model(x), y)) < 0.2 * initial


def test_symo_with_the_teleporter():
    model, batch = _net("leaky_relu", (3, 4, 2), True, seed=11)
    opt = SymO(model, lr=0.01)
    tele = Teleporter(
        model, nn.MSELoss(), opt, schedule=Schedule.at([1]), data=[batch], state_policy="reset"
    )
    for _ in range(2):
        tele.zero_grad()
        _backward(model, batch)
        tele.step()
    assert len(tele.history) == 1
    assert opt.steps_taken == 1  # reset at step 1, then one step
    transform = Teleporter(
        model, nn.MSELoss(), opt, schedule=Schedule.at([2]), data=[batch], state_policy="transform"
    )
    transform.step_count = 2
    with pytest.raises(ps.InvalidArgumentError, match="'keep' or 'reset'"):
        transform.zero_grad()


def test_symo_bad_input():
    model, batch = _net("tanh", (3, 4, 2), True)
    with pytest.raises(ps.InvalidArgumentError, match="the model"):
        SymO(model.parameters())
    with pytest.raises(ps.UnsupportedModuleError, match="Conv1d"):
        SymO(nn.Sequential(nn.Linear(3, 4), nn.Conv1d(1, 1, 1), nn.Linear(4, 2)))
    bad_options: list[dict[str, Any]] = [
        {"lr": 0.0},
        {"lr_decay": 1.5},
        {"beta_h": 1.0},
        {"inverse_every": 0},
        {"damping": -1.0},
    ]
    for bad in bad_options:
        with pytest.raises(ps.InvalidArgumentError):
            SymO(model, **bad)
    opt = SymO(model)
    with pytest.raises(ps.InvalidArgumentError, match="no gradient"):
        opt.step()
    with pytest.raises(ps.InvalidArgumentError, match="add_param_group"):
        opt.add_param_group({"params": [torch.zeros(1, requires_grad=True)]})
    _backward(model, batch)
    model[0].weight.grad[0, 0] = float("nan")
    with pytest.raises(ps.NonFiniteError, match=r"0\.weight"):
        opt.step()
    with pytest.raises(ps.InvalidArgumentError, match="no step"):
        opt.curvature()


def test_zero_gradient_gives_no_update():
    model, _ = _net("relu", (3, 4, 2), True)
    before = ps.flatten(ps.params_of(model)).clone()
    opt = SymO(model)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    assert torch.equal(ps.flatten(ps.params_of(model)), before)


# -- baselines ---------------------------------------------------------------------------------


def test_simple_kfac_matches_its_formula():
    model, (x, y) = _net("tanh", (3, 4, 2), True, seed=13, n=11)
    reference = copy.deepcopy(model)
    lr, damping, momentum = 0.3, 0.05, 0.9
    opt = SimpleKFAC(model, lr=lr, damping=damping, momentum=momentum)
    factors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for step in range(2):
        opt.zero_grad()
        _backward(model, (x, y))
        opt.step()
        # the oracle: explicit pre-activations, autograd for their gradients, explicit inverses
        w1, b1, w2, b2 = (
            t.detach().clone().requires_grad_() for t in ps.params_of(reference).values()
        )
        h1 = x @ w1.T + b1
        out = torch.tanh(h1) @ w2.T + b2
        gh1, gout, gw1, gb1, gw2, gb2 = torch.autograd.grad(
            nn.functional.mse_loss(out, y), [h1, out, w1, b1, w2, b2]
        )
        inputs = [x, torch.tanh(h1).detach()]
        outputs = [gh1, gout]
        grads = [torch.cat([gw1, gb1[:, None]], 1), torch.cat([gw2, gb2[:, None]], 1)]
        new: list[torch.Tensor] = []
        for k in range(2):
            a = torch.cat([inputs[k], torch.ones(len(x), 1, dtype=F64)], 1)
            fa, fg = a.T @ a / len(x), outputs[k].T @ outputs[k] / len(x)
            if step:
                fa = momentum * factors[k][0] + (1 - momentum) * fa
                fg = momentum * factors[k][1] + (1 - momentum) * fg
            factors[k] = (fa, fg)
            eye_a, eye_g = torch.eye(len(fa), dtype=F64), torch.eye(len(fg), dtype=F64)
            update = (
                torch.linalg.inv(fg + damping * eye_g)
                @ grads[k]
                @ torch.linalg.inv(fa + damping * eye_a)
            )
            new += [update[:, :-1], update[:, -1]]
        with torch.no_grad():
            for p, u in zip(reference.parameters(), new, strict=True):
                p -= lr * u
    assert (
        relative_error(ps.flatten(ps.params_of(model)), ps.flatten(ps.params_of(reference))) < TOL
    )


def test_simple_shampoo_matches_its_formula():
    model, batch = _net("tanh", (3, 4, 2), True, seed=14)
    reference = copy.deepcopy(model)
    lr, eps = 0.1, 1e-3
    opt = SimpleShampoo(model.parameters(), lr=lr, epsilon=eps)

    def loss(p):
        return nn.functional.mse_loss(ps.functional_call(reference, p, batch[0]), batch[1])

    def power(matrix: torch.Tensor, exponent: float) -> torch.Tensor:
        return torch.as_tensor(scipy.linalg.fractional_matrix_power(matrix.numpy(), exponent).real)

    stats: dict[str, list[torch.Tensor]] = {}
    for _ in range(2):
        opt.zero_grad()
        _backward(model, batch)
        opt.step()
        grads = torch.func.grad(loss)(ps.params_of(reference))
        with torch.no_grad():
            for name, p in reference.named_parameters():
                g = grads[name]
                sides = stats.setdefault(name, [eps * torch.eye(n, dtype=F64) for n in g.shape])
                if g.ndim == 1:  # full-matrix AdaGrad for vectors
                    sides[0] += torch.outer(g, g)
                    p -= lr * power(sides[0], -0.5) @ g
                else:
                    sides[0] += g @ g.T
                    sides[1] += g.T @ g
                    p -= lr * power(sides[0], -0.25) @ g @ power(sides[1], -0.25)
    assert (
        relative_error(ps.flatten(ps.params_of(model)), ps.flatten(ps.params_of(reference))) < 1e-9
    )


def test_make_optimizer_builds_the_five_of_table_2():
    model = ps.mlp([5, 4, 3], "tanh", bias=False, seed=0)
    kinds = {
        name: type(make_optimizer(name, model, TABLE2["tanh"][name])).__name__
        for name in ("gd", "adam", "kfac", "shampoo", "symo")
    }
    assert kinds == {
        "gd": "SGD",
        "adam": "Adam",
        "kfac": "SimpleKFAC",
        "shampoo": "SimpleShampoo",
        "symo": "SymO",
    }
    assert TABLE2["tanh"]["kfac"] == {"lr": 0.006, "damping": 0.017, "momentum": 0.9}
    assert TABLE2["linear"]["symo"] == {"lr": 0.05, "lr_decay": 0.95, "beta_h": 0.95}
    with pytest.raises(ps.InvalidArgumentError, match="unknown optimizer"):
        make_optimizer("lbfgs", model, {"lr": 1.0})
    with pytest.raises(ps.InvalidArgumentError, match="bad hyperparameters"):
        make_optimizer("kfac", model, {"lr": 1.0})
    with pytest.raises(ps.UnsupportedModuleError, match=r"nn\.Linear"):
        SimpleKFAC(nn.Sequential(nn.Linear(2, 2), nn.PReLU()), lr=1.0, damping=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["identity", "tanh"])
def test_paper_figures_5_and_6_ordering(activation):
    """The teacher–student runs of Figs. 5–6 (100-70-40 without bias, 5000 points with input
    eigenvalues logspace(0, −5), Gaussian 1/√fan_in weights, loss ‖Ŷ − Y‖²/2N, Table 2, full
    batch, 100 iterations): SymO ends lowest in the linear case; with tanh SymO and Shampoo
    tie within a few percent (the ``symo-training`` experiment: SymO 0.00653, Shampoo 0.00640
    on data seed 0; SymO lower on seeds 1 and 2), both far below K-FAC, Adam and GD (notes
    002 §4.1: 0.0074, 0.0077, 0.0087, ...). Teacher and student layers are drawn from one
    generator each, so the layers are independent."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(F64)
    try:
        g = _gen(0)
        d0, d1, d2 = 100, 70, 40
        q, _ = torch.linalg.qr(torch.randn(d0, d0, generator=g))
        mix = q * torch.logspace(0, -5, d0).sqrt()

        def gaussian_mlp(seed: int) -> nn.Sequential:
            m = ps.mlp([d0, d1, d2], activation, bias=False)
            weights = _gen(seed)  # one generator for all layers: independent draws
            with torch.no_grad():
                for p in m.parameters():
                    p.copy_(torch.randn(p.shape, generator=weights) / p.shape[1] ** 0.5)
            return m

        teacher = gaussian_mlp(100)
        x_train = torch.randn(5000, d0, generator=g) @ mix.T
        x_test = torch.randn(5000, d0, generator=g) @ mix.T
        with torch.no_grad():
            y_train, y_test = teacher(x_train), teacher(x_test)

        def loss_fn(out, y):
            return ((out - y) ** 2).sum() / (2 * len(y))

        final = {}
        table = TABLE2["linear" if activation == "identity" else "tanh"]
        for name in ("gd", "adam", "kfac", "shampoo", "symo"):
            model = gaussian_mlp(1)
            opt = make_optimizer(name, model, table[name])
            for _ in range(100):
                opt.zero_grad()
                loss_fn(model(x_train), y_train).backward()
                opt.step()
            with torch.no_grad():
                final[name] = float(loss_fn(model(x_test), y_test))
    finally:
        torch.set_default_dtype(previous)
    assert final["adam"] < final["gd"]
    if activation == "identity":
        assert final["symo"] == min(final.values())
        assert final["symo"] < 0.1 * final["kfac"] < final["shampoo"]
    else:  # SymO and Shampoo tie within a few percent, either can be lower (data seed)
        assert final["symo"] <= 1.05 * min(final.values())
        assert final["symo"] < 0.6 * final["adam"]


def test_simple_kfac_factors_against_curvlinops():
    """A second, maintained reference (curvlinops, the benchmark peer): the input factor A is
    the same; the notebook's output factor G (gradients of the *mean* loss) is curvlinops'
    empirical-Fisher factor divided by d_out · N² (MSELoss averages over N·d_out entries)."""
    curvlinops = pytest.importorskip("curvlinops")
    n, d_out = 11, 3
    model, batch = _net("tanh", (3, 4, d_out), True, seed=15, n=n)
    reference = curvlinops.KFACLinearOperator(
        model,
        nn.MSELoss(),
        list(model.parameters()),
        [batch],
        fisher_type="empirical",
        separate_weight_and_bias=False,
        check_deterministic=False,
    )
    reference.compute_kronecker_factors()
    factors = reference.state_dict()
    opt = SimpleKFAC(model, lr=0.1, damping=0.1)
    _backward(model, batch)
    opt.step()
    for layer, name in zip(opt.layers, ("0", "2"), strict=True):
        state = opt.state[layer.weight]
        assert relative_error(state["A"], factors["input_covariances"][name]) < TOL
        expected = factors["gradient_covariances"][name] / (d_out * n**2)
        assert relative_error(state["G"], expected) < TOL
