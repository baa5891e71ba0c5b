"""Issue 28 part 4: verification that can fail. ``ps.symmetries(..., verify=...)`` acts with
non-identity elements (a random permutation of two heads is the identity half the time), drawn
in the parameters' dtype, and every family casts an element to that dtype before inverting it
(a float32 GL element moved a float64 model's output by 1.3e-7 when inverted first)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.nn import MultiHeadAttention
from paramsym.symmetry import HiddenGL, NeuronPermutation, ProductSymmetry, SignFlip
from paramsym.symmetry.attention import HeadPermutation
from paramsym.symmetry.base import numerically_equal
from paramsym.symmetry.orthogonal import HiddenOrthogonal
from paramsym.symmetry.verify import verification_elements, verify_symmetries

F64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(F64)
    yield
    torch.set_default_dtype(previous)


def _relative_change(model: nn.Module, params: dict, x: torch.Tensor) -> float:
    with torch.no_grad():
        reference = model(x)
        moved = ps.functional_call(model, params, x)
    return float((moved - reference).norm() / reference.norm())


# -- elements are built in the parameters' dtype ----------------------------------------------


def test_float32_gl_element_leaves_float64_model_unchanged():
    """Measured before the fix: 1.3e-7 (the inverse was taken in float32, then cast);
    after: 4e-16."""
    model = ps.mlp([3, 4, 2], activation="identity", seed=0).double()
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1))
    gl = next(s for s in ps.symmetries(model, example_input=x) if isinstance(s, HiddenGL))
    theta = ps.params_of(model)
    for seed in range(10):
        g = gl.sample(0.5, torch.Generator().manual_seed(seed), dtype=torch.float32)
        assert g.dtype == torch.float32
        assert _relative_change(model, gl.act(theta, g), x) < 1e-12


def test_float32_orthogonal_element_is_made_orthogonal_in_float64():
    """A float32 rotation is orthogonal to 1e-7 only; standing in for its inverse, its
    transpose moved a float64 model's output by 3.9e-7. Cast, it is replaced by its polar
    factor, which moves it by about that much and the output by rounding only."""
    model = ps.mlp([3, 4, 2], activation="identity", seed=0).double()
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1))
    rotation = HiddenOrthogonal(4, ["0.weight", "0.bias"], ["2.weight"])
    theta = ps.params_of(model)
    for seed in range(10):
        g = rotation.sample(0.5, torch.Generator().manual_seed(seed), dtype=torch.float32)
        cast = rotation._orthogonal_in(g, F64, torch.device("cpu"))
        assert float((cast.T @ cast - torch.eye(4)).abs().max()) < 1e-14
        assert float((cast - g.double()).abs().max()) < 1e-6
        assert _relative_change(model, rotation.act(theta, g), x) < 1e-12


def test_float64_element_on_float32_model_acts_in_float32():
    model = ps.mlp([3, 4, 2], activation="identity", seed=0).float()
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1)).float()
    gl = HiddenGL(4, ["0.weight", "0.bias"], ["2.weight"])
    g = gl.sample(0.5, torch.Generator().manual_seed(0), dtype=F64)
    moved = gl.act(ps.params_of(model), g)
    assert all(t.dtype == torch.float32 for t in moved.values())
    assert _relative_change(model, moved, x) < 1e-5


# -- a finite group is checked with non-identity elements -------------------------------------


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(4, 2, dtype=F64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x)


def _two_heads() -> tuple[nn.Module, torch.Tensor, HeadPermutation]:
    torch.manual_seed(0)
    model = TwoHeads()
    x = torch.randn(3, 5, 4)
    heads = [s for s in ps.symmetries(model, example_input=x) if isinstance(s, HeadPermutation)]
    assert len(heads) == 1
    assert heads[0].exact
    return model, x, heads[0]


def test_a_wrong_head_permutation_is_caught():
    """The head permutation with the value rows left in place is no symmetry. Verification
    used to act with one uniform draw from S_2 (seeded 0: the identity) and passed it."""
    model, x, right = _two_heads()
    incoming = [s for s in right.slots if s.power > 0 and not s.name.startswith("attention.v")]
    outgoing = [s for s in right.slots if s.power < 0]
    assert len(incoming) < len([s for s in right.slots if s.power > 0])
    wrong = HeadPermutation(2, incoming, outgoing, site="attention")
    assert wrong.exact
    with pytest.warns(ps.SymmetryVerificationWarning, match=r"head_permutation\[attention\]"):
        checked = verify_symmetries(model, [wrong], x)
    assert checked == [wrong]
    assert not wrong.exact
    assert any(note.startswith("verification:") for note in wrong.notes)


def test_the_right_head_permutation_passes():
    model, x, right = _two_heads()
    (g,) = verification_elements(right, F64)
    assert g.tolist() == [1, 0]
    verify_symmetries(model, [right], x)  # no warning (the suite makes it an error)
    assert right.exact


def test_a_wrong_sign_flip_of_one_neuron_is_caught():
    """(Z_2)^1 has one non-identity element; a uniform draw is the identity half the time."""
    model = ps.mlp([3, 1, 2], activation="identity", seed=0).double()
    x = torch.randn(4, 3)
    wrong = SignFlip(1, ["0.weight"], ["2.weight"])  # the bias does not flip
    with pytest.warns(ps.SymmetryVerificationWarning, match=r"sign_flip"):
        verify_symmetries(model, [wrong], x)
    assert not wrong.exact


def _permutation(width: int) -> NeuronPermutation:
    return NeuronPermutation(width, ["0.weight"], ["2.weight"])


def test_non_identity_sample_of_s2_is_never_the_identity():
    s2 = _permutation(2)
    for seed in range(50):
        generator = torch.Generator().manual_seed(seed)
        assert s2.sample(generator=generator, non_identity=True).tolist() == [1, 0]
        assert [g.tolist() for g in verification_elements(s2, F64, generator)] == [[1, 0]]


def test_verification_draws_distinct_non_identity_elements_of_s3():
    s3 = _permutation(3)
    identity = s3.identity()
    for seed in range(20):
        elements = verification_elements(s3, F64, torch.Generator().manual_seed(seed))
        assert len(elements) == 3
        assert len({tuple(g.tolist()) for g in elements}) == 3
        assert not any(torch.equal(g, identity) for g in elements)


def test_small_groups_give_all_their_non_identity_elements():
    flips = SignFlip(2, ["0.weight"], ["2.weight"])  # (Z_2)^2: three non-identity elements
    elements = verification_elements(flips, F64)
    assert sorted(tuple(g.tolist()) for g in elements) == [(-1, -1), (-1, 1), (1, -1)]
    product = ProductSymmetry([_permutation(2), NeuronPermutation(2, ["2.weight"], ["4.weight"])])
    assert product.order == 4
    elements = verification_elements(product, F64)
    assert len(elements) == 3
    assert not any(numerically_equal(g, product.identity()) for g in elements)


def test_the_trivial_group_has_nothing_to_check():
    s1 = _permutation(1)
    assert s1.order == 1
    assert verification_elements(s1, F64) == []
    with pytest.raises(ps.InvalidArgumentError, match="no element but the identity"):
        s1.sample(non_identity=True)


def test_continuous_elements_are_away_from_the_identity():
    model = ps.mlp([3, 4, 4, 2], activation="relu", seed=0).double()
    found = ps.symmetries(model, example_input=torch.randn(5, 3))
    continuous = [s for s in found if not s.discrete]
    assert continuous
    for symmetry in continuous:
        (g,) = verification_elements(symmetry, F64)
        assert float((g - symmetry.identity(F64)).abs().max()) > 0.1
    gl = HiddenGL(4, ["0.weight"], ["2.weight"])
    assert float((verification_elements(gl, F64)[0] - torch.eye(4)).abs().max()) > 0.1
    with pytest.raises(ps.InvalidArgumentError, match="all the identity"):
        gl.sample(scale=0.0, non_identity=True)


class Counted(nn.Module):
    """An MLP that records the leading size of every input it runs on; with ``fixed`` it
    runs only on exactly 40 rows (its leading axis is not a batch)."""

    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.net = ps.mlp([3, 1, 2], activation="identity", seed=0).double()
        self.fixed, self.seen = fixed, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.shape[0])
        if self.fixed and x.shape[0] != 40:
            raise RuntimeError("this model reads exactly 40 rows")
        return self.net(x)


@pytest.mark.parametrize("fixed", [False, True])
def test_a_large_batch_is_checked_on_its_first_examples(fixed):
    """Verification's forwards read the first ``VERIFY_EXAMPLES`` = 16 of a batch of 40 (its
    cost does not grow with the batch), and still catch a false symmetry there; a model that
    cannot run on them (the leading axis was not a batch) is checked on the whole input."""
    model = Counted(fixed)
    x = torch.randn(40, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
    wrong = SignFlip(1, ["net.0.weight"], ["net.2.weight"])  # the bias does not flip
    with pytest.warns(ps.SymmetryVerificationWarning, match=r"sign_flip"):
        verify_symmetries(model, [wrong], x)
    assert not wrong.exact
    assert set(model.seen[1:] if fixed else model.seen) == {40 if fixed else 16}
    assert model.seen[0] == 16
