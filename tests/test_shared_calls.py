"""A layer applied more than once moves once for all its calls (issue 44: ALBERT's shared layers).

A tensor two ops read may move only where both reads are sites of the same symmetry: the matrix
groups tie a region two calls read alike (a reused attention layer's query–key and value–output
GL), and the absorbed translations are kept where the same one is found at every use of the
tensors they move (:mod:`paramsym.symmetry.graph.shared_calls`). A tensor read once as the
pattern wants and once otherwise must stay put. Oracles: the outputs under random elements (to
1e-12) and the audit against the Jacobian's null space.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.core.params import functional_call, params_of
from paramsym.symmetry import Symmetry
from paramsym.tangent_kernel.completeness import every_output
from test_audit_encoders import HIDDEN, _encoder, _perturbed

F64 = torch.float64


class TwiceRead(nn.Module):
    """One LayerNorm and one linear map, applied to two inputs; ``mixed``: the second call reads
    the raw input instead of the norm's output."""

    def __init__(self, mixed: bool) -> None:
        super().__init__()
        self.norm, self.read, self.head = nn.LayerNorm(6), nn.Linear(6, 5), nn.Linear(5, 3)
        self.mixed = mixed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = self.read(self.norm(x[:, 0]))
        second = self.read(x[:, 1] if self.mixed else self.norm(x[:, 1]))
        return self.head(torch.tanh(first) + torch.tanh(second))


def _keeps_outputs(model: nn.Module, s: Symmetry, x: object) -> None:
    params = params_of(model)
    with torch.no_grad():
        before = every_output(functional_call(model, params, x))
        generator = torch.Generator().manual_seed(0)
        for _ in range(3):
            g = s.sample(scale=0.5, generator=generator, dtype=F64)
            after = every_output(functional_call(model, s.act(params, g), x))
            assert (after - before).abs().max() <= 1e-12 * before.abs().max(), s.name


def test_a_linear_map_reading_one_norm_in_both_calls_gets_its_norm_reader() -> None:
    model = _perturbed(TwiceRead(mixed=False))
    x = torch.randn(4, 2, 6, dtype=F64)
    catalogue = ps.symmetries(model, x)
    readers = [s for s in catalogue if s.name == "norm_reader[norm]"]
    assert len(readers) == 1
    assert set(readers[0].parameter_names) == {"read.weight", "read.bias"}
    _keeps_outputs(model, readers[0], x)
    report = ps.audit(model, x, catalogue=catalogue, points=1)
    assert report.not_flat == []
    assert report.complete, report.carriers


def test_a_linear_map_read_once_otherwise_stays_put() -> None:
    model = _perturbed(TwiceRead(mixed=True))
    x = torch.randn(4, 2, 6, dtype=F64)
    catalogue = ps.symmetries(model, x)
    assert not any("read.weight" in s.parameter_names for s in catalogue if s.dim and s.exact)
    report = ps.audit(model, x, catalogue=catalogue, points=1)
    assert report.not_flat == []


@pytest.fixture(scope="module")
def albert() -> tuple[nn.Module, dict, list[Symmetry]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, x = _encoder("AlbertConfig", "AlbertModel", True, embedding_size=6,
                            **{**HIDDEN, "num_hidden_layers": 2})  # fmt: skip
        return model, x, ps.symmetries(model, x)


LAYER = "encoder.albert_layer_groups.0.albert_layers.0"
SHARED = [
    f"attention_QK[{LAYER}.attention.head0]",
    f"attention_VO[{LAYER}.attention.head1]",
    f"key_bias[{LAYER}.attention.head0]",
    f"value_bias[{LAYER}.attention.head1]",
    f"norm_reader[{LAYER}.attention.LayerNorm]",
    f"norm_shift[{LAYER}.attention.LayerNorm]",
    f"mean_translation[{LAYER}.attention.dense]",
    f"mean_translation[{LAYER}.ffn_output]",
]


@pytest.mark.parametrize("name", SHARED)
def test_albert_moves_its_shared_layer_once_for_both_calls(
    name: str, albert: tuple[nn.Module, dict, list[Symmetry]]
) -> None:
    model, x, catalogue = albert
    s = next(s for s in catalogue if s.name == name)
    assert s.exact
    assert s.dim > 0
    _keeps_outputs(model, s, x)


def test_albert_with_shared_layers_misses_one_flat_direction(
    albert: tuple[nn.Module, dict, list[Symmetry]],
) -> None:
    """Two calls of one layer: 124 of 205 flat directions were missing before the shared
    tensors moved; one is left, a combination of the first call's span readers (the stream
    there lies in the embedding projection's 5-dimensional affine subspace) with the second
    call's norm readers, which moves the embedding projection, its norm and the shared
    query, key and value maps together (notes 006: not a family the catalogue has)."""
    model, x, catalogue = albert
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ps.audit(model, x, catalogue=catalogue, points=1)
    assert report.not_flat == []
    assert report.flat == 205
    assert report.missing == 1
    assert report.unreached == 0
