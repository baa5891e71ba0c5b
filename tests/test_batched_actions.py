"""Per-head matrix groups acted with as one (``MatrixBatch``) against their members one by one,
and the transport path's shortcuts against the general path, on Hugging Face models as users
build them (float64): the decoders' rotary and grouped-query groups (strided outgoing slots),
GPT-2's packed projection, BLOOM's interleaved q/k/v rows."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import paramsym as ps
from paramsym.symmetry.batched import MatrixBatch, batch_symmetries
from paramsym.teleportation import objectives
from paramsym.teleportation.orbit import Orbit, commute

F64 = torch.float64
transformers = pytest.importorskip("transformers")

from hf_models import build, example_input  # noqa: E402

KINDS = ("llama", "gpt2-lm", "bloom", "opt")


@functools.cache
def _found(kind: str) -> tuple[torch.nn.Module, dict, tuple[ps.Symmetry, ...]]:
    """The model, its input and its continuous symmetries (detected once per kind), without the
    absorbed translations whose shift depends on parameters they read (``Symmetry.reads``):
    they do not act slot by slot, so they neither batch nor commute, and they keep the tensors
    they touch whole (tests/test_teleport_absorptions.py teleports with them)."""
    model = build(kind)
    x = example_input(kind)
    found = ps.symmetries(model, example_input=x)
    return model, x, tuple(s for s in found if s.dim > 0 and not s.reads)


def _batches(kind: str) -> tuple[torch.nn.Module, dict, list[MatrixBatch]]:
    model, x, found = _found(kind)
    units = batch_symmetries(found)
    batches = [u for u in units if isinstance(u, MatrixBatch)]
    assert sum(len(b.members) for b in batches) + len(units) - len(batches) == len(found)
    return model, x, batches


def _xis(batch: MatrixBatch, seed: int, scale: float = 0.3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(m.dim, generator=g, dtype=F64) / m.width for m in batch.members]


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_acts_as_its_members_in_turn(kind):
    """Element, move, covector transport and algebra pullback of the whole batch equal the
    members' own, one by one, to rounding."""
    model, _, batches = _batches(kind)
    assert batches, kind
    params = {k: v.detach() for k, v in ps.params_of(model).items()}
    g = torch.Generator().manual_seed(3)
    covector = {k: torch.randn(v.shape, generator=g, dtype=F64) for k, v in params.items()}
    for batch in batches:
        xis = _xis(batch, seed=len(batch.members))
        element = batch.element(xis, "exp")
        for m, xi, gm, gm_inv in zip(batch.members, xis, *element, strict=True):
            torch.testing.assert_close(gm, m.exp(xi), rtol=1e-13, atol=1e-14)
            torch.testing.assert_close(gm_inv, torch.linalg.inv(m.exp(xi)), rtol=1e-12, atol=1e-13)
        moved = {k: v.clone() for k, v in params.items()}
        batch.act_in_place(moved, element)
        pulled = {k: v.clone() for k, v in covector.items()}
        batch.pull_back_in_place(pulled, batch.inverse(element))
        expected, carried = dict(params), {k: v.clone() for k, v in covector.items()}
        for m, gm in zip(batch.members, element[0], strict=True):
            expected = m.act(expected, gm)
            m.pull_back_in_place(carried, m.inverse(gm))
        # a caller that owns no tensor: each touched one is replaced (computed out of place
        # where the regions are whole leading rows, a Llama's q/k/v by heads, else copied
        # first), never written
        before = {k: v.clone() for k, v in params.items()}
        moved_new, pulled_new = dict(params), dict(covector)
        batch.act_in_place(moved_new, element, set())
        batch.pull_back_in_place(pulled_new, batch.inverse(element), set())
        for k in params:
            torch.testing.assert_close(moved[k], expected[k], rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(pulled[k], carried[k], rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(moved_new[k], expected[k], rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(pulled_new[k], carried[k], rtol=1e-13, atol=1e-13)
            assert torch.equal(params[k], before[k])
        rates = batch.pullbacks(params, covector)
        for m, rate in zip(batch.members, rates, strict=True):
            torch.testing.assert_close(
                rate, m.cotangent_pullback(params, covector), rtol=1e-12, atol=1e-12
            )


def test_members_out_of_order_take_the_indexed_path():
    """Heads listed in reverse order are not evenly spaced forwards: the batch gathers them
    by index instead of a strided view, with the same result."""
    model, _, batches = _batches("gpt2-lm")
    params = {k: v.detach() for k, v in ps.params_of(model).items()}
    forwards = batches[0]
    backwards = MatrixBatch(list(reversed(forwards.members)))
    name, axis, _, offsets = backwards._slots[0]
    assert backwards._strided(params[name], axis, offsets) is None
    assert forwards._strided(params[name], axis, forwards._slots[0][3]) is not None
    xis = _xis(forwards, seed=5)
    a = {k: v.clone() for k, v in params.items()}
    b = {k: v.clone() for k, v in params.items()}
    forwards.act_in_place(a, forwards.element(xis, "exp"))
    backwards.act_in_place(b, backwards.element(list(reversed(xis)), "exp"))
    for k in params:
        torch.testing.assert_close(a[k], b[k], rtol=1e-13, atol=1e-13)


def test_grouping_batches_each_layers_heads_and_refuses_overlaps():
    """One batch per family and layer on the decoder (its groups' regions disjoint); two
    members on the same region, or of different widths, make no batch."""
    _, _, batches = _batches("llama")
    for batch in batches:
        regions = [r for m in batch.members for r in m.touched_regions]
        assert len(set(regions)) == len(regions)
    member = batches[0].members[0]
    with pytest.raises(ps.InvalidArgumentError, match="disjoint"):
        MatrixBatch([member, member])
    assert batch_symmetries([member, member]) == [member, member]


def test_a_singular_step_names_the_member():
    _, _, batches = _batches("gpt2-lm")
    batch = batches[0]
    xis = _xis(batch, seed=1)
    generators = batch.algebra(xis)
    generators[2] = -torch.eye(batch.width, dtype=F64) * 1e3  # exp ≈ 0: numerically singular
    xis[2] = generators[2].reshape(-1)
    with pytest.raises(
        ps.InvalidGroupElementError, match=batch.members[2].name.replace("[", r"\[")
    ):
        batch.element(xis, "exp")


@pytest.mark.parametrize("kind", ["gpt2-lm", "llama"])
def test_replay_composes_commuting_units(kind):
    """Moving θ once by each unit's composed element equals moving it step by step."""
    model, x, every = _found(kind)
    found = [s for s in every if not s.translation]
    params = {k: v.detach() for k, v in ps.params_of(model).items()}
    orbit = Orbit(found, x, "exp", params)
    assert commute(orbit.units)
    g = torch.Generator().manual_seed(6)
    steps = [
        orbit.elements([0.05 * torch.randn(s.dim, generator=g, dtype=F64) for s in found])
        for _ in range(3)
    ]
    composed = orbit.replay(params, steps)
    one_by_one = dict(params)
    for step in steps:
        one_by_one = orbit.replay(one_by_one, [step])
    for k in params:
        torch.testing.assert_close(composed[k], one_by_one[k], rtol=1e-12, atol=1e-13)


class _OpaqueGradNorm(objectives.GradNorm):
    """‖∇L‖², without saying it is a diagonal form: the transport's general (autograd) path."""

    def diagonal_weights(self):
        return None


@pytest.mark.parametrize("kind", ["gpt2-lm", "llama", "opt"])
def test_diagonal_shortcut_equals_the_general_transport(kind):
    """J kept tensor by tensor and ∇J = 2v without autograd, against J and ∇J by autograd over
    the whole transported gradient: the same steps, objective and end point."""
    model, x, found = _found(kind)
    batch = (x, x["input_ids"])

    def loss_fn(output, ids):
        logits = output.logits if hasattr(output, "logits") else output.last_hidden_state
        return logits.square().mean() + 0.0 * ids.sum()

    exact = [s for s in found if s.exact]
    fast, general = (
        ps.teleport(copy.deepcopy(model), loss_fn, batch, exact, objective=goal, steps=5)
        for goal in (objectives.GradNorm(), _OpaqueGradNorm())
    )
    assert fast.method == general.method == "transport"
    assert fast.steps == general.steps == 5
    assert fast.gain > 1.0
    assert [s.objective for s in fast.history] == pytest.approx(
        [s.objective for s in general.history], rel=1e-10
    )
    assert fast.grad_norm_after == pytest.approx(general.grad_norm_after, rel=1e-10)
    assert abs(fast.loss_after - fast.loss_before) <= 1e-10 * abs(fast.loss_before)
    for k in fast.params:
        torch.testing.assert_close(fast.params[k], general.params[k], rtol=1e-10, atol=1e-12)
