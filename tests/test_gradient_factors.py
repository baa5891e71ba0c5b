"""Gradient factors (``paramsym.teleportation.gradient_factors``): a weight moved along both
axes carried as the two factors of its gradient, against the whole tensors."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional

import paramsym as ps
from helpers import assert_same_teleport, seeded
from paramsym.teleportation import ascent, default_symmetries, gradient_factors
from paramsym.teleportation.gradient_factors import Factors, checked, recorded_factors

F64 = torch.float64


class TwoCalls(nn.Module):
    """One ``Linear`` applied to two inputs, through the module or (``bypass``) the second
    time through ``F.linear`` on its weight, which no hook on the module sees."""

    def __init__(self, bypass: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.bypass = bypass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = torch.tanh(self.fc(x[:, :6]))
        if self.bypass:
            second = functional.linear(x[:, 6:], self.fc.weight, self.fc.bias)
        else:
            second = self.fc(x[:, 6:])
        return first + torch.sin(second)


def _gradient(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    model(x).pow(2).sum().backward()
    return {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("bypass", [False, True])
def test_recorded_factors_are_the_gradient_or_refused(bypass, monkeypatch):
    """Both calls of the layer recorded: A C is autograd's gradient (rows ``(5, 2N)``) and
    the check keeps it; a call the hooks cannot see (``F.linear`` on the weight) leaves a
    product that misses its share, and the check refuses it."""
    monkeypatch.setattr(gradient_factors, "MAX_SHARE", 1e9)
    torch.manual_seed(0)
    model = TwoCalls(bypass).double()
    x = torch.randn(3, 12, dtype=F64, generator=seeded(1))
    with recorded_factors(model, ["fc.weight", "fc.bias"]) as recorded:
        gradient = _gradient(model, x)
    assert list(recorded) == ["fc.weight"]  # a bias is no outer product
    f = recorded["fc.weight"]
    assert f.rows.shape == ((5, 3) if bypass else (5, 6))
    assert f.columns.shape == ((3, 6) if bypass else (6, 6))
    kept = checked(recorded, gradient)
    if bypass:
        assert kept == {}
    else:
        torch.testing.assert_close(f.rows @ f.columns, gradient["fc.weight"], rtol=1e-13, atol=0)
        assert list(kept) == ["fc.weight"]
    assert not model.fc._forward_hooks  # the hooks are gone


def test_the_check_refuses_factors_that_would_not_pay():
    """Factors holding more than a quarter of the tensor's entries are refused."""
    model = TwoCalls(False).double()
    x = torch.randn(3, 12, dtype=F64, generator=seeded(2))
    with recorded_factors(model, ["fc.weight"]) as recorded:
        gradient = _gradient(model, x)
    assert "fc.weight" in recorded
    assert checked(recorded, gradient) == {}


def test_factors_read_what_the_whole_tensor_gives():
    """‖A C‖², and each side's point and covector pair as the whole tensor does."""
    a = torch.randn(7, 3, dtype=F64, generator=seeded(3))
    c = torch.randn(3, 9, dtype=F64, generator=seeded(4))
    f, v = Factors(a, c), a @ c
    assert f.squared_norm() == pytest.approx(float((v**2).sum()), rel=1e-14)
    rows = torch.randn(7, 7, dtype=F64, generator=seeded(5))  # a map along the rows
    columns = torch.randn(9, 9, dtype=F64, generator=seeded(6))  # and one along the columns
    whole_rows = float(((rows @ v) * v).sum())
    whole_columns = float(((v @ columns.T) * v).sum())
    assert float(((rows @ f.side(0)) * f.covector(0)).sum()) == pytest.approx(whole_rows)
    assert float(((f.side(1) @ columns.T) * f.covector(1)).sum()) == pytest.approx(whole_columns)


def _factored_and_whole(kind: str, dtype: torch.dtype, monkeypatch: Any) -> tuple[Any, Any]:
    """The default teleport of the model ``kind`` with its two-sided tensors factored (the
    tiny models' factors are made to pay) and with none, after checking that some were.
    Without the absorbed translations, which keep the tensors they move and read whole (on
    GPT-2, Phi, OPT and BLOOM every factored one; with them:
    tests/test_teleport_absorptions.py)."""
    pytest.importorskip("transformers")
    from hf_models import regression_case

    model, loss_fn, batch = regression_case(kind, dtype)
    chosen = [s for s in default_symmetries(model, loss_fn, batch[0]) if not s.reads]
    factored: list[list[str]] = []
    original = ascent.checked

    def counted(recorded, gradient):
        out = original(recorded, gradient)
        factored.append(sorted(out))
        return out

    monkeypatch.setattr(ascent, "checked", counted)
    monkeypatch.setattr(gradient_factors, "MAX_SHARE", 1e9)
    fast = ps.teleport(copy.deepcopy(model), loss_fn, batch, chosen, method="transport")
    monkeypatch.setattr(gradient_factors, "MAX_SHARE", 0.0)
    whole = ps.teleport(copy.deepcopy(model), loss_fn, batch, chosen, method="transport")
    assert factored[0]
    assert factored[1] == []
    return fast, whole


@pytest.mark.parametrize("kind", ["gpt2-lm", "llama", "phi", "opt", "bloom"])
def test_factored_teleport_equals_the_whole_tensors(kind, monkeypatch):
    """The default teleport (Hugging Face models, float64) with the two-sided tensors
    carried as factors takes the same steps to the same point as with the whole tensors;
    some tensors were factored (``Conv1D`` on GPT-2, ``Linear`` on the others: not vacuous);
    the loss is kept to 1e-10 relative."""
    assert_same_teleport(*_factored_and_whole(kind, F64, monkeypatch))


@pytest.mark.parametrize("kind", ["gpt2-lm", "llama"])
def test_factored_teleport_in_float32(kind, monkeypatch):
    """The same in float32, as the models are trained: the factored and whole teleports
    agree to float32 rounding over ten steps, and the loss is kept to 1e-6 relative."""
    fast, whole = _factored_and_whole(kind, torch.float32, monkeypatch)
    assert fast.steps == whole.steps == 10
    assert fast.gain > 1.0
    assert fast.objective_after == pytest.approx(whole.objective_after, rel=1e-5)
    for key in fast.params:
        torch.testing.assert_close(fast.params[key], whole.params[key], rtol=1e-5, atol=1e-6)
    assert abs(fast.loss_after - fast.loss_before) <= 1e-6 * abs(fast.loss_before)
