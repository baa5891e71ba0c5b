"""Detection benchmark: symmetry detection on the traced graph, against Torch-Pruning's graph.

For each model, in the same process and timed round-robin (``timing.round_robin``):

* **ours**: ``ps.symmetries(model, example_input=x)`` (the trace, ``make_fx`` on fake tensors
  or ``torch.export`` where that fails; the walk of the graph and the solve), each call on a
  shallow copy of the model so that no per-model cache can serve it; and
  ``paramsym.symmetry.graph.analyse`` for the split: ``trace_seconds`` (the trace, with the
  tracer that made it) and the rest (walk and solve);
* **peer**: Torch-Pruning's ``tp.DependencyGraph().build_dependency(model, example_inputs=x)``
  and ``get_all_groups()`` (its default roots, convolutions and linear layers): the graph
  build from one autograd forward and the coupled channel groups (DepGraph, Fang et al. 2023;
  see ``../shared/DESIGN.md``).

Models: a GPT-2-small-sized ``transformers.GPT2Model`` (12 layers, width 768, 12 heads, the
full 50,257-token vocabulary, 1,024 positions, dropout 0, eval mode) on token ids of shape
(1, 64); the zoo's nanoGPT-style ``GPTStyle`` of the same size; the zoo's ResNet-18
(torchvision layout) on a (1, 3, 224, 224) image; a BERT-base-sized ``transformers.BertModel``
on ids (1, 64). Figures: median seconds after one warm-up call (whose time is kept as
``first_call_seconds``), the number of symmetries by kind, the number of Torch-Pruning groups,
and the ratios ours / peer (whole peer, and its graph build alone). Targets: detection under
5 s on the GPT-2-small config and on ResNet-18, and no slower than the peer's graph build.

``cpu_share_used_elsewhere`` is the share of the machine's CPUs that other processes used
during a section (from /proc/stat). Read the ratios with it: the peer runs a real forward in
torch's 2-thread kernels, which slow down many times (ResNet-18: 0.04 s → 1 s) when another
process holds one of 2 cores, while the trace (single-threaded Python on fake tensors) slows
down at most about twofold. ``--threads 1`` makes the peer far less sensitive to that.

Torch-Pruning does not know Hugging Face's ``Conv1D`` (GPT-2's linear layers): its default
grouping finds no group there. Rooting its groups at the embedding instead does not finish in
minutes even on one layer; that attempt runs in a subprocess cut off after ``--peer-timeout``
seconds and is recorded as such.

Run ``make bench`` or ``python benchmarks/bench_detect.py`` (``--smoke`` for a reduced run).
"""

from __future__ import annotations

import argparse
import collections
import copy
import functools
import importlib.metadata
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import paramsym as ps
from paramsym.nn import zoo
from paramsym.symmetry.graph import analyse
from timing import round_robin, run_sections

try:  # the peer is optional here (it is in the dev extra): pip install torch-pruning
    import torch_pruning as tp
except ImportError:  # pragma: no cover - depends on the environment
    tp = None

SEQUENCE = 64
TARGET_SECONDS = 5.0


def gpt2_small(layers: int = 12, vocab: int = 50257) -> tuple[nn.Module, Any]:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        n_layer=layers, n_embd=768, n_head=12, vocab_size=vocab, n_positions=1024,
        use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return GPT2Model(config).eval(), torch.randint(0, vocab, (1, SEQUENCE))


def gptstyle(layers: int = 12, vocab: int = 50257) -> tuple[nn.Module, Any]:
    model = zoo.GPTStyle(vocab=vocab, context=1024, width=768, heads=12, layers=layers)
    return model.eval(), torch.randint(0, vocab, (1, SEQUENCE))


def resnet18() -> tuple[nn.Module, Any]:
    return zoo.resnet18().eval(), torch.randn(1, 3, 224, 224)


