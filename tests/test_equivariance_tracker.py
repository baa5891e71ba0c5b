"""IdentityTracker: seed 003's identities, charges, sharpness and gradient subspace along
training, each checked against what it must equal."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.equivariance.noether import layer_rescaling_generator


def _problem(seed: int = 0):
    torch.manual_seed(seed)
    model = ps.mlp([3, 5, 4, 2], activation="relu", bias=False, seed=seed).double()
    x = torch.randn(12, 3, dtype=torch.float64)
    y = torch.randn(12, 2, dtype=torch.float64)
    return model, nn.MSELoss(), (x, y)


def _train(model, loss_fn, batch, tracker, steps: int, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps + 1):
        tracker(step)
        if step == steps:
            break
        optimizer.zero_grad()
        loss_fn(model(batch[0]), batch[1]).backward()
        optimizer.step()


def test_tracker_records_identities_charges_and_sharpness_that_hold():
    model, loss_fn, batch = _problem()
    A = layer_rescaling_generator(ps.params_of(model), ["0.weight"], ["2.weight"])
    lr = 0.05
    tracker = ps.IdentityTracker(
        model,
        loss_fn,
        batch,
        transformations=[ps.equivariance.homogeneity(model)],
        charges={"rescaling01": A},
        lr=lr,
        sharpness=True,
        top_k=2,
    )
    _train(model, loss_fn, batch, tracker, steps=4, lr=lr)
    history = tracker.history
    assert history["step"] == [0, 1, 2, 3, 4]
    name = ps.equivariance.homogeneity(model).name
    for identity in ("item1", "item2a", "item2b_gg", "item2b_mixed", "consistency"):
        assert max(history[f"residual/{name}/{identity}"]) <= 1e-9
    # a quadratic charge changes under GD by exactly the predicted ½η²∇LᵀA∇L per step
    charge, predicted = history["charge/rescaling01"], history["gd_drift/rescaling01"]
    for t in range(4):
        change = charge[t + 1] - charge[t]
        assert change == pytest.approx(predicted[t], rel=1e-9, abs=1e-15)
    assert any(abs(p) > 1e-8 for p in predicted)  # the check above is not vacuous
    assert all(history["bound_holds"])
    assert all(
        b <= lam * (1 + 1e-8)
        for b, lam in zip(history["sharpness_bound"], history["lambda_max"], strict=True)
    )
    assert history["two_over_lr"] == [2 / lr] * 5
    assert all(0.0 <= f <= 1.0 + 1e-12 for f in history["top_k_gradient_fraction"])
    assert max(history["top_k_pair_residual"]) <= 1e-6  # Lanczos tolerance floor


def test_tracker_predicts_the_expected_sgd_drift_of_the_charge():
    model, loss_fn, batch = _problem(1)
    A = layer_rescaling_generator(ps.params_of(model), ["0.weight"], ["2.weight"])
    tracker = ps.IdentityTracker(model, loss_fn, batch, charges={"q": A}, lr=0.1, batch_size=3)
    assert tracker(0)
    row = {k: v[0] for k, v in tracker.history.items()}
    drift = ps.equivariance.noether.noether_drift(model, loss_fn, batch, A, 0.1, 3)
    assert row["sgd_drift/q"] == drift.sgd_drift
    assert row["gd_drift/q"] == drift.gd_drift
    assert row["sgd_drift/q"] != row["gd_drift/q"]  # the noise term is there


def test_tracker_records_only_every_kth_step():
    model, loss_fn, batch = _problem()
    tracker = ps.IdentityTracker(model, loss_fn, batch, every=2)
    assert [tracker(s) for s in range(5)] == [True, False, True, False, True]
    assert list(tracker.history) == ["step", "loss"]
    assert tracker.history["step"] == [0, 2, 4]


def test_tracker_refuses_bad_settings():
    model, loss_fn, batch = _problem()
    size = ps.flatten(ps.params_of(model)).numel()
    with pytest.raises(ps.InvalidArgumentError, match="every must be >= 1"):
        ps.IdentityTracker(model, loss_fn, batch, every=0)
    with pytest.raises(ps.InvalidArgumentError, match="needs lr"):
        ps.IdentityTracker(model, loss_fn, batch, batch_size=4)
    with pytest.raises(ps.ShapeError, match=rf"\({size}, {size}\) generator"):
        ps.IdentityTracker(model, loss_fn, batch, charges={"q": torch.eye(3)})
    skew = torch.zeros(size, size, dtype=torch.float64)
    skew[0, 1], skew[1, 0] = 1.0, -1.0
    with pytest.raises(ps.InvalidArgumentError, match="must be symmetric"):
        ps.IdentityTracker(model, loss_fn, batch, charges={"q": skew})
