"""Rotations, simulated low-precision inference and the activation objectives of issue 31,
against orthogonality, dense oracles and the models' own outputs (float64), on Hugging Face
GPT-2-, Llama- and ViT-style models and a CNN with a depthwise convolution."""

from __future__ import annotations

import copy
import functools

import pytest
import scipy.stats
import torch
from torch import nn

import paramsym as ps
from paramsym.quantization import (
    ActivationOutliers,
    LearnedRotationConfig,
    QuantizedLoss,
    Quantizer,
    fake_quantize,
    hadamard,
    learn_rotation,
    outlier_measure,
    quantized_call,
    random_rotation,
    rotate,
)

F64 = torch.float64
transformers = pytest.importorskip("transformers")
VOCAB, BLOCK = 150, 12


def _trained_like(model: nn.Module, seed: int = 1) -> nn.Module:
    """float64, eval mode, every weight moved off its initialisation (norm gains included)."""
    model = model.to(F64).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=F64))
    return model


def _model(kind: str) -> tuple[nn.Module, dict]:
    """A fresh copy of the model ``kind`` (tests move or edit it) and its example input."""
    model, x = _built(kind)
    return copy.deepcopy(model), x


@functools.cache
def _built(kind: str) -> tuple[nn.Module, dict]:
    from paramsym.experiments.merging.char_lm import char_gpt2, char_llama

    g = torch.Generator().manual_seed(5)
    if kind == "vit":
        from transformers import ViTConfig, ViTForImageClassification

        torch.manual_seed(0)
        config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, image_size=8, patch_size=4, num_channels=1,
                           num_labels=10)  # fmt: skip
        x = {"pixel_values": torch.randn(2, 1, 8, 8, generator=g, dtype=F64)}
        return _trained_like(ViTForImageClassification(config)), x
    x = {"input_ids": torch.randint(0, VOCAB, (2, BLOCK), generator=g)}
    if kind == "gpt2":
        model = char_gpt2(VOCAB, BLOCK, seed=0, overrides={"tie_word_embeddings": False})
    else:
        model = char_llama(VOCAB, BLOCK, seed=0)
    return _trained_like(model), x


def _cnn() -> tuple[nn.Module, torch.Tensor]:
    """A CNN with a depthwise convolution (BatchNorm folded, as quantization needs it)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(2, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 6, 3, padding=1, groups=6),
        nn.ReLU(), nn.Conv2d(6, 4, 1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 5),
    ).to(F64).eval()  # fmt: skip
    return model, torch.randn(8, 2, 6, 6, dtype=F64, generator=torch.Generator().manual_seed(1))


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in model.named_parameters()}


def _output(model: nn.Module, x: dict) -> torch.Tensor:
    with torch.no_grad():
        return ps.core.params.first_output(model(**x))


def _loss(output, target) -> torch.Tensor:
    logits = output.logits
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


@pytest.mark.parametrize("n", [1, 2, 4, 8, 12, 20, 24, 48, 64, 768, 896])
def test_hadamard_matrices_are_hadamard(n):
    h = hadamard(n)
    assert set(h.unique().tolist()) <= {-1.0, 1.0}
    assert torch.equal(h @ h.T, n * torch.eye(n, dtype=F64))


def test_a_width_without_a_hadamard_matrix_names_the_random_rotation():
    with pytest.raises(ps.InvalidArgumentError, match="rotation='random'"):
        hadamard(28)  # one exists (Williamson), but not by Sylvester and Paley
    with pytest.raises(ps.InvalidArgumentError, match="rotation must be one of"):
        random_rotation(4, "givens", torch.Generator())  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["hadamard", "random"])
def test_random_rotations_are_orthogonal_and_the_hadamard_one_incoherent(kind):
    q = random_rotation(48, kind, torch.Generator().manual_seed(0))
    assert float((q.T @ q - torch.eye(48, dtype=F64)).abs().max()) <= 1e-13
    if kind == "hadamard":
        assert torch.allclose(q.abs(), torch.full_like(q, 48**-0.5), rtol=1e-14)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "vit"])
def test_rotation_is_orthogonal_and_exact_on_the_folded_model(kind):
    """QuaRot's weight rotations on every stream and value–output group: the rotated model is
    the folded model as a function to 1e-10 in float64 (and the given one too, but for the
    Llama's RMSNorm, which Hugging Face computes in float32 whatever the model's dtype)."""
    model, x = _model(kind)
    before = _output(model, x)
    result = rotate(model, x, heads=True, seed=3)
    assert len(result.streams) == 1  # the residual stream
    assert len(result.heads) == {"gpt2": 8, "llama": 4, "vit": 8}[kind]
    assert result.orthogonality <= 1e-12
    folded = ps.fold_norms(model, x, add_bias=True)
    reference = _output(folded, x)
    change = (_output(result.model, x) - reference).abs().max() / reference.abs().max()
    assert float(change) <= 1e-10
    assert result.output_change <= (1e-6 if kind == "llama" else 1e-10)
    assert torch.equal(_output(model, x), before)  # the given model is unchanged
    # it moved: the stream's writers are rotated
    moved = _state(result.model)
    assert any(float((moved[k] - v).abs().max()) > 1e-3 for k, v in _state(folded).items())


def test_rotation_spreads_a_trained_in_outlier_feature():
    """An outlier written into one stream feature by the embedding (not by a symmetry, which a
    rotation would undo trivially) is spread over every feature by the randomized Hadamard
    matrix: the readers' inputs lose their max/RMS outliers."""
    model, x = _model("llama")
    with torch.no_grad():
        model.get_parameter("model.embed_tokens.weight")[:, 5] += 30.0
    objective = ActivationOutliers("max_rms", calibration=x)
    rotated = rotate(model, x).model
    folded = ps.fold_norms(model, x, add_bias=True)
    assert float(objective.value(rotated, _state(rotated))) < 0.5 * float(
        objective.value(folded, _state(folded))
    )


