"""Every analysis on the models people train, with symmetries found on the traced graph:
teleportation (engine and Teleporter), orbit dimensions, conserved quantities along gradient
flow, and weight matching with a planted permutation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate
import torch
from torch import nn

import paramsym as ps
from helpers import relative_error, state_of
from paramsym.conserved.moment import MomentMap
from paramsym.nn.zoo import ZOO


@pytest.fixture(autouse=True, scope="module")
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def zoo(name, seed=0):
    entry = ZOO[name]
    torch.manual_seed(seed)
    return entry.build(), entry.example_input(torch.Generator().manual_seed(seed))


def classification_batch(model, x, classes, seed=1):
    with torch.no_grad():
        out = model(x)
    y = torch.randint(0, classes, out.shape[:-1], generator=torch.Generator().manual_seed(seed))
    return x, y


def sequence_loss(logits, y):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@pytest.mark.parametrize(
    ("name", "classes", "loss_fn"),
    [
        ("cnn-bn", 3, nn.CrossEntropyLoss()),
        ("resnet-block", 3, nn.CrossEntropyLoss()),
        ("gpt", 32, sequence_loss),
    ],
)
def test_teleport_raises_the_gradient_norm_within_the_loss_guard(name, classes, loss_fn):
    model, x = zoo(name)
    batch = classification_batch(model, x, classes)
    before = {k: v.clone() for k, v in state_of(model).items()}
    result = ps.teleport(model, loss_fn, batch, steps=5)
    assert result.grad_norm_after > 1.05 * result.grad_norm_before
    assert abs(result.loss_after - result.loss_before) <= 1e-4 * result.loss_before
    assert result.symmetries  # found on the graph traced on the batch
    after = ps.params_of(model)
    moved = ps.norm(ps.sub(after, {k: before[k] for k in after})) / ps.norm(after)
    assert moved > 1e-3
    with torch.no_grad():  # the model really holds the teleported point, same function
        assert float(loss_fn(model(batch[0]), batch[1])) == pytest.approx(result.loss_after)


def test_teleport_refuses_symmetries_that_move_running_statistics():
    model, x = zoo("cnn-bn")
    batch = classification_batch(model, x, 3)
    scaling = next(
        s for s in ps.symmetries(model, example_input=x) if s.name.startswith("norm_scaling")
    )
    with pytest.raises(ps.InvalidArgumentError, match="running"):
        ps.teleport(model, nn.CrossEntropyLoss(), batch, symmetries=[scaling], steps=1)


def test_teleporter_finds_the_symmetries_on_its_first_batch():
    model, x = zoo("cnn")
    batch = classification_batch(model, x, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    tele = ps.Teleporter(
        model,
        nn.CrossEntropyLoss(),
        optimizer,
        schedule=ps.Schedule.at([0]),
        data=lambda: batch,
        config=ps.TeleportConfig(steps=3, lr=0.05),
    )
    tele.zero_grad()
    nn.CrossEntropyLoss()(model(batch[0]), batch[1]).backward()
    tele.step()
    assert [e.step for e in tele.history] == [0]
    assert {s.name for s in tele.symmetries_for(batch)} == {
        "rescaling[conv1->conv2]",
        "rescaling[conv2->fc]",
        "translation[fc]",  # a loss symmetry of the cross-entropy
    }


def test_orbit_dimensions_equal_the_formulas_on_cnn_and_attention():
    model, x = zoo("cnn-bn")
    for s in ps.symmetries(model, example_input=x):
        if s.dim:
            # per-channel scalings and BatchNorm shifts at a generic point: one orbit direction
            # per channel
            assert ps.orbit_dimension(model, s) == s.dim, s.name
    model, ids = zoo("gpt")
    found = ps.symmetries(model, example_input=ids)
    heads = [s for s in found if s.name.startswith(("attention_QK", "attention_VO"))]
    assert len(heads) == 8
    for s in heads:  # d×d with d = 8 < width 16: the action on (W_Q, W_K) is injective
        assert ps.orbit_dimension(model, s) == 64, s.name


def _flow(model, loss, t_end):
    point = ps.params_of(model)

    def rhs(_t, w):
        leaf = torch.from_numpy(w).requires_grad_(True)
        (g,) = torch.autograd.grad(loss(ps.unflatten(leaf, point)), leaf)
        return -g.numpy()

    solution = scipy.integrate.solve_ivp(
        rhs, (0.0, t_end), ps.flatten(point).numpy(), method="DOP853", rtol=1e-12, atol=1e-12
    )
    assert solution.success
    return point, ps.unflatten(torch.from_numpy(solution.y[:, -1].copy()), point)


class SquareConvNet(nn.Module):
    """Bias-free conv → z² → conv → z² → pool → linear: smooth, homogeneous (degree 2)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(4, 3, 3, padding=1, bias=False)
        self.fc = nn.Linear(3, 2, bias=False)

    def forward(self, x):
        h = self.conv1(x) ** 2
        h = self.conv2(h) ** 2
        return self.fc(h.mean((2, 3)))


