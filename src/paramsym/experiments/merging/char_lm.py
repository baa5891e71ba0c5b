"""Character-level language models to align and merge (issue 30, item 2).

Two model families, built from small Hugging Face configs as users have them (nothing is
downloaded; every setting not named here is the config class's default, ``use_cache=True``
included):

* :func:`char_gpt2`: ``GPT2LMHeadModel(GPT2Config(vocab_size, n_positions=block_size,
  n_embd=64, n_layer=2, n_head=4))``: learned positions, LayerNorm, GELU MLP of width 4·64,
  dropout 0.1 (GPT-2's default), tied input and output embeddings.
* :func:`char_llama`: ``LlamaForCausalLM(LlamaConfig(vocab_size, hidden_size=64,
  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=176,
  max_position_embeddings=block_size))``: rotary position embeddings, grouped-query attention
  (two query heads per key/value head), RMSNorm, SwiGLU MLP (176 ≈ 8/3·64 rounded up to a
  multiple of 16, LLaMA's rule, so its three maps hold about as many weights as GPT-2's two),
  untied output embedding, no dropout, no biases.

:func:`train_char_lm` trains either on a :class:`~paramsym.data.text.CharCorpus` with AdamW,
called the Hugging Face way (``model(input_ids=x, use_cache=False)``, the loss computed here from
``.logits``), and returns the model with a :class:`CharLMRecord` (train and validation loss every
``eval_every`` steps, final validation and test loss, time).

**Measured** once (not in tests), :func:`paramsym.data.stdlib_text` on CPython 3.11.7 (vocabulary
102, 3.25 M training characters); 2-core CPU shared with other jobs (load 5–8), one torch
thread; 1,800 steps of batch 32 × 128 characters (7.4 M characters, 2.3 passes), lr 3e-3, cosine
schedule with 100 warm-up steps down to lr/10, weight decay 0.1 on matrices, gradient norm
clipped at 1, model seed = training seed; losses in nats per character, validation and test on
the whole split in non-overlapping blocks of 128:

=================================  ==========  ====  ==========  ==========  =====  ==========
model                              parameters  seed  train loss  validation  test   wall time
=================================  ==========  ====  ==========  ==========  =====  ==========
char GPT-2 (2 layers, width 64)    114,816     0     1.84        1.53        1.91   628 s
char GPT-2 (2 layers, width 64)    114,816     1     1.84        1.54        1.92   449 s
char Llama (2 layers, width 64)    105,536     0     1.25        1.19        1.60   239 s
=================================  ==========  ====  ==========  ==========  =====  ==========

(train loss: mean over the last 100 steps, with GPT-2's dropout 0.1 on; a short timing gave 0.24 s
per step.) The held-out test modules (``difflib``, ``calendar``, ``cmd``) are harder to predict
than the validation ones (``argparse``, ``textwrap``) by about 0.38 nats for both GPT-2 seeds (0.41
for the Llama). Issue 30 reports test loss 1.53 for each of two seeds of a 115k-parameter char
GPT-2 trained 1,800 steps on the standard-library text (split and settings not recorded there),
which matches the validation loss here. The Llama-style model (no dropout, RoPE, SwiGLU) ends 0.3
nats lower with fewer parameters in half the time; its second seed was not run in the time
available.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn
from torch.nn import functional

from paramsym.data.text import CharCorpus, Split, contiguous_blocks
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.registry import Progress, SilentProgress

if TYPE_CHECKING:
    from transformers import GPT2LMHeadModel, LlamaForCausalLM

__all__ = [
    "SCHEDULES",
    "CharLMRecord",
    "char_gpt2",
    "char_llama",
    "decay_groups",
    "evaluate_char_lm",
    "learning_rate",
    "train_char_lm",
]

Schedule = Literal["cosine", "constant"]
#: The learning-rate schedules of :func:`train_char_lm` (see :func:`learning_rate`).
SCHEDULES: tuple[Schedule, ...] = ("cosine", "constant")


def _transformers(where: str) -> Any:
    try:
        import transformers
    except ImportError as error:
        raise InvalidArgumentError(
            f"{where} needs Hugging Face transformers: pip install transformers"
        ) from error
    return transformers


def _positive(value: object, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{where}: {name} must be a positive integer, got {value!r}")
    return value


def _seeded_build(transformers: Any, model_class: str, config: Any, seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: nn.Module = getattr(transformers, model_class)(config)
    return model


def char_gpt2(
    vocab_size: int,
    block_size: int,
    *,
    width: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
) -> GPT2LMHeadModel:
    """A character GPT-2: ``GPT2LMHeadModel(GPT2Config(vocab_size=vocab_size,
    n_positions=block_size, n_embd=width, n_layer=layers, n_head=heads, bos_token_id=eos_token_id
    =vocab_size - 1))``, every other setting GPT-2's default (dropout 0.1, GELU, MLP 4·width,
    ``use_cache=True``, tied embeddings, the default attention kernel).

    The weights are GPT-2's initialisation drawn from ``torch.manual_seed(seed)`` inside a
    forked random state (the caller's global state is unchanged); float32, training mode. The
    begin/end-of-text id (used only by ``generate``) is the last of the vocabulary, as in
    :func:`paramsym.nn.hf.hf_tiny`. ``overrides``: further ``GPT2Config`` keywords (e.g.
    ``{"resid_pdrop": 0.0}``). With the defaults and 102 characters: 114,816 parameters
    (block 128).

    Raises:
        InvalidArgumentError: a size below 1, ``width`` not divisible by ``heads``, or
            ``transformers`` not installed.
    """
    where = "char_gpt2"
    for name, value in (("vocab_size", vocab_size), ("block_size", block_size),
                        ("width", width), ("layers", layers), ("heads", heads)):  # fmt: skip
        _positive(value, name, where)
    if width % heads:
        raise InvalidArgumentError(f"{where}: width {width} does not split into {heads} heads")
    transformers = _transformers(where)
    options: dict[str, Any] = {
        "vocab_size": vocab_size,
        "n_positions": block_size,
        "n_embd": width,
        "n_layer": layers,
        "n_head": heads,
        "bos_token_id": vocab_size - 1,
        "eos_token_id": vocab_size - 1,
        **(overrides or {}),
    }
    model = _seeded_build(transformers, "GPT2LMHeadModel", transformers.GPT2Config(**options), seed)
    return model  # type: ignore[return-value]


def char_llama(
    vocab_size: int,
    block_size: int,
    *,
    width: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate_size: int | None = None,
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
) -> LlamaForCausalLM:
    """A character Llama: ``LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size,
    hidden_size=width, intermediate_size=intermediate_size, num_hidden_layers=layers,
    num_attention_heads=heads, num_key_value_heads=kv_heads,
    max_position_embeddings=block_size))``, every other setting Llama's default (rotary
    embeddings with θ = 10⁴ on the whole head, RMSNorm, SwiGLU, no biases, no dropout, untied
    output embedding, ``use_cache=True``, the default attention kernel).

    ``intermediate_size`` defaults to 8/3·width rounded up to a multiple of 16 (176 for width
    64). Weights drawn from ``torch.manual_seed(seed)`` in a forked random state; float32,
    training mode. ``overrides``: further ``LlamaConfig`` keywords. With the defaults and 102
    characters: 105,536 parameters.

    Raises:
        InvalidArgumentError: a size below 1, ``width`` not divisible by ``heads``, ``heads``
            not divisible by ``kv_heads``, or ``transformers`` not installed.
    """
    where = "char_llama"
    for name, value in (("vocab_size", vocab_size), ("block_size", block_size),
                        ("width", width), ("layers", layers), ("heads", heads),
                        ("kv_heads", kv_heads)):  # fmt: skip
        _positive(value, name, where)
    if width % heads or heads % kv_heads:
        raise InvalidArgumentError(
            f"{where}: width {width} must split into {heads} heads and {heads} query heads into "
            f"{kv_heads} key/value groups"
        )
    if intermediate_size is None:
        intermediate_size = 16 * math.ceil(8 * width / 3 / 16)
    _positive(intermediate_size, "intermediate_size", where)
    transformers = _transformers(where)
    options: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": width,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": block_size,
        **(overrides or {}),
    }
    model = _seeded_build(
        transformers, "LlamaForCausalLM", transformers.LlamaConfig(**options), seed
    )
    return model  # type: ignore[return-value]


def char_model(
    family: str, vocab_size: int, block_size: int, *, width: int, layers: int, heads: int,
    seed: int, where: str,
) -> nn.Module:  # fmt: skip
    """The character model of ``family`` the merging and quantization experiments train:
    :func:`char_gpt2` with an untied head (a tied head keeps the final norm from folding into
    it) or :func:`char_llama`; another family is an :class:`InvalidArgumentError` naming
    ``where``."""
    sizes = {"width": width, "layers": layers, "heads": heads, "seed": seed}
    if family == "gpt2":
        return char_gpt2(vocab_size, block_size, **sizes, overrides={"tie_word_embeddings": False})
    if family == "llama":
        return char_llama(
            vocab_size, block_size, width=width, layers=layers, heads=heads, seed=seed
        )
    raise InvalidArgumentError(f"{where}: family must be 'gpt2' or 'llama', got {family!r}")


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class CharLMRecord:
    """What :func:`train_char_lm` measured (plain numbers, JSON-ready).

    Attributes:
        parameters: number of distinct parameters (tied embeddings counted once).
        steps, batch_size, block_size, lr, seed, schedule, warmup_steps, weight_decay: the
            training settings.
        eval_steps: the steps after which the curves were recorded (every ``eval_every`` steps
            and after the last).
        train_loss: mean training-batch loss over the steps since the previous record.
        val_loss: validation loss on ``eval_blocks`` evenly spaced validation blocks at
            ``eval_steps``.
        initial_val_loss: the same before the first step.
        final_val_loss, test_loss: loss on the whole validation / test split after training
            (non-overlapping blocks of ``block_size``, :func:`evaluate_char_lm`).
        seconds: wall-clock time of the training loop and its evaluations.
        Losses are mean cross-entropies in nats per character.
    """

    parameters: int
    steps: int
    batch_size: int
    block_size: int
    lr: float
    seed: int
    schedule: str
    warmup_steps: int
    weight_decay: float
    eval_steps: tuple[int, ...]
    train_loss: tuple[float, ...]
    val_loss: tuple[float, ...]
    initial_val_loss: float
    final_val_loss: float
    test_loss: float
    seconds: float


def decay_groups(parameters: Sequence[Tensor], weight_decay: float) -> list[dict[str, Any]]:
    """AdamW parameter groups with ``weight_decay`` on the matrices (tensors of two or more
    axes) and none on the vectors (biases, norm gains), as GPT-2 and LLaMA train."""
    return [
        {"params": [p for p in parameters if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in parameters if p.ndim < 2], "weight_decay": 0.0},
    ]


def learning_rate(
    step: int, steps: int, lr: float, schedule: str, warmup_steps: int, min_lr_ratio: float
) -> float:
    """The learning rate of step ``step`` (0-based) of ``steps``.

    Both schedules warm up linearly over the first ``warmup_steps`` steps (step ``s`` uses
    ``lr·(s + 1)/warmup_steps``). ``"constant"`` then stays at ``lr``; ``"cosine"`` decays from
    ``lr`` to ``min_lr_ratio·lr`` along half a cosine reaching its floor at the last step.

    >>> learning_rate(0, 10, 1.0, "cosine", 0, 0.1), learning_rate(9, 10, 1.0, "cosine", 0, 0.1)
    (1.0, 0.1)
    """
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    span = max(steps - 1 - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _max_positions(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def _check_model(model: nn.Module, corpus: CharCorpus, block_size: int, where: str) -> None:
    if not isinstance(model, nn.Module):
        raise InvalidArgumentError(f"{where}: model must be an nn.Module, got {type(model)}")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(vocab, int) and vocab < corpus.vocab_size:
        raise InvalidArgumentError(
            f"{where}: the model's vocab_size {vocab} is smaller than the corpus's "
            f"{corpus.vocab_size} characters; build it with vocab_size=corpus.vocab_size"
        )
    positions = _max_positions(model)
    if positions is not None and block_size > positions:
        raise InvalidArgumentError(
            f"{where}: block_size {block_size} exceeds the model's {positions} positions; build "
            "the model with block_size at least this large"
        )


def _logits(model: nn.Module, inputs: Tensor) -> Tensor:
    logits: Tensor = model(input_ids=inputs, use_cache=False).logits
    return logits


def _cross_entropy(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    return functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction=reduction
    )


def evaluate_char_lm(
    model: nn.Module,
    tokens: Tensor,
    block_size: int,
    batch_size: int = 64,
    max_blocks: int | None = None,
) -> float:
    """Mean next-character cross-entropy (nats) of ``model`` on ``tokens``.

    The tokens are cut into non-overlapping blocks (:func:`~paramsym.data.text.contiguous_blocks`;
    each block starts with an empty context); with ``max_blocks`` only that many evenly spaced
    blocks are scored. The model runs in evaluation mode without gradients, ``batch_size``
    blocks at a time, and is put back in the mode it was in.

    Args:
        model: called as ``model(input_ids=x, use_cache=False)``, returning ``.logits`` of shape
            ``(batch, block_size, vocab)``.
        tokens: token ids, shape ``(n,)`` int64, ``n > block_size``.
    """
    inputs, targets = contiguous_blocks(tokens, block_size)
    count = inputs.shape[0]
    if max_blocks is not None and count > max_blocks:
        pick = torch.linspace(0, count - 1, max_blocks).round().long().unique()
        inputs, targets = inputs[pick], targets[pick]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, scored = 0.0, 0
    try:
        with torch.no_grad():
            for start in range(0, inputs.shape[0], batch_size):
                x = inputs[start : start + batch_size].to(device)
                y = targets[start : start + batch_size].to(device)
                total += float(_cross_entropy(_logits(model, x), y, reduction="sum"))
                scored += y.numel()
    finally:
        model.train(was_training)
    return total / scored


def train_char_lm(
    model: nn.Module,
    corpus: CharCorpus,
    steps: int,
    batch_size: int,
    block_size: int,
    lr: float,
    seed: int,
    *,
    schedule: Schedule = "cosine",
    warmup_steps: int = 100,
    min_lr_ratio: float = 0.1,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.99),
    grad_clip: float | None = 1.0,
    eval_every: int = 100,
    eval_blocks: int = 64,
    train_split: Split = "train",
    final_losses: bool = True,
    progress: Progress | None = None,
) -> tuple[nn.Module, CharLMRecord]:
    """Train a causal language model on a character corpus with AdamW (in place).

    Each step draws ``batch_size`` random blocks of ``block_size`` characters
    (:meth:`CharCorpus.blocks`) from a ``torch.Generator`` seeded with ``seed``, calls
    ``model(input_ids=x, use_cache=False)`` (the cache is only for generation) and minimises
    the mean cross-entropy of ``.logits`` against the next characters. AdamW (``betas``,
    ``weight_decay`` on parameters with two or more dimensions only, none on biases and norm
    weights), the gradient norm clipped at ``grad_clip`` (``None``: not clipped), the learning
    rate of :func:`learning_rate` (``schedule`` ``"cosine"`` or ``"constant"``, linear warm-up).
    Dropout masks are drawn from ``torch.manual_seed(seed)`` in a forked random state, so the
    run is deterministic given the model's initial weights and ``seed`` (the caller's global
    random state is unchanged), and two runs from one initialisation with different ``seed``
    differ only in batch order and dropout.

    Runs on the model's device and dtype with the current torch thread count (experiments set
    one thread, :func:`paramsym.experiments.threads.torch_threads`). The model ends in
    evaluation mode.

    Args:
        model: e.g. :func:`char_gpt2` or :func:`char_llama` with ``vocab_size >=
            corpus.vocab_size`` and at least ``block_size`` positions.
        corpus: the text; ``train_split`` is trained on, ``"validation"`` and ``"test"`` scored.
        steps, batch_size, block_size, lr, seed: the run.
        eval_every, eval_blocks: the curves are recorded every ``eval_every`` steps, validation
            on ``eval_blocks`` evenly spaced blocks (the final losses use every block).
        final_losses: score the whole validation and test splits at the end (the record's
            ``final_val_loss`` and ``test_loss``; NaN when ``False``, for a caller that
            scores the model its own way).
        progress: a :class:`~paramsym.experiments.registry.Progress` (a bar over the steps).

    Returns:
        ``(model, record)``: the trained model and its :class:`CharLMRecord`.

    Raises:
        InvalidArgumentError: a non-positive size or learning rate, an unknown schedule, a
            model whose vocabulary or positions are too small.
    """
    where = "train_char_lm"
    for name, value in (("steps", steps), ("batch_size", batch_size),
                        ("block_size", block_size), ("eval_every", eval_every),
                        ("eval_blocks", eval_blocks)):  # fmt: skip
        _positive(value, name, where)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise InvalidArgumentError(f"{where}: warmup_steps must be an integer >= 0")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise InvalidArgumentError(f"{where}: lr must be a positive finite number, got {lr!r}")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise InvalidArgumentError(f"{where}: min_lr_ratio must lie in [0, 1], got {min_lr_ratio}")
    if schedule not in SCHEDULES:
        raise InvalidArgumentError(
            f"{where}: unknown schedule {schedule!r}; allowed values: {', '.join(SCHEDULES)}"
        )
    _check_model(model, corpus, block_size, where)
    progress = progress or SilentProgress()
    device = next(model.parameters()).device

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(decay_groups(params, weight_decay), lr=lr, betas=betas)
    generator = torch.Generator().manual_seed(seed)
    validation = corpus.split("validation")

    eval_steps: list[int] = []
    train_curve: list[float] = []
    val_curve: list[float] = []
    window: list[float] = []
    start_time = time.perf_counter()
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else None):
        torch.manual_seed(seed)
        initial_val = evaluate_char_lm(model, validation, block_size, max_blocks=eval_blocks)
        model.train()
        for step in progress.track(range(steps), total=steps, description=f"{where} seed {seed}"):
            rate = learning_rate(step, steps, lr, schedule, warmup_steps, min_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = rate
            inputs, targets = corpus.blocks(train_split, batch_size, block_size, generator)
            loss = _cross_entropy(_logits(model, inputs.to(device)), targets.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            optimizer.step()
            window.append(float(loss.detach()))
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                eval_steps.append(step + 1)
                train_curve.append(sum(window) / len(window))
                window = []
                val_curve.append(
                    evaluate_char_lm(model, validation, block_size, max_blocks=eval_blocks)
                )
        model.eval()
        final_val = test = math.nan
        if final_losses:
            final_val = evaluate_char_lm(model, validation, block_size)
            test = evaluate_char_lm(model, corpus.split("test"), block_size)
    seconds = time.perf_counter() - start_time
    scored = f", validation loss {final_val:.3f}, test loss {test:.3f} nats/char"
    progress.log(f"{where}: {steps} steps in {seconds:.1f} s" + (scored if final_losses else ""))
    record = CharLMRecord(
        parameters=sum(p.numel() for p in model.parameters()),
        steps=steps,
        batch_size=batch_size,
        block_size=block_size,
        lr=float(lr),
        seed=seed,
        schedule=schedule,
        warmup_steps=warmup_steps,
        weight_decay=float(weight_decay),
        eval_steps=tuple(eval_steps),
        train_loss=tuple(train_curve),
        val_loss=tuple(val_curve),
        initial_val_loss=initial_val,
        final_val_loss=final_val,
        test_loss=test,
        seconds=seconds,
    )
    return model, record
