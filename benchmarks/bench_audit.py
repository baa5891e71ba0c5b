"""Completeness-audit benchmark (issue 44): ``ps.audit`` on models of about 10k parameters.

For each model (float64, eval mode, built once with seed 0), timed round-robin in one process
(``timing.round_robin``) on the same drawn inputs:

* **audit**: ``ps.audit(model, x, points=1)``: the per-sample reverse-mode Jacobian over both
  halves of the drawn data, its QR and the SVD of R, the catalogue's tangents and the
  principal angles (detection included, as a user calls it);
* **recipe** (the peer): what a user writes with torch alone for the same yardstick on the
  same rows: ``torch.func.jacrev`` of the flattened outputs over the whole batch, then
  ``torch.linalg.svdvals`` of J (the rank alone, no catalogue), ``chunk_size`` 256 (as a user
  must: unchunked it ran out of 24 GB);
* **gradient**: one gradient of the summed outputs on the same batch (the unit the issue
  asks for: the audit as a multiple of a gradient).

Models: ``gpt2``: ``transformers.GPT2Model`` with 1 layer, width 24, 2 heads, 32 tokens, 8
positions (P ≈ 8.5k, the audit's row count ≈ 2P); ``mlp``: a tanh MLP 16-64-64-16-4 (P ≈ 6.5k).

Figures: median seconds of each method, audit / recipe and audit / gradient, and the audit's
own numbers (P, FD, flat, named, missing).

Real sizes (``--local``, run by ``make bench``): ``ps.local_audit`` (each block or large linear
layer on its recorded inputs, float64) on GPT-2-small (``GPT2Model(GPT2Config())``, 124 M),
BERT-base (``BertModel(BertConfig())``, 110 M) and a Llama with Qwen2.5-0.5B's sizes
(``LlamaModel``, 494 M; ``bench_detect.llama_0_5b_config``) with random weights perturbed by
0.02·randn, on
ids of shape (1, 64); timed once (minutes), against one gradient of the summed last hidden
state on the same number of recorded tokens in float64 (``gradient_recorded``, what the
recording forward must at least cost) and on the example batch in float32
(``gradient_example``). The report's units, flat, named and missing directions are kept.

Run ``make bench`` or ``python benchmarks/bench_audit.py``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import math
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

import paramsym as ps
from paramsym.core.params import functional_call, params_of
from paramsym.tangent_kernel.completeness import every_output
from paramsym.tangent_kernel.probes import draw_like, vocabulary
from timing import round_robin, run_sections

F64 = torch.float64


def _gpt2() -> tuple[nn.Module, Any]:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=24, n_head=2, vocab_size=32, n_positions=8,
                        bos_token_id=31, eos_token_id=31)  # fmt: skip
    model = GPT2Model(config).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model, {"input_ids": torch.randint(0, 32, (2, 8))}


def _mlp() -> tuple[nn.Module, Any]:
    return ps.mlp([16, 64, 64, 16, 4], "tanh", seed=0, dtype=F64).eval(), torch.randn(
        2, 16, dtype=F64
    )


MODELS = {"gpt2": _gpt2, "mlp": _mlp}
RECIPE_CHUNK = 256
"""Output rows per vmapped backward in the recipe's ``jacrev`` (unchunked, its vmap over
17k rows of the GPT-2 model held activations for every row at once: 24 GB, killed)."""


def _real(name: str) -> tuple[nn.Module, Any]:
    import transformers

    torch.manual_seed(0)
    if name == "gpt2_small":
        model = transformers.GPT2Model(transformers.GPT2Config())
    elif name == "llama_0_5b":
        from bench_detect import llama_0_5b_config

        model = transformers.LlamaModel(llama_0_5b_config())
    else:
        model = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False)
    model = model.eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model, {"input_ids": torch.randint(0, 1000, (1, 64))}


def compare_local(name: str) -> dict[str, Any]:
    """The block-local audit of a real-size model, timed once, against gradients."""
    import time

    model, example = _real(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        report = ps.local_audit(model, example)
        seconds = time.perf_counter() - start
    samples = max(1, report.tokens // example["input_ids"].shape[1])

    def gradient(m: nn.Module, x: Any) -> object:
        out = m(**x, use_cache=False) if "gpt2" in name else m(**x)
        return torch.autograd.grad(out.last_hidden_state.sum(), list(m.parameters()))

    recorded = {"input_ids": torch.randint(0, 1000, (samples, example["input_ids"].shape[1]))}
    wide = copy.deepcopy(model).to(F64)
    times = round_robin(
        {"recorded": lambda: gradient(wide, recorded), "example": lambda: gradient(model, example)},
        repeats=1,
        warmup=1,
    )
    methods = {m: sum(u.method == m for u in report.units) for m in
               ("dense", "linear", "embedding", "skipped")}  # fmt: skip
    return {
        "parameters": report.parameters,
        "units": methods,
        "recorded_tokens": report.tokens,
        "flat": report.flat,
        "named": report.named,
        "missing": report.missing,
        "not_visible": len(report.not_visible),
        "complete": report.complete,
        "seconds": {
            "local_audit": seconds,
            "gradient_recorded": times["recorded"],
            "gradient_example": times["example"],
        },
        "audit_over_gradient_recorded": seconds / times["recorded"],
        "audit_over_gradient_example": seconds / times["example"],
    }


def compare(name: str, repeats: int) -> dict[str, Any]:
    model, example = MODELS[name]()
    size = sum(p.numel() for p in model.parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ps.audit(model, example, points=1)
    samples = math.ceil(report.rows / 2 / _per_sample(model, example))
    data = draw_like(example, 2 * samples, torch.Generator().manual_seed(0),
                     vocabulary=vocabulary(model))  # fmt: skip
    point = params_of(model)

    def outputs(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return every_output(functional_call(model, p, data)).reshape(-1)

    def audit() -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ps.audit(model, example, points=1)

    def recipe() -> object:
        jac = torch.func.jacrev(outputs, chunk_size=RECIPE_CHUNK)(point)
        matrix = torch.cat([j.reshape(j.shape[0], -1) for j in jac.values()], dim=1)
        return torch.linalg.svdvals(matrix)

    def gradient() -> object:
        leaves = {k: v.detach().requires_grad_(True) for k, v in point.items()}
        return torch.autograd.grad(outputs(leaves).sum(), list(leaves.values()))

    times = round_robin({"audit": audit, "recipe": recipe, "gradient": gradient}, repeats, 1)
    return {
        "parameters": size,
        "rows": report.rows,
        "functional_dimension": report.functional_dimension,
        "flat": report.flat,
        "named": report.named,
        "missing": report.missing,
        "seconds": times,
        "audit_over_recipe": times["audit"] / times["recipe"],
        "audit_over_gradient": times["audit"] / times["gradient"],
    }


def _per_sample(model: nn.Module, example: Any) -> int:
    first = {k: v[:1] for k, v in example.items()} if isinstance(example, dict) else example[:1]
    with torch.no_grad():
        return every_output(model(**first) if isinstance(first, dict) else model(first)).shape[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/audit.json"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--local", nargs="*", choices=["gpt2_small", "bert_base", "llama_0_5b"],
                        default=["gpt2_small", "bert_base", "llama_0_5b"],
                        help="real-size models for the block-local audit (none: skip)")  # fmt: skip
    args = parser.parse_args()
    sections = {name: functools.partial(compare, name, args.repeats) for name in args.models}
    for name in args.local:
        sections[f"local_{name}"] = functools.partial(compare_local, name)
    run_sections(sections, args.out, {"repeats": args.repeats})


if __name__ == "__main__":
    main()
