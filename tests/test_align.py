"""``ps.align``: a planted element of every group is recovered exactly (float64) on GPT-2-,
Llama- and ViT-style models built from small Hugging Face configs, the aligned model computes
the same function, the distance never increases, and bad input is named."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import paramsym as ps
from paramsym.connectivity import align_steps
from paramsym.connectivity.alignment import _scalings, _selected, _translations
from paramsym.symmetry.gl import MatrixNeuronSymmetry
from paramsym.symmetry.rotary import RotaryQueryKey

F64 = torch.float64
transformers = pytest.importorskip("transformers")

VOCAB, BLOCK = 150, 12  # a vocabulary wider than the stream, as a character model's


def _gpt2(seed: int) -> torch.nn.Module:
    from paramsym.experiments.merging.char_lm import char_gpt2

    return char_gpt2(VOCAB, BLOCK, seed=seed, overrides={"tie_word_embeddings": False})


def _llama(seed: int) -> torch.nn.Module:
    from paramsym.experiments.merging.char_lm import char_llama

    return char_llama(VOCAB, BLOCK, seed=seed)


def _vit(seed: int) -> torch.nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=8,
        patch_size=4,
        num_channels=1,
        num_labels=10,
    )
    return ViTForImageClassification(config)


BUILDERS = {"gpt2": _gpt2, "llama": _llama, "vit": _vit}


def _input(kind: str) -> dict:
    g = torch.Generator().manual_seed(5)
    if kind == "vit":
        return {"pixel_values": torch.randn(2, 1, 8, 8, generator=g, dtype=F64)}
    return {"input_ids": torch.randint(0, VOCAB, (2, BLOCK), generator=g)}


def _trained_like(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """float64, eval mode, weights moved off their initialisation (norm gains included)."""
    model = model.to(F64).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=F64))
    return model


@functools.cache
def _folded(kind: str) -> tuple[torch.nn.Module, tuple]:
    """The folded model A and the groups align moves along on it."""
    x = _input(kind)
    a = ps.fold_norms(_trained_like(BUILDERS[kind](0), 1), x, add_bias=True)
    found = ps.symmetries(a, example_input=x)
    perms, matrices = _selected(found, "all")
    groups = (tuple(perms), tuple(matrices), tuple(_scalings(found)), tuple(_translations(found)))
    return a, groups


def _planted(kind: str, seed: int = 2, translations: bool = True) -> torch.nn.Module:
    """B = g·A for a random element g of every group align moves along: permutations of
    units and heads, orthogonal per-head maps, rotations of RoPE's pairs, a stream rotation,
    positive scales of gated-MLP units, key and value biases, summed embeddings."""
    a, (perms, matrices, scalings, shifts) = _folded(kind)
    g = torch.Generator().manual_seed(seed)
    state = {k: v.detach().clone() for k, v in a.named_parameters()}
    shifts = shifts if translations else ()
    for s in (*matrices, *perms, *scalings, *shifts):
        if s in shifts:
            element = s.exp(torch.randn(s.dim, generator=g, dtype=F64))
        elif isinstance(s, ps.PositiveScaling):
            element = torch.exp(0.5 * torch.randn(s.width, generator=g, dtype=F64))
        elif isinstance(s, RotaryQueryKey):
            element = torch.zeros(s.width, s.width, dtype=F64)
            for i, j in s.pairs:
                angle = 6.0 * torch.rand((), generator=g, dtype=F64)
                element[i, i] = element[j, j] = torch.cos(angle)
                element[i, j], element[j, i] = -torch.sin(angle), torch.sin(angle)
        elif isinstance(s, MatrixNeuronSymmetry):
            element = torch.linalg.qr(torch.randn(s.width, s.width, generator=g, dtype=F64))[0]
        else:
            element = torch.randperm(s.width, generator=g)
        own = {k: state[k] for k in (*s.parameter_names, *s.reads)}
        state.update({k: v for k, v in s.act(own, element).items() if k in s.parameter_names})
    b = copy.deepcopy(a)
    with torch.no_grad():
        for k, v in state.items():
            b.get_parameter(k).copy_(v)
    return b


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_a_planted_element_of_every_group_is_recovered(kind):
    a, (_, matrices, _, _) = _folded(kind)
    expected = {"gpt2": {"heads", "permutation", "orthogonal", "translation"},
                "llama": {"heads", "permutation", "orthogonal", "rotary", "scaling"},
                "vit": {"heads", "permutation", "orthogonal", "translation"}}[kind]  # fmt: skip
    b = _planted(kind)
    # the key and value biases move with their heads' maps and by their own translations:
    # block descent then converges linearly (about 7x per sweep on GPT-2), not in two sweeps
    result = ps.align(a, b, _input(kind), max_sweeps=30, tolerance=0.0)
    assert set(result.groups) == expected
    streams = [s for s in matrices if all(t.offset is None for t in s.slots)]
    # the ViT's stream is written by its patch convolution, class token and position table
    assert streams
    assert result.distance_before > 1.0
    assert result.distance_after <= 1e-8 * result.distance_before
    assert result.output_change <= 1e-10  # aligned B computes B's function
    assert all(x >= y - 1e-12 for x, y in zip(result.history, result.history[1:], strict=False))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_two_seeds_align_monotonically_and_keep_the_function(kind):
    """Two independently initialised models (no planted element): the distance falls at
    every sweep, the whole group does at least as well as its permutations, and the aligned
    model is B as a function."""
    x = _input(kind)
    a, b = (_trained_like(BUILDERS[kind](seed), seed) for seed in (0, 1))
    whole = ps.align(a, b, x, max_sweeps=5)
    perms = ps.align(a, b, x, groups="permutations", max_sweeps=5)
    for result in (whole, perms):
        assert all(u >= v - 1e-12 for u, v in zip(result.history, result.history[1:], strict=False))
        assert result.distance_after < result.distance_before
        if kind == "gpt2":  # Llama's RMSNorm computes in float32: folding changes it by 1e-7
            assert result.output_change <= 1e-10
    assert whole.distance_after < perms.distance_after
    assert set(perms.groups) <= {"heads", "permutation"}


def test_bad_input_is_named():
    x = _input("gpt2")
    a = _trained_like(_gpt2(0), 0)
    with pytest.raises(ps.ShapeError, match="differ"):
        ps.align(a, _trained_like(_llama(0), 0), x)
    from paramsym.experiments.merging.char_lm import char_gpt2

    wider = char_gpt2(VOCAB, BLOCK, width=32, overrides={"tie_word_embeddings": False})
    with pytest.raises(ps.ShapeError):
        ps.align(a, wider.to(F64), x)
    with pytest.raises(ps.InvalidArgumentError, match="groups"):
        ps.align(a, a, x, groups="everything")
    with pytest.raises(ps.InvalidArgumentError, match="max_sweeps"):
        ps.align(a, a, x, max_sweeps=0)
    with pytest.raises(ps.InvalidArgumentError, match="method"):
        ps.align(a, a, x, method="learned")

    class Opaque(torch.nn.Module):  # Python control flow on a value: the trace sees nothing
        def __init__(self):
            super().__init__()
            self.first, self.second = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

        def forward(self, x):
            h = self.first(x)
            return self.second(torch.relu(h if float(h.sum()) > 0 else 2 * h))

    with (
        pytest.warns(ps.UnanalysedModuleWarning),
        pytest.raises(ps.UnsupportedModuleError, match="strict=True"),
    ):
        ps.align(Opaque(), Opaque(), torch.randn(5, 3))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_activation_matching_recovers_a_planted_element(kind):
    """On data, each group is read off the activations at its neurons: the planted element
    comes back (to the conditioning of the activations' cross-products) and the aligned
    model is B as a function. Translations are not planted: a key bias's shift moves the keys
    the activations pair, which no one-pass matching undoes."""
    a, _ = _folded(kind)
    b = _planted(kind, translations=False)
    g = torch.Generator().manual_seed(9)
    data = {"input_ids": torch.randint(0, VOCAB, (16, BLOCK), generator=g)}
    result = ps.align(a, b, _input(kind), method="activations", data=data)
    assert result.method == "activations"
    # scales and translations have no activation statistic: by weights
    translations = {s.name for s in _translations(result.symmetries)}
    assert all(n.startswith("rescaling") or n in translations for n in result.by_weights)
    assert result.distance_after <= 1e-6 * result.distance_before
    assert result.output_change <= 1e-10
    weights = ps.align(a, b, _input(kind), groups="permutations")
    only_perms = ps.align(
        a, b, _input(kind), groups="permutations", method="activations", data=data
    )
    assert set(only_perms.groups) <= {"heads", "permutation"}
    assert only_perms.distance_after > 1e-2 * only_perms.distance_before  # the maps remain
    assert weights.distance_after > 1e-2 * weights.distance_before


def test_the_vit_stream_translation_takes_in_its_patch_convolution_class_token_and_positions():
    """The ViT's stream is written by a 4-D convolution weight (feature axis 0), a (1, 1, d)
    class token and a (1, n, d) position table (axis 2), beside the blocks' linear maps: a
    random translation of all of them keeps the output to float64 precision."""
    from torch.func import functional_call

    from paramsym.symmetry.translation import StreamTranslation

    model, x = _trained_like(_vit(0), 0), _input("vit")
    (stream,) = [
        s for s in ps.symmetries(model, example_input=x) if isinstance(s, StreamTranslation)
    ]
    writers = dict(stream.writers)
    prefix = "vit.embeddings."
    assert writers[prefix + "cls_token"] == writers[prefix + "position_embeddings"] == 2
    assert writers[prefix + "patch_embeddings.projection.weight"] == 0
    assert stream.closed
    state = {k: v.detach() for k, v in model.named_parameters()}
    with torch.no_grad():
        reference = model(**x).logits
    g = stream.sample(scale=1.0, generator=torch.Generator().manual_seed(0), dtype=F64)
    with torch.no_grad():
        moved = functional_call(model, stream.act(state, g), args=(), kwargs=x).logits
    assert float((moved - reference).norm() / reference.norm()) < 1e-12
    assert (
        float(
            stream.act(state, g)[prefix + "cls_token"].sub(state[prefix + "cls_token"]).abs().max()
        )
        > 0.1
    )


@pytest.mark.parametrize("nullity", [1, 3])
def test_a_singular_activation_pairing_is_completed_by_the_weights(nullity):
    """``orthogonal_completed``: where M = X_Aᵀ X_B is rank-deficient, Q agrees with the data
    on M's range (the same ⟨Q, M⟩ as U Vᵀ) and on the null spaces maximises ⟨Q, M_w⟩ over
    every orthogonal completion (brute force over random ones, and the closed form's
    independence of the null-space bases: the same Q from M with its null vectors rotated)."""
    import types

    from paramsym.connectivity.align_steps import orthogonal_completed

    width, g = 8, torch.Generator().manual_seed(5)
    dtype = torch.float64
    u, _ = torch.linalg.qr(torch.randn(width, width, generator=g, dtype=dtype))
    v, _ = torch.linalg.qr(torch.randn(width, width, generator=g, dtype=dtype))
    sigma = torch.cat(
        [torch.rand(width - nullity, generator=g, dtype=dtype) + 1, torch.zeros(nullity)]
    )
    m = u @ torch.diag(sigma) @ v.T
    mw = torch.randn(width, width, generator=g, dtype=dtype)
    s = types.SimpleNamespace(width=width)
    eps = torch.finfo(dtype).eps
    q = orthogonal_completed(m, s, lambda: mw, eps)
    assert torch.allclose(q.T @ q, torch.eye(width, dtype=dtype), atol=1e-13)
    assert float((q * m).sum()) == pytest.approx(float(sigma.sum()), rel=1e-13)
    r = width - nullity
    best = float((q * mw).sum())
    for _ in range(200):  # any other completion U_r V_rᵀ + U₀ R V₀ᵀ scores no higher on M_w
        rotation, _ = torch.linalg.qr(torch.randn(nullity, nullity, generator=g, dtype=dtype))
        other = u[:, :r] @ v[:, :r].T + u[:, r:] @ rotation @ v[:, r:].T
        assert float((other * mw).sum()) <= best + 1e-12
    turn, _ = torch.linalg.qr(torch.randn(nullity, nullity, generator=g, dtype=dtype))
    u2 = torch.cat([u[:, :r], u[:, r:] @ turn], dim=1)  # other null-space bases, same M
    m2 = u2 @ torch.diag(sigma) @ v.T
    assert torch.allclose(orthogonal_completed(m2, s, lambda: mw, eps), q, atol=1e-12)


@pytest.mark.parametrize("kind", ["gpt2", "vit"])
def test_a_translation_step_is_the_least_squares_solution(kind):
    """Oracle: E stacked from the tangents of the basis vectors, t = lstsq(E, θ_A − θ_B) on
    the moved tensors; the step lands on θ_B + E t and no other element of the group is
    closer (the residual is orthogonal to E)."""
    a, (_, _, _, translations) = _folded(kind)
    assert translations
    b = _planted(kind, seed=3)
    pa = {k: v.detach() for k, v in a.named_parameters()}
    for s in translations:
        pb = {k: v.detach().clone() for k, v in b.named_parameters()}
        moved = list(s.parameter_names)
        basis = torch.eye(s.dim, dtype=F64)
        columns = []
        for i in range(s.dim):
            tangent = s.tangent(pb, basis[i])
            columns.append(torch.cat([tangent[k].reshape(-1) for k in moved]))
        e = torch.stack(columns, 1)
        r = torch.cat([(pa[k] - pb[k]).reshape(-1) for k in moved])
        t = torch.linalg.lstsq(e, r.unsqueeze(1)).solution.squeeze(1)
        expected = torch.cat([pb[k].reshape(-1) for k in moved]) + e @ t
        align_steps.translation_step(s, pa, pb)
        got = torch.cat([pb[k].reshape(-1) for k in moved])
        assert torch.allclose(got, expected, atol=1e-12, rtol=0), s.name
        assert (e.T @ torch.cat([(pa[k] - pb[k]).reshape(-1) for k in moved])).abs().max() < 1e-10
