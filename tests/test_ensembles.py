"""Group ensembles (dissertation §2.9) and the attacks, in float64, against oracles: the
library's own pseudo-inverse action, brute-force voting, autograd input gradients, and the
exactness / Prop 3.4.1 bounds of the batch action."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import paramsym as ps
from helpers import params_relative_error, randomize_, relative_error
from paramsym.ensembles import (
    KINDS,
    EnsembleConfig,
    accuracy,
    attack_accuracy,
    fgsm,
    group_ensemble,
    interpolated_permutation,
    majority_vote,
    pgd,
    pseudo_inverse_mixing,
)
from paramsym.symmetry import PseudoInverseGL

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _classifier(widths=(4, 8, 3), activation="leaky_relu", seed=0) -> nn.Sequential:
    model = ps.mlp(list(widths), activation, dtype=F64)
    randomize_(model, _gen(seed))
    return model


def _inputs(k: int, n: int = 4, seed: int = 1) -> torch.Tensor:
    return torch.randn(k, n, generator=_gen(seed), dtype=F64)


def _pinv(model: nn.Module) -> PseudoInverseGL:
    return [s for s in ps.symmetries(model, data_dependent=True) if isinstance(s, PseudoInverseGL)][
        -1
    ]


def test_group_members_are_the_library_action_and_exact_on_small_batches():
    model = _classifier()
    x = _inputs(6)  # 6 ≤ h = 8 samples: σ(gH) has full column rank
    ensemble = group_ensemble(model, x, epsilon=0.3, members=4, generator=2)
    assert ensemble.exact
    assert max(ensemble.layer_changes) <= 1e-12
    action = _pinv(model)
    theta = ps.params_of(model)
    for member, params in zip(ensemble.members, ensemble.member_params(), strict=True):
        oracle = action.act(theta, member.g, x)
        assert params_relative_error(params, oracle) <= 1e-13
        assert relative_error(ps.functional_call(model, params, x), model(x)) <= 1e-12
        assert params_relative_error(params, theta) > 1e-2  # the members really moved
    assert torch.equal(ensemble.predict(x), model(x).argmax(dim=1))


def test_group_members_change_the_layer_by_at_most_its_norm_on_large_batches():
    """k > h: not exact, but ‖Uσ(H) − U′σ(gH)‖ ≤ ‖Uσ(H)‖ (Prop 3.4.1)."""
    model = _classifier()
    ensemble = group_ensemble(model, _inputs(20), epsilon=0.5, members=6, generator=3)
    assert not ensemble.exact
    assert all(0.0 < change <= 1.0 + 1e-12 for change in ensemble.layer_changes)


def test_pseudo_inverse_mixing_is_the_action_on_u():
    model = _classifier()
    action = _pinv(model)
    theta = ps.params_of(model)
    g = action.sample(scale=0.4, generator=_gen(4), dtype=F64)
    for k in (5, 12):
        x = _inputs(k)
        pi = pseudo_inverse_mixing(action.pair, theta, g, x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ps.ApproximateActionWarning)
            moved = action.act(theta, g, x)
        assert relative_error(theta["2.weight"] @ pi, moved["2.weight"]) <= 1e-13


def test_shuffle_permutes_the_entries_of_pi():
    model = _classifier()
    x = _inputs(10)
    group = group_ensemble(model, x, epsilon=0.2, members=3, generator=5)
    shuffled = group_ensemble(model, x, kind="shuffle", epsilon=0.2, members=3, generator=5)
    theta = ps.params_of(model)
    u = theta["2.weight"]
    for member, params in zip(shuffled.members, shuffled.member_params(), strict=True):
        pi = pseudo_inverse_mixing(_pinv(model).pair, theta, member.g, x)
        expected = u @ pi.reshape(-1)[member.shuffle].reshape(pi.shape)
        assert relative_error(params["2.weight"], expected) <= 1e-14
        assert torch.equal(
            torch.sort(pi.reshape(-1)[member.shuffle]).values, torch.sort(pi.reshape(-1)).values
        )
    # same generator, same first g: that member differs from the group one only in U
    a, b = group.member_params()[0], shuffled.member_params()[0]
    assert torch.equal(a["0.weight"], b["0.weight"])
    assert not torch.allclose(a["2.weight"], b["2.weight"])


@pytest.mark.parametrize("kind", ["group", "g_inverse", "random_diagonal", "perm_interp"])
def test_epsilon_zero_members_are_the_model(kind):
    model = _classifier()
    x = _inputs(12)
    ensemble = group_ensemble(model, x, kind=kind, epsilon=0.0, members=2, generator=6)
    for params in ensemble.member_params():
        assert params_relative_error(params, ps.params_of(model)) <= 1e-13
    assert max(ensemble.layer_changes) <= 1e-13


def test_baseline_formulas():
    model = _classifier()
    theta = ps.params_of(model)
    x = _inputs(12)
    w, b, u = theta["0.weight"], theta["0.bias"], theta["2.weight"]
    for kind in ("g_inverse", "random_diagonal", "perm_interp"):
        ensemble = group_ensemble(model, x, kind=kind, epsilon=0.3, members=2, generator=7)
        for member, params in zip(ensemble.members, ensemble.member_params(), strict=True):
            if kind == "perm_interp":
                p = member.mixing
                expected = (p @ w, p @ b, u @ torch.linalg.inv(p))
            elif kind == "g_inverse":
                expected = (member.g @ w, member.g @ b, u @ torch.linalg.inv(member.g))
            else:
                g_prime = member.mixing
                assert torch.equal(g_prime, torch.diag(torch.diagonal(g_prime)))
                expected = (member.g @ w, member.g @ b, u @ g_prime)
            got = (params["0.weight"], params["0.bias"], params["2.weight"])
            for a, e in zip(got, expected, strict=True):
                assert relative_error(a, e) <= 1e-13, kind
        assert not ensemble.exact  # baselines are not symmetries of a leaky ReLU layer


def test_interpolated_permutation():
    s = torch.tensor([2, 0, 1, 4, 3])
    eye = torch.eye(5, dtype=F64)
    for eps in (0.0, 0.5, 3.0):
        p = interpolated_permutation(s, eps)
        assert torch.allclose(p.sum(0), torch.ones(5, dtype=F64), atol=1e-15)
        assert torch.allclose(p.sum(1), torch.ones(5, dtype=F64), atol=1e-15)
        assert abs(float(torch.linalg.det(p))) > 1e-3  # invertible even with a 2-cycle
    assert torch.equal(interpolated_permutation(s, 0.0), eye)
    far = interpolated_permutation(s, 1e9)
    assert torch.allclose(far, 0.5 * (eye + eye[s]), atol=1e-8)


def test_batch_reference_recomputes_pi_for_each_batch():
    model = _classifier()
    ensemble = group_ensemble(model, epsilon=0.4, members=3, reference="batch", generator=8)
    assert ensemble.layer_changes == []
    a, b = _inputs(5, seed=9), _inputs(5, seed=10)
    # exact on any batch of at most h samples: every member reproduces the model there
    for x in (a, b):
        outputs = ensemble.member_outputs(x)
        assert relative_error(outputs, model(x).expand_as(outputs)) <= 1e-12
    first, second = ensemble.member_params(a), ensemble.member_params(b)
    assert torch.equal(first[0]["0.weight"], second[0]["0.weight"])  # g V does not depend on x
    assert not torch.allclose(first[0]["2.weight"], second[0]["2.weight"])  # U π(g, H) does
    with pytest.raises(ps.InvalidArgumentError, match="pass x"):
        ensemble.member_params()


def test_convolutional_prefix_runs_once_and_gives_the_full_model_outputs():
    model = nn.Sequential(
        nn.Conv2d(1, 3, 3), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(12, 10), nn.LeakyReLU(0.1),
        nn.Linear(10, 4),
    ).double()  # fmt: skip
    randomize_(model, _gen(11))
    x = torch.randn(6, 1, 6, 6, generator=_gen(12), dtype=F64)
    for reference in ("fixed", "batch"):
        ensemble = group_ensemble(
            model, x, epsilon=0.2, members=3, reference=reference, generator=13
        )
        outputs = ensemble.member_outputs(x)
        oracle = torch.stack([ps.functional_call(model, p, x) for p in ensemble.member_params(x)])
        assert relative_error(outputs, oracle) <= 1e-13
        assert relative_error(outputs, model(x).expand_as(outputs)) <= 1e-10  # 6 ≤ 10: exact


def test_majority_vote_against_counting():
    g = _gen(14)
    for _ in range(20):
        outputs = torch.randn(5, 7, 3, generator=g, dtype=F64)
        labels = outputs.argmax(dim=-1)
        probabilities = torch.softmax(outputs, dim=-1).mean(dim=0)
        votes = majority_vote(outputs)
        for j in range(7):
            counts = Counter(labels[:, j].tolist())
            best = max(counts.values())
            tied = [c for c, n in counts.items() if n == best]
            expected = max(tied, key=lambda c: float(probabilities[j, c]))
            assert int(votes[j]) == expected
    with pytest.raises(ps.ShapeError, match="members, samples, classes"):
        majority_vote(torch.zeros(3, 4))


# -- attacks --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    """Three Gaussian blobs in R^4 and a 4-16-3 leaky ReLU net trained on them."""
    g = _gen(15)
    centres = 2.0 * torch.randn(3, 4, generator=g, dtype=F64)
    y = torch.randint(0, 3, (150,), generator=g)
    x = centres[y] + torch.randn(150, 4, generator=g, dtype=F64)
    model = ps.mlp([4, 16, 3], "leaky_relu", seed=0, dtype=F64)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(150):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model, x, y


def test_fgsm_is_the_signed_input_gradient(trained):
    model, x, y = trained
    epsilon = 0.1
    leaf = x.clone().requires_grad_(True)
    # the summed loss: each sample's gradient is k times that of the mean, same signs
    (gradient,) = torch.autograd.grad(F.cross_entropy(model(leaf), y, reduction="sum"), leaf)
    attacked = fgsm(model, F.cross_entropy, x, y, epsilon)
    assert torch.equal(attacked, x + epsilon * gradient.sign())
    clamped = fgsm(model, F.cross_entropy, x, y, 5.0, clamp=(-1.0, 1.0))
    assert float(clamped.abs().max()) <= 1.0
    assert F.cross_entropy(model(attacked), y) > F.cross_entropy(model(x), y)


def test_pgd_stays_in_the_ball_and_reduces_to_fgsm(trained):
    model, x, y = trained
    epsilon = 0.2
    attacked = pgd(model, F.cross_entropy, x, y, epsilon, steps=5, generator=16)
    assert float((attacked - x).abs().max()) <= epsilon + 1e-15
    one_step = pgd(
        model, F.cross_entropy, x, y, epsilon, steps=1, step_size=epsilon, random_start=False
    )
    assert torch.equal(one_step, fgsm(model, F.cross_entropy, x, y, epsilon))
    loss_clean = F.cross_entropy(model(x), y)
    assert F.cross_entropy(model(attacked), y) > loss_clean


def test_attack_curves_for_a_model_and_its_ensemble(trained):
    model, x, y = trained
    clean = accuracy(model, x, y)
    assert clean > 0.9
    ensemble = group_ensemble(model, x[:40], epsilon=0.05, members=5, generator=17)
    curve = attack_accuracy(model, model, F.cross_entropy, x, y, [0.0, 0.5, 2.0])
    assert curve.accuracy[0] == clean
    assert curve.accuracy[2] < curve.accuracy[0]  # a strong attack hurts
    white_box = attack_accuracy(
        ensemble,
        ensemble.predict,
        F.cross_entropy,
        x,
        y,
        [0.0, 1.0],
        attack="pgd",
        steps=3,
        generator=18,
    )
    assert white_box.accuracy[0] == accuracy(ensemble.predict, x, y)
    assert white_box.accuracy[1] < white_box.accuracy[0]
    assert white_box.settings == {"steps": 3, "generator": 18}
    with pytest.raises(ps.InvalidArgumentError, match="attack"):
        attack_accuracy(model, model, F.cross_entropy, x, y, [0.1], attack="cw")


def test_ensemble_logits_are_differentiable_through_batch_pi():
    model = _classifier()
    ensemble = group_ensemble(model, epsilon=0.3, members=2, reference="batch", generator=19)
    x = _inputs(12).requires_grad_(True)
    (gradient,) = torch.autograd.grad(ensemble.logits(x).sum(), x)
    assert bool(torch.isfinite(gradient).all())
    assert float(gradient.abs().max()) > 0


# -- bad input ------------------------------------------------------------------------------------


def test_bad_configurations_are_named():
    model = _classifier()
    x = _inputs(5)
    with pytest.raises(ps.InvalidArgumentError, match="kind"):
        group_ensemble(model, x, kind="dropout")
    with pytest.raises(ps.InvalidArgumentError, match="members"):
        EnsembleConfig(members=0)
    with pytest.raises(ps.InvalidArgumentError, match="epsilon"):
        EnsembleConfig(epsilon=-1.0)
    with pytest.raises(ps.InvalidArgumentError, match="x_reference"):
        group_ensemble(model)
    with pytest.raises(ps.InvalidArgumentError, match="no hidden layer"):
        group_ensemble(_classifier(activation="relu"), x)  # ReLU vanishes off zero
    with pytest.raises(ps.InvalidArgumentError, match="PseudoInverseGL"):
        group_ensemble(model, x, symmetry=ps.symmetries(model)[0])
    with pytest.raises(ps.InvalidArgumentError, match="epsilon"):
        fgsm(model, F.cross_entropy, x, torch.zeros(5, dtype=torch.long), -0.1)
    with pytest.raises(ps.InvalidArgumentError, match="steps"):
        pgd(model, F.cross_entropy, x, torch.zeros(5, dtype=torch.long), 0.1, steps=0)
    with pytest.raises(ps.ShapeError, match="labels"):
        accuracy(model, x, torch.zeros(4, dtype=torch.long))
    assert set(KINDS) == {"group", "g_inverse", "random_diagonal", "shuffle", "perm_interp"}
