"""Character corpora (paramsym.data.text) and the character language models of issue 30
(paramsym.experiments.merging.char_lm). Kept fast: one standard-library read per module, tiny
models and 20-step runs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from paramsym.data import (
    STDLIB_TEST_FILES,
    STDLIB_TRAIN_FILES,
    STDLIB_VALIDATION_FILES,
    UNKNOWN_CHAR,
    CharCorpus,
    char_corpus,
    contiguous_blocks,
    random_blocks,
    stdlib_text,
    text_file,
)
from paramsym.data.text import stdlib_directory
from paramsym.errors import DataFormatError, InvalidArgumentError, MissingDataError
from paramsym.experiments.merging.char_lm import (
    char_gpt2,
    char_llama,
    learning_rate,
    train_char_lm,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def stdlib() -> CharCorpus:
    return stdlib_text()


@pytest.fixture(scope="module")
def tiny(stdlib: CharCorpus) -> CharCorpus:
    """A small slice of the standard-library text with the full corpus's alphabet."""
    return char_corpus(
        stdlib.decode(stdlib.train[:30_000]),
        stdlib.decode(stdlib.validation[:1_000]),
        stdlib.decode(stdlib.test[:1_000]),
        name="stdlib-slice",
    )


# --------------------------------------------------------------------------- the stdlib corpus


def test_file_list_is_present_disjoint_and_used(stdlib: CharCorpus) -> None:
    every = STDLIB_TRAIN_FILES + STDLIB_VALIDATION_FILES + STDLIB_TEST_FILES
    assert len(set(every)) == len(every)
    assert all((stdlib_directory() / f).is_file() for f in every)
    assert stdlib.metadata["files"] == {
        "train": list(STDLIB_TRAIN_FILES),
        "validation": list(STDLIB_VALIDATION_FILES),
        "test": list(STDLIB_TEST_FILES),
    }
    sizes = stdlib.metadata["characters"]
    assert sizes["train"] > 2_000_000
    assert 50_000 < sizes["validation"] < 0.1 * sizes["train"]
    assert 50_000 < sizes["test"] < 0.1 * sizes["train"]
    # the split is by file: each split starts with its first file's text
    first_test = (stdlib_directory() / STDLIB_TEST_FILES[0]).read_text("utf-8")[:500]
    assert stdlib.decode(stdlib.test[:500]) == first_test
    first_val = (stdlib_directory() / STDLIB_VALIDATION_FILES[0]).read_text("utf-8")[:500]
    assert stdlib.decode(stdlib.validation[:500]) == first_val


def test_split_is_deterministic(stdlib: CharCorpus) -> None:
    again = stdlib_text()
    assert again.vocabulary == stdlib.vocabulary
    for split in ("train", "validation", "test"):
        assert torch.equal(again.split(split), stdlib.split(split))
        assert again.split(split).dtype == torch.int64
    assert again.metadata["sha256"] == stdlib.metadata["sha256"]


def test_missing_stdlib_file_is_named(tmp_path) -> None:
    for name in STDLIB_TRAIN_FILES[1:] + STDLIB_VALIDATION_FILES + STDLIB_TEST_FILES:
        (tmp_path / name).write_text("x = 1\n")
    with pytest.raises(MissingDataError, match=rf"{STDLIB_TRAIN_FILES[0]}.*text_file"):
        stdlib_text(tmp_path)


# --------------------------------------------------------------------------- vocabulary


def test_vocabulary_sorted_with_fallback_and_round_trip(stdlib: CharCorpus) -> None:
    vocab = stdlib.vocabulary
    assert list(vocab) == sorted(vocab)
    assert UNKNOWN_CHAR in vocab
    assert stdlib.unknown_id == vocab.index(UNKNOWN_CHAR)
    assert stdlib.vocab_size == len(vocab) < 200
    text = stdlib.decode(stdlib.train[100_000:101_000])
    assert torch.equal(stdlib.encode(text), stdlib.train[100_000:101_000])
    assert stdlib.decode(stdlib.encode("def f(x):\n    return x\n")) == "def f(x):\n    return x\n"


