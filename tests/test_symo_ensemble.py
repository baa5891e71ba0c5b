"""Global curvature over ensembles of models (seed 002 Eqs. 2–3, 95, Lemma 2.4, Theorem 2.2;
Figs. 2–4, 7–9) in float64:

* the vmapped gradients, GD steps and Hessians equal per-model loops (``torch.func.grad``,
  ``ps.hessian``);
* an ensemble closed under the group (every G·θ of a few θ) has an exactly invariant
  covariance and global Hessian, also after GD steps (Theorem 2.2: GD keeps the ensemble's
  symmetry) — no Monte-Carlo noise;
* for random initialisations the projection residual ‖Σ − P(Σ)‖/‖Σ‖ falls as N grows;
* the factor-level ensemble estimate equals the projection of the dense covariance.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps
from helpers import relative_error
from paramsym.symo import (
    CurvatureStructure,
    Factors,
    GaussianInit,
    act,
    covariance_of,
    dense_action,
    ensemble_gradients,
    ensemble_moments,
    global_hessian,
    global_hessian_prefixes,
    gradient_covariance,
    group_elements,
    init_ensemble,
    projection_residual,
    projection_residuals,
    random_element,
    train_ensemble,
)

F64 = torch.float64


def _setup(activation: str, widths, bias: bool = True, n_data: int = 20, seed: int = 0):
    model = ps.mlp(list(widths), activation, bias=bias, dtype=F64)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_data, widths[0], generator=g, dtype=F64)
    teacher = ps.mlp(list(widths), activation, bias=bias, dtype=F64, seed=seed + 1)
    with torch.no_grad():
        y = teacher(x)
    return model, (x, y), CurvatureStructure.from_model(model)


def _per_model(stacked: dict[str, torch.Tensor], k: int) -> dict[str, torch.Tensor]:
    return {name: t[k] for name, t in stacked.items()}


def test_vmapped_gradients_steps_and_hessians_equal_per_model_loops():
    model, batch, s = _setup("tanh", (3, 4, 2))
    loss_fn = nn.MSELoss()
    stacked = init_ensemble(s, 3, seed=1)

    def loss(p):
        return loss_fn(ps.functional_call(model, p, batch[0]), batch[1])

    grads = ensemble_gradients(model, loss_fn, batch, stacked, chunk_size=2)
    trained = train_ensemble(model, loss_fn, batch, stacked, steps=2, lr=0.3)
    for k in range(3):
        theta = _per_model(stacked, k)
        expected = torch.func.grad(loss)(theta)
        assert relative_error(s.flatten(_per_model(grads, k)), s.flatten(expected)) < 1e-13
        for _ in range(2):
            theta = ps.axpy(-0.3, torch.func.grad(loss)(theta), theta)
        assert relative_error(s.flatten(_per_model(trained, k)), s.flatten(theta)) < 1e-13
    hessians = [ps.hessian(model, loss_fn, batch, _per_model(stacked, k)) for k in range(3)]
    ours = global_hessian_prefixes(model, loss_fn, batch, stacked, [1, 0], chunk_size=2)
    assert relative_error(ours[0], hessians[0]) < 1e-12
    assert relative_error(ours[1], torch.stack(hessians).mean(0)) < 1e-12
    assert relative_error(global_hessian(model, loss_fn, batch, stacked), ours[1]) < 1e-14


def test_dense_and_factor_ensemble_moments_agree():
    model, batch, s = _setup("relu", (3, 4, 3, 2))
    stacked = init_ensemble(s, 50, seed=2)
    grads = ensemble_gradients(model, nn.MSELoss(), batch, stacked)
    flat = s.flatten(grads)
    for center in (True, False):
        dense = gradient_covariance(model, nn.MSELoss(), batch, stacked, center=center)
        mean = flat.mean(0)
        expected = flat.T @ flat / 50 - (torch.outer(mean, mean) if center else 0)
        assert relative_error(dense.matrix, expected) < 1e-13
        moments = ensemble_moments(s, grads, center=center)
        projected = Factors.from_dense(s, dense.matrix)
        assert relative_error(moments.covariance.flat(), projected.flat()) < 1e-12
    # the reported mean is the invariant part of the sample mean: G-fixed, and the rest ⟂ it
    invariant = s.flatten(s.invariant_vector(moments.mean))
    g = dense_action(s, random_element(s, torch.Generator().manual_seed(5)))
    assert relative_error(g @ invariant, invariant) < 1e-14
    assert abs(float((flat.mean(0) - invariant) @ invariant)) < 1e-14 * float(invariant @ invariant)


def _orbit_ensemble(s: CurvatureStructure, n_seeds: int) -> dict[str, torch.Tensor]:
    """Every group image G·θ of ``n_seeds`` random θ: an exactly invariant ensemble."""
    seeds = init_ensemble(s, n_seeds, seed=3, init=GaussianInit(weight_power=0.5, bias_std=0.5))
    members = [act(s, seeds, element) for element in group_elements(s)]
    return {name: torch.cat([m[name] for m in members]) for name in seeds}


@pytest.mark.parametrize(("activation", "widths"), [("tanh", (2, 3, 2)), ("relu", (2, 3, 2, 2))])
def test_invariant_ensembles_have_exactly_structured_curvature(activation, widths):
    """Lemma 2.4 without sampling noise, and Theorem 2.2: after GD the ensemble is still
    invariant, so its covariance and mean Hessian still have the predicted structure."""
    model, batch, s = _setup(activation, widths)
    ensemble = _orbit_ensemble(s, 2)
    trained = train_ensemble(model, nn.MSELoss(), batch, ensemble, steps=3, lr=0.2)
    for stacked in (ensemble, trained):
        cov = gradient_covariance(model, nn.MSELoss(), batch, stacked)
        assert projection_residual(s, cov.matrix) < 1e-12
        mean = cov.mean
        invariant = s.flatten(s.invariant_vector(ensemble_moments(s, s.unflatten(mean[None])).mean))
        assert relative_error(invariant, mean) < 1e-12  # μ has only trivial coordinates
        hessian = global_hessian(model, nn.MSELoss(), batch, stacked, chunk_size=64)
        assert projection_residual(s, hessian) < 1e-12
    single = {k: v[:1] for k, v in ensemble.items()}  # one model is not invariant
    second = gradient_covariance(model, nn.MSELoss(), batch, single, center=False)
    assert projection_residual(s, second.matrix) > 0.1


def test_monte_carlo_residual_falls_with_the_number_of_models():
    """Figs. 2–3 setting (tanh, biases, widths 5): random inits, t = 0 and after GD steps."""
    model, batch, s = _setup("tanh", (5, 5, 5), n_data=50)
    stacked = init_ensemble(s, 1600, seed=4)
    for params in (stacked, train_ensemble(model, nn.MSELoss(), batch, stacked, steps=5, lr=0.2)):
        grads = ensemble_gradients(model, nn.MSELoss(), batch, params)
        residuals = projection_residuals(s, grads, [100, 400, 1600])
        assert residuals[0] > residuals[1] > residuals[2]
        assert residuals[2] < 0.6 * residuals[0]


def test_gaussian_init_and_bad_input():
    s = CurvatureStructure.from_widths([400, 30, 2], "permutation", bias=True)
    params = init_ensemble(s, 20, init=GaussianInit(weight_power=1.0, bias_std=0.25))
    assert params["0.weight"].shape == (20, 30, 400)
    assert abs(float(params["0.weight"].std()) - 1 / 400) < 0.05 / 400
    assert abs(float(params["0.bias"].std()) - 0.25) < 0.05
    small = CurvatureStructure.from_widths([3, 3, 2], "permutation", bias=True)
    structured = Factors.random(small, torch.Generator().manual_seed(0)).to_dense()
    assert projection_residual(small, structured) < 1e-14
    with pytest.raises(ps.InvalidArgumentError, match="zero"):
        projection_residual(small, torch.zeros_like(structured))
    with pytest.raises(ps.InvalidArgumentError, match="one leading model axis"):
        covariance_of(s, {k: v[0] for k, v in params.items()})
    with pytest.raises(ps.InvalidArgumentError, match="n must be"):
        init_ensemble(s, 0)
