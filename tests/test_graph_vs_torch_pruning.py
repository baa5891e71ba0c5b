"""Permutation spaces found on the graph against Torch-Pruning's coupled channel groups.

Channels that must be pruned together are channels that must be permuted together: on CNNs,
ResNets and residual MLPs the two must agree exactly. On attention Torch-Pruning over-couples
(it treats the fused attention op as element-wise, so q, k, v and the output projection form
one group, across heads); there every permutation space paramsym finds must lie inside one of
its groups, and paramsym's are finer (per head, queries with keys, values with the output).
"""

from __future__ import annotations

import pytest
import torch

import paramsym as ps
from paramsym.nn.zoo import ZOO
from paramsym.symmetry import HeadPermutation

oracle = pytest.importorskip("oracles.torch_pruning_groups")
pytest.importorskip("torch_pruning")


def permutation_spaces(model, x) -> set[frozenset[tuple[str, int]]]:
    params = dict(model.named_parameters())
    return {
        frozenset((slot.name, slot.axis) for slot in s.slots if slot.name in params)
        for s in ps.symmetries(model, example_input=x)
        if isinstance(s, ps.NeuronPermutation) and not isinstance(s, HeadPermutation)
    }


def build(name):
    entry = ZOO[name]
    model = entry.build().double()
    x = entry.example_input(torch.Generator().manual_seed(0))
    return model, (x.double() if x.is_floating_point() else x)


@pytest.mark.parametrize(
    "name", ["cnn", "cnn-bn", "cnn1d-tanh", "resnet-block", "resnet18-tiny", "residual-mlp"]
)
def test_permutation_spaces_equal_torch_pruning_groups(name):
    model, x = build(name)
    ours = permutation_spaces(model, x)
    theirs = set(oracle.coupled_channel_groups(model, x).groups)
    assert ours == theirs
    assert len(ours) >= 2


@pytest.mark.parametrize("name", ["gpt", "gpt-packed"])
def test_attention_spaces_refine_torch_pruning_groups(name):
    model, x = build(name)
    ours = permutation_spaces(model, x)
    theirs = set(oracle.coupled_channel_groups(model, x).groups)
    finer = ours - theirs
    assert finer  # the per-head query-key and value-output spaces
    for space in ours:
        assert any(space <= group for group in theirs), sorted(space)


def _touches_attention(space: frozenset[tuple[str, int]]) -> bool:
    return any("attn" in name or "attention" in name.lower() for name, _ in space)


@pytest.mark.parametrize("kind", ["opt", "bloom", "t5", "swin"])
def test_hugging_face_models_with_defaults_against_torch_pruning(kind):
    """Hugging Face models with their default settings, called with a dict, on which
    Torch-Pruning's DependencyGraph finishes (it fails on GPT-2 and runs past minutes on the
    Llama family and Phi): feed-forward spaces equal, attention spaces refine."""
    pytest.importorskip("transformers")
    from hf_models import build, example_input

    model, x = build(kind), example_input(kind)
    ours = permutation_spaces(model, x)
    theirs = set(oracle.coupled_channel_groups(model, x).groups)
    assert {s for s in ours if not _touches_attention(s)} == {
        s for s in theirs if not _touches_attention(s)
    }
    assert any(not _touches_attention(s) for s in ours)
    for space in ours:
        assert any(space <= group for group in theirs), sorted(space)