def test_unknown_characters_map_to_the_fallback() -> None:
    corpus = char_corpus("abcab\n" * 5, "abz\n", "éab\n")
    assert corpus.vocabulary == ("\n", "a", "b", "c", UNKNOWN_CHAR)
    assert corpus.validation.tolist() == [1, 2, corpus.unknown_id, 0]
    assert corpus.decode(corpus.test) == f"{UNKNOWN_CHAR}ab\n"
    assert corpus.metadata["unknown_characters"] == {"train": 0, "validation": 1, "test": 1}
    with pytest.raises(InvalidArgumentError, match="ids must lie"):
        corpus.decode([0, 5])
    with pytest.raises(InvalidArgumentError, match="at least 2"):
        char_corpus("abc", "a", "ab")


# --------------------------------------------------------------------------- blocks


def test_blocks_shapes_determinism_and_shift(tiny: CharCorpus) -> None:
    x, y = tiny.blocks("train", 5, 16, torch.Generator().manual_seed(3))
    assert x.shape == y.shape == (5, 16)
    assert x.dtype == y.dtype == torch.int64
    x2, y2 = tiny.blocks("train", 5, 16, torch.Generator().manual_seed(3))
    assert torch.equal(x, x2)
    assert torch.equal(y, y2)
    x3, _ = tiny.blocks("train", 5, 16, torch.Generator().manual_seed(4))
    assert not torch.equal(x, x3)
    assert torch.equal(x[:, 1:], y[:, :-1])
    # on tokens 0..n-1 every window is consecutive and targets are inputs + 1
    ramp = torch.arange(40)
    xs, ys = random_blocks(ramp, 64, 8, torch.Generator().manual_seed(0))
    assert torch.equal(ys, xs + 1)
    assert torch.equal(xs - xs[:, :1], torch.arange(8).expand(64, 8))
    assert int(ys.max()) <= 39
    assert int(xs.min()) >= 0


def test_contiguous_blocks_and_bad_sizes() -> None:
    x, y = contiguous_blocks(torch.arange(11), 3)
    assert x.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert torch.equal(y, x + 1)
    with pytest.raises(InvalidArgumentError, match="cannot hold a block"):
        random_blocks(torch.arange(8), 2, 8, torch.Generator())
    with pytest.raises(InvalidArgumentError, match="1-D int64"):
        contiguous_blocks(torch.zeros(10), 3)


# --------------------------------------------------------------------------- text_file


def test_text_file_split_and_line_endings(tmp_path) -> None:
    text = "".join(f"line {i}\n" for i in range(200))
    (tmp_path / "input.txt").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    corpus = text_file("input.txt", data_dir=tmp_path)
    n = len(text)
    assert corpus.name == "text_file/input.txt"
    assert corpus.metadata["characters"] == {
        "train": int(0.9 * n),
        "validation": int(0.95 * n) - int(0.9 * n),
        "test": n - int(0.95 * n),
    }
    joined = "".join(corpus.decode(corpus.split(s)) for s in ("train", "validation", "test"))
    assert joined == text


def test_text_file_errors(tmp_path) -> None:
    with pytest.raises(MissingDataError, match="does not exist"):
        text_file(tmp_path / "input.txt")
    with pytest.raises(DataFormatError, match="directory"):
        text_file(tmp_path)
    (tmp_path / "latin1.txt").write_bytes(("abc\n" * 400 + "café\n").encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"not UTF-8.*line 401"):
        text_file(tmp_path / "latin1.txt")
    (tmp_path / "short.txt").write_text("to be or not to be\n")
    with pytest.raises(DataFormatError, match="19 characters, fewer than min_chars=1000"):
        text_file(tmp_path / "short.txt")


