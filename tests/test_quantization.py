"""Fake quantizers and cross-layer equalization (issue 31), against PyTorch's fake-quantize
ops, Nagel et al.'s closed form and the models' own outputs (float64)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.quantization import Quantizer, equalize, neuron_ranges
from paramsym.symmetry.base import Slot

F64 = torch.float64


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("granularity", ["tensor", "channel"])
@pytest.mark.parametrize("bits", [3, 4, 8])
def test_fake_quantization_is_pytorchs(symmetric, granularity, bits):
    x = torch.randn(6, 9, generator=torch.Generator().manual_seed(bits)) * torch.linspace(
        0.1, 3.0, 6
    ).unsqueeze(1)
    q = Quantizer(bits, granularity, symmetric)
    scale, zero = q.scale_and_zero(x)
    lowest, highest = q.levels
    if granularity == "tensor":
        expected = torch.fake_quantize_per_tensor_affine(
            x, float(scale), int(zero), lowest, highest
        )
    else:
        expected = torch.fake_quantize_per_channel_affine(
            x, scale.reshape(-1), zero.reshape(-1).int(), 0, lowest, highest
        )
    assert torch.equal(q.fake(x), expected)
    assert int(q.quantize(x).unique().numel()) <= 2**bits
    # float64 on the same grid, the error is the squared distance to it
    x64 = x.to(F64)
    assert torch.allclose(q.fake(x64), expected.to(F64), atol=1e-6)
    assert float(q.error(x64)) == pytest.approx(
        float((q.fake(x64) - x64).square().sum()), rel=1e-12
    )


def test_the_straight_through_estimator_passes_the_identitys_gradient():
    x = torch.randn(4, 5, dtype=F64, requires_grad=True)
    q = Quantizer(3)
    y = q.fake(x, ste=True)
    assert torch.equal(y.detach(), q.fake(x.detach()))
    (g,) = torch.autograd.grad((y * torch.arange(20.0, dtype=F64).reshape(4, 5)).sum(), x)
    assert torch.equal(g, torch.arange(20.0, dtype=F64).reshape(4, 5))


def test_an_asymmetric_grid_keeps_zero_and_a_constant_tensor_is_exact():
    q = Quantizer(4, symmetric=False)
    x = torch.tensor([0.0, 0.3, 1.7, 2.0])
    assert float(q.fake(x)[0]) == 0.0
    assert torch.equal(Quantizer(4).fake(torch.zeros(3)), torch.zeros(3))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bits": 0}, "bits must be between 2 and 16"),
        ({"bits": 17}, "bits must be between 2 and 16"),
        ({"bits": 1}, "bits must be between 2 and 16 for a symmetric grid"),
        ({"bits": True}, "bits must be an integer"),
        ({"granularity": "group"}, "granularity must be one of"),
    ],
)
def test_a_bad_quantizer_is_named(kwargs, match):
    with pytest.raises(ps.InvalidArgumentError, match=match):
        Quantizer(**kwargs)


def test_a_channel_axis_out_of_range_is_named():
    with pytest.raises(ps.ShapeError, match="channel axis 2 is out of range"):
        Quantizer(granularity="channel", axis=2).fake(torch.ones(3, 4))


def _two_layer(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)).to(F64)
    with torch.no_grad():  # channel ranges over three orders of magnitude
        model[0].weight.mul_(torch.logspace(-1.5, 1.5, 7, dtype=F64).unsqueeze(1))
    return model


def test_equalization_is_nagels_closed_form_on_two_layers():
    model = _two_layer()
    x = torch.randn(11, 5, dtype=F64)
    w1, b1, w2 = (t.detach().clone() for t in (model[0].weight, model[0].bias, model[2].weight))
    r1, r2 = w1.abs().amax(dim=1), w2.abs().amax(dim=0)
    s = torch.sqrt(r1 * r2) / r2  # Nagel et al. Eq. 11: W1 ← S⁻¹ W1, b1 ← S⁻¹ b1, W2 ← W2 S
    result = equalize(model, x)
    new = result.model
    assert result.sweeps <= 2  # one group: one closed-form step, one to see it is done
    assert result.converged
    assert torch.allclose(new[0].weight, w1 / s.unsqueeze(1), rtol=1e-13, atol=0)
    assert torch.allclose(new[0].bias, b1 / s, rtol=1e-13, atol=0)
    assert torch.allclose(new[2].weight, w2 * s.unsqueeze(0), rtol=1e-13, atol=0)
    ranges = torch.sqrt(r1 * r2)
    assert torch.allclose(new[0].weight.abs().amax(dim=1), ranges, rtol=1e-13)
    assert torch.allclose(new[2].weight.abs().amax(dim=0), ranges, rtol=1e-13)
    assert result.output_change <= 1e-13
    assert torch.equal(model[0].weight, w1)  # the given model is unchanged


def _conv_chain() -> nn.Sequential:
    """MobileNetV2's inverted residual without its skip, BatchNorm folded (ReLU for ReLU6):
    1×1 expansion, 3×3 depthwise, 1×1 projection, then a classifier."""
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Conv2d(2, 8, 1), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU(),
        nn.Conv2d(8, 4, 1), nn.ReLU(),
        nn.Flatten(), nn.Linear(4 * 6 * 6, 5),
    ).to(F64)  # fmt: skip
    with torch.no_grad():
        model[0].weight.mul_(torch.logspace(-2, 1, 8, dtype=F64).reshape(8, 1, 1, 1))
    return model


def test_equalization_keeps_a_depthwise_chain_and_equalises_every_joint():
    model, x = _conv_chain(), torch.randn(3, 2, 6, 6, dtype=F64)
    result = equalize(model, x, tol=1e-12)
    assert result.converged
    assert len(result.groups) == 3  # expansion → depthwise → projection → classifier
    assert result.output_change <= 1e-12
    found = ps.quantization.equalizable(ps.symmetries(result.model, example_input=x))
    state = dict(result.model.named_parameters())
    for s in found:  # at the fixed point every channel's two ranges agree
        incoming = [t for t in s.slots if t.power > 0 and state[t.name].ndim > 1]
        outgoing = [t for t in s.slots if t.power < 0 and state[t.name].ndim > 1]
        r_in = torch.stack([neuron_ranges(state[t.name], t, s.width) for t in incoming]).amax(0)
        r_out = torch.stack([neuron_ranges(state[t.name], t, s.width) for t in outgoing]).amax(0)
        assert torch.allclose(r_in, r_out, rtol=1e-9), s.name
    # per-tensor 4-bit weights: with the planted imbalance gone, the output error falls
    q = Quantizer(4)

    def quantized_error(m: nn.Module) -> float:
        state = {
            k: q.fake(p.detach()) if p.ndim > 1 else p.detach() for k, p in m.named_parameters()
        }
        with torch.no_grad():
            reference = m(x)
            out = torch.func.functional_call(m, state, (x,))
        return float((out - reference).norm() / reference.norm())

    assert quantized_error(result.model) < 0.75 * quantized_error(model)  # measured: 0.62×


def test_neuron_ranges_read_a_block_of_a_longer_axis():
    t = torch.arange(24.0).reshape(6, 4) - 12
    slot = Slot("w", axis=0, offset=2, block=2)
    assert torch.equal(neuron_ranges(t, slot, 2), torch.tensor([4.0, 11.0]))


def test_a_model_without_a_rescaling_between_weights_is_named():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 3))
    model.eval()
    with pytest.raises(ps.UnsupportedModuleError, match="fuse_conv_bn_eval"):
        equalize(model, torch.randn(2, 1, 8, 8))
    with pytest.raises(ps.InvalidArgumentError, match="max_sweeps"):
        equalize(_two_layer(), torch.randn(2, 5, dtype=F64), max_sweeps=0)


def test_a_teleport_lowers_the_weight_error_and_keeps_the_function():
    model, x = _conv_chain(), torch.randn(16, 2, 6, 6, dtype=F64)
    y = torch.randint(0, 5, (16,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(x)
    objective = ps.quantization.WeightError(bits=4)
    start = float(objective.value({k: v.detach() for k, v in model.named_parameters()}))
    result = ps.teleport(
        model, nn.functional.cross_entropy, (x, y), objective=objective, steps=30, lr=0.1
    )
    # the teleport sums the unmoved weights' terms once: the same value
    assert result.objective_before == pytest.approx(start, rel=1e-12)
    moved = float(objective.value({k: v.detach() for k, v in model.named_parameters()}))
    assert result.objective_after == pytest.approx(moved, rel=1e-10)
    assert result.objective_after < 0.85 * result.objective_before  # measured 0.91 → 0.72
    assert result.approximate == []  # exact symmetries only
    with torch.no_grad():
        assert float((model(x) - before).norm() / before.norm()) < 1e-10
    # the closed form of the rescalings' equal-range point goes further (0.45): the objective
    # is a sum of maxima, which gradient steps approach slowly
    equalized = equalize(_conv_chain(), x).model
    state = {k: v.detach() for k, v in equalized.named_parameters()}
    assert float(objective.value(state)) < result.objective_after


def test_the_weight_error_sums_the_unmoved_weights_once():
    """In a teleport the terms of weights no symmetry moves are summed at the start, without a
    graph: the value is the same, and only the moved weights get a gradient."""
    from paramsym.teleportation.objectives import TeleportContext

    model = _two_layer()
    state = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
    objective = ps.quantization.WeightError(bits=4)
    scaling = next(s for s in ps.symmetries(model) if isinstance(s, ps.PositiveScaling))
    objective.start([], state, None)  # nothing moves: all constant
    context = TeleportContext(model, state, nn.functional.mse_loss, (None, None))
    expected = float(objective.value(state).detach())
    assert float(objective(context)) == pytest.approx(expected, rel=1e-14)
    assert not objective(context).requires_grad
    objective.start([scaling], state, None)
    value = objective(context)
    assert float(value.detach()) == pytest.approx(expected, rel=1e-14)
    grads = torch.autograd.grad(value, list(state.values()), allow_unused=True)
    moved = set(scaling.parameter_names)
    for name, g in zip(state, grads, strict=True):
        assert (g is not None) == (name in moved and state[name].ndim >= 2), name


def test_the_weight_error_names_its_bad_input():
    with pytest.raises(ps.InvalidArgumentError, match="bits must be between 2 and 16"):
        ps.quantization.WeightError(bits=0)
    state = {k: v.detach() for k, v in _two_layer().named_parameters()}
    with pytest.raises(ps.InvalidArgumentError, match="no parameter named 'w'"):
        ps.quantization.WeightError(parameters=["w"]).value(state)
    with pytest.raises(ps.InvalidArgumentError, match=r"'0\.bias' has shape"):
        ps.quantization.WeightError(parameters=["0.bias"]).value(state)
    with pytest.raises(ps.InvalidArgumentError, match="no weight to quantize"):
        ps.quantization.WeightError().value({"b": torch.ones(3)})


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_smoothing_is_smoothquants_formula_and_keeps_the_function(kind):
    """On Hugging Face decoders from small configs (float64, dict input, default settings),
    SmoothQuant's s_j = max|X_j|^α / max|W_j|^(1−α) at α = 0.5: the readers' inputs (measured
    here by hooks) are divided by s, and every moved channel's activation and weight ranges
    end equal, the function kept to 1e-10."""
    from paramsym.nn.hf import hf_example_input, hf_tiny

    model, x = hf_tiny(kind).to(F64).eval(), hf_example_input(kind)
    with torch.no_grad():  # trained-like norm gains, one channel with a large one
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, dtype=F64))
                p[3] = 20.0
    result = ps.quantization.smooth(model, x)
    assert result.output_change <= 1e-10
    assert len(result.groups) >= 2
    found = {s.name: s for s in ps.symmetries(model, example_input=x)}
    modules = dict(model.named_modules())
    after = {k: v.detach() for k, v in result.model.named_parameters()}
    for name in result.groups:
        s = found[name]
        outgoing = [t for t in s.slots if t.power < 0]
        readers = [t.name.rpartition(".")[0] for t in outgoing]
        assert all(type(modules[r]).__name__ in ("Linear", "Conv1D") for r in readers)
        seen = ps.quantization.activation_ranges(model, readers, x)
        x_before = torch.stack([seen[r] for r in readers]).amax(0)
        seen = ps.quantization.activation_ranges(result.model, readers, x)
        x_after = torch.stack([seen[r] for r in readers]).amax(0)
        w_after = torch.stack([neuron_ranges(after[t.name], t, s.width) for t in outgoing]).amax(0)
        # the readers' inputs were divided by s, and at α = 0.5 both ranges are now equal
        assert torch.allclose(x_after, x_before / result.scales[name], rtol=1e-10), name
        assert torch.allclose(x_after, w_after, rtol=1e-10), name


def test_smoothing_names_its_bad_input():
    with pytest.raises(ps.InvalidArgumentError, match=r"alpha must be in \[0, 1\]"):
        ps.quantization.smooth(_two_layer(), torch.randn(2, 5, dtype=F64), alpha=1.5)
    convolutions = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 3)).to(F64)
    with pytest.raises(ps.UnsupportedModuleError, match="no exact rescaling whose readers"):
        ps.quantization.smooth(convolutions, torch.randn(2, 1, 8, 8, dtype=F64))


def test_smoothing_reads_a_flattened_channel_as_its_block_of_features():
    """The classifier of the conv chain reads each of the last convolution's 4 channels as 36
    flattened features: only that group has a linear reader, and its channel range is the
    largest of the 36."""
    model, x = _conv_chain(), torch.randn(3, 2, 6, 6, dtype=F64)
    result = ps.quantization.smooth(model, x)
    assert result.groups == ["rescaling[4->7]"]
    assert result.output_change <= 1e-12
    (features,) = ps.quantization.activation_ranges(model, ["7"], x).values()
    assert torch.equal(result.activation_ranges["rescaling[4->7]"], features.reshape(4, 36).amax(1))
