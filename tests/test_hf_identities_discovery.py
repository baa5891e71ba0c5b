"""``ps.check_identities`` and ``ps.discover_symmetries`` on Hugging Face models as users hand
them over: built from small configs with default settings (``use_cache=True``), float64,
called with ``{"input_ids": ids}``, returning a ``ModelOutput`` that the loss reads.

The oracle is the same model behind a wrapper whose forward takes the tensor ``input_ids`` and
returns the first field of ``model(input_ids=ids, use_cache=False)`` as a tensor: the path the
analyses took before they accepted dict inputs and ``ModelOutput``s. Both must give the same
numbers; the identities must hold, and discovery must find the planted unit rescalings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.equivariance import Equivariance
from paramsym.equivariance.result import THEOREM1, IdentityResult
from paramsym.experiments.threads import torch_threads

transformers = pytest.importorskip("transformers")

from hf_models import build, example_input  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TOL = 1e-9  # the identities' residual bound in float64 (tests/test_equivariance_identities.py)
SAME = 1e-10  # dict input against the wrapped oracle
KINDS = ("llama", "gpt2-lm")
FIELD = {"llama": "last_hidden_state", "gpt2-lm": "logits"}
FINAL_NORM = {
    "llama": ("norm.weight",),
    "gpt2-lm": ("transformer.ln_f.weight", "transformer.ln_f.bias"),
}


class FirstField(nn.Module):
    """The oracle: ``model`` called with the tensor ``input_ids``, returning one tensor."""

    def __init__(self, model: nn.Module, field: str) -> None:
        super().__init__()
        self.model, self.field = model, field

    def forward(self, input_ids: Tensor) -> Tensor:
        return getattr(self.model(input_ids=input_ids, use_cache=False), self.field)


def first_field_loss(output: Any, target: Tensor) -> Tensor:
    """The user's loss: it reads the ``ModelOutput``'s first field."""
    return ((output[0] - target) ** 2).mean()


def tensor_loss(output: Tensor, target: Tensor) -> Tensor:
    return ((output - target) ** 2).mean()


@dataclasses.dataclass
class Problem:
    model: nn.Module
    x: dict[str, Tensor]
    target: Tensor
    oracle: FirstField
    found: list[ps.Symmetry]  # ps.symmetries of the model on x

    @property
    def symmetry(self) -> ps.Symmetry:
        """The exact continuous catalogue symmetry of smallest dimension."""
        continuous = [s for s in self.found if s.exact and s.dim and not s.discrete and s.linear]
        return min(continuous, key=lambda s: s.dim)


@pytest.fixture(scope="module")
def problems() -> dict[str, Problem]:
    out = {}
    with torch_threads(1):
        for kind in KINDS:
            model, x = build(kind), example_input(kind)
            oracle = FirstField(model, FIELD[kind])
            with torch.no_grad():
                shape = oracle(x["input_ids"]).shape
            target = torch.randn(
                shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64
            )
            found = ps.symmetries(model, example_input=x)
            out[kind] = Problem(model, x, target, oracle, found)
    return out


def renamed(eq: Equivariance, prefix: str) -> Equivariance:
    """``eq`` acting on the parameters of a wrapper that holds the model under ``prefix``."""

    def strip(p: dict[str, Tensor]) -> dict[str, Tensor]:
        return {k.removeprefix(prefix): v for k, v in p.items()}

    def add(p: Any) -> dict[str, Tensor]:
        return {prefix + k: v for k, v in p.items()}

    tangent = eq.tangent
    return dataclasses.replace(
        eq,
        transform=lambda p, g: add(eq.transform(strip(p), g)),
        tangent=None if tangent is None else (lambda p, xi: add(tangent(strip(p), xi))),
    )


def final_norm_scale(names: tuple[str, ...], prefix: str = "") -> Equivariance:
    """T scales the final norm layer by e^g, so the output scales by e^g (S ≠ id)."""
    return Equivariance(
        lambda p, g: {prefix + n: g.exp() * p[prefix + n] for n in names},
        output_transform=lambda y, g: g.exp() * y,
        name="final-norm scale",
    )


def assert_same(ours: IdentityResult, oracle: IdentityResult) -> None:
    """Both sides of every identity, and J, equal to SAME (relative to the identity's scale)."""
    assert ours.checked == oracle.checked
    for name in ours.checked:
        scale = max(oracle.scales[name], 1e-300)
        assert abs(ours.scales[name] - oracle.scales[name]) <= SAME * scale, name
        for side in ("lhs", "rhs"):
            a, b = getattr(ours, side)[name], getattr(oracle, side)[name]
            difference = float(torch.linalg.vector_norm(a - b))
            assert difference <= SAME * scale, (name, side, difference)
    J, J_oracle = ours.terms["J"], oracle.terms["J"]
    assert float(torch.linalg.vector_norm(J - J_oracle)) <= SAME * float(
        torch.linalg.vector_norm(J_oracle)
    )


@pytest.mark.parametrize("kind", KINDS)
def test_identities_of_a_catalogue_symmetry_hold_and_equal_the_wrapped_model(problems, kind):
    p = problems[kind]
    received: list[type] = []

    def loss(output: Any, target: Tensor) -> Tensor:
        received.append(type(output))
        return first_field_loss(output, target)

    result = ps.check_identities(p.model, loss, (p.x, p.target), p.symmetry)
    assert result.checked == THEOREM1
    assert result.holds(TOL), result.residuals
    assert received
    assert all(issubclass(t, transformers.utils.ModelOutput) for t in received)
    eq = renamed(Equivariance.from_symmetry(p.symmetry), "model.")
    oracle = ps.check_identities(p.oracle, tensor_loss, (p.x["input_ids"], p.target), eq)
    assert oracle.holds(TOL), oracle.residuals
    assert_same(result, oracle)


@pytest.mark.parametrize("kind", KINDS)
def test_an_equivariance_that_moves_the_output_differentiates_the_loss_of_the_model_output(
    problems, kind
):
    """S ≠ id: ∇ℓ and ∇²ℓ come from the user's loss on the ``ModelOutput`` with f in place."""
    p = problems[kind]
    eq = final_norm_scale(FINAL_NORM[kind])
    batch = (p.x, p.target)
    result = ps.check_identities(p.model, first_field_loss, batch, eq, g=[0.3])
    assert result.holds(TOL), result.residuals
    assert float(torch.linalg.vector_norm(result.terms["K"])) > 0  # the output side is exercised
    for output in (0, FIELD[kind], lambda o: getattr(o, FIELD[kind])):
        assert_same(
            ps.check_identities(p.model, first_field_loss, batch, eq, [0.3], output=output), result
        )
    oracle = ps.check_identities(
        p.oracle,
        tensor_loss,
        (p.x["input_ids"], p.target),
        final_norm_scale(FINAL_NORM[kind], "model."),
        g=[0.3],
    )
    assert_same(result, oracle)


def test_a_model_output_with_several_fields_needs_output_and_holds_the_others(problems):
    p = problems["llama"]
    eq = final_norm_scale(FINAL_NORM["llama"])
    x = {**p.x, "output_hidden_states": True}  # the output gains a field: hidden_states
    with pytest.raises(ps.InvalidArgumentError, match=r"hidden_states.*output=0"):
        ps.check_identities(p.model, first_field_loss, (x, p.target), eq)
    with pytest.raises(ps.InvalidArgumentError, match="names no field"):
        ps.check_identities(p.model, first_field_loss, (p.x, p.target), eq, output="logits")
    with pytest.raises(ps.InvalidArgumentError, match="output must be"):
        ps.check_identities(p.model, first_field_loss, (p.x, p.target), eq, output=1.5)

    def reads_every_field(output: Any, target: Tensor) -> Tensor:
        # hidden_states is held fixed: the identities are about ℓ∘f with f = last_hidden_state
        return first_field_loss(output, target) + sum(
            h.square().mean() for h in output.hidden_states
        )

    chosen = ps.check_identities(
        p.model, reads_every_field, (x, p.target), eq, g=[0.3], output="last_hidden_state"
    )
    plain = ps.check_identities(p.model, first_field_loss, (p.x, p.target), eq, g=[0.3])
    assert chosen.holds(TOL), chosen.residuals
    assert_same(chosen, plain)


def test_theorem2_of_a_neuron_swap_at_its_fixed_points_equals_the_wrapped_model(problems):
    p = problems["llama"]
    sym = next(s for s in p.found if s.name.startswith("permutation[") and ".mlp." in s.name)
    swap = torch.arange(p.model.config.intermediate_size)
    swap[[0, 1]] = swap[[1, 0]]
    discrete = ps.DiscreteSymmetry.from_symmetry(sym, swap)
    point = discrete.project(ps.params_of(p.model))
    result = ps.check_identities(p.model, first_field_loss, (p.x, p.target), discrete, params=point)
    assert result.theorem == 2
    assert result.holds(TOL), result.residuals
    assert float(torch.linalg.vector_norm(result.rhs["thm2_item1"])) > 1e-3  # not stationary

    def on_wrapper(q: dict[str, Tensor]) -> dict[str, Tensor]:
        moved = discrete.apply({k.removeprefix("model."): v for k, v in q.items()})
        return {"model." + k: v for k, v in moved.items()}

    oracle = ps.check_identities(
        p.oracle,
        tensor_loss,
        (p.x["input_ids"], p.target),
        ps.DiscreteSymmetry(on_wrapper, name="swap on the wrapper", linear=True),
        params={"model." + k: v for k, v in point.items()},
    )
    for name in result.checked:
        for side in ("lhs", "rhs"):
            a, b = getattr(result, side)[name], getattr(oracle, side)[name]
            assert float(torch.linalg.vector_norm(a - b)) <= SAME * result.scales[name], name


def unit_rescalings(units: int) -> list[Callable[[dict[str, Tensor]], dict[str, Tensor]]]:
    """A basis of 2·units maps: row i of ``up_proj`` and column i of ``down_proj``. Their
    differences (scale an MLP unit's input by e^t and its output by e^-t) are the symmetries:
    the null space has dimension ``units``. Keyed by suffix, so it fits the wrapper too."""

    def part(suffix: str, i: int, row: bool) -> Callable[[dict[str, Tensor]], dict[str, Tensor]]:
        def element(p: dict[str, Tensor]) -> dict[str, Tensor]:
            out = {k: torch.zeros_like(v) for k, v in p.items()}
            for k, v in p.items():
                if k.endswith(suffix):
                    if row:
                        out[k][i] = v[i]
                    else:
                        out[k][:, i] = v[:, i]
            return out

        return element

    return [part("mlp.up_proj.weight", i, True) for i in range(units)] + [
        part("mlp.down_proj.weight", i, False) for i in range(units)
    ]


@pytest.mark.parametrize("per_example", [True, False])
def test_discovery_on_a_dict_input_equals_the_wrapped_model(problems, per_example):
    p = problems["llama"]
    basis = unit_rescalings(4)
    kwargs = {"samples": 8, "per_example": per_example, "generator": 5}
    ours = ps.discover_symmetries(p.model, first_field_loss, [(p.x, p.target)], basis, **kwargs)
    oracle = ps.discover_symmetries(
        p.oracle, tensor_loss, [(p.x["input_ids"], p.target)], basis, **kwargs
    )
    assert oracle.dim == 4
    assert oracle.determined
    for field in ("dim", "status", "unknowns", "rows", "rank_per_sample", "dims_by_samples"):
        assert getattr(ours, field) == getattr(oracle, field), field
    torch.testing.assert_close(ours.singular_values, oracle.singular_values, rtol=1e-10, atol=1e-14)
    assert ours.gap == pytest.approx(oracle.gap, rel=1e-6)
    # a tokenizer's BatchEncoding is a mapping like the dict
    encoded = transformers.BatchEncoding(p.x)
    again = ps.discover_symmetries(p.model, first_field_loss, (encoded, p.target), basis, **kwargs)
    torch.testing.assert_close(again.singular_values, ours.singular_values, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        (lambda ids: [ids], ps.InvalidArgumentError, r"mapping of tensors.*got x of type list"),
        (
            lambda ids: {"input_ids": ids, "attention_mask": [1] * 8},
            ps.InvalidArgumentError,
            "'attention_mask' = list",
        ),
        (
            lambda ids: {"input_ids": ids, "attention_mask": torch.ones(3, 8)},
            ps.ShapeError,
            "same length in every tensor",
        ),
        (lambda ids: {}, ps.InvalidArgumentError, "an empty mapping"),
    ],
    ids=["list", "non-tensor value", "batch lengths differ", "empty mapping"],
)
def test_discovery_names_a_bad_batch(problems, x, error, match):
    p = problems["llama"]
    with pytest.raises(error, match=match):
        ps.discover_symmetries(
            p.model,
            first_field_loss,
            (x(p.x["input_ids"]), p.target),
            unit_rescalings(1),
            samples=2,
        )