# --------------------------------------------------------------------------- models


def test_builders_have_the_intended_features() -> None:
    transformers = pytest.importorskip("transformers")
    gpt2 = char_gpt2(102, 128, seed=0)
    assert isinstance(gpt2, transformers.GPT2LMHeadModel)
    config = gpt2.config
    assert (config.n_embd, config.n_layer, config.n_head, config.n_positions) == (64, 2, 4, 128)
    assert config.use_cache
    assert config.vocab_size == 102
    assert gpt2.lm_head.weight is gpt2.transformer.wte.weight
    assert sum(p.numel() for p in gpt2.parameters()) == 114_816

    llama = char_llama(102, 128, seed=0)
    assert isinstance(llama, transformers.LlamaForCausalLM)
    config = llama.config
    assert config.num_key_value_heads < config.num_attention_heads
    assert config.use_cache
    assert config.hidden_act == "silu"
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (64, 2, 176)
    layer = llama.model.layers[0]
    assert type(layer.input_layernorm).__name__ == "LlamaRMSNorm"
    assert hasattr(layer.mlp, "gate_proj")  # SwiGLU
    assert layer.self_attn.k_proj.out_features == 2 * 16  # two key/value heads of 16
    assert hasattr(llama.model, "rotary_emb")
    assert sum(p.numel() for p in llama.parameters()) == 105_536

    same = char_llama(102, 128, seed=0)
    other = char_llama(102, 128, seed=1)
    w = llama.model.layers[0].self_attn.q_proj.weight
    assert torch.equal(w, same.model.layers[0].self_attn.q_proj.weight)
    assert not torch.equal(w, other.model.layers[0].self_attn.q_proj.weight)
    with pytest.raises(InvalidArgumentError, match="key/value groups"):
        char_llama(102, 128, heads=4, kv_heads=3)


def test_cosine_schedule() -> None:
    rates = [learning_rate(s, 20, 1.0, "cosine", 5, 0.1) for s in range(20)]
    assert rates[:5] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert rates[-1] == pytest.approx(0.1)
    assert rates == sorted(rates[:5]) + sorted(rates[5:])[::-1]
    assert learning_rate(15, 20, 1.0, "constant", 5, 0.1) == 1.0


@pytest.mark.parametrize("build", [char_gpt2, char_llama])
def test_training_lowers_the_loss_deterministically(tiny: CharCorpus, build) -> None:
    pytest.importorskip("transformers")

    def run(seed: int):
        model = build(tiny.vocab_size, 32, width=32, layers=1, seed=0)
        return train_char_lm(model, tiny, 20, 8, 32, 1e-2, seed, warmup_steps=2,
                             eval_every=10, eval_blocks=8)  # fmt: skip

    model, record = run(0)
    assert not model.training
    assert record.eval_steps == (10, 20)
    assert record.val_loss[-1] < record.initial_val_loss - 0.5
    assert record.train_loss[-1] < record.train_loss[0]
    assert record.test_loss < record.initial_val_loss
    if build is char_gpt2:  # dropout on: the masks are seeded too
        _, again = run(0)
        fields = dataclasses.asdict(record)
        assert {k: v for k, v in dataclasses.asdict(again).items() if k != "seconds"} == {
            k: v for k, v in fields.items() if k != "seconds"
        }


def test_training_rejects_a_too_small_model(tiny: CharCorpus) -> None:
    pytest.importorskip("transformers")
    with pytest.raises(InvalidArgumentError, match="exceeds the model's 16 positions"):
        train_char_lm(char_gpt2(tiny.vocab_size, 16, width=8, layers=1), tiny, 1, 2, 32, 1e-3, 0)
    with pytest.raises(InvalidArgumentError, match="vocab_size 10 is smaller"):
        train_char_lm(char_gpt2(10, 32, width=8, layers=1), tiny, 1, 2, 32, 1e-3, 0)
