"""Detection does not depend on whether a Hugging Face model is called directly or from inside a
user's module (issue 44).

A user's ``forward`` that calls ``self.backbone(input_ids=x)`` leaves the backbone's key/value
cache at its default (on for decoders): the cache's writes (keys and values concatenated onto an
empty tensor, read back by the attention) then stood between the projections and the attention,
and the trace fell back to ``torch.export``, whose graph held metadata checks that kept RMSNorm
from being read as one op. Measured before the fix (GPT-2, 2 layers, width 16): 868 catalogue
dimensions called directly, 356 wrapped. Now the inner caches are off for the trace (and the
result's notes say so), a cache the model's own code turns on has its writes ignored, and the
export fallback gives ``make_fx``'s graph.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.core.calls import CACHE_NOTE, caches_off, call_notes, inner_caches
from paramsym.curvature import tangent_matrix
from paramsym.symmetry.graph import analyse
from paramsym.symmetry.graph.trace import CACHE_WRITE_NOTE

pytest.importorskip("transformers")

from paramsym.nn.hf import hf_example_input, hf_tiny

F64 = torch.float64
DECODERS = ("gpt2", "gpt2-lm", "opt", "llama", "mistral", "qwen2", "gemma", "phi", "bloom")
PREFIX = "backbone."


class Wrapper(nn.Module):
    """What users write: the backbone called inside their own forward, its cache at the
    default; the first output field (logits for a language-model head)."""

    def __init__(self, backbone: nn.Module, use_cache: bool | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.use_cache = use_cache

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        options = {} if self.use_cache is None else {"use_cache": self.use_cache}
        out = self.backbone(input_ids=x, **options)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _model(kind: str, layers: int = 2, width: int = 16) -> nn.Module:
    if kind == "llama-lm":  # a ForCausalLM with tied embeddings
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            hidden_size=16, intermediate_size=24, num_hidden_layers=layers,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
            max_position_embeddings=64, tie_word_embeddings=True,
        )  # fmt: skip
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = LlamaForCausalLM(config).to(F64).eval()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.1 * torch.randn_like(p))
        assert model.lm_head.weight is model.model.embed_tokens.weight
        return model
    return hf_tiny(kind, width=width, layers=layers, heads=4, kv_heads=2)


def _ids(kind: str) -> torch.Tensor:
    return hf_example_input("llama" if kind == "llama-lm" else kind)["input_ids"]


def _detect(model: nn.Module, x: Any, verify: bool = False) -> ps.Symmetries:
    """The symmetries, with no module left unanalysed; verification (which runs the model
    once per symmetry, the most of detection's time here) only where asked for."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ps.UnanalysedModuleWarning)
        warnings.simplefilter("error", ps.SymmetryVerificationWarning)
        return ps.symmetries(model, example_input=x, verify=verify)


def _catalogue(found: list[ps.Symmetry], prefix: str = "") -> list[tuple]:
    """Every symmetry as (name, dim, exact, parameters), the wrapper's prefix taken off."""
    rows = []
    for s in found:
        names = sorted(s.parameter_names)
        assert all(n.startswith(prefix) for n in names), (s.name, names)
        rows.append(
            (s.name.replace(prefix, ""), s.dim, s.exact, tuple(n[len(prefix) :] for n in names))
        )
    return sorted(rows)


def _span(model: nn.Module, found: list[ps.Symmetry]) -> int:
    """The rank of the exact continuous symmetries' tangent matrices at the model's weights."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    rows = [tangent_matrix(s, params) for s in found if s.dim > 0 and s.exact]
    matrix = torch.cat(rows)
    values = torch.linalg.svdvals(matrix.T)  # the tall side: measured 10x faster than matrix_rank
    return int((values > values[0] * max(matrix.shape) * torch.finfo(F64).eps).sum())


@pytest.mark.parametrize("kind", [*DECODERS, "llama-lm"])
def test_a_wrapped_model_gets_the_symmetries_of_the_direct_call(kind):
    model = _model(kind)
    ids = _ids(kind)
    direct = _detect(model, {"input_ids": ids})
    wrapper = Wrapper(model)
    wrapped = _detect(wrapper, ids)
    assert any(s.dim > 0 and s.exact for s in direct)
    assert _catalogue(wrapped, PREFIX) == _catalogue(direct)
    assert CACHE_NOTE in direct.notes
    inner = [note for note in wrapped.notes if "inside 'backbone'" in note]
    assert len(inner) == 1
    assert "use_cache=False" in inner[0]
    assert CACHE_NOTE not in wrapped.notes  # the wrapper itself takes no use_cache
    if kind != "llama-lm":  # LlamaForCausalLM's config: use_cache True as well
        assert model.config.use_cache is True  # put back after detection
    with torch.no_grad():  # and the model as the user has it still computes the same
        out = wrapper(ids)
        reference = model(input_ids=ids, use_cache=False)
    first = reference.logits if hasattr(reference, "logits") else reference.last_hidden_state
    torch.testing.assert_close(out, first, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_catalogues_span_is_the_same_wrapped_and_with_a_dict_input(kind):
    """The measure of issue 44: the rank of the tangent matrices of the verified catalogue,
    direct vs wrapped (called with the tensor and with a dict of the wrapper's keyword)."""
    model = _model(kind, layers=1, width=8)
    ids = _ids(kind)
    found = _detect(model, {"input_ids": ids}, verify=True)
    direct = _span(model, found)
    wrapper = Wrapper(model)
    wrapped = _detect(wrapper, ids, verify=True)
    assert _catalogue(wrapped, PREFIX) == _catalogue(found)
    assert _span(wrapper, wrapped) == direct
    as_dict = _detect(wrapper, {"x": ids})
    assert _span(wrapper, as_dict) == direct
    assert any("inside 'backbone'" in note for note in as_dict.notes)


def test_a_cache_the_models_own_code_turns_on_has_its_writes_ignored():
    """``self.backbone(input_ids=x, use_cache=True)``: no config reaches that keyword, so the
    cache's writes are in the trace; concatenating onto an empty tensor is the identity, and
    the graph reads as the direct call's (noted)."""
    model = _model("gpt2")
    ids = _ids("gpt2")
    direct = _detect(model, {"input_ids": ids})
    wrapped = _detect(Wrapper(model, use_cache=True), ids)
    assert _catalogue(wrapped, PREFIX) == _catalogue(direct)
    assert CACHE_WRITE_NOTE in wrapped.notes


@pytest.mark.parametrize("kind", ["llama", "gpt2-lm"])
def test_the_export_fallback_gives_the_graph_of_make_fx(kind):
    """``torch.export``'s graph checks tensor metadata before each cast (an extra reader that
    kept RMSNorm from fusing: Llama's norm rescalings were lost) and names a tied weight twice
    (``lm_head.weight``, absent from ``named_parameters()``)."""
    model = _model(kind)
    x = {"input_ids": _ids(kind)}
    by_export = analyse(model, x, tracers=("export",))
    by_make_fx = analyse(model, x, tracers=("make_fx",))
    assert by_export.walk is not None
    assert by_export.walk.traced.tracer == "export"
    assert _catalogue(by_export.symmetries) == _catalogue(by_make_fx.symmetries)
    parameters = {n for n, _ in model.named_parameters()}
    assert set(by_export.walk.traced.parameters.values()) <= parameters


def test_a_wrapped_stack_of_identical_blocks_is_repeated_as_the_direct_one():
    model = _model("gpt2", layers=5)
    ids = _ids("gpt2")
    direct = _detect(model, {"input_ids": ids})
    wrapped = _detect(Wrapper(model), ids)
    assert _catalogue(wrapped, PREFIX) == _catalogue(direct)
    assert any("identical blocks of 'backbone.h'" in note for note in wrapped.notes)
    assert any("identical blocks of 'h'" in note for note in direct.notes)


def test_other_analyses_compute_the_direct_calls_function_on_the_wrapped_model():
    """The NTK and a teleport (which detects on its batch) give the same numbers wrapped."""
    model = _model("gpt2", layers=1, width=8)
    x = hf_example_input("gpt2", batch=2, sequence=4)
    ids = x["input_ids"]
    wrapper = Wrapper(copy.deepcopy(model))
    torch.testing.assert_close(ps.ntk(wrapper, ids), ps.ntk(model, x), rtol=0, atol=1e-12)
    target = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0), dtype=F64)
    direct = ps.teleport(model, lambda o, y: ((o[0] - y) ** 2).mean(), (x, target), steps=2)
    wrapped = ps.teleport(wrapper, lambda o, y: ((o - y) ** 2).mean(), (ids, target), steps=2)
    assert wrapped.objective_after == pytest.approx(direct.objective_after, rel=1e-10)
    assert wrapped.loss_after == pytest.approx(direct.loss_after, rel=1e-10)
    for name, p in model.named_parameters():
        torch.testing.assert_close(wrapper.get_parameter(PREFIX + name), p, rtol=0, atol=1e-12)


def test_inner_caches_respect_the_users_choice_and_are_put_back():
    model = _model("gpt2", layers=1)
    wrapper = Wrapper(model)
    assert [name for name, _ in inner_caches(wrapper)] == ["backbone"]
    assert inner_caches(model) == []  # called directly: the call's use_cache=False reaches it
    assert inner_caches(wrapper, {"x": None, "use_cache": True}) == []  # the user chose
    assert call_notes(model, {"input_ids": None}) == [CACHE_NOTE]
    seen: list[object] = []

    def fail_inside() -> None:
        with caches_off(wrapper) as names:
            seen.extend([names, model.config.use_cache])
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        fail_inside()
    assert seen == [["backbone"], False]
    assert model.config.use_cache is True
