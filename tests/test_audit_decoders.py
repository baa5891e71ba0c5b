"""The completeness audit on every Hugging Face decoder kind: the catalogue names every flat
direction (``ps.audit``: missing = 0), called directly, from inside a user's module, and as a
``*ForCausalLM`` with tied embeddings; and the families the audit found on decoders.

Models are built small (width 8, 2 heads, one key/value head where grouped, vocabulary 32,
``max_position_embeddings`` = the example's sequence length so that every position is reached,
one layer unless a second matters), float64, weights moved off their initialisation.

Two degeneracies are of the function on finitely many inputs, not symmetries, and the configs
keep clear of them: a parallel block (Phi, Falcon, GPT-NeoX) applies its first MLP to the
token's embedding alone, a function on the V tokens, whose parameters are flat beyond the
V·(d − 1) values it takes (Falcon's default 4·d feed-forward width at V = 24: 380 of its 448
missing directions), so their MLPs are narrow here; and a ReLU unit that fires only where the
input is a function of the token alone (OPT's second block at position 0) is flat beyond the
few inputs it sees (:func:`test_opt_second_block_relu_flatness_is_of_the_point`).

The new families (:mod:`paramsym.symmetry.offset_scaling`, :mod:`paramsym.symmetry.norm_weights`,
:mod:`paramsym.symmetry.embedding_norm`, the ``bias_sum`` translations) are checked against
the model's output under random elements, their closed-form tangents against the generic one,
their inverses and products, and the audit with the family removed (it must report exactly the
family's dimension, on its tensors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.core.params import first_output, functional_call, params_of
from paramsym.core.precision import KeepFloat64
from paramsym.core.ranks import decide_rank
from paramsym.curvature import tangent_matrix
from paramsym.symmetry import QueryKeyGL, RotaryQueryKey, Symmetry, ValueOutputGL

transformers = pytest.importorskip("transformers")

from paramsym.nn.hf import hf_tiny_config  # noqa: E402

F64 = torch.float64
VOCAB, SEQ = 32, 6
SMALLEST_VOCAB = 16
"""BLOOM's vocabulary (its audit runs a sample at a time: its GELU is an ``autograd.Function``
without a ``vmap`` rule, so fewer tokens to draw make it faster); the examples' tokens."""


