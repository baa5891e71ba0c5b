"""Empirical-NTK benchmark: paramsym against the torch.func recipe and neural-tangents.

Problem (issue 5): 784-W-W-10 ReLU MLPs, float32, W ∈ {256, 1024, 4096}, n ∈ {64, 256} inputs,
the full ``(n, n, 10, 10)`` kernel and its trace. Each measurement runs in its own process so
that its peak memory is its own (``peak_memory.py``: the high-water mark of one steady-state
call above what the process held before). neural-tangents runs in the separate environment
``.venv-nt`` (``make bench-nt-env``) through ``nt_peer.py``.

Figures, all from the same run on the same machine:
* time and peak memory of every method at every size;
* the speed-up of ``structured`` over the torch.func recipe and its memory fraction;
* ``structured``'s time against the floating-point work of the per-layer contraction at the
  machine's measured matmul rate (``flop_ratio``; the target is ≤ 3);
* ``structured`` against neural-tangents' structured derivatives;
* the functional dimension of a 768 × 431 problem (seed 004's Energy size).

Run ``make bench`` or ``python benchmarks/bench_ntk.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NT_PYTHON = ROOT / ".venv-nt" / "bin" / "python"
INPUT, OUTPUT = 784, 10
MEMORY_LIMIT_GIB = 16.0  # the recipe's Jacobians beyond this are not attempted on a 24 GiB machine


def parameters(width: int) -> int:
    return INPUT * width + width + width * width + width + width * OUTPUT + OUTPUT


def contraction_flops(width: int, n: int, mode: str) -> float:
    """Multiply-adds ×2 of the per-layer contraction Σ_l (a·a′)(δ·δ′) for x1 = x2 of n samples."""
    layers = [(INPUT, width), (width, width), (width, OUTPUT)]
    flops = 0.0
    for fan_in, fan_out in layers:
        flops += 2 * n * n * fan_in  # a aᵀ
        pairs = (n * OUTPUT) ** 2 if mode == "full" else n * n * OUTPUT
        flops += 2 * pairs * fan_out  # δ δᵀ
    return flops


# -- measurements (child processes) ---------------------------------------------------------------


def _measure_torch(kind: str, width: int, n: int, mode: str, repeats: int) -> dict[str, Any]:
    import torch

    sys.path.insert(0, str(HERE))
    import paramsym as ps
    import peak_memory

    torch.manual_seed(0)
    model = ps.mlp([INPUT, width, width, OUTPUT], "relu", seed=0)
    x = torch.randn(n, INPUT)
    if kind == "torchfunc":
        needed = 2 * n * OUTPUT * parameters(width) * 4 / 2**30
        if needed > MEMORY_LIMIT_GIB:
            return {"skipped": f"needs about {needed:.0f} GiB for the per-sample Jacobians"}
        compute = _torch_func_recipe(model, x, mode)
    else:
        method = kind.split("-", 1)[1]

        def compute() -> Any:
            return ps.ntk(model, x, mode=mode, method=method)

    with torch.no_grad():
        kernel = compute()  # warm-up
    baseline = peak_memory.reset()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        kernel = compute()
        times.append(time.perf_counter() - start)
    return {
        "seconds": statistics.median(times),
        "peak_memory_mib": peak_memory.peak_since(baseline),
        "checksum": float(kernel.double().sum()),
        "shape": list(kernel.shape),
    }


def _torch_func_recipe(model: Any, x: Any, mode: str) -> Any:
    """The torch.func tutorial's Jacobian contraction ("Neural Tangent Kernels", PyTorch docs)."""
    import torch
    from torch.func import functional_call, jacrev, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}

    def single(p: dict[str, Any], sample: Any) -> Any:
        return functional_call(model, p, (sample.unsqueeze(0),)).squeeze(0)

    def kernel() -> Any:
        jac1 = [j.flatten(2) for j in vmap(jacrev(single), (None, 0))(params, x).values()]
        jac2 = [j.flatten(2) for j in vmap(jacrev(single), (None, 0))(params, x).values()]
        expression = "Naf,Mbf->NMab" if mode == "full" else "Naf,Maf->NM"
        return torch.stack(
            [torch.einsum(expression, a, b) for a, b in zip(jac1, jac2, strict=True)]
        ).sum(0)

    return kernel


def _measure_matmul() -> dict[str, Any]:
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return {
        "gflops": 2 * 2048**3 / statistics.median(times) / 1e9,
        "threads": torch.get_num_threads(),
    }


def _measure_functional_dimension(repeats: int) -> dict[str, Any]:
    import torch

    import paramsym as ps

    model = ps.mlp([8, 10, 10, 10, 10, 1], "relu", seed=0)
    x = torch.rand(768, 8)
    ps.functional_dimension(model, x)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = ps.functional_dimension(model, x)
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), "rank": result.rank, "shape": list(result.shape)}


# -- driver ---------------------------------------------------------------------------------------