def test_conserved_quantities_of_a_bias_free_conv_net_stay_constant_along_gradient_flow():
    torch.manual_seed(0)
    model = SquareConvNet()
    x = torch.randn(5, 2, 4, 4, generator=torch.Generator().manual_seed(1))
    y = torch.randn(5, 2, generator=torch.Generator().manual_seed(2))
    found = [s for s in ps.symmetries(model, example_input=x) if s.dim]
    assert [s.name for s in found] == ["rescaling[conv1->conv2]", "rescaling[conv2->fc]"]

    def loss(params):
        return nn.functional.mse_loss(ps.functional_call(model, params, x), y)

    start, end = _flow(model, loss, 1.0)
    assert ps.norm(ps.sub(end, start)) / ps.norm(start) > 0.02  # the flow really moved
    for s in found:
        q = MomentMap(s)
        change = float(torch.linalg.vector_norm(q(end) - q(start))) / float(q.magnitude(start))
        assert change <= 1e-8, s.name
    imbalance = ps.imbalance(model, end, example_input=x)
    assert set(imbalance) == {s.name for s in found}


def test_weight_matching_recovers_a_planted_resnet_permutation_exactly():
    model, x = zoo("resnet18-tiny")
    spec = ps.permutation_spec(model, x)
    assert len(spec.slots) == 12  # 4 residual streams + 8 inner block spaces
    assert any(
        "running_var" in {s.name.rsplit(".", 1)[1] for s in slots} for slots in spec.slots.values()
    )
    rng = torch.Generator().manual_seed(3)
    planted = {g: torch.randperm(w, generator=rng) for g, w in spec.widths.items()}
    buffers = {n: b for n, b in model.named_buffers() if n in spec.unmatched}
    state = {**ps.params_of(model), **buffers}
    permuted = ps.connectivity.apply_permutations(state, spec, planted)
    with torch.no_grad():  # a permuted copy computes the same function (statistics moved)
        assert relative_error(ps.functional_call(model, permuted, x), model(x)) <= 1e-10
    result = ps.weight_matching(model, permuted, spec)
    assert result.distance_after == 0.0
    assert result.distance_before > 0.1
    with torch.no_grad():
        aligned = ps.functional_call(model, result.params, x)
    assert relative_error(aligned, model(x)) <= 1e-10


def test_weight_matching_recovers_a_planted_lstm_permutation_exactly():
    """The hidden units permute both axes of weight_hh: J is quadratic in P there, and each
    assignment step is checked against J recomputed."""
    model, x = zoo("lstm")
    spec = ps.permutation_spec(model, x)
    (group,) = spec.slots
    assert {(s.name, s.axis) for s in spec.slots[group]} >= {
        ("rnn.weight_hh_l0", 0),
        ("rnn.weight_hh_l0", 1),
    }
    planted = {
        group: torch.randperm(spec.widths[group], generator=torch.Generator().manual_seed(3))
    }
    permuted = ps.connectivity.apply_permutations(ps.params_of(model), spec, planted)
    result = ps.weight_matching(model, permuted, spec)
    assert result.distance_before > 0.1
    assert result.distance_after == 0.0
    assert result.objective_after == pytest.approx(
        ps.connectivity.matching_objective(ps.params_of(model), result.params, spec), rel=1e-13
    )


def test_weight_matching_derives_its_spec_from_the_graph():
    model, x = zoo("cnn-bn")
    other, _ = zoo("cnn-bn", seed=5)
    result = ps.weight_matching(model, other, example_input=x)
    assert set(result.permutations) == {
        "permutation[conv1->conv2]",
        "permutation[conv2->fc]",
    }
    assert result.distance_after < result.distance_before
    np.testing.assert_array_equal(
        np.sort(result.permutations["permutation[conv1->conv2]"].numpy()), np.arange(8)
    )
