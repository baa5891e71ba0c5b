"""Teleport along the absorbed translations (notes 006 §3; ``paramsym.symmetry.absorption``):
the actions θ ↦ θ + Σ t_k e_k(θ_r) that shift parameters by amounts read off others
(``norm_reader``, ``norm_shift``, ``value_bias``), now in the default teleport.

Oracles, in float64 on a Hugging Face GPT-2 and on a pre-LN MLP: the transport path's ascent
rates against the Hessian path's (reverse over reverse through the actions) and against a
Richardson-extrapolated central difference of ‖∇L‖² along each action; whole teleports by
transport against the Hessian path; the transported ∇L at the end point against the gradient
recomputed there; the model's output before and after.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest
import torch
from torch import nn

import paramsym as ps
from helpers import seeded
from paramsym.core.params import first_output, functional_call, params_of
from paramsym.teleportation import (
    PreconditionedGradNorm,
    Schedule,
    default_symmetries,
    transport_obstacle,
)
from paramsym.teleportation import gradient_factors as factors_module
from paramsym.teleportation.ascent import HessianAscent, TransportAscent
from paramsym.teleportation.gradient_factors import two_sided
from paramsym.teleportation.gram_surrogate import regions_by_tensor
from paramsym.teleportation.objectives import GradNorm, Objective
from paramsym.teleportation.orbit import Orbit
from paramsym.teleportation.read_shifts import (
    generic_read_pullback,
    generic_read_shift_rate,
    read_pullback,
    read_shift_rate,
    shifts_by_reads,
)

F64 = torch.float64
FAMILIES = ("norm_reader", "norm_shift", "value_bias")


@dataclass
class Case:
    model: nn.Module
    loss_fn: Callable[..., torch.Tensor]
    batch: tuple[Any, torch.Tensor]
    families: tuple[str, ...]  # the absorbed families the default must include

    @property
    def symmetries(self) -> list[ps.Symmetry]:
        return default_symmetries(self.model, self.loss_fn, self.batch[0])

    def output(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return first_output(functional_call(self.model, params, self.batch[0]))

    def gradient(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        loss = self.loss_fn(functional_call(self.model, leaves, self.batch[0]), self.batch[1])
        return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))


def _mse(output: Any, target: torch.Tensor) -> torch.Tensor:
    return ((first_output(output) - target) ** 2).mean()


def _gpt2() -> Case:
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8,
                        bos_token_id=15, eos_token_id=15)  # fmt: skip
    model = GPT2Model(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    g = seeded(3)
    x = {"input_ids": torch.randint(0, 16, (2, 8), generator=g)}
    target = torch.randn(2, 8, 8, generator=g, dtype=F64)
    return Case(model, _mse, (x, target), FAMILIES)


def _mlp() -> Case:
    """A pre-LN MLP: LayerNorm → Linear → GELU → Linear, weights off their initialisation."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 7), nn.GELU(), nn.Linear(7, 3))
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    g = seeded(4)
    batch = (torch.randn(10, 6, generator=g, dtype=F64), torch.randn(10, 3, generator=g, dtype=F64))
    return Case(model, nn.MSELoss(), batch, FAMILIES[:2])


CASES = {"gpt2": _gpt2, "mlp": _mlp}


def _family(s: ps.Symmetry | str) -> str:
    return (s if isinstance(s, str) else s.name).split("[")[0]


class _OpaqueGradNorm(GradNorm):
    """‖∇L‖² without saying it is a diagonal form: the transport's autograd path for ∇f(v)."""

    def diagonal_weights(self) -> Any:
        return None


def _objective(kind: str, params: dict[str, torch.Tensor]) -> Objective:
    if kind == "grad_norm":
        return GradNorm()
    if kind == "opaque":
        return _OpaqueGradNorm()
    g = seeded(5)
    return PreconditionedGradNorm(
        {k: torch.rand(v.shape, generator=g, dtype=F64) + 0.5 for k, v in params.items()}
    )


