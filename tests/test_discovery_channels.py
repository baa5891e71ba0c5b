"""Exact discovery on CNNs and ResNet blocks: the layer-pair ansatz read off the traced graph
(:class:`paramsym.discovery.channels.ChannelAnsatz`), in float64.

Expected dimensions, from the catalogue and by hand:

* ``SimpleCNN`` (conv 3 → ReLU → conv 4 → ReLU → flatten → linear 3), cross-entropy: one
  positive rescaling per hidden channel (3 + 4) and the three linear logit shifts z ↦ z + 1uᵀz
  of the output block (as for an MLP with cross-entropy): 10.
* ``ResidualBlockNet`` (conv–BN–ReLU stem, a BasicBlock with a skip, pooling, linear) in
  evaluation mode: the catalogue's rescalings from each BatchNorm's (γ, β) to the convolution
  or linear layer that reads it (3 + 3, the stem's BN and the block's last BN share one because
  the skip adds their outputs) and three logit shifts: 9. The catalogue's BatchNorm
  ``norm_scaling`` also moves the running statistics (buffers), so it is no symmetry of the
  parameters alone, and discovery must not find it.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps
from helpers import random_mlp, seeded
from paramsym.discovery import compare_to_catalogue, discover_symmetries, make_ansatz
from paramsym.discovery.channels import ChannelAnsatz
from paramsym.discovery.sampling import ParameterSampler
from paramsym.nn.zoo import ResidualBlockNet, SimpleCNN

F64 = torch.float64
CE = nn.CrossEntropyLoss()


pytestmark = pytest.mark.usefixtures("one_thread")


def images(channels: int = 2, size: int = 6, classes: int = 3, batch: int = 4):
    def draw(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch, channels, size, size, generator=generator, dtype=F64)
        return x, torch.randint(0, classes, (batch,), generator=generator)

    return draw


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return SimpleCNN(in_channels=2, channels=(3, 4), input_size=6).double()


def resnet_block() -> nn.Module:
    torch.manual_seed(0)
    return ResidualBlockNet(in_channels=2, width=3).double().eval()


def names(model: nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


@pytest.mark.parametrize("build", [cnn, resnet_block, lambda: random_mlp("relu").double()])
def test_rows_fields_and_matrices_agree_with_the_dense_oracle(build):
    """rows(θ, g)·c = ⟨g, field(c, θ)⟩ = ⟨g, A(c)θ⟩ with A(c) = matrix(c); the redundant
    directions generate the zero matrix."""
    model = build()
    x = images()(seeded(0))[0] if model.__class__ is not nn.Sequential else torch.randn(3, 4)
    ansatz = ChannelAnsatz(model, names(model), x.to(F64))
    g = seeded(1)
    theta = torch.randn(ansatz.numel, generator=g, dtype=F64)
    grads = torch.randn(5, ansatz.numel, generator=g, dtype=F64)
    c = torch.randn(ansatz.size, generator=g, dtype=F64)
    a = ansatz.matrix(c)
    field = ansatz.field(c, theta)
    torch.testing.assert_close(field, a @ theta, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ansatz.rows(theta, grads) @ c, grads @ field, rtol=1e-12, atol=1e-10)
    two = torch.stack([c, 2 * c], dim=1)
    torch.testing.assert_close(ansatz.field(two, theta)[:, 1], 2 * field, rtol=1e-12, atol=1e-12)
    redundant = ansatz.redundancy()
    for direction in redundant:
        assert float(ansatz.matrix(direction).abs().max()) < 1e-12
    c2 = torch.randn(ansatz.size, generator=g, dtype=F64)
    bracket = ansatz.bracket(c, c2)
    assert bracket is not None
    b = ansatz.matrix(c2)
    torch.testing.assert_close(ansatz.matrix(bracket), a @ b - b @ a, rtol=1e-10, atol=1e-10)


def test_bias_free_convolutions_have_the_expected_redundant_directions():
    """conv1 (bias-free) has a row block and a column block: M = I, N = −I generate nothing;
    so do the block convolutions'; BatchNorm's (γ, β) block has no partner."""
    model = resnet_block()
    ansatz = ChannelAnsatz(model, names(model), images()(seeded(0))[0])
    assert ansatz.redundancy().shape[0] == 2  # block.conv1 and block.conv2 (conv1: rows only)


def test_cnn_rescalings_and_logit_shifts_are_found_and_contain_the_catalogue():
    model = cnn()
    result = discover_symmetries(model, CE, images())
    assert result.ansatz.startswith("channels")
    assert result.determined
    assert result.dim == 10
    comparison = compare_to_catalogue(result, model, images()(seeded(5))[0], loss_fn=CE)
    rescalings = [s for s in comparison.symmetries if s.name.startswith("rescaling")]
    assert sum(s.dim for s in rescalings) == 7
    assert all(s.residual <= 1e-8 for s in rescalings)
    assert comparison.closure.closed


def test_resnet_block_in_eval_mode_finds_the_parameter_rescalings_only():
    model = resnet_block()
    result = discover_symmetries(model, CE, images())
    assert result.determined
    assert result.dim == 9
    assert any("constant at initialisation" in note for note in result.notes)
    comparison = compare_to_catalogue(result, model, images()(seeded(5))[0], loss_fn=CE)
    by_kind = {s.name: s for s in comparison.symmetries}
    rescalings = [s for n, s in by_kind.items() if n.startswith("rescaling")]
    assert sum(s.dim for s in rescalings) == 6
    assert all(s.residual <= 1e-8 for s in rescalings)
    moves_buffers = [s for n, s in by_kind.items() if n.startswith("norm_scaling")]
    assert moves_buffers
    assert all(s.residual > 0.1 for s in moves_buffers)


def test_layer_pairs_on_an_mlp_and_channels_agree():
    model = random_mlp("relu").double()

    def data(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(8, 4, generator=generator, dtype=F64)
        return x, torch.randn(8, 3, generator=generator, dtype=F64)

    pairs = discover_symmetries(model, nn.MSELoss(), data, "layer_pairs")
    channels = discover_symmetries(model, nn.MSELoss(), data, "channels")
    assert pairs.ansatz.startswith("layer_pairs")
    assert channels.ansatz.startswith("channels")
    assert pairs.dim == channels.dim == 12  # the 6 + 6 hidden rescalings


def test_constant_initialisations_are_spread_so_that_draws_are_generic():
    """BatchNorm's reset gives γ = 1, β = 0 at every draw; without spreading, any M with
    M·1 = 0 on (γ, β) would vanish at every sample and pass for a symmetry (18 extra)."""
    model = resnet_block()
    sampler = ParameterSampler(model, names(model), "init", 1.0, F64, seeded(0))
    first, second = sampler.draw(), sampler.draw()
    assert float(first["bn1.weight"].std()) > 0.1
    assert not torch.equal(first["bn1.bias"], second["bn1.bias"])
    assert any("bn1.weight" in note for note in sampler.notes)


def test_models_the_graph_cannot_trace_get_a_clear_error():
    class Opaque(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(1, 2, 3)

        def forward(self, x):
            return self.conv(x).numpy().sum()  # leaves torch: untraceable

    with pytest.raises(ps.InvalidArgumentError, match="channels ansatz"):
        ChannelAnsatz(Opaque(), ["conv.weight", "conv.bias"], torch.randn(2, 1, 3))
    cnn_model = cnn()
    with pytest.raises(ps.InvalidArgumentError, match="needs an example input"):
        make_ansatz(cnn_model, names(cnn_model), "layer_pairs")


def test_an_lstm_classifier_has_only_the_logit_shifts():
    """Sigmoid and tanh gates leave an LSTM no continuous symmetry: under the graph's blocks
    (the recurrent weights' gates and hidden units, the head) only the three logit shifts."""
    torch.manual_seed(0)
    model = ps.nn.zoo.LSTMClassifier(cell="lstm", num_layers=1).double().eval()

    def sequences(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(4, 5, 4, generator=generator, dtype=F64)
        return x, torch.randint(0, 3, (4,), generator=generator)

    result = discover_symmetries(model, CE, sequences)
    assert result.ansatz.startswith("channels")
    assert result.determined
    assert result.dim == 3


def test_hugging_face_gpt2_keeps_the_catalogue_and_reports_layernorm_eps_as_ambiguous():
    """A tiny GPT2Model from a config: every exact catalogue symmetry (per-head query-key and
    value-output GL, the LayerNorm-to-linear rescalings) lies in the discovered span, but the
    whole-block norm scaling holds only up to LayerNorm's eps; its singular value (≈ 2e-6)
    sits inside the undecided band, so the dimension is reported ambiguous, never rounded.
    Discovery also finds 16 exact linear generators from LayerNorm's mean subtraction, checked
    by a finite transformation on fresh data; at every point they lie in the tangent space of
    the catalogue's stream translation (an affine group), so the orbit comparison misses
    nothing."""
    pytest.importorskip("transformers")
    from paramsym.nn.hf import hf_gpt2

    torch.manual_seed(0)
    model = hf_gpt2(last_hidden_state=True, width=4, heads=2, vocab=6, positions=3).double()

    def tokens(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(0, 6, (4, 3), generator=generator)
        return ids, torch.randn(4, 3, 4, generator=generator, dtype=F64)

    with pytest.warns(ps.AmbiguousDimensionWarning, match="ambiguous"):
        result = discover_symmetries(model, nn.MSELoss(), tokens)
    assert result.status == "ambiguous"
    assert result.dim is None
    comparison = compare_to_catalogue(result, model, tokens(seeded(3))[0])
    catalogue = {s.name: s for s in ps.symmetries(model, example_input=tokens(seeded(3))[0])}
    exact = [o for o in comparison.symmetries if catalogue[o.name].exact]
    linear = [o for o in exact if catalogue[o.name].linear]  # the translations are affine
    assert sum(o.dim for o in linear) == 24  # 2 × (QK + VO) GL(2) per head, 2 × 4 rescalings
    assert all(o.residual <= 1e-8 for o in linear)
    # the catalogue's stream translation (an affine group: wte 6 + wpe 3 + (4 + 1) + (16 + 1)
    # directions) holds every discovered field at every point, so no discovered direction
    # is missing from the catalogue's orbit; as constant fields its algebra differs from the
    # θ-dependent linear fields discovery's ansatz can hold (below), and most of it is outside
    (translation,) = [o for o in exact if o.name.startswith("mean_translation")]
    assert translation.dim == 31
    assert translation.residual > 0.5
    assert comparison.orbit_catalogue_misses == 0
    approximate = [o for o in comparison.symmetries if not catalogue[o.name].exact]
    assert [o.name.split("[")[0] for o in approximate] == ["norm_scaling"]
    assert approximate[0].residual > 0.5
    # what the catalogue misses: LayerNorm subtracts the mean, so every write into the
    # residual stream (wte, wpe, the attention and MLP output projections) may add
    # (vᵀ out)·1 for its own v ∈ R⁴: 4 × 4 generators, exact at any eps
    assert comparison.catalogue_misses == 16
    ansatz = result.ansatz_object
    found, known = [], []  # fields stacked over the kept points, as compare_to_catalogue does
    for point in result.points:
        theta = ansatz.flatten(point)
        found.append(torch.stack([ansatz.field(g.coefficients, theta) for g in result.generators]))
        known.append(
            torch.stack(
                [
                    ansatz.flatten(sym.tangent(point, torch.eye(sym.dim, dtype=F64)[j], None))
                    for sym in catalogue.values()
                    if sym.exact
                    for j in range(sym.dim)
                ]
            )
        )
    found, q = torch.cat(found, 1).T, torch.linalg.qr(torch.cat(known, 1).T).Q
    theta = ansatz.flatten(result.points[0])
    outside = found - q @ (q.T @ found)
    _, s, vh = torch.linalg.svd(outside, full_matrices=False)
    coefficients = torch.stack([g.coefficients for g in result.generators], 1)
    extra = coefficients @ vh[: int((s > 1e-8 * s[0]).sum())].T
    assert extra.shape[1] == 16
    moved = {n for n, b in ansatz.blocks(extra).items() if float(b.norm()) > 1e-8}
    writers = ("model.wte", "model.wpe", "model.h.0.attn.c_proj", "model.h.0.mlp.c_proj")
    assert {n.split("@")[0] for n in moved} == set(writers)
    x, y = tokens(seeded(11))

    def loss(vector: torch.Tensor) -> float:
        return float(nn.MSELoss()(ps.functional_call(model, ansatz.unflatten(vector), x), y))

    a = ansatz.matrix(extra[:, 0] / extra[:, 0].norm())
    assert loss(torch.linalg.matrix_exp(0.5 * a) @ theta) == pytest.approx(loss(theta), rel=1e-12)
