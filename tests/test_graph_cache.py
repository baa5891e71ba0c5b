"""Graph analyses kept per model (``symmetry/graph/cache.py``): reused while the model's
signature holds, traced again when it changes, fresh objects on every call, and no
reference that keeps a model alive."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.symmetry.graph import cache


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 5, 3), nn.ReLU(),
        nn.Flatten(), nn.Linear(5 * 2 * 2, 3),
    ).eval()  # fmt: skip


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = cache.analyse

    def analyse(*args, **kwargs):
        calls.append(type(args[0]).__name__)
        return real(*args, **kwargs)

    monkeypatch.setattr(cache, "analyse", analyse)
    cache.clear()
    return calls


def _described(found):
    return [(s.name, s.group, s.exact, tuple(s.parameter_names)) for s in found]


def test_a_second_call_reuses_the_analysis_with_fresh_objects(counted):
    model, x = _cnn(), torch.randn(2, 3, 6, 6)
    first = ps.symmetries(model, example_input=x)
    second = ps.symmetries(model, example_input=x)
    assert len(counted) == 1
    assert len(first) >= 4
    assert _described(first) == _described(second)
    assert all(a is not b for a, b in zip(first, second, strict=True))
    exact = next(i for i, s in enumerate(first) if s.exact)
    first[exact].exact = False  # e.g. verification downgrading it on this call's weights
    assert ps.symmetries(model, example_input=x)[exact].exact


@pytest.mark.parametrize(
    "change",
    [
        lambda m, x: (setattr(m[1], "eps", 0.0), x),
        lambda m, x: (m.__setitem__(2, nn.Tanh()), x),
        lambda m, x: (m.double(), x.double()),
        lambda m, x: (None, x[:1]),
        lambda m, x: (m[0].weight.requires_grad_(False), x),
    ],
    ids=["eps", "activation", "dtype", "batch shape", "frozen"],
)
def test_a_changed_signature_traces_again(counted, change):
    model, x = _cnn(), torch.randn(2, 3, 6, 6)
    before = ps.symmetries(model, example_input=x)
    _, x = change(model, x)
    after = ps.symmetries(model, example_input=x)
    assert len(counted) == 2
    if isinstance(model[2], nn.Tanh):  # the rescalings are gone with the ReLU
        assert _described(before) != _described(after)


def test_the_cache_does_not_keep_a_model_alive(counted):
    model, x = _cnn(), torch.randn(2, 3, 6, 6)
    ps.symmetries(model, example_input=x)
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None
