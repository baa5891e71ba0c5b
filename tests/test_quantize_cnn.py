"""``quantize-cnn`` (issue 31): the MobileNetV2-style CNN's BatchNorm fold and cross-layer
equalization keep its function (float64), a tiny run evaluates every claim and draws the
figure, and bad input is named."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import pytest
import torch

import paramsym as ps
from paramsym.experiments import registry
from paramsym.experiments.quantize_cnn import (
    MobileNetV2Like,
    QuantizeCnnConfig,
    fold_batchnorm,
    run_quantize_cnn,
)
from paramsym.experiments.registry import SilentProgress

F64 = torch.float64

TINY = QuantizeCnnConfig(
    stem=8,
    blocks="8/1,12/2,12/1",
    expand=2,
    head=16,
    steps=15,
    runs=2,
    bits="8,4,3",
    eval_samples=120,
)


def _trained_looking_cnn() -> MobileNetV2Like:
    """A float64 CNN in eval mode whose BatchNorms have non-default statistics and affine
    parameters (a fold of default ones would test little)."""
    torch.manual_seed(0)
    model = MobileNetV2Like(1, 10, stem=8, blocks=((8, 1), (12, 2), (12, 1)), expand=2, head=16)
    model = model.to(F64)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                n = module.num_features
                module.running_mean.copy_(torch.randn(n, dtype=F64))
                module.running_var.copy_(torch.rand(n, dtype=F64) * 3 + 0.1)
                module.weight.copy_(torch.randn(n, dtype=F64))
                module.bias.copy_(torch.randn(n, dtype=F64))
    return model.eval()


def test_batchnorm_fold_and_equalization_keep_the_logits():
    model = _trained_looking_cnn()
    x = torch.rand(16, 1, 16, 16, dtype=F64)
    folded = fold_batchnorm(model)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())  # unchanged
    with torch.no_grad():
        reference, after_fold = model(x), folded(x)
    torch.testing.assert_close(after_fold, reference, rtol=0, atol=1e-10 * reference.abs().max())
    with pytest.raises(ps.UnsupportedModuleError, match="fuse_conv_bn_eval"):
        ps.quantization.equalize(model, x)  # BatchNorm between the convs: fold first
    result = ps.quantization.equalize(folded, x)
    assert result.converged
    assert len(result.groups) >= 7  # 2 per block, stem/stream, head
    with torch.no_grad():
        after = result.model(x)
    torch.testing.assert_close(after, reference, rtol=0, atol=1e-10 * reference.abs().max())
    assert result.output_change <= 1e-10
    moved = [float(s.log().abs().max()) for s in result.scales.values()]
    assert max(moved) > 0.1  # equalization did move the weights


def test_fake_quantization_leaves_biases_and_puts_weights_on_the_grid():
    folded = fold_batchnorm(_trained_looking_cnn())
    quantized = ps.quantization.fake_quantize(folded, ps.quantization.Quantizer(3))
    for (name, before), after in zip(
        folded.named_parameters(), quantized.parameters(), strict=True
    ):
        if before.ndim >= 2:
            assert after.unique().numel() <= 7, name  # 3-bit symmetric grid: 7 levels
        else:
            assert torch.equal(after, before), name


def test_tiny_run_evaluates_every_claim_and_draws_the_figure():
    result = run_quantize_cnn(TINY, SilentProgress())
    m = result.metrics
    assert m["seeds"] == [0, 1]
    assert m["bits"] == [8, 4, 3]
    assert m["fold_change"] <= 1e-10
    assert m["equalization_change"] <= 1e-10
    for method in ("float", "rtn", "equalized", "per_channel"):
        assert len(m[f"{method}_accuracy_4_seeds"]) == 2
        assert 0.0 <= m[f"{method}_accuracy_4"] <= 1.0
    assert m["float_logit_error_4"] == 0.0
    assert m["rtn_logit_error_3"] > 0.0
    assert len(result.series["per_seed"]["accuracy"]) == 2 * 3 * 4
    outcomes = registry.get("quantize-cnn").evaluate(result)
    assert len(outcomes) == 3
    assert all(isinstance(o.holds, bool) for o in outcomes), outcomes
    assert outcomes[0].holds, outcomes[0]  # the function is kept at any size
    assert "recovered" in outcomes[1].measured
    figures = registry.get("quantize-cnn").plot(result)
    assert set(figures) == {"accuracy_vs_bits.png"}
    for figure in figures.values():
        plt.close(figure)
    no_eight = registry.get("quantize-cnn").evaluate(
        dataclasses.replace(result, metrics={**m, "bits": [4, 3]})
    )
    assert no_eight[2].holds is None
    assert no_eight[2].measured.startswith("not evaluated")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dataset": "cifar100"}, "dataset must be one of digits, mnist, cifar10"),
        ({"blocks": "16-1"}, "blocks must be 'out/stride' pairs"),
        ({"bits": "8,1"}, "bits must be between 2 and 16"),
        ({"bits": "eight"}, "bits must be integers"),
        ({"runs": 0}, "runs ≥ 1"),
    ],
)
def test_bad_input_is_named(overrides, message):
    config = dataclasses.replace(TINY, **overrides)
    with pytest.raises(ps.InvalidArgumentError, match=message):
        run_quantize_cnn(config, SilentProgress())
