"""Benchmark peer: neural-tangents' empirical NTK of a small MLP on CPU.

Measures the wall time, compile time and peak-memory increase of
``neural_tangents.empirical_ntk_fn`` (jitted) for the MLP 784→W→W→10 with ReLU, in the
standard parameterization with biases, on N inputs x ~ N(0, 1), with x2 = x1. The full kernel
has shape (N, N, 10, 10); ``--mode trace`` traces the logit axis and gives (N, N).

It runs in its own virtual environment (``make bench-nt-env`` builds ``.venv-nt``), not in the
main one: neural-tangents 0.6.5 does not import with current JAX and needs old pins (JAX 0.4.23,
numpy<2, TensorFlow 2.15). So it imports neither torch nor paramsym; the benchmark that compares
it with paramsym starts this script with ``.venv-nt/bin/python`` and reads the one JSON line it
prints on stdout. On failure (e.g. out of memory) that line carries ``"error"`` and the exit
status is still 0.

Example::

    .venv-nt/bin/python benchmarks/nt_peer.py --width 1024 --n 64 --mode full
"""

from __future__ import annotations

import os

# Before JAX (and the TensorFlow that neural-tangents imports) load: CPU only, no GPU/TPU
# probing, and no C++ log noise on stderr.
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import json
import statistics
import sys
import time
from importlib.metadata import version
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from neural_tangents import NtkImplementation, empirical_ntk_fn, stax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peak_memory

IMPLEMENTATIONS: dict[str, NtkImplementation] = {
    "structured": NtkImplementation.STRUCTURED_DERIVATIVES,
    "jacobian": NtkImplementation.JACOBIAN_CONTRACTION,
    "vp": NtkImplementation.NTK_VECTOR_PRODUCTS,
}
INPUT_DIM = 784
OUTPUT_DIM = 10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=256, help="hidden width W")
    parser.add_argument("--n", type=int, default=64, help="number of inputs N")
    parser.add_argument("--mode", choices=("full", "trace"), default="full")
    parser.add_argument("--implementation", choices=tuple(IMPLEMENTATIONS), default="structured")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls after the warm-up")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Build the MLP, compute its empirical NTK and return the measurements."""
    init_fn, apply_fn, _ = stax.serial(
        stax.Dense(args.width, parameterization="standard"),
        stax.Relu(),
        stax.Dense(args.width, parameterization="standard"),
        stax.Relu(),
        stax.Dense(OUTPUT_DIM, parameterization="standard"),
    )
    key_params, key_x = jax.random.split(jax.random.PRNGKey(args.seed))
    _, params = init_fn(key_params, (-1, INPUT_DIM))
    x = jax.random.normal(key_x, (args.n, INPUT_DIM), dtype=jnp.float32)

    ntk_fn = jax.jit(
        empirical_ntk_fn(
            apply_fn,
            trace_axes=() if args.mode == "full" else (-1,),
            vmap_axes=0,
            implementation=IMPLEMENTATIONS[args.implementation],
        )
    )

    start = time.perf_counter()
    kernel = ntk_fn(x, None, params).block_until_ready()
    compile_seconds = time.perf_counter() - start

    baseline = peak_memory.reset()  # steady state: compilation is not counted
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        kernel = ntk_fn(x, None, params).block_until_ready()
        times.append(time.perf_counter() - start)

    return {
        "shape": list(kernel.shape),
        "compile_seconds": compile_seconds,
        "seconds": statistics.median(times) if times else None,
        "peak_memory_mib": peak_memory.peak_since(baseline),
        "checksum": float(np.asarray(kernel, dtype=np.float64).sum()),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print one JSON line; errors go in the line, exit status 0."""
    args = parse_args(argv)
    record: dict[str, Any] = {
        "library": "neural-tangents",
        "version": version("neural-tangents"),
        "jax": jax.__version__,
        "implementation": args.implementation,
        "mode": args.mode,
        "width": args.width,
        "n": args.n,
    }
    try:
        record.update(measure(args))
    except (Exception, MemoryError) as exc:  # XLA reports OOM as XlaRuntimeError
        record["error"] = f"{type(exc).__name__}: {exc}".strip()
    json.dump(record, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
