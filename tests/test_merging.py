"""``ps.merge``: weighted averages of models, BatchNorm statistics recomputed, bad input named;
and the end to end use: a planted pair aligned by ``ps.align`` merges into the same network."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps

F64 = torch.float64


def _cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)
    ).to(F64)


def test_two_and_three_models_merge_to_their_weighted_average():
    a, b, c = (ps.mlp([3, 5, 2], seed=s).to(F64) for s in (0, 1, 2))
    mid = ps.merge([a, b], 0.25)
    for name, p in mid.named_parameters():
        expected = 0.75 * a.get_parameter(name) + 0.25 * b.get_parameter(name)
        torch.testing.assert_close(p, expected, rtol=0, atol=1e-15)
    three = ps.merge([a, b, c], [0.2, 0.3, 0.5])
    uniform = ps.merge([a, b, c])
    for name, p in three.named_parameters():
        parts = [m.get_parameter(name) for m in (a, b, c)]
        torch.testing.assert_close(p, 0.2 * parts[0] + 0.3 * parts[1] + 0.5 * parts[2])
        torch.testing.assert_close(uniform.get_parameter(name), sum(parts) / 3)
    assert ps.merge([a, b], 0.0).state_dict()["0.weight"].equal(a.state_dict()["0.weight"])
    assert a.get_parameter("0.weight").data_ptr() != mid.get_parameter("0.weight").data_ptr()


def test_batchnorm_statistics_are_those_of_the_merged_network():
    a, b = _cnn(0), _cnn(1)
    x = torch.randn(40, 1, 4, 4, dtype=F64)
    with pytest.warns(ps.ParamsymWarning, match="batchnorm_inputs"):
        stale = ps.merge([a, b], 0.5)
    merged = ps.merge([a, b], 0.5, batchnorm_inputs=x, batch_size=20)  # two equal batches
    conv = merged[0]
    activations = conv(x)  # what the merged network's BatchNorm sees
    torch.testing.assert_close(merged[1].running_mean, activations.mean(dim=(0, 2, 3)))
    assert not torch.allclose(stale[1].running_mean, merged[1].running_mean)
    assert not merged.training


def test_bad_input_is_named():
    a, b = ps.mlp([3, 5, 2], seed=0), ps.mlp([3, 5, 2], seed=1)
    with pytest.raises(ps.InvalidArgumentError, match=r"\[0, 1\]"):
        ps.merge([a, b], 1.5)
    with pytest.raises(ps.InvalidArgumentError, match="sum to 1"):
        ps.merge([a, b], [0.5, 0.6])
    with pytest.raises(ps.InvalidArgumentError, match="two or more"):
        ps.merge([a])
    with pytest.raises(ps.InvalidArgumentError, match="single α"):
        ps.merge([a, b, a], 0.5)
    with pytest.raises(ps.ShapeError):
        ps.merge([a, ps.mlp([3, 6, 2], seed=0)])


def test_an_aligned_planted_pair_merges_into_the_same_network():
    """B = g·A for a random element of every group of a folded GPT-2; after ``ps.align`` the
    midpoint of A and aligned B computes A's function (a zero barrier), while the midpoint of
    A and B as they are does not."""
    pytest.importorskip("transformers")
    from test_align import _folded, _input, _planted

    a, _ = _folded("gpt2")
    b = _planted("gpt2")
    x = _input("gpt2")
    result = ps.align(a, b, x)
    with torch.no_grad():
        reference = a(**x).logits
        aligned_mid = ps.merge([result.reference, result.model], 0.5)(**x).logits
        naive_mid = ps.merge([a, b], 0.5)(**x).logits
    scale = float(reference.abs().max())
    assert float((aligned_mid - reference).abs().max()) <= 1e-8 * scale
    assert float((naive_mid - reference).abs().max()) >= 1e-2 * scale


def test_learned_matching_never_ends_with_a_higher_midpoint_loss():
    """Two seeds of a character GPT-2 aligned data-free, then the orthogonal maps trained on
    the midpoint's loss: the midpoint loss falls (never rises: the best point is kept), the
    distance and loss histories are reported, and the aligned model is still B."""
    pytest.importorskip("transformers")
    from test_align import BLOCK, VOCAB, _gpt2, _trained_like

    a, b = (_trained_like(_gpt2(seed), seed) for seed in (0, 1))
    g = torch.Generator().manual_seed(3)
    ids = [torch.randint(0, VOCAB, (4, BLOCK), generator=g) for _ in range(3)]

    def loss_fn(output, targets):
        logits = output.logits[:, :-1]
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1)
        )

    batches = [({"input_ids": x}, x) for x in ids]
    weights = ps.align(a, b, batches[0][0], max_sweeps=3)
    config = ps.LearnedAlignConfig(steps=12, lr=0.05, eval_every=4)
    learned, record = ps.learn_alignment(weights, loss_fn, batches, config)
    assert record.loss_after < record.loss_before  # trained: the merge got better
    assert record.loss_after == min(loss for _, loss in record.history)
    assert [step for step, _ in record.history] == [0, 4, 8, 12]
    assert learned.method == "weights+learned"
    assert learned.model is not weights.model
    x = batches[0][0]
    with torch.no_grad():
        before, after = weights.model(**x).logits, learned.model(**x).logits
    assert float((after - before).abs().max()) <= 1e-10 * float(before.abs().max())
    with pytest.raises(ps.InvalidArgumentError, match="alpha"):
        ps.LearnedAlignConfig(alpha=2.0)
    with pytest.raises(ps.InvalidArgumentError, match="empty"):
        ps.learn_alignment(weights, loss_fn, [])


def test_vit_merging_names_a_bad_dataset_and_patch():
    from paramsym.experiments.merging.vit_merging import VitMergingConfig, run_vit_merging, vit
    from paramsym.experiments.registry import SilentProgress

    with pytest.raises(ps.InvalidArgumentError, match="dataset must be one of digits"):
        run_vit_merging(VitMergingConfig(dataset="cifar100", steps=1), SilentProgress())
    with pytest.raises(ps.InvalidArgumentError, match="patch 3 must divide the image side 8"):
        vit(VitMergingConfig(patch=3), (1, 8), 10, seed=0)
