"""``ps.learn_alignment`` reports the output change of the model it returns (issue 44): the
refined model against B as the user gave it, on the input ``ps.align`` measured on, not the
starting alignment's number carried over."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
import torch

import paramsym as ps
from paramsym.core.params import output_change
from paramsym.nn.hf import hf_example_input, hf_tiny

F64 = torch.float64


@functools.cache
def _aligned_pair() -> tuple[ps.AlignResult, list, object]:
    """Two seeds of a tiny GPT-2 with an LM head, aligned data-free; the training batches and
    the loss of next-token prediction."""
    pytest.importorskip("transformers")
    a, b = (hf_tiny("gpt2-lm", width=16, heads=2, seed=seed) for seed in (0, 1))
    inputs = [hf_example_input("gpt2-lm", seed=seed)["input_ids"] for seed in (1, 2)]
    batches = [({"input_ids": ids}, ids) for ids in inputs]

    def loss_fn(output, targets):
        logits = output.logits[:, :-1]
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1)
        )

    return ps.align(a, b, batches[0][0], max_sweeps=1), batches, loss_fn


def test_the_learned_alignment_reports_its_own_output_change():
    """The starting alignment's ``output_change`` replaced by a sentinel: the learned result
    must report its own model's change against B (recomputed here), not carry the sentinel
    over, and that change is rounding-sized (every learned element is orthogonal)."""
    start, batches, loss_fn = _aligned_pair()
    assert start.original is not None
    assert start.example_input is batches[0][0]
    flagged = replace(start, output_change=123.0)
    config = ps.LearnedAlignConfig(steps=4, lr=0.05, eval_every=2)
    learned, record = ps.learn_alignment(flagged, loss_fn, batches, config)
    assert record.loss_after <= record.loss_before
    true = output_change(start.original, learned.model, start.example_input)
    assert learned.output_change == true
    assert learned.output_change < 1e-10
    with torch.no_grad():
        moved = max(
            float((p - start.model.get_parameter(name)).abs().max())
            for name, p in learned.model.named_parameters()
        )
    assert moved > 1e-6  # the learning moved B: a change of its own to report
    assert learned.to_dict()["output_change"] == true


def test_an_alignment_made_without_b_reports_a_bound():
    """An ``AlignResult`` without the user's B (made by hand): the starting change plus the
    learned model's change against the starting one, on the first training input."""
    start, batches, loss_fn = _aligned_pair()
    bare = replace(start, original=None, example_input=None, output_change=0.5)
    config = ps.LearnedAlignConfig(steps=2, lr=0.05, eval_every=2)
    learned, _ = ps.learn_alignment(bare, loss_fn, batches, config)
    step = output_change(start.model, learned.model, batches[0][0])
    assert learned.output_change == 0.5 + step