def _perturbed(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` initialised from seed 0, its weights moved off their initialisation by
    0.1·randn, float64, evaluation mode; the global random state is left alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build().to(F64).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return model


def _hf(kind: str, model_class: str | None = None, **options: Any) -> nn.Module:
    config_name, model_name, config = hf_tiny_config(kind, width=8, heads=2, kv_heads=1)
    for key in ("max_position_embeddings", "n_positions"):
        if key in config:
            config[key] = SEQ
    config.update({"vocab_size": VOCAB, **options})
    if kind.startswith("gpt2"):
        config.update(bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    model = getattr(transformers, model_class or model_name)
    return _perturbed(lambda: model(getattr(transformers, config_name)(**config)))


def _falcon(new: bool, bias: bool = False) -> nn.Module:
    """``bias=True``: ``FalconLinear`` adds its bias after ``x @ W.T`` (its readers' biases and
    the parallel block's two output biases are found through that add)."""
    config = transformers.FalconConfig(
        hidden_size=8, num_attention_heads=2, num_hidden_layers=1, vocab_size=VOCAB,
        new_decoder_architecture=new, num_kv_heads=1, ffn_hidden_size=8, bos_token_id=0,
        eos_token_id=0, bias=bias,
    )  # fmt: skip
    return _perturbed(lambda: transformers.FalconModel(config))


def _gpt_neo() -> nn.Module:
    """Two blocks, the second with local attention (a window of 4)."""
    config = transformers.GPTNeoConfig(
        hidden_size=8, num_heads=2, num_layers=2, attention_types=[[["global", "local"], 1]],
        window_size=4, vocab_size=VOCAB, max_position_embeddings=SEQ, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    return _perturbed(lambda: transformers.GPTNeoModel(config))


def _gpt_neox() -> nn.Module:
    """A parallel block (``use_parallel_residual``), partial rotary; a narrow MLP."""
    config = transformers.GPTNeoXConfig(
        hidden_size=8, num_attention_heads=2, num_hidden_layers=1, intermediate_size=4,
        vocab_size=VOCAB, max_position_embeddings=SEQ, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return _perturbed(lambda: transformers.GPTNeoXModel(config))


BUILDERS = {
    "llama": lambda: _hf("llama"),
    "mistral": lambda: _hf("mistral"),
    "qwen2": lambda: _hf("qwen2"),
    "gemma": lambda: _hf("gemma"),
    "phi": lambda: _hf("phi", intermediate_size=4),  # narrow parallel MLP (module docstring)
    "gpt2": lambda: _hf("gpt2"),
    "gpt2-lm": lambda: _hf("gpt2-lm"),  # GPT2LMHeadModel: tied embeddings
    "opt": lambda: _hf("opt"),
    "bloom": lambda: _hf("bloom", vocab_size=SMALLEST_VOCAB),
    "llama-lm": lambda: _hf("llama", "LlamaForCausalLM", tie_word_embeddings=True),
    "falcon": lambda: _falcon(False),
    "falcon-new": lambda: _falcon(True),
    "falcon-bias": lambda: _falcon(False, bias=True),  # 35 missing before (issue 44)
    "gptneo": _gpt_neo,
    "gptneox": _gpt_neox,
}
LAST_HIDDEN = [k for k in BUILDERS if not k.endswith("-lm")]


class Wrapped(nn.Module):
    """What users write: the backbone inside their own forward, its cache at the default."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(input_ids=x).last_hidden_state


def _ids(batch: int = 2, seed: int = 1) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(0, SMALLEST_VOCAB, (batch, SEQ), generator=generator)}


_MODELS: dict[str, tuple[nn.Module, list[Symmetry]]] = {}


def _model(kind: str) -> tuple[nn.Module, list[Symmetry]]:
    """The model ``kind`` and its catalogue, built once per session."""
    if kind not in _MODELS:
        model = BUILDERS[kind]()
        _MODELS[kind] = model, ps.symmetries(model, example_input=_ids())
    return _MODELS[kind]


def _family(catalogue: list[Symmetry], prefixes: str) -> list[Symmetry]:
    """The symmetries of the families ``prefixes`` (names separated by ``|``)."""
    return [s for s in catalogue if s.name.split("[")[0] in prefixes.split("|")]


# -- every decoder: nothing missing --------------------------------------------------------


def _complete(report: ps.AuditReport, kind: str) -> None:
    if kind == "opt":  # OPT's positions start at row 2: rows 0 and 1 are read by no input
        assert report.missing == report.unreached == 14
        top = max(report.carriers, key=report.carriers.__getitem__)
        assert top.endswith("decoder.embed_positions.weight")
        assert report.unreached_parameters[top] == 2 * 8
        return
    assert (report.missing, report.not_flat) == (0, []), report.carriers
    assert report.complete, report.ranks


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_every_decoder_catalogue_names_every_flat_direction(kind: str) -> None:
    model, catalogue = _model(kind)
    report = ps.audit(model, _ids(), catalogue=catalogue, points=1)
    assert report.flat > 0
    _complete(report, kind)


WRAPPED_AUDITS = ("llama", "gemma", "falcon-new")


@pytest.mark.parametrize("kind", LAST_HIDDEN)
def test_inside_a_users_module_too(kind: str) -> None:
    """Called from a user's ``forward`` (its cache at the default) the model computes the same
    function of the same parameters, so the flat directions are the same: the catalogue must
    span the direct call's (name by name) — audited in full for a few kinds."""
    model, direct = _model(kind)
    wrapped = Wrapped(model).eval()
    x = _ids()["input_ids"]
    if kind in WRAPPED_AUDITS:
        _complete(ps.audit(wrapped, x, points=1), kind)
        return
    found = ps.symmetries(wrapped, example_input=x)
    params = params_of(model)
    inner = {f"backbone.{k}": v for k, v in params.items()}

    def span(catalogue: list[Symmetry], point: dict[str, torch.Tensor]) -> torch.Tensor:
        counted = [s for s in catalogue if s.dim and s.exact and not s.data_dependent]
        return torch.cat([tangent_matrix(s, point) for s in counted])

    ours, theirs = span(found, inner), span(direct, params)
    ranks = [_rank(m) for m in (ours, theirs, torch.cat([ours, theirs]))]
    assert ranks[0] == ranks[1] == ranks[2], ranks


def _rank(matrix: torch.Tensor) -> int:
    values = torch.linalg.svdvals(matrix)
    return decide_rank(values, eps=torch.finfo(F64).eps, size=max(matrix.shape)).rank


def test_falcon_new_architecture_gets_its_attention_groups() -> None:
    """Falcon's new decoder architecture views ``query_key_value`` as (…, K, G + 2, D): G
    query heads, one key and one value head per group, sliced and selected off it."""
    _, found = _model("falcon-new")
    kinds = sorted((type(s).__name__, s.dim) for s in found if isinstance(
        s, (QueryKeyGL, RotaryQueryKey, ValueOutputGL)))  # fmt: skip
    assert kinds == [("RotaryQueryKey", 4), ("ValueOutputGL", 16)]
    packed = "h.0.self_attention.query_key_value.weight"
    qk = next(s for s in found if isinstance(s, RotaryQueryKey))
    assert sorted((t.offset, t.power) for t in qk.slots if t.name == packed) == [
        (0, 1.0), (4, 1.0), (8, -1.0)]  # fmt: skip


@pytest.mark.slow
def test_opt_second_block_relu_flatness_is_of_the_point() -> None:
    """OPT with two blocks, initialised from seed 0 and moved by a generator's draws: besides
    the two position rows no input reads, the audit finds directions on the second block's
    first MLP map. They are not a symmetry: one ReLU unit fires (almost) only at position 0,
    where the block's input is a function of the token alone, for two tokens, so its weights
    are flat beyond those few inputs (three times the rows leave the count as it is); at a
    second, perturbed point part of them goes, and the audit reports that part as
    point-degenerate. (Built as :func:`_hf` builds it, the same architecture has no such unit
    and is complete but for the two rows.)"""
    config_name, model_name, config = hf_tiny_config("opt", width=8, heads=2, layers=2)
    config.update(vocab_size=VOCAB, max_position_embeddings=SEQ)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = getattr(transformers, model_name)(getattr(transformers, config_name)(**config))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    model = model.to(F64).eval()
    report = ps.audit(model, _ids(), points=2)
    reached = report.missing - report.unreached
    assert reached > 0
    assert report.point_degenerate is not None
    assert report.point_degenerate > 0
    on_fc = sum(v for k, v in report.carriers.items() if "layers.1.fc1" in k)
    assert on_fc >= 0.75 * reached
    seen = {}
    hook = model.decoder.layers[1].fc1.register_forward_hook(
        lambda module, args, out: seen.setdefault("z", out.detach())
    )
    ids = torch.randint(0, VOCAB, (2000, SEQ), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        model(input_ids=ids)
    hook.remove()
    active = seen["z"].reshape(2000, SEQ, -1) > 0  # OPT flattens (batch, tokens) for its MLP
    unit = int(active.float().mean((0, 1)).argmin())
    at_first = active[:, 0, unit].sum() / active[..., unit].sum()
    assert at_first > 0.9
    assert len(set(ids[active[:, 0, unit], 0].tolist())) <= 3


# -- the new families ------------------------------------------------------------------------

FAMILIES = [  # (model, family prefix, dimension the audit reports without it, its tensors)
    # (GPT-Neo's norm_shift_weights are checked on Falcon's: one audit of GPT-Neo fewer)
    ("gemma", "offset_rescaling", 16, ("input_layernorm", "post_attention_layernorm")),
    ("phi", "bias_sum", 7, ("dense.bias", "fc2.bias")),  # one of 8 is the stream translation
    ("gptneo", "key_shift|value_shift", 32, ("k_proj", "v_proj", "out_proj.bias")),
    ("falcon-new", "norm_shift_weights", 16, ("ln_attn.bias", "ln_mlp.bias", "query_key_value",
                                              "dense_h_to_4h")),
    ("bloom", "embedding_norm", 15, ("word_embeddings",)),  # one of 16: the stream's β
]  # fmt: skip


def _output(model: nn.Module, params: dict[str, torch.Tensor]) -> torch.Tensor:
    with KeepFloat64(), torch.no_grad():  # Gemma's RMSNorm and BLOOM's softmax cast to float32
        return first_output(functional_call(model, params, _ids()))


@pytest.mark.parametrize(("kind", "family"), [(k, f) for k, f, _, _ in FAMILIES])
def test_family_keeps_the_function_and_is_a_group(kind: str, family: str) -> None:
    model, catalogue = _model(kind)
    found = _family(catalogue, family)
    assert found
    params = params_of(model)
    before = _output(model, params)
    generator = torch.Generator().manual_seed(0)
    for s in found:
        assert s.exact, s.notes
        for _ in range(3):
            g = s.sample(scale=0.5, generator=generator, dtype=F64, non_identity=True)
            moved = s.act(params, g)
            assert any(not torch.equal(moved[k], params[k]) for k in s.parameter_names)
            after = _output(model, moved)
            assert (after - before).abs().max() <= 1e-12 * before.abs().max(), s.name
            back = s.act(moved, s.inverse(g))
            assert all(torch.allclose(back[k], params[k], atol=1e-12) for k in params), s.name
            h = s.sample(scale=0.5, generator=generator, dtype=F64)
            two, one = s.act(s.act(params, h), g), s.act(params, s.compose(g, h))
            assert all(torch.allclose(two[k], one[k], atol=1e-12) for k in params), s.name
        xi = torch.randn(s.dim, generator=generator, dtype=F64)
        closed, generic = s.tangent(params, xi), Symmetry.tangent(s, params, xi)
        for k in params:
            scale = 1e-10 * (1.0 + float(generic[k].abs().max()))
            assert torch.allclose(closed[k], generic[k], rtol=1e-9, atol=scale), (s.name, k)


@pytest.mark.parametrize(("kind", "family", "dimension", "tensors"), FAMILIES)
def test_audit_reports_a_removed_family_on_its_tensors(
    kind: str, family: str, dimension: int, tensors: tuple[str, ...]
) -> None:
    model, catalogue = _model(kind)
    removed = _family(catalogue, family)
    kept = [s for s in catalogue if s not in removed]
    report = ps.audit(model, _ids(), catalogue=kept, points=1)
    assert report.missing == dimension
    assert report.unreached == 0
    assert sum(report.carriers.values()) == pytest.approx(dimension, abs=0.05 * dimension)
    # the missing directions are the family's tangents less their projection on the named
    # ones: carried by the family's tensors (the largest share) and by those of the named
    # symmetries that share a tensor with it
    moved = {n for s in removed for n in s.parameter_names}
    assert all(any(t in k for k in moved) for t in tensors), moved
    own = moved | {n for s in removed for n in s.reads}
    near = {n for s in kept if own & set(s.parameter_names) for n in s.parameter_names}
    far = sum(v for k, v in report.carriers.items() if k not in own | near)
    assert far <= 0.1 * dimension, report.carriers
    assert max(report.carriers, key=report.carriers.__getitem__) in own
    assert sum(report.carriers.get(k, 0.0) for k in own) >= 0.4 * dimension, report.carriers


def test_gradient_transport_along_the_non_affine_families() -> None:
    """A covector carried along an element (the VJP of the inverse action at the moved point)
    is the gradient recomputed there."""
    from paramsym.teleportation.orbit import Orbit

    for kind, family in (("gptneo", "norm_shift_weights"), ("gemma", "offset_rescaling"),
                         ("bloom", "embedding_norm")):  # fmt: skip
        model, catalogue = _model(kind)
        s = _family(catalogue, family)[0]
        params = params_of(model)
        target = torch.randn_like(_output(model, params))

        def gradient(point: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            leaves = {k: v.clone().requires_grad_(True) for k, v in point.items()}
            with KeepFloat64():
                out = first_output(functional_call(model, leaves, _ids()))  # noqa: B023
            loss = ((out - target) ** 2).sum()  # noqa: B023
            return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))

        orbit = Orbit([s], _ids(), "exp", params)
        g = s.sample(scale=0.3, generator=torch.Generator().manual_seed(1), dtype=F64)
        moved, moves = orbit.apply(params, [(s, s.check_element(g))])
        carried, direct = orbit.transport(gradient(params), moves), gradient(moved)
        for k in params:
            assert torch.allclose(carried[k], direct[k], rtol=1e-7, atol=1e-9), (s.name, k)