def test_quantized_call_is_the_dense_computation_on_a_linear_map():
    """W per output channel, the input per token, by hand: y = Q(x) Q(W)ᵀ + b."""
    layer = nn.Linear(6, 3).to(F64)
    x = torch.randn(4, 5, 6, dtype=F64)
    w, a = Quantizer(4, "channel"), Quantizer(8, "channel")
    params = dict(layer.named_parameters())
    out = quantized_call(layer, params, x, weights=w, activations=a)
    rows = x.reshape(-1, 6)
    wq = torch.stack([Quantizer(4).fake(r) for r in layer.weight.detach()])
    xq = torch.stack([Quantizer(8).fake(r) for r in rows]).reshape(4, 5, 6)
    assert torch.allclose(out, xq @ wq.T + layer.bias, rtol=0, atol=1e-14)
    assert torch.allclose(fake_quantize(layer, w, a)(x), out, rtol=0, atol=1e-14)
    # a Hugging Face Conv1D's output channels are its weight's columns
    from transformers.pytorch_utils import Conv1D

    conv1d = Conv1D(3, 6).to(F64)
    with torch.no_grad():
        conv1d.weight.copy_(layer.weight.T)
        conv1d.bias.copy_(layer.bias)
    out1d = quantized_call(conv1d, dict(conv1d.named_parameters()), x, weights=w, activations=a)
    assert torch.allclose(out1d, out, rtol=0, atol=1e-14)


def test_outlier_measures_are_their_formulas():
    x = torch.randn(50, 8, dtype=F64, generator=torch.Generator().manual_seed(0))
    spike = torch.zeros(64, dtype=F64)
    spike[7] = 3.0
    assert float(outlier_measure(spike, "max_rms")) == pytest.approx(8.0, rel=1e-14)  # √n
    expected = scipy.stats.kurtosis(x.reshape(-1).numpy(), fisher=False)
    assert float(outlier_measure(x, "kurtosis")) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "vit", "cnn"])
@pytest.mark.parametrize("objective", ["outliers", "quantized_loss", "weight_error"])
def test_quantization_teleports_keep_the_function(kind, objective):
    """A teleport for a quantization objective moves along the exact symmetries of the function
    only: the output is kept to 1e-10 in float64, and the objective does not rise."""
    if kind == "cnn":
        model, x = _cnn()
        batch, loss = (x, torch.randint(0, 5, (8,))), nn.functional.cross_entropy
    else:
        model, x = _model(kind)
        model = _trained_like(model.__class__(model.config), 2) if kind == "vit" else model
        target = torch.randint(0, 10, (2,)) if kind == "vit" else x["input_ids"]
        batch = (x, target)
        loss = (lambda o, t: nn.functional.cross_entropy(o.logits, t)) if kind == "vit" else _loss
    goal = {
        "outliers": ActivationOutliers("kurtosis"),
        "quantized_loss": QuantizedLoss(Quantizer(4), Quantizer(8)),
        "weight_error": ps.quantization.WeightError(bits=4),
    }[objective]
    before = _output(model, x) if kind != "cnn" else model(x).detach()
    result = ps.teleport(model, loss, batch, objective=goal, steps=5, lr=0.01)
    after = _output(model, x) if kind != "cnn" else model(x).detach()
    assert float((after - before).abs().max() / before.abs().max()) <= 1e-10
    assert result.objective_after <= result.objective_before + 1e-12
    assert result.approximate == []


