"""Learned symmetry discovery (dissertation §6.5): the six loss terms of objective (6.3) against
closed forms on the p = 2 linear net with a hand-written linear action, the network's
hand-propagated JVPs against ``torch.func.jvp``, a short fit that recovers the rescaling
generator diag(1, −1) (Fig 6.3), its curve keeping the loss better than random generators'
curves (Fig 6.6), bad input, and state-dict round trips."""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from paramsym.discovery.learned import FitHistory, LearnedSymmetry, LearnedSymmetryConfig
from paramsym.discovery.learned_losses import (
    TERMS,
    associativity_term,
    field_orthogonality_term,
    flat_loss,
    gaussian_sampler,
    identity_term,
    infinitesimal_action,
    invariance_term,
    loss_derivatives,
    loss_terms,
    norm_term,
    orthogonality_term,
    sparsity_term,
    weighted_total,
)
from paramsym.errors import InvalidArgumentError, NonFiniteError, ShapeError
from paramsym.experiments.threads import torch_threads

F64 = torch.float64
RESCALING = torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=F64)


def linear_net_loss(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L(w1, w2, x, y) = (w2·w1·x − y)² per point: the p = 2 linear net of §6.5.3."""
    return (theta[1] * theta[0] * x - y) ** 2


def linear_action(g: torch.Tensor, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """a(g, θ) = gθ (data-independent)."""
    return (g @ theta.unsqueeze(-1)).squeeze(-1)


def samples(batch: int = 6, points: int = 4, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(batch, 2, generator=gen, dtype=F64)
    x = torch.randn(batch, points, generator=gen, dtype=F64)
    y = torch.randn(batch, points, generator=gen, dtype=F64)
    return theta, x, y


# -- the terms against closed forms ------------------------------------------------------------
def test_infinitesimal_action_of_a_linear_action_is_h_theta() -> None:
    theta, x, _ = samples()
    h = torch.stack([RESCALING, torch.eye(2, dtype=F64)])
    v = infinitesimal_action(linear_action, h, theta, x)
    assert v.shape == (2, 6, 2)
    torch.testing.assert_close(v, torch.einsum("kij,bj->kbi", h, theta))


def test_invariance_term_closed_forms() -> None:
    theta, x, y = samples()
    w1, w2 = theta[:, :1], theta[:, 1:]
    residual = w2 * w1 * x - y
    # h = diag(1, −1): v = (w1, −w2) ⟂ ∇ℓ = 2rx(w2, w1), so every point's derivative is 0
    v = infinitesimal_action(linear_action, RESCALING[None], theta, x)
    assert float(invariance_term(linear_net_loss, theta, x, y, v)) < 1e-14
    # h = I: v = θ, ∇ℓ·θ = 4 r x w1 w2 per point
    v = infinitesimal_action(linear_action, torch.eye(2, dtype=F64)[None], theta, x)
    expected = (4 * residual * x * w1 * w2).abs().mean()
    got = invariance_term(linear_net_loss, theta, x, y, v)
    torch.testing.assert_close(got, expected)
    assert float(got) > 0.1
    rates = loss_derivatives(linear_net_loss, theta, x, y, v)
    torch.testing.assert_close(rates[0], 4 * residual * x * w1 * w2)


def test_identity_and_associativity_vanish_for_a_linear_action() -> None:
    theta, x, _ = samples()
    h = torch.stack([RESCALING, torch.tensor([[0.3, 1.0], [-2.0, 0.5]], dtype=F64)])
    assert float(identity_term(linear_action, theta, x)) == 0.0
    assert float(associativity_term(linear_action, h, theta, x)) < 1e-14


def test_identity_and_associativity_closed_forms_for_non_actions() -> None:
    theta, x, _ = samples()
    shift = torch.tensor([0.3, -0.4], dtype=F64)

    def shifted(g, t, d):
        return linear_action(g, t, d) + shift

    torch.testing.assert_close(identity_term(shifted, theta, x), torch.tensor(0.5, dtype=F64))
    s = 0.7

    def curved(g, t, d):  # a(I, θ) = θ + sθ⊙θ: D_θa|_I(v) = v + 2sθ⊙v
        return linear_action(g, t, d) + s * t * t

    h = torch.stack([RESCALING, torch.tensor([[0.3, 1.0], [-2.0, 0.5]], dtype=F64)])
    v = torch.einsum("kij,bj->kbi", h, theta)
    # pairs (0, 1), (1, 0): the residual of pair (i, j) is 2sθ⊙v_i
    expected = torch.stack([(2 * s * theta * v[i]).norm(dim=-1) for i in (0, 1)]).mean()
    torch.testing.assert_close(associativity_term(curved, h, theta, x), expected)
    torch.testing.assert_close(
        associativity_term(curved, h, theta, x, pairs=[(1, 1)]),
        (2 * s * theta * v[1]).norm(dim=-1).mean(),
    )


def test_regularisers_closed_forms() -> None:
    theta, _, _ = samples()
    h = torch.stack(
        [
            RESCALING,
            torch.tensor([[0.0, 2.0], [0.0, 0.0]], dtype=F64),
            torch.diag(torch.tensor([3.0, 0.0], dtype=F64)),
        ]
    )
    v = torch.einsum("kij,bj->kbi", h, theta)
    torch.testing.assert_close(norm_term(v, 0.5), (0.5 - v.norm(dim=-1)).abs().mean())
    # |cos|: (diag(1,−1), E12) = 0, (diag(1,−1), diag(3,0)) = 1/√2, (E12, diag(3,0)) = 0
    torch.testing.assert_close(orthogonality_term(h), torch.tensor(1 / math.sqrt(2), dtype=F64))
    # the absolute cosine: anti-parallel generators are penalised like parallel ones (notes §9.5)
    torch.testing.assert_close(
        orthogonality_term(torch.stack([RESCALING, -2 * RESCALING])), torch.tensor(1.0, dtype=F64)
    )
    assert float(orthogonality_term(RESCALING[None])) == 0.0
    torch.testing.assert_close(sparsity_term(h), torch.tensor(7.0, dtype=F64))
    # on the fields: sample 0 has |cos| = 1/√2 (anti-parallel components count), sample 1 has 0
    fields = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[-1.0, 1.0], [0.0, 3.0]]], dtype=F64)
    expected = torch.tensor(1 / (2 * math.sqrt(2)), dtype=F64)
    torch.testing.assert_close(field_orthogonality_term(fields), expected)
    assert float(field_orthogonality_term(fields[:1])) == 0.0
    with pytest.raises(ShapeError, match="velocities"):
        field_orthogonality_term(fields[0])


def test_loss_terms_and_weighted_total_for_the_rescaling_generator() -> None:
    theta, x, y = samples()
    terms = loss_terms(linear_action, RESCALING[None], linear_net_loss, theta, x, y, beta=1.0)
    assert tuple(terms) == TERMS
    speed = theta.norm(dim=-1)  # ‖diag(1, −1)θ‖ = ‖θ‖
    expected = {
        "invariance": 0.0,
        "identity": 0.0,
        "associativity": 0.0,
        "norm": float((1 - speed).abs().mean()),
        "orthogonality": 0.0,
        "sparsity": 2.0,
    }
    for name, value in expected.items():
        assert float(terms[name]) == pytest.approx(value, abs=1e-14), name
    weights = (10.0, 1.0, 1.0, 1.0, 1.0, 0.1)
    total = weighted_total(terms, weights)
    assert float(total) == pytest.approx(expected["norm"] + 0.2, abs=1e-13)


# -- the network's fast JVPs against torch.func.jvp ---------------------------------------------
@pytest.mark.parametrize(
    ("action", "activation", "orthogonality"),
    [
        ("mlp", "silu", "generators"),
        ("residual", "tanh", "generators"),
        ("residual", "gelu", "generators"),
        ("residual", "silu", "fields"),
    ],
)
def test_fast_terms_match_the_reference(action: str, activation: str, orthogonality: str) -> None:
    cfg = LearnedSymmetryConfig(
        generators=3,
        action=action,
        activation=activation,
        hidden=(12, 7),
        init_scale=1.0,
        orthogonality=orthogonality,  # type: ignore[arg-type]
    )
    sym = LearnedSymmetry(linear_net_loss, 2, data_dim=4, config=cfg, dtype=F64)
    theta, x, y = samples()
    fast = sym.loss_terms(theta, x, y)
    ref = loss_terms(
        sym.act, sym.h, linear_net_loss, theta, x, y, beta=cfg.beta, orthogonality=orthogonality
    )
    for name in TERMS:
        torch.testing.assert_close(fast[name], ref[name], rtol=1e-10, atol=1e-12)
    assert float(fast["invariance"].detach()) > 0
    assert float(fast["identity"].detach()) > 0
    grads = torch.autograd.grad(sym.objective(fast), list(sym.parameters()))
    ref_grads = torch.autograd.grad(sym.objective(ref), list(sym.parameters()))
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    v = sym.infinitesimal_action(theta, x)
    torch.testing.assert_close(v, infinitesimal_action(sym.act, sym.h, theta, x))
    torch.testing.assert_close(sym.infinitesimal_action(theta[0], x[0])[:, :], v[:, 0])


def test_flat_loss_of_a_module_matches_the_hand_written_loss() -> None:
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False)).to(F64)
    loss = flat_loss(model, nn.MSELoss())
    assert loss.num_params == 2
    theta, x, y = samples(batch=1, points=5)
    got = loss(theta[0], x[0].unsqueeze(-1), y[0].unsqueeze(-1))
    torch.testing.assert_close(got, linear_net_loss(theta[0], x[0], y[0]))
    batch_loss = flat_loss(model, nn.MSELoss(), per_point=False)
    torch.testing.assert_close(
        batch_loss(theta[0], x[0].unsqueeze(-1), y[0].unsqueeze(-1)), got.mean().reshape(1)
    )
    torch.testing.assert_close(loss.flatten(loss.unflatten(theta[0])), theta[0])
    sym = LearnedSymmetry(loss, data_dim=5, config=LearnedSymmetryConfig(hidden=(4,)), dtype=F64)
    assert sym.num_params == 2


def test_fast_terms_match_the_reference_on_a_module() -> None:
    """A sigmoid 3-3-1 net (§6.5.4) through flat_loss: vmap, jvp and functional_call compose."""
    gen = torch.Generator().manual_seed(3)
    model = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Sigmoid(), nn.Linear(3, 1, bias=False))
    loss = flat_loss(model.to(F64), nn.MSELoss())
    cfg = LearnedSymmetryConfig(generators=2, hidden=(8,), init_scale=1.0)
    sym = LearnedSymmetry(loss, data_dim=6, config=cfg, dtype=F64)
    theta, x, y = gaussian_sampler(12, (2, 3), (2, 1), dtype=F64)(4, gen)
    fast = sym.loss_terms(theta, x, y)
    ref = loss_terms(sym.act, sym.h, loss, theta, x, y)
    for name in TERMS:
        torch.testing.assert_close(fast[name], ref[name], rtol=1e-10, atol=1e-12)
    assert float(fast["invariance"].detach()) > 0


# -- a short fit recovers the rescaling generator (Fig 6.3) and its curves (Fig 6.6) ------------
FIT_CONFIG = LearnedSymmetryConfig(
    hidden=(16, 16), epochs=10, steps_per_epoch=20, batch_size=64, seed=0
)


@pytest.fixture(scope="module")
def fitted() -> tuple[LearnedSymmetry, FitHistory, list[int]]:
    sym = LearnedSymmetry(linear_net_loss, 2, data_dim=1, config=FIT_CONFIG, dtype=F64)
    epochs: list[int] = []
    with torch_threads(1):  # tiny matrices: a second thread on shared cores is ~30x slower
        history = sym.fit(
            gaussian_sampler(2, (1,), (1,), dtype=F64), callback=lambda e, r: epochs.append(e)
        )
    return sym, history, epochs


def test_fit_recovers_the_rescaling_generator(fitted) -> None:
    sym, history, epochs = fitted
    assert epochs == list(range(10))
    assert history.epochs == 10
    assert history.steps == 200
    assert history.invariance[-1] < 0.5 * history.invariance[0]
    h = sym.generators()[0]
    cosine = float((h * RESCALING).sum() / (h.norm() * RESCALING.norm()))
    assert abs(cosine) >= 0.95, f"|cos(h, diag(1, −1))| = {abs(cosine):.3f}, h = {h.tolist()}"
    # exp of the unit-speed generator is a rescaling diag(c, 1/c), c ≈ e^{±1}
    g = torch.linalg.matrix_exp(math.sqrt(2) * h / h.norm())
    diagonal = g.diagonal()
    off_diagonal = g - torch.diag(diagonal)
    assert float(off_diagonal.abs().max()) < 0.1 * float(diagonal.abs().max())
    assert float(diagonal.prod()) == pytest.approx(1.0, abs=0.1)  # det e^A = e^{tr A}
    assert float((diagonal[0] / diagonal[1]).log().abs()) > 1.5  # a rescaling, not ≈ I


def test_learned_curve_keeps_the_loss_better_than_random_curves(fitted) -> None:
    sym, _, _ = fitted
    gen = torch.Generator().manual_seed(7)
    t = torch.linspace(-1.0, 1.0, 11, dtype=F64)
    learned = sym.generators()[0]
    learned = learned / learned.norm()
    ratios = []
    for _ in range(5):
        theta = torch.randn(2, generator=gen, dtype=F64)
        x, y = torch.randn(1, generator=gen, dtype=F64), torch.randn(1, generator=gen, dtype=F64)
        speed = sym.infinitesimal_action(theta, x, learned).norm()
        along = sym.loss_along_curve(t, learned, theta, x, y)
        variation = float((along - along[5]).abs().max())
        random_variations = []
        for _ in range(8):  # random generators at the same speed ‖v‖ at θ
            h = torch.randn(2, 2, generator=gen, dtype=F64)
            h = h * speed / sym.infinitesimal_action(theta, x, h).norm()
            curve_loss = sym.loss_along_curve(t, h, theta, x, y)
            random_variations.append(float((curve_loss - curve_loss[5]).abs().max()))
        ratios.append(variation / (sum(random_variations) / len(random_variations)))
    assert max(ratios) < 0.5, ratios
    torch.testing.assert_close(
        sym.curve(0.0, 0, theta, x), sym.act(torch.eye(2, dtype=F64), theta, x)
    )
    torch.testing.assert_close(
        sym.curve([0.5], 0, theta, x)[0],
        sym.act(torch.linalg.matrix_exp(0.5 * sym.h[0].detach()), theta, x),
    )


# -- history, interruption, non-finite values ------------------------------------------------------
def test_fit_on_a_fixed_sample_set_and_an_interrupted_fit_keeps_finished_epochs() -> None:
    cfg = LearnedSymmetryConfig(hidden=(8,), epochs=5, batch_size=10)
    sym = LearnedSymmetry(linear_net_loss, 2, data_dim=3, config=cfg, dtype=F64)
    data = samples(batch=25, points=3)

    class StopError(Exception):
        pass

    def stop_after_two(epoch: int, record: dict[str, float]) -> None:
        assert set(record) == {*TERMS, "total"}
        if epoch == 1:
            raise StopError

    with pytest.raises(StopError):
        sym.fit(data, callback=stop_after_two)
    assert sym.history.epochs == 2
    assert sym.history.steps == 6  # 3 batches (10, 10, 5) per epoch
    history = sym.fit(data)
    assert history.epochs == 7
    assert len(history.to_dict()["invariance"]) == 7


def test_a_non_finite_objective_raises_before_spoiling_the_parameters() -> None:
    def bad_loss(theta, x, y):
        return linear_net_loss(theta, x, y) * torch.nan

    sym = LearnedSymmetry(
        bad_loss, 2, data_dim=1, config=LearnedSymmetryConfig(hidden=(4,)), dtype=F64
    )
    before = {k: v.clone() for k, v in sym.state_dict().items()}
    with pytest.raises(NonFiniteError, match="objective"):
        sym.fit(gaussian_sampler(2, (1,), (1,), dtype=F64))
    for k, v in sym.state_dict().items():
        torch.testing.assert_close(v, before[k])


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"generators": 0}, "generators"),
        ({"gamma_invariance": -1.0}, "gamma_invariance"),
        ({"gamma_sparsity": float("nan")}, "gamma_sparsity"),
        ({"beta": 0.0}, "beta"),
        ({"hidden": (16, 0)}, "hidden"),
        ({"activation": "swish"}, "activation"),
        ({"action": "linear"}, "action"),
        ({"schedule": "step"}, "schedule"),
        ({"orthogonality": "matrices"}, "orthogonality"),
        ({"lr": -1e-3}, "lr"),
    ],
)
def test_bad_config(changes: dict, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        LearnedSymmetryConfig(**changes)


def test_bad_input() -> None:
    sym = LearnedSymmetry(
        linear_net_loss, 2, data_dim=1, config=LearnedSymmetryConfig(hidden=(4,)), dtype=F64
    )
    theta3 = torch.zeros(4, 3, dtype=F64)
    ones = torch.ones(4, 1, dtype=F64)
    with pytest.raises(ShapeError, match="P"):
        sym.fit((theta3, ones, ones))
    with pytest.raises(ShapeError, match=r"\(B, 2\)"):
        sym.fit(lambda n, g: (torch.zeros(n, 3, dtype=F64), torch.ones(n, 1), torch.ones(n, 1)))
    with pytest.raises(ShapeError, match="data_dim"):
        sym.fit((torch.zeros(4, 2, dtype=F64), torch.ones(4, 2), torch.ones(4, 2)))
    with pytest.raises(NonFiniteError, match="theta"):
        sym.fit((torch.full((4, 2), torch.inf, dtype=F64), ones, ones))
    with pytest.raises(ShapeError, match="theta"):
        sym.act(torch.eye(2), torch.zeros(3))
    with pytest.raises(ShapeError, match="matrix"):
        sym.act(torch.eye(3), torch.zeros(2))
    with pytest.raises(InvalidArgumentError, match="index"):
        sym.curve(1.0, 1, torch.zeros(2, dtype=F64), torch.zeros(1, dtype=F64))
    with pytest.raises(InvalidArgumentError, match="pass x"):
        sym.act(torch.eye(2), torch.zeros(2))
    with pytest.raises(InvalidArgumentError, match="num_params"):
        LearnedSymmetry(linear_net_loss, 0, data_dim=1)
    with pytest.raises(InvalidArgumentError, match="num_params"):
        LearnedSymmetry(linear_net_loss, data_dim=1)
    with pytest.raises(InvalidArgumentError, match="data_dim"):
        LearnedSymmetry(linear_net_loss, 2)
    with pytest.raises(InvalidArgumentError, match="dimension 4"):
        LearnedSymmetry(linear_net_loss, 2, data_dim=1, config=LearnedSymmetryConfig(generators=5))
    with pytest.raises(InvalidArgumentError, match="first layer"):
        LearnedSymmetry(linear_net_loss, 1000, data_dim=1)
    with pytest.raises(InvalidArgumentError, match="no trainable parameter"):
        flat_loss(nn.ReLU(), nn.MSELoss())
    theta, x, _ = samples()
    with pytest.raises(ShapeError, match="P = 2"):
        infinitesimal_action(linear_action, torch.zeros(1, 3, 3, dtype=F64), theta, x)
    with pytest.raises(ShapeError, match=r"\(k, P, P\)"):
        orthogonality_term(torch.zeros(2, 3, dtype=F64))
    with pytest.raises(InvalidArgumentError, match="beta"):
        norm_term(torch.zeros(1, 2, 2, dtype=F64), -1.0)
    with pytest.raises(InvalidArgumentError, match="outside"):
        associativity_term(linear_action, RESCALING[None], theta, x, pairs=[(0, 1)])


# -- state ---------------------------------------------------------------------------------------
def test_state_dict_round_trip() -> None:
    cfg = LearnedSymmetryConfig(generators=2, hidden=(8, 8), epochs=1, steps_per_epoch=3)
    sym = LearnedSymmetry(linear_net_loss, 2, data_dim=1, config=cfg, dtype=F64)
    sym.fit(gaussian_sampler(2, (1,), (1,), dtype=F64))
    buffer = io.BytesIO()
    torch.save(sym.state_dict(), buffer)
    buffer.seek(0)
    other = LearnedSymmetry(
        linear_net_loss,
        2,
        data_dim=1,
        config=LearnedSymmetryConfig(generators=2, hidden=(8, 8), seed=5),
        dtype=F64,
    )
    assert not torch.equal(other.generators(), sym.generators())
    other.load_state_dict(torch.load(buffer))
    torch.testing.assert_close(other.generators(), sym.generators())
    theta, x, _ = samples(points=1)
    g = torch.linalg.matrix_exp(0.3 * sym.generators()[1])
    torch.testing.assert_close(other.act(g, theta, x), sym.act(g, theta, x))
    assert set(sym.state_dict()) == {"h"} | {
        f"network.layers.{i}.{p}" for i in range(3) for p in ("weight", "bias")
    }
    torch.testing.assert_close(sym.group_elements(), torch.linalg.matrix_exp(sym.generators()))


def test_data_sensitivity() -> None:
    sym = LearnedSymmetry(
        linear_net_loss,
        2,
        data_dim=3,
        config=LearnedSymmetryConfig(generators=2, hidden=(8,), init_scale=1.0),
        dtype=F64,
    )
    theta, x, _ = samples(points=3)
    sensitivity = sym.data_sensitivity(theta[0], x[0])
    assert sensitivity.shape == (2,)
    assert bool((sensitivity > 0).all())
    # against central differences of v in each entry of x (the field is smooth: SiLU)
    eps, columns = 1e-6, []
    with torch.no_grad():
        for j in range(x[0].numel()):
            step = torch.zeros_like(x[0]).reshape(-1)
            step[j] = eps
            step = step.reshape(x[0].shape)
            plus = sym.infinitesimal_action(theta[0], x[0] + step)
            minus = sym.infinitesimal_action(theta[0], x[0] - step)
            columns.append((plus - minus) / (2 * eps))
        oracle = torch.stack(columns, dim=-1).flatten(1).norm(dim=1)
        speeds = sym.infinitesimal_action(theta[0], x[0]).norm(dim=-1)
    torch.testing.assert_close(sensitivity, oracle, rtol=1e-6, atol=0.0)
    relative = sym.data_sensitivity(theta[0], x[0], relative=True)
    torch.testing.assert_close(relative, oracle * x[0].norm() / speeds, rtol=1e-6, atol=0.0)
    blind = LearnedSymmetry(
        linear_net_loss, 2, config=LearnedSymmetryConfig(hidden=(8,), action_sees_data=False)
    )
    with pytest.raises(InvalidArgumentError, match="sees the data"):
        blind.data_sensitivity(theta[0].float(), x[0].float())
    assert blind.act(torch.eye(2), theta[0].float()).shape == (2,)