def _child(
    args: list[str], python: Path | str = sys.executable, timeout: float = 900
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    try:
        done = subprocess.run(
            [str(python), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {
            "error": (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        }
    return json.loads(lines[-1])


def _measure_in_child(kind: str, width: int, n: int, mode: str, repeats: int) -> dict[str, Any]:
    if kind.startswith("neural-tangents"):
        if not NT_PYTHON.exists():
            return {"skipped": "neural-tangents environment missing (make bench-nt-env)"}
        implementation = kind.split("-", 2)[2]
        return _child(
            [
                str(HERE / "nt_peer.py"),
                "--width",
                str(width),
                "--n",
                str(n),
                "--mode",
                mode,
                "--implementation",
                implementation,
                "--repeats",
                str(repeats),
            ],
            python=NT_PYTHON,
        )
    return _child([__file__, "--child", kind, str(width), str(n), mode, str(repeats)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ntk.json")
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--ns", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--child", nargs=5, metavar=("KIND", "W", "N", "MODE", "REPEATS"), help=argparse.SUPPRESS
    )
    parser.add_argument("--child-special", choices=["matmul", "fd"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, width, n, mode, repeats = args.child
        print(json.dumps(_measure_torch(kind, int(width), int(n), mode, int(repeats))))
        return
    if args.child_special == "matmul":
        print(json.dumps(_measure_matmul()))
        return
    if args.child_special == "fd":
        print(json.dumps(_measure_functional_dimension(args.repeats)))
        return

    kinds = [
        "paramsym-structured",
        "torchfunc",
        "neural-tangents-structured",
        "neural-tangents-jacobian",
    ]
    matmul = _child([__file__, "--child-special", "matmul"])
    results: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "matmul_gflops_float32": matmul.get("gflops"),
            "torch_threads": matmul.get("threads"),
        },
        "measurements": [],
    }
    for width in args.widths:
        for n in args.ns:
            for mode in ("full", "trace"):
                row: dict[str, Any] = {
                    "width": width,
                    "n": n,
                    "mode": mode,
                    "parameters": parameters(width),
                }
                for kind in kinds:
                    if kind == "neural-tangents-jacobian" and width * n > 256 * 64:
                        row[kind] = {
                            "skipped": "slow Jacobian contraction; measured at W=256, n=64 only"
                        }
                        continue
                    row[kind] = _measure_in_child(kind, width, n, mode, args.repeats)
                    print(f"W={width} n={n} {mode:5s} {kind:28s} {row[kind]}", file=sys.stderr)
                _ratios(row, matmul.get("gflops"))
                results["measurements"].append(row)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=2) + "\n")  # keep what is finished
    results["functional_dimension_768x431"] = _child([__file__, "--child-special", "fd"])
    results["targets"] = _targets(results)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results["targets"], indent=2))


def _ratios(row: dict[str, Any], gflops: float | None) -> None:
    ours = row["paramsym-structured"]
    recipe = row["torchfunc"]
    nt = row["neural-tangents-structured"]
    if "seconds" in ours and "seconds" in recipe:
        row["speedup_vs_torchfunc"] = recipe["seconds"] / ours["seconds"]
        row["memory_fraction_of_torchfunc"] = ours["peak_memory_mib"] / max(
            recipe["peak_memory_mib"], 1e-9
        )
        row["checksum_relative_difference"] = abs(ours["checksum"] - recipe["checksum"]) / abs(
            recipe["checksum"]
        )
    if "seconds" in ours and "seconds" in nt:
        row["time_ratio_vs_neural_tangents"] = ours["seconds"] / nt["seconds"]
    if "seconds" in ours and gflops:
        ideal = contraction_flops(row["width"], row["n"], row["mode"]) / (gflops * 1e9)
        row["flop_ratio"] = ours["seconds"] / ideal


def _targets(results: dict[str, Any]) -> dict[str, Any]:
    def find(width: int, n: int, mode: str) -> dict[str, Any]:
        return next(
            (
                r
                for r in results["measurements"]
                if (r["width"], r["n"], r["mode"]) == (width, n, mode)
            ),
            {},
        )

    key = find(1024, 64, "full")
    fd = results.get("functional_dimension_768x431", {})
    return {
        "speedup_vs_torchfunc_W1024_n64_full": key.get("speedup_vs_torchfunc"),
        "target_speedup_at_least": 100,
        "memory_fraction_of_torchfunc_W1024_n64_full": key.get("memory_fraction_of_torchfunc"),
        "target_memory_fraction_at_most": 0.1,
        "flop_ratio_W1024_n64_full": key.get("flop_ratio"),
        "target_flop_ratio_at_most": 3,
        "time_ratio_vs_neural_tangents_W1024_n64_full": key.get("time_ratio_vs_neural_tangents"),
        "target_time_ratio_vs_neural_tangents_at_most": 1,
        "functional_dimension_768x431_seconds": fd.get("seconds"),
        "target_functional_dimension_seconds_at_most": 0.5,
    }


if __name__ == "__main__":
    main()
