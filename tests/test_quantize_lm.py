"""``quantize-lm`` (issue 31) at a tiny size: every method's model keeps the float function, the
claims are evaluated, the outlier is trained in and held, and bad settings are named."""

from __future__ import annotations

import math

import pytest
import torch

import paramsym as ps
from paramsym.experiments.quantize_lm import (
    CLAIMS,
    METHODS,
    QuantizeLMConfig,
    hold_outlier,
    run_quantize_lm,
    scheme,
)
from paramsym.experiments.registry import SilentProgress

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

# the GPT-2-style family here; tests/demo_reduced.py runs the Llama-style one at this size
TINY = QuantizeLMConfig(
    families=("gpt2",), seeds=1, width=32, steps=20, batch_size=8, block_size=16,
    schemes=("W8A8", "W4A4"), eval_blocks=16, learned_steps=4, learned_batches=2, teleport_steps=2,
)  # fmt: skip


@pytest.fixture(scope="module")
def tiny() -> ps.experiments.Result:
    return run_quantize_lm(TINY, SilentProgress())


def test_a_tiny_run_measures_every_method_and_evaluates_its_claims(tiny):
    for family in TINY.families:
        for name in TINY.schemes:
            for method in METHODS:
                value = tiny.metrics[f"{family}_{name}_{method}"]
                assert math.isfinite(value), (family, name, method)
                assert value > 1.0, (family, name, method)
        # 8-bit weights and activations cost little; 4-bit ones cost more as trained
        assert tiny.metrics[f"{family}_W8A8_rtn"] < tiny.metrics[f"{family}_W4A4_rtn"]
    outcomes = [claim.evaluate(tiny) for claim in CLAIMS]
    assert all(o.holds is not None for o in outcomes), [o.measured for o in outcomes]
    assert outcomes[-1].holds, outcomes[-1].measured  # every move keeps the function
    assert tiny.metrics["max_output_change"] <= 1e-4
    # the outlier was held through training (only weight decay shrank it a little)
    assert all(4.0 < v <= TINY.outlier_gain for v in tiny.metrics["outlier_after_training"])


@pytest.mark.parametrize("site", ["stream", "norm"])
def test_the_outlier_is_held_against_the_gradient(site):
    from paramsym.experiments.merging.char_lm import char_llama

    model = char_llama(20, 8, width=16, layers=1, heads=2, kv_heads=1)
    handles = hold_outlier(model, site, 10.0, 3)
    ids = torch.randint(0, 20, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    held = (
        [model.get_input_embeddings().weight]
        if site == "stream"
        else [p for n, p in model.named_parameters() if "norm" in n]
    )
    assert held
    for weight in held:
        assert torch.all(weight[..., 3] == 10.0)
        assert torch.all(weight.grad[..., 3] == 0.0)
        assert bool(weight.grad.ne(0).any())  # the other features train
    for handle in handles:
        handle.remove()


def test_bad_settings_are_named():
    with pytest.raises(ps.InvalidArgumentError, match="families must be among"):
        run_quantize_lm(QuantizeLMConfig(families=("bert",)), SilentProgress())
    with pytest.raises(ps.InvalidArgumentError, match="W<bits>A<bits>"):
        scheme("int4")
    with pytest.raises(ps.InvalidArgumentError, match="bits must be between"):
        scheme("W1A8")
    with pytest.raises(ps.InvalidArgumentError, match="outlier_site must be one of"):
        run_quantize_lm(QuantizeLMConfig(outlier_site="head"), SilentProgress())