def bert_base(layers: int = 12) -> tuple[nn.Module, Any]:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        num_hidden_layers=layers, hidden_size=768, num_attention_heads=12,
        intermediate_size=3072, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return BertModel(config).eval(), torch.randint(0, config.vocab_size, (1, SEQUENCE))


def _ours(model: nn.Module, x: Any) -> list[ps.Symmetry]:
    # A shallow copy (same parameters and submodules, a new root object) so that a per-model
    # cache of the graph analysis, should ps.symmetries keep one, cannot serve a timed call;
    # compare() also checks that every call paid for a trace.
    return ps.symmetries(copy.copy(model), example_input=x)


def _peer(model: nn.Module, x: Any, split: dict[str, list[float]]) -> int:
    """Torch-Pruning's graph build and grouping; appends the build's seconds to ``split``."""
    assert tp is not None
    start = time.perf_counter()
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=x)
    split["build"].append(time.perf_counter() - start)
    return len(list(graph.get_all_groups()))


def _timed_first(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _short(message: str, limit: int = 240) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy (all processes), from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:  # pragma: no cover - not Linux
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _elsewhere(work: Callable[[], Any]) -> tuple[Any, float | None]:
    """Run ``work``; also return the share of the machine's CPUs that other processes used
    meanwhile (0 on an idle machine, 0.5 with one of 2 cores busy elsewhere). Torch's
    2-thread kernels (the peer's real forward) slow down many times when a core is taken;
    the trace, single-threaded Python, far less: read the ratios with this figure."""
    busy, own, wall = _busy_seconds(), time.process_time(), time.perf_counter()
    value = work()
    after = _busy_seconds()
    if busy is None or after is None:
        return value, None
    others = (after - busy) - (time.process_time() - own)
    share = others / ((time.perf_counter() - wall) * (os.cpu_count() or 1))
    return value, min(1.0, max(0.0, share))


def compare(build: Callable[[], tuple[nn.Module, Any]], repeats: int) -> dict[str, Any]:
    """Detection and the peer on one model: medians after one warm-up call each."""
    out, share = _elsewhere(lambda: _compare(build, repeats))
    out["cpu_share_used_elsewhere"] = share
    return out


def _compare(build: Callable[[], tuple[nn.Module, Any]], repeats: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model, x = build()
    parameters = {name for name, _ in model.named_parameters()}
    out: dict[str, Any] = {
        "model": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "input_shape": list(x.shape),
    }
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if attention is not None:
        out["attn_implementation"] = attention

    # warm-up calls, kept as first-call times (the first model also pays the tracer's imports)
    first_ours, found = _timed_first(lambda: _ours(model, x))
    analysis = analyse(model, x)
    kinds = collections.Counter(s.name.split("[", 1)[0] for s in found)
    ours: dict[str, Any] = {
        "first_call_seconds": first_ours,
        "symmetries": len(found),
        "by_kind": dict(sorted(kinds.items())),
        "continuous_dimension": sum(s.dim for s in found),
        "unexplained_parameters": sorted(p for p in analysis.unexplained if p in parameters),
        "tracer": analysis.walk.traced.tracer,
    }
    trace_seconds: list[float] = []
    fns: dict[str, Callable[[], Any]] = {
        "ours": lambda: _ours(model, x),
        "analyse": lambda: trace_seconds.append(analyse(model, x).trace_seconds),
    }

    peer: dict[str, Any] = {"call": "DependencyGraph().build_dependency + get_all_groups()"}
    split: dict[str, list[float]] = {"build": []}
    if tp is None:
        peer["failed"] = "torch-pruning not installed"
    else:
        peer["version"] = importlib.metadata.version("torch-pruning")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                peer["first_call_seconds"], peer["groups"] = _timed_first(
                    lambda: _peer(model, x, split)
                )
            peer["warnings"] = list(dict.fromkeys(_short(str(w.message)) for w in caught))
            if peer["groups"] == 0:
                peer["failed"] = "no group found"
            else:
                fns["peer"] = lambda: _peer(model, x, split)
        except Exception as error:  # the peer's own failure on this model, recorded as such
            peer["failed"] = _short(f"{type(error).__name__}: {error}")
    split["build"].clear()
    trace_seconds.clear()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the peer's per-call warnings, kept above
        seconds = round_robin(fns, repeats, warmup=0)
    trace = statistics.median(trace_seconds)
    if seconds["ours"] < 0.5 * trace:
        raise RuntimeError("ps.symmetries took less than half a trace: it served a cached analysis")
    ours.update(
        seconds=seconds["ours"],
        analyse_seconds=seconds["analyse"],
        trace_seconds=trace,
        walk_and_solve_seconds=seconds["analyse"] - trace,
        under_target=seconds["ours"] < TARGET_SECONDS,
    )
    out["ours"] = ours
    if "peer" in seconds:
        build_seconds = statistics.median(split["build"])
        peer.update(
            seconds=seconds["peer"],
            build_seconds=build_seconds,
            groups_seconds=seconds["peer"] - build_seconds,
        )
        out["ours_over_peer"] = seconds["ours"] / seconds["peer"]
        out["ours_over_peer_build"] = seconds["ours"] / build_seconds
    out["peer"] = peer
    return out


_EMBEDDING_ROOTS = "embedding_roots"


def _peer_embedding_roots(layers: int) -> None:
    """(In a subprocess.) Torch-Pruning on GPT-2 with its groups rooted at the embedding."""
    assert tp is not None
    model, x = gpt2_small(layers)
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=x)
    start = time.perf_counter()
    groups = list(graph.get_all_groups(root_module_types=[nn.Embedding]))
    print(f"{len(groups)} groups in {time.perf_counter() - start:.2f} s")


def gpt2_peer_embedding_roots(layers: int, timeout: float) -> dict[str, Any]:
    """Whether Torch-Pruning groups GPT-2's channels when rooted at the embedding (its
    default roots, convolutions and linear layers, do not include HF's ``Conv1D``)."""
    command = [sys.executable, __file__, f"--{_EMBEDDING_ROOTS}", str(layers)]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            "layers": layers,
            "call": "get_all_groups(root_module_types=[nn.Embedding])",
            "failed": f"did not finish within {timeout:g} s (cut off)",
        }
    result: dict[str, Any] = {"layers": layers, "seconds": time.perf_counter() - start}
    if done.returncode:
        result["failed"] = _short(done.stderr.strip().splitlines()[-1] if done.stderr else "")
    else:
        result["result"] = done.stdout.strip()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/detect.json"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--peer-timeout", type=float, default=60.0,
        help="seconds for Torch-Pruning's embedding-rooted grouping of a 1-layer GPT-2",
    )  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="2-layer models, 2 repeats")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument(f"--{_EMBEDDING_ROOTS}", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.embedding_roots is not None:
        _peer_embedding_roots(args.embedding_roots)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", ps.ParamsymWarning)
    layers = 2 if args.smoke else 12
    repeats = 2 if args.smoke else args.repeats
    sections: dict[str, Callable[[], Any]] = {
        "gpt2_small_hf": functools.partial(compare, functools.partial(gpt2_small, layers), repeats),
        "gptstyle_small": functools.partial(compare, functools.partial(gptstyle, layers), repeats),
        "resnet18": functools.partial(compare, resnet18, repeats),
        "bert_base": functools.partial(compare, functools.partial(bert_base, layers), repeats),
    }
    if tp is not None:
        timeout = 5.0 if args.smoke else args.peer_timeout
        sections["gpt2_peer_embedding_roots"] = functools.partial(
            gpt2_peer_embedding_roots, 1, timeout
        )
    header = {
        "smoke": args.smoke,
        "repeats": repeats,
        "target_seconds_below": TARGET_SECONDS,
        "target_ours_over_peer_build_at_most": 1.0,
    }
    run_sections(sections, args.out, header)


if __name__ == "__main__":
    main()