NOT_APPLICABLE = {
    ("gpt2", "equalize"): "no exact rescaling between two weight layers",  # GELU MLP
    ("vit", "equalize"): "no exact rescaling between two weight layers",
    ("cnn", "rotate"): "no exact rotation group",  # no norms, no attention
}


@pytest.mark.parametrize("kind", ["gpt2", "llama", "vit", "cnn"])
@pytest.mark.parametrize("preset", ["equalize", "smooth", "rotate"])
def test_every_preset_keeps_the_function_or_names_why_it_does_not_apply(kind, preset):
    """Each published method, as a preset, on each model: the moved model computes the given
    model's function to 1e-10 (float64; a rotation, the folded model's: Hugging Face's Llama
    RMSNorm computes in float32), or a named error says what the model lacks."""
    model, x = _cnn() if kind == "cnn" else _model(kind)
    run = {
        "equalize": lambda: ps.quantization.equalize(model, x),
        "smooth": lambda: ps.quantization.smooth(model, x),
        "rotate": lambda: rotate(model, x),
    }[preset]
    if (kind, preset) in NOT_APPLICABLE:
        with pytest.raises(ps.UnsupportedModuleError, match=NOT_APPLICABLE[kind, preset]):
            run()
        return
    result = run()
    reference = ps.fold_norms(model, x, add_bias=True) if preset == "rotate" else model
    before = _output(reference, x) if kind != "cnn" else reference(x).detach()
    after = _output(result.model, x) if kind != "cnn" else result.model(x).detach()
    assert float((after - before).abs().max() / before.abs().max()) <= 1e-10
    moved = _state(result.model)
    assert any(float((moved[k] - v).abs().max()) > 1e-6 for k, v in _state(reference).items())


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_learned_rotation_stays_orthogonal_and_never_ends_worse(kind):
    """SpinQuant's Cayley rotations trained on the W4A4 loss: orthogonal to 1e-10 after
    training, the folded model's function kept to 1e-10, the quantized loss not above the
    Hadamard start."""
    model, x = _model(kind)
    g = torch.Generator().manual_seed(9)
    batches = []
    for _ in range(2):
        ids = torch.randint(0, VOCAB, (2, BLOCK), generator=g)
        batches.append(({"input_ids": ids}, ids))
    config = LearnedRotationConfig(steps=6, lr=0.05, eval_every=3)
    result, learned = learn_rotation(
        model, x, _loss, batches, Quantizer(4, "channel"), Quantizer(4, "channel"), config
    )
    assert result.orthogonality <= 1e-10
    assert learned.loss_after <= learned.loss_before
    assert [s for s, _ in learned.history] == [0, 3, 6]
    start = rotate(model, x, seed=0).model  # the same Hadamard start (seed 0)
    folded = ps.fold_norms(model, x, add_bias=True)
    reference = _output(folded, x)
    change = (_output(result.model, x) - reference).abs().max() / reference.abs().max()
    assert float(change) <= 1e-10
    # the start is the Hadamard rotation of the same seed: the loss before is its loss
    params = {k: v.detach() for k, v in start.named_parameters()}
    quantized = [
        float(_loss(quantized_call(start, params, b[0], weights=Quantizer(4, "channel"),
                                   activations=Quantizer(4, "channel")), b[1]))
        for b in batches
    ]  # fmt: skip
    assert learned.loss_before == pytest.approx(sum(quantized) / 2, rel=1e-10)


