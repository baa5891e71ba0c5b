"""``transformer-merging`` and ``transformer-merging-llama``: the test-loss barrier between two
character language models trained from different seeds, naive and after each alignment
(issue 30; Theus et al. 2025, Table 2).

Per seed pair p, models A and B are built and trained from seeds ``seed·1000 + 2p`` and ``… + 1``
(:func:`~paramsym.experiments.merging.char_lm.train_char_lm`, the standard library's source or a
text file from ``--data-dir``). The barrier along θ(α) = (1 − α) θ_A + α θ_B is measured on
test blocks for: both models as they are (naive); B aligned to A by ``ps.align`` with unit and
head permutations only, data-free (Git Re-Basin's groups) and from activations on a training
batch (Theus et al.'s "activation matching"); with every group (folded norms, orthogonal stream
and per-head maps), data-free; and that alignment trained on the midpoint's training loss
(``ps.learn_alignment``). A reference pair from one initialisation, trained with different
batch orders, gives the barrier that is not symmetry at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

import paramsym as ps
from paramsym.data.text import CharCorpus, contiguous_blocks, stdlib_text, text_file
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.merging.char_lm import char_model, train_char_lm
from paramsym.experiments.merging.pairs import CLAIMS, PairTask, measure, plot_chords
from paramsym.experiments.registry import Progress, Result, experiment
from paramsym.experiments.threads import torch_threads


@dataclass(frozen=True)
class TransformerMergingConfig:
    """Settings of ``transformer-merging`` (and its Llama-style twin).

    Attributes:
        seed: base seed (pair p: seeds ``seed·1000 + 2p`` and ``+ 1``; the same-init pair:
            initialisation ``seed·1000 + 999``, training seeds 1 and 2).
        family: ``"gpt2"`` (learned positions, LayerNorm, GELU; untied head, so that the final
            norm folds into it) or ``"llama"`` (RoPE, GQA, RMSNorm, SwiGLU).
        text_file, data_dir: a text file (TinyShakespeare's ``input.txt``) read from
            ``data_dir``; ``None``: the standard library's source (:func:`stdlib_text`).
        width, layers, heads: model sizes.
        steps, batch_size, block_size, lr: training (AdamW, cosine schedule).
        pairs: seed pairs.
        alphas: chord points.
        eval_blocks: test blocks of ``block_size`` scored at each α (evenly spaced).
        learned_steps, learned_lr, learned_batches: ``ps.learn_alignment`` on that many training
            batches of ``batch_size`` blocks.
        threads: torch intra-op threads (0: unchanged).
    """

    seed: int = 0
    family: str = "gpt2"
    text_file: str | None = None
    data_dir: str | None = None
    width: int = 64
    layers: int = 2
    heads: int = 4
    steps: int = 600
    batch_size: int = 32
    block_size: int = 64
    lr: float = 3e-3
    pairs: int = 3
    alphas: int = 11
    eval_blocks: int = 64
    learned_steps: int = 200
    learned_lr: float = 0.01
    learned_batches: int = 8
    threads: int = 1


def corpus_of(text_file_name: str | None, data_dir: str | None) -> CharCorpus:
    """The text file ``text_file_name`` read from ``data_dir``; ``None``: the standard
    library's source (:func:`~paramsym.data.text.stdlib_text`)."""
    if text_file_name is None:
        return stdlib_text()
    return text_file(text_file_name, data_dir)


def _model(config: TransformerMergingConfig, vocab: int, seed: int) -> nn.Module:
    return char_model(
        config.family, vocab, config.block_size, width=config.width, layers=config.layers,
        heads=config.heads, seed=seed, where="transformer-merging",
    )  # fmt: skip


def next_char_loss(output: Any, targets: Tensor) -> Tensor:
    """Mean cross-entropy of ``output.logits`` against the next characters."""
    logits = output.logits
    return functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def evenly_spaced_batches(
    tokens: Tensor, block: int, count: int, size: int
) -> list[tuple[Any, Tensor]]:
    """``count`` evenly spaced blocks of ``tokens`` in batches of ``size``."""
    inputs, targets = contiguous_blocks(tokens, block)
    index = torch.linspace(0, inputs.shape[0] - 1, min(count, inputs.shape[0])).long()
    return [
        ({"input_ids": inputs[index[i : i + size]]}, targets[index[i : i + size]])
        for i in range(0, len(index), size)
    ]


def run_transformer_merging(config: TransformerMergingConfig, progress: Progress) -> Result:
    if config.pairs < 1 or config.alphas < 3 or config.steps < 1:
        raise InvalidArgumentError(
            "transformer-merging: pairs ≥ 1, alphas ≥ 3 and steps ≥ 1 are needed"
        )
    with torch_threads(config.threads):
        corpus = corpus_of(config.text_file, config.data_dir)
        g = torch.Generator().manual_seed(config.seed)
        train = []
        for _ in range(config.learned_batches):
            x, y = corpus.blocks("train", config.batch_size, config.block_size, generator=g)
            train.append(({"input_ids": x}, y))

        def fit(model: nn.Module, seed: int) -> None:
            train_char_lm(
                model, corpus, config.steps, config.batch_size, config.block_size, config.lr,
                seed, eval_every=max(config.steps, 1), final_losses=False,
            )  # fmt: skip

        task = PairTask(
            build=lambda seed: _model(config, len(corpus.vocabulary), seed),
            train=fit,
            loss=next_char_loss,
            test=evenly_spaced_batches(corpus.test, config.block_size, config.eval_blocks, 32),
            train_batches=train,
            alphas=config.alphas,
            learned=ps.LearnedAlignConfig(steps=config.learned_steps, lr=config.learned_lr),
        )
        notes = [f"corpus: {corpus.name}, vocabulary {len(corpus.vocabulary)}"]
        return measure(task, config.pairs, config.seed, progress, notes)


_DESCRIPTION = (
    "test-loss barrier between two character {family} models (width {width}, {layers} layers) "
    "trained from different seeds on the standard library's source, naive and after aligning B "
    "by ps.align: permutations alone (data-free; and from activations), every group (folded "
    "norms, orthogonal stream and per-head maps), and learned (ps.learn_alignment); a same-init "
    "pair as the reference for what is not symmetry"
)


def _register(name: str, family: str, paper_sizes: dict[str, Any]) -> Callable:
    quick = TransformerMergingConfig(family=family)
    return experiment(
        name,
        seed_ref="dissertation ch. 3 (mode connectivity), beyond it: Theus et al. 2025",
        description=_DESCRIPTION.format(family=family, width=quick.width, layers=quick.layers),
        data="the Python standard library's source (quick); a text file in --data-dir (paper)",
        quick=quick,
        paper=TransformerMergingConfig(
            family=family, text_file="input.txt", threads=0, pairs=3, **paper_sizes
        ),
        claims=CLAIMS,
        plot=plot_chords,
    )


_PAPER = {"width": 256, "layers": 6, "heads": 8, "steps": 5000, "block_size": 128, "lr": 1e-3}
run_transformer_merging = _register("transformer-merging", "gpt2", _PAPER)(run_transformer_merging)
_register("transformer-merging-llama", "llama", _PAPER)(run_transformer_merging)