def test_discovery_names_a_bad_target(problems):
    p = problems["llama"]
    basis = unit_rescalings(1)
    with pytest.raises(ps.InvalidArgumentError, match="y of type list"):
        ps.discover_symmetries(p.model, first_field_loss, (p.x, [0.0]), basis, samples=2)
    with pytest.raises(ps.ShapeError, match="one row per example"):
        ps.discover_symmetries(p.model, first_field_loss, (p.x, p.target[:1]), basis, samples=2)


def test_identity_tracker_records_the_model_output_loss_and_residuals(problems):
    """``IdentityTracker`` on the dict input: its loss column is the user's loss of the
    ``ModelOutput`` (the oracle's loss of the wrapped tensor), its residuals those of
    ``check_identities``, which hold."""
    p = problems["llama"]
    tracker = ps.IdentityTracker(
        p.model, first_field_loss, (p.x, p.target), transformations=[p.symmetry]
    )
    assert tracker(0)
    row = tracker.history
    with torch.no_grad():
        expected = float(tensor_loss(p.oracle(p.x["input_ids"]), p.target))
    assert abs(row["loss"][0] - expected) <= SAME * expected
    reference = ps.check_identities(p.model, first_field_loss, (p.x, p.target), p.symmetry)
    for name in THEOREM1:
        column = row[f"residual/{p.symmetry.name}/{name}"][0]
        assert column == pytest.approx(reference.residuals[name], rel=1e-8, abs=1e-14)
        assert column <= TOL