def test_the_default_includes_the_absorbed_translations_and_transports_them():
    """Every family that reads parameters joins the default teleport (exact, data-free, a
    shift by what it reads), and ``method="auto"`` still transports ∇L."""
    for make in CASES.values():
        case = make()
        found = case.symmetries
        shifting = [s for s in found if _family(s) in FAMILIES]
        assert {_family(s) for s in shifting} == set(case.families)
        assert all(s.reads for s in shifting)
        assert all(shifts_by_reads(s) and s.exact and not s.affine for s in shifting)
        assert transport_obstacle(found, GradNorm(), set()) is None


@pytest.mark.parametrize("name", sorted(CASES))
def test_closed_forms_equal_the_generic_derivatives(name):
    """Each absorbed family's closed-form covector transport Σ t_k (De_k)ᵀ m and rate
    −⟨De_k[c_r], m_m⟩ against the tangent differentiated by autograd (GPT-2: ``Conv1D``
    layout; the MLP: ``nn.Linear``), at random t, m and c, to 1e-12; both far from zero."""
    case = CASES[name]()
    theta = params_of(case.model)
    g = seeded(8)
    m = {k: torch.randn(v.shape, generator=g, dtype=F64) for k, v in theta.items()}
    c = {k: torch.randn(v.shape, generator=g, dtype=F64) for k, v in theta.items()}
    shifting = [s for s in case.symmetries if _family(s) in FAMILIES]
    assert {_family(s) for s in shifting} == set(case.families)
    for s in shifting:
        t = torch.randn(s.dim, generator=g, dtype=F64)
        closed, generic = read_pullback(s, theta, t, m), generic_read_pullback(s, theta, t, m)
        assert set(closed) == set(generic) == set(s.reads), s.name
        for k in generic:
            assert float(generic[k].abs().max()) > 1e-3, (s.name, k)
            torch.testing.assert_close(closed[k], generic[k], rtol=1e-12, atol=1e-12)
        rate = read_shift_rate(s, theta, m, c)
        expected = generic_read_shift_rate(s, theta, m, c)
        assert float(expected.abs().max()) > 1e-3, s.name
        torch.testing.assert_close(rate, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("objective", ["grad_norm", "preconditioned", "opaque"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_transport_rates_equal_the_hessian_paths(name, objective):
    """∂J(g(ξ)·θ)/∂ξ at 0 from the one transported gradient equals the Hessian path's, to
    1e-10 relative, for every default symmetry; each absorbed family's rate is far from zero
    (the check is not vacuous). J = ‖∇L‖² (one weight: the diagonal fast path), a diagonal
    ‖∇L‖²_A, and ‖∇L‖² through autograd."""
    case = CASES[name]()
    theta = params_of(case.model)
    goal = _objective(objective, theta)
    orbit = Orbit(case.symmetries, case.batch[0], "exp", theta)
    hessian = HessianAscent(case.model, case.loss_fn, case.batch, goal, None, orbit)
    transport = TransportAscent(case.model, case.loss_fn, case.batch, goal, orbit, list(theta))
    assert transport.shifting
    assert transport.tracked  # γ, β and the reader weights move too
    slow = hessian.evaluate(theta, with_grad_norm=True)
    fast = transport.start(theta, [])
    assert fast.value == pytest.approx(slow.value, rel=1e-12)
    rates_fast, rates_slow = transport.direction(fast), hessian.direction(slow)
    scale = max(float(r.abs().max()) for r in rates_slow)
    for s, a, b in zip(orbit.symmetries, rates_fast, rates_slow, strict=True):
        if _family(s) in FAMILIES:
            assert float(b.abs().max()) > 1e-2 * scale, s.name
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10 * scale, msg=s.name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_transport_rates_equal_a_difference_of_the_gradient_norm(name):
    """The rate along a random direction t of each absorbed family against the central
    difference of ‖∇L(act(θ, h t))‖², Richardson-extrapolated (error O(h⁴)), to 1e-8."""
    case = CASES[name]()
    theta = params_of(case.model)
    orbit = Orbit(case.symmetries, case.batch[0], "exp", theta)
    transport = TransportAscent(
        case.model, case.loss_fn, case.batch, GradNorm(), orbit, list(theta)
    )
    start = transport.start(theta, [])
    rates = transport.direction(start)
    g = seeded(6)
    checked = 0
    for s, rate in zip(orbit.symmetries, rates, strict=True):
        if _family(s) not in FAMILIES:
            continue
        t = torch.randn(s.dim, generator=g, dtype=F64)

        def norm2(h: float, s: ps.Symmetry = s, t: torch.Tensor = t) -> float:
            grad = case.gradient(s.act(theta, h * t))
            return sum(float((v**2).sum()) for v in grad.values())

        def central(h: float) -> float:
            return (norm2(h) - norm2(-h)) / (2 * h)

        h = 1e-2
        difference = (4 * central(h / 2) - central(h)) / 3
        expected = float(rate @ t)
        assert abs(expected) > 1e-3
        assert difference == pytest.approx(expected, rel=1e-8), s.name
        checked += 1
    assert checked >= 2
    assert checked == sum(_family(s) in FAMILIES for s in orbit.symmetries)


def _teleport(
    case: Case, chosen: list[ps.Symmetry], method: Literal["transport", "hessian"]
) -> ps.TeleportResult:
    """Ten default steps by ``method``, with ∇L(θ₀) carried along as a covector."""
    gradient = case.gradient(params_of(case.model))
    model = copy.deepcopy(case.model)
    return ps.teleport(model, case.loss_fn, case.batch, chosen, method=method, covectors=[gradient])


@pytest.mark.parametrize("subset", ["default", "absorbed", "bilinear"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_teleport_keeps_the_function_and_transports_the_gradient(name, subset, monkeypatch):
    """Ten default steps along the default symmetries (the absorbed translations with the
    catalogue's), along the absorbed ones alone, or along the bilinear ones alone (β and
    value-bias absorption: nothing else moves what they read, so θ stays at the start until
    the end): ‖∇L‖² rises, the loss is kept to 1e-10 relative and the output to 1e-10; the
    ∇L transported to the end point is the gradient recomputed there; the transport and the
    Hessian path take the same steps to the same point. Factors are made to pay
    (``MAX_SHARE``): the tensors the absorbed families touch stay whole anyway."""
    monkeypatch.setattr(factors_module, "MAX_SHARE", 1e9)
    case = CASES[name]()
    found = case.symmetries
    chosen = {
        "default": found,
        "absorbed": [s for s in found if s.reads],
        "bilinear": [s for s in found if _family(s) in ("norm_shift", "value_bias")],
    }[subset]
    theta = params_of(case.model)
    orbit = Orbit(chosen, case.batch[0], "exp", theta)
    path = TransportAscent(case.model, case.loss_fn, case.batch, GradNorm(), orbit, list(theta))
    assert path.tracked == (subset != "bilinear")
    fast, slow = _teleport(case, chosen, "transport"), _teleport(case, chosen, "hessian")
    assert (fast.method, slow.method) == ("transport", "hessian")
    assert {_family(s) for s in chosen if s.reads} <= {_family(n) for n in fast.symmetries}
    assert fast.steps == slow.steps == 10
    assert fast.gain > 1.0
    assert abs(fast.loss_after - fast.loss_before) <= 1e-10 * abs(fast.loss_before)
    before, after = case.output(theta), case.output(fast.params)
    assert float((after - before).abs().max()) <= 1e-10 * float(before.abs().max())
    assert any(not torch.equal(fast.params[k], theta[k]) for s in chosen for k in s.parameter_names)
    recomputed = case.gradient(fast.params)
    for k in theta:
        torch.testing.assert_close(fast.covectors[0][k], recomputed[k], rtol=1e-9, atol=1e-12)
    norm = sum(float((v**2).sum()) for v in recomputed.values()) ** 0.5
    assert fast.grad_norm_after == pytest.approx(norm, rel=1e-10)
    assert fast.objective_after == pytest.approx(slow.objective_after, rel=1e-9)
    assert [s.objective for s in fast.history] == pytest.approx(
        [s.objective for s in slow.history], rel=1e-9
    )
    for k in theta:
        torch.testing.assert_close(fast.params[k], slow.params[k], rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(
            fast.covectors[0][k], slow.covectors[0][k], rtol=1e-9, atol=1e-12
        )


def test_the_diagonal_shortcut_equals_the_autograd_path_with_absorptions():
    """J kept tensor by tensor (only the tensors a step moves or reads recomputed) against J
    and ∇J by autograd over the whole transported gradient: the same steps and end point."""
    case = _gpt2()
    fast, general = (
        ps.teleport(copy.deepcopy(case.model), case.loss_fn, case.batch, objective=goal)
        for goal in (GradNorm(), _OpaqueGradNorm())
    )
    assert fast.method == general.method == "transport"
    assert fast.steps == general.steps == 10
    assert [s.objective for s in fast.history] == pytest.approx(
        [s.objective for s in general.history], rel=1e-10
    )
    for k in fast.params:
        torch.testing.assert_close(fast.params[k], general.params[k], rtol=1e-10, atol=1e-12)


def test_compressed_gradients_leave_out_what_the_absorptions_touch():
    """Gram surrogates and gradient factors need every action on a tensor to multiply it
    along an axis; an absorbed translation adds −(∂b/∂θ_r)ᵀv to the gradient of the tensors it
    reads and pairs their whole gradient in its rate, so neither those nor the tensors it
    moves are compressed. Without the absorbed families (control), GPT-2's packed
    query–key–value weight is two-sided and its output projection a surrogate candidate."""
    case = _gpt2()
    theta = params_of(case.model)
    shapes = {k: v.shape for k, v in theta.items()}
    found = [s for s in case.symmetries if not s.translation]
    touched = {n for s in found if s.reads for n in (*s.parameter_names, *s.reads)}
    qkv, out = "h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight"
    assert {qkv, out} <= touched
    with_them = Orbit(found, case.batch[0], "exp", theta).units
    without = Orbit([s for s in found if not s.reads], case.batch[0], "exp", theta).units
    assert qkv in two_sided(without, shapes)
    assert out in regions_by_tensor(without)
    assert not touched & set(two_sided(with_them, shapes))
    assert not touched & set(regions_by_tensor(with_them))


def test_teleporter_moves_along_the_absorptions_and_keeps_the_function():
    """``ps.Teleporter`` in an SGD loop on the pre-LN MLP: its default symmetries include the
    absorbed families, each teleport keeps the loss to 1e-10 relative by transport, and the
    momentum is carried along."""
    case = _mlp()
    model = case.model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    tele = ps.Teleporter(
        model, case.loss_fn, optimizer, schedule=Schedule.every(3), data=[case.batch],
        state_policy="transform",
    )  # fmt: skip
    x, y = case.batch
    for _ in range(7):
        tele.zero_grad()
        case.loss_fn(model(x), y).backward()
        tele.step()
    assert [event.step for event in tele.history] == [0, 3, 6]
    for event in tele.history:
        (result,) = event.results
        assert result.method == "transport"
        assert {"norm_reader", "norm_shift"} <= {_family(n) for n in result.symmetries}
        assert result.gain > 1.0
        assert abs(result.loss_after - result.loss_before) <= 1e-10 * abs(result.loss_before)


def test_a_move_keeps_the_point_each_absorption_acted_at():
    """A slot-by-slot action after an absorbed translation in one move (the norm's rescaling
    after its readers' translation) writes into a copy: the reader translation's recorded
    point keeps the γ and β it acted at, so the covector transported along the move is the
    gradient recomputed at the moved point."""
    case = _mlp()
    theta = params_of(case.model)
    by_family = {_family(s): s for s in case.symmetries}
    chosen = [by_family["norm_reader"], by_family["rescaling"]]
    assert getattr(chosen[1], "acts_in_place", False)
    assert set(chosen[0].reads) <= set(chosen[1].parameter_names)
    orbit = Orbit(chosen, case.batch[0], "exp", theta)
    g = seeded(7)
    xis = [0.5 * torch.randn(s.dim, generator=g, dtype=F64) for s in chosen]
    moved, moves = orbit.move(theta, xis)
    assert not torch.equal(moves[0][2]["0.weight"], moved["0.weight"])
    carried, direct = orbit.transport(case.gradient(theta), moves), case.gradient(moved)
    for k in theta:
        torch.testing.assert_close(carried[k], direct[k], rtol=1e-10, atol=1e-12)
