"""Detection and exactness on CUDA: the decoder zoo of the tests and real vision models.

Run on a machine with a GPU (``python benchmarks/cuda_check.py --out cuda.json``): for each
Hugging Face architecture of ``tests/hf_models.py`` (default settings, dict input) in float64
and float32, and for torchvision's ``resnet18`` and timm's ``vit_tiny_patch16_224`` (random
weights, float32) when those packages are there, it detects the symmetries on CUDA tensors and
acts on the weights with three non-identity elements of every exact one, recording the largest
relative output change (float64: must be rounding, float32: ~1e-6) and the detection time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import paramsym as ps
from paramsym.core.calls import call_arguments
from paramsym.core.params import stateless_call


def _first(raw: Any) -> torch.Tensor:
    return raw if isinstance(raw, torch.Tensor) else raw[0]


def check(model: torch.nn.Module, x: Any, draws: int = 3) -> dict[str, Any]:
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = ps.symmetries(model, example_input=x)
    seconds = time.perf_counter() - start
    state = {k: v.detach() for k, v in [*model.named_parameters(), *model.named_buffers()]}
    args, kwargs = call_arguments(model, x)
    with torch.no_grad():
        reference = _first(stateless_call(model, state, args, kwargs))
        worst: dict[str, float] = {}
        for s in found:
            if not s.exact or s.preserves != "function":
                continue
            change = 0.0
            for seed in range(draws):
                generator = torch.Generator().manual_seed(seed)
                dtype = next(iter(state.values())).dtype
                g = s.sample(scale=0.5, generator=generator, dtype=dtype, non_identity=True)
                g = g if not isinstance(g, torch.Tensor) else g.to(reference.device)
                moved = _first(stateless_call(model, s.act(state, g), args, kwargs))
                change = max(change, float((moved - reference).norm() / reference.norm()))
            worst[s.name] = change
    kinds: dict[str, int] = {}
    for s in found:
        kinds[s.name.split("[")[0]] = kinds.get(s.name.split("[")[0], 0) + 1
    return {
        "symmetries": len(found),
        "by_family": kinds,
        "exact_checked": len(worst),
        "max_exact_change": max(worst.values(), default=0.0),
        "worst": max(worst, key=worst.get) if worst else None,
        "detect_seconds": seconds,
        "warnings": [f"{type(w.message).__name__}: {str(w.message)[:160]}" for w in caught],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="cuda_check.json")
    options = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from hf_models import KINDS, build, example_input

    results: dict[str, Any] = {"device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name()
    for dtype in (torch.float64, torch.float32):
        for kind in KINDS:
            model = build(kind, dtype).to(device)
            x = {k: v.to(device) for k, v in example_input(kind, dtype).items()}
            key = f"{kind}-{str(dtype).split('.')[-1]}"
            try:
                results[key] = check(model, x)
            except Exception as error:  # record and go on: one failure must not hide the rest
                results[key] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
            print(key, json.dumps(results[key])[:300], flush=True)
    vision: list[tuple[str, Any]] = []
    try:
        import torchvision

        vision.append(("torchvision-resnet18", torchvision.models.resnet18()))
    except Exception as error:
        results["torchvision"] = f"not available: {error}"
    try:
        import timm

        vision.append(
            ("timm-vit_tiny", timm.create_model("vit_tiny_patch16_224", pretrained=False))
        )
    except Exception as error:
        results["timm"] = f"not available: {error}"
    for name, model in vision:
        model = model.eval().to(device)
        x = torch.randn(2, 3, 224, 224, device=device)
        try:
            results[name] = check(model, x, draws=2)
        except Exception as error:
            results[name] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
        print(name, json.dumps(results[name])[:300], flush=True)
    Path(options.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
