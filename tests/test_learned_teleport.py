"""Learned teleportation (dissertation §5.5, Algorithm 3, Fig 5.12): the learned group elements
keep the batch loss through the exact batch actions (float64), state-dict round trips, the
four methods, meta-training lowering the meta-loss, and bad input."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.errors import InvalidArgumentError
from paramsym.teleportation import (
    METHODS,
    LearnedTeleportConfig,
    LearnedTeleporter,
    MetaTask,
    batch_actions,
    regression_task,
    steps_to_threshold,
)

F64 = torch.float64


def _half_sq(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """0.5‖Y − f(X)‖_F², the authors' code's loss."""
    return 0.5 * ((output - target) ** 2).sum()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _model(widths=(5, 5, 5), bias: bool = False, activation: str = "leaky_relu") -> nn.Module:
    return ps.mlp(list(widths), activation=activation, bias=bias, dtype=F64)


def _config(**changes) -> LearnedTeleportConfig:
    base = {"hidden": 8, "teleport_norm": 0.3, "update_scale": 0.01}
    return LearnedTeleportConfig(**{**base, **changes})


@pytest.mark.parametrize(
    ("widths", "bias", "activation", "action", "group_map"),
    [
        ((5, 5, 5), False, "leaky_relu", "inverse", "first_order"),  # §5.5: square X, Eq. 4.13
        ((5, 5, 5), False, "leaky_relu", "pinv", "exp"),  # Eq. 4.16, k ≤ h
        ((4, 6, 6, 3), True, "tanh", "pinv", "first_order"),  # two layer pairs, k ≤ h
    ],
)
def test_group_elements_keep_batch_loss(widths, bias, activation, action, group_map) -> None:
    model = _model(widths, bias, activation)
    tele = LearnedTeleporter(model, _half_sq, config=_config(action=action, group_map=group_map))
    assert len(tele.actions) == len(widths) - 2
    task = regression_task(model, 5 if action == "inverse" else 4, generator=_gen(0))
    params, state = task.params, None
    for _ in range(3):
        with torch.no_grad():
            out = tele.step(params, task.batch, state)
        moved_loss = tele.loss(out.moved, task.batch)
        new_loss = tele.loss(out.params, task.batch)
        torch.testing.assert_close(new_loss, moved_loss, rtol=1e-10, atol=1e-12)
        for site, g in out.elements.items():  # a real move: ‖g − I‖ is the teleport norm
            eye = torch.eye(g.shape[0], dtype=F64)
            assert float(torch.linalg.norm(g - eye)) > 0.1, site
        changed = max(float((out.params[n] - out.moved[n]).abs().max()) for n in out.params)
        assert changed > 1e-3
        params, state = out.params, out.state


def test_step_is_update_plus_teleport() -> None:
    """LSTM(update) moves by f alone (g = I); GD moves by −η∇."""
    model = _model()
    task = regression_task(model, 5, generator=_gen(1))
    plain = LearnedTeleporter.from_method(model, _half_sq, "LSTM(update)", config=_config())
    out = plain.step(task.params, task.batch)
    assert out.elements == {}
    for n in out.params:
        torch.testing.assert_close(out.params[n], task.params[n] + out.update[n])
    gd = LearnedTeleporter.from_method(model, _half_sq, "GD", config=_config(gd_lr=1e-2))
    assert list(gd.parameters()) == []
    params = {n: t.clone().requires_grad_(True) for n, t in task.params.items()}
    grads = torch.autograd.grad(gd.loss(params, task.batch), list(params.values()))
    out = gd.step(task.params, task.batch)
    for (n, p), g in zip(task.params.items(), grads, strict=True):
        torch.testing.assert_close(out.params[n], p - 1e-2 * g)


@pytest.mark.parametrize("method", list(METHODS))
def test_state_dict_round_trip(method: str) -> None:
    model = _model()
    task = regression_task(model, 5, generator=_gen(2))
    source = LearnedTeleporter.from_method(model, _half_sq, method, config=_config(seed=3))
    target = LearnedTeleporter.from_method(model, _half_sq, method, config=_config(seed=4))
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)
    target.load_state_dict(torch.load(buffer))
    a = source.run(task.params, task.batch, 4)
    b = target.run(task.params, task.batch, 4)
    assert a.losses == b.losses
    for n in a.params:
        assert torch.equal(a.params[n], b.params[n])
    if method != "GD":  # different seeds differ before loading
        fresh = LearnedTeleporter.from_method(model, _half_sq, method, config=_config(seed=4))
        assert fresh.run(task.params, task.batch, 4).losses != a.losses


@pytest.mark.parametrize(
    ("method", "changes"),
    [
        ("LSTM(update,tele)", {}),
        ("LSTM(lr,tele)", {"lr_range": (1e-4, 0.2)}),
    ],
)
def test_meta_training_lowers_meta_loss(method: str, changes: dict) -> None:
    """Algorithm 3 on tiny §5.5-style regressions (4×4 weights, 4 samples): truncated BPTT
    lowers the meta-loss (Σ L(w_i) per window) and the loss after the unroll on the tasks."""
    model = _model((4, 4, 4))
    config = _config(meta_lr_update=1e-2, meta_lr_teleport=1e-2, **changes)
    tele = LearnedTeleporter.from_method(model, _half_sq, method, config=config)
    tasks = [regression_task(model, 4, generator=_gen(10 + i)) for i in range(3)]
    steps = 10

    def mean_final() -> float:
        return sum(tele.run(t.params, t.batch, steps).losses[-1] for t in tasks) / len(tasks)

    before = mean_final()
    result = tele.meta_train(tasks, steps=steps, unroll=5, epochs=6)
    assert result.updates == 2 * len(tasks) * 6
    per_epoch = 2 * len(tasks)
    first = sum(result.meta_losses[:per_epoch])
    last = sum(result.meta_losses[-per_epoch:])
    assert last < 0.8 * first
    assert mean_final() < 0.8 * before


def test_meta_train_sampler_and_gd() -> None:
    model = _model((3, 3, 3))
    tele = LearnedTeleporter(model, _half_sq, config=_config())

    def sampler(i: int) -> MetaTask:
        return regression_task(model, 3, generator=_gen(i))

    result = tele.meta_train(sampler, num_tasks=2, steps=3, unroll=2)
    assert result.updates == 4  # windows 1-2 and 3 of each task
    assert len(result.final_losses) == 2
    gd = LearnedTeleporter.from_method(model, _half_sq, "GD")
    assert gd.meta_train(sampler, num_tasks=1, steps=2).updates == 0
    assert steps_to_threshold([3.0, 2.0, 0.5, 0.1], 1.0) == 2
    assert steps_to_threshold([3.0, 2.0], 1.0) is None


def test_bad_input() -> None:
    linear = ps.mlp([3, 4, 2], activation="identity", dtype=F64)  # GL(h) is not a batch action
    with pytest.raises(InvalidArgumentError, match="batch action"):
        LearnedTeleporter(linear, _half_sq)
    LearnedTeleporter(linear, _half_sq, teleport=False, config=_config())  # update only is fine
    with pytest.raises(InvalidArgumentError, match="batch action"):
        batch_actions(_model(), symmetries=[], action="auto")
    relu = ps.mlp([3, 4, 2], activation="relu", dtype=F64)  # σ = 0 on a half-line: none found
    with pytest.raises(InvalidArgumentError, match="no layer pair"):
        LearnedTeleporter(relu, _half_sq)
    pinv_only = [s for s in ps.symmetries(_model(), data_dependent=True) if "pinv" in s.name]
    with pytest.raises(InvalidArgumentError, match="InverseActivationGL"):
        LearnedTeleporter(
            _model(), _half_sq, symmetries=pinv_only, config=_config(action="inverse")
        )
    assert len(LearnedTeleporter(_model(), _half_sq, symmetries=pinv_only).actions) == 1
    with pytest.raises(InvalidArgumentError, match="update"):
        LearnedTeleporter(_model(), _half_sq, update="adam")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="unknown method"):
        LearnedTeleporter.from_method(_model(), _half_sq, "LSTM(tele)")
    with pytest.raises(InvalidArgumentError, match="lr_range"):
        LearnedTeleportConfig(lr_range=(1e-2, 1e-3))
    with pytest.raises(InvalidArgumentError, match="group_map"):
        LearnedTeleportConfig(group_map="cayley")  # type: ignore[arg-type]
    tele = LearnedTeleporter(_model(), _half_sq, config=_config())
    with pytest.raises(InvalidArgumentError, match="num_tasks"):
        tele.meta_train(lambda i: regression_task(_model(), 5), steps=2)
    with pytest.raises(InvalidArgumentError, match="steps"):
        tele.meta_train([regression_task(_model(), 5)], steps=0)
    with pytest.raises(InvalidArgumentError, match="lacks"):
        tele.step({}, (torch.zeros(5, 5, dtype=F64), torch.zeros(5, 5, dtype=F64)))