def test_bad_input_is_named():
    model, x = _model("gpt2")
    state = {k: v.detach() for k, v in model.named_parameters()}
    with pytest.raises(ps.MissingCalibrationError, match="no calibration batch"):
        ActivationOutliers().value(model, state)
    with pytest.raises(ps.InvalidArgumentError, match="measure must be one of"):
        ActivationOutliers("range")
    with pytest.raises(ps.InvalidArgumentError, match="nothing is quantized"):
        QuantizedLoss()
    with pytest.raises(ps.InvalidArgumentError, match="bits must be between 2 and 16"):
        Quantizer(17)
    with pytest.raises(ps.InvalidArgumentError, match="batches is empty"):
        learn_rotation(model, x, _loss, [], Quantizer(4))
    relu = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(F64)
    with pytest.raises(ps.UnsupportedModuleError, match="no exact rotation group"):
        rotate(relu, torch.randn(3, 4, dtype=F64))
    with pytest.raises(ps.InvalidArgumentError, match="rotation must be one of"):
        rotate(model, x, rotation="givens")  # type: ignore[arg-type]
    # a model with no exact symmetry the objective can use: one linear map
    single = nn.Linear(4, 2).to(F64)
    batch = (torch.randn(3, 4, dtype=F64), torch.randint(0, 2, (3,)))
    with pytest.raises(ps.ParamsymError, match="no continuous symmetry"):
        ps.teleport(single, nn.functional.cross_entropy, batch,
                    objective=QuantizedLoss(Quantizer(4)))  # fmt: skip


def _tied(kind: str) -> tuple[nn.Module, dict]:
    """Decoders as most small checkpoints come: the LM head tied to the token table (GPT-2,
    Llama-3.2-1B-style, Gemma, whose RMSNorms scale by 1 + γ)."""
    torch.manual_seed(0)
    small = {"num_hidden_layers": 2, "hidden_size": 16, "intermediate_size": 32,
             "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32,
             "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}  # fmt: skip
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=32,
                                         n_positions=8, bos_token_id=0, eos_token_id=1)  # fmt: skip
        model = transformers.GPT2LMHeadModel(config)
    elif kind == "llama":
        model = transformers.LlamaForCausalLM(
            transformers.LlamaConfig(**small, tie_word_embeddings=True)
        )
    else:
        model = transformers.GemmaForCausalLM(transformers.GemmaConfig(**small, head_dim=8))
    g = torch.Generator().manual_seed(5)
    return _trained_like(model), {"input_ids": torch.randint(0, 32, (2, 8), generator=g)}


@pytest.mark.parametrize("kind", ["gpt2", "llama", "gemma"])
def test_a_tied_model_rotates_its_stream_after_an_exact_untie(kind):
    """Issue 45: a tied head used to leave the stream unrotated, silently. ``rotate`` unties it
    first (the head gets its own copy), folds every norm (Gemma's 1 + γ too), and rotates the
    stream; the result says what it untied and which norms stayed (the final one of a tied
    model, whose reader is the copy now, folds)."""
    model, x = _tied(kind)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    result = rotate(model, x, seed=1)
    assert len(result.streams) == 1
    assert list(result.untied) == ["lm_head.weight"]
    assert result.unfolded == {}
    assert result.model.config.tie_word_embeddings is False
    # Hugging Face's RMSNorms compute in float32 inside a float64 model; the folded ones do not
    assert result.output_change <= (1e-10 if kind == "gpt2" else 1e-6)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    text = str(result)
    assert "untied first: lm_head.weight" in text
    assert "tensor" not in text
    assert len(text) < 400


def test_without_untying_a_tied_stream_is_named_not_rotated():
    model, x = _tied("gpt2")
    with pytest.warns(ps.PartialTransformWarning, match="stream .* was not rotated"):
        result = rotate(model, x, untie=False)
    assert result.streams == []
    assert len(result.heads) == 4
    assert "transformer.ln_f" in result.unfolded
    assert "NOT rotated" in str(result)


def test_gemma_norms_fold_their_one_plus_weight():
    """Gemma's RMSNorm computes x̂ · (1 + γ): folding puts 1 + γ into its readers (found as
    the catalogue's OffsetNormScaling) and names the norm it leaves."""
    model, x = _tied("gemma")
    folded = ps.fold_norms(model, x)
    report = folded.paramsym_fold
    norms = ("input_layernorm", "post_attention_layernorm")
    assert sorted(report.folded) == [f"model.layers.{i}.{n}" for i in (0, 1) for n in norms]
    assert list(report.skipped) == ["model.norm"]  # its reader is the tied table
    assert report.output_change <= 1e-6  # Gemma's norms compute in float32
    layer = folded.model.layers[0]
    gamma = model.model.layers[0].input_layernorm.weight.detach()
    torch.testing.assert_close(
        layer.self_attn.q_proj.weight, model.model.layers[0].self_attn.q_proj.weight * (1 + gamma)
    )
