"""Curvature benchmark: paramsym's HVP and top eigenvalue against curvlinops and PyHessian.

Problem (issue 2): a 784-512-512-10 ReLU MLP, float32, cross-entropy on a batch of 1024
random inputs. Every figure is a ratio between methods timed in the same run on the same
machine; absolute times are recorded only for context. Correctness is checked alongside:
each HVP against paramsym's, each eigenvalue against a tight ARPACK reference.

Run with ``make bench`` (installs the peers) or ``python benchmarks/bench_curvature.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import scipy.sparse.linalg
import torch

import paramsym as ps
from timing import machine, median_seconds, round_robin

WIDTHS = [784, 512, 512, 10]
BATCH = 1024


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/curvature.json"))
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = ps.mlp(WIDTHS, activation="relu", seed=0)
    x = torch.randn(BATCH, WIDTHS[0])
    y = torch.randint(0, WIDTHS[-1], (BATCH,))
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = (x, y)
    params = ps.params_of(model)
    v = ps.core.randn_like(params, torch.Generator().manual_seed(1))
    flat_v = ps.flatten(v)
    size = flat_v.numel()
    results: dict[str, object] = {
        "machine": machine(),
        "problem": {
            "widths": WIDTHS,
            "batch": BATCH,
            "parameters": size,
            "dtype": "float32",
            "loss": "cross-entropy",
        },
    }

    # -- one gradient (the unit of cost) ----------------------------------------------------
    def gradient() -> object:
        leaves = {k: t.detach().requires_grad_(True) for k, t in params.items()}
        loss = loss_fn(ps.functional_call(model, leaves, x), y)
        return torch.autograd.grad(loss, list(leaves.values()))

    operator = ps.HessianOperator(model, loss_fn, batch)
    timed = {
        "gradient": gradient,
        "hvp": lambda: ps.hvp(model, loss_fn, batch, v),
        "hvp_forward": lambda: ps.hvp(model, loss_fn, batch, v, method="forward_over_reverse"),
        "operator_matvec": lambda: operator.matvec(flat_v),
    }
    try:
        from curvlinops import HessianLinearOperator
    except ImportError:
        has_curvlinops = False
    else:
        has_curvlinops = True
        ordered = [p for _, p in model.named_parameters()]
        v_list = [v[name] for name, _ in model.named_parameters()]
        curvlinops_operator = HessianLinearOperator(
            model, loss_fn, ordered, [batch], check_deterministic=False
        )
        timed["curvlinops_matvec"] = lambda: curvlinops_operator @ v_list
        timed["curvlinops_one_shot"] = lambda: (
            HessianLinearOperator(model, loss_fn, ordered, [batch]) @ v_list
        )
    seconds = round_robin(timed, args.repeats)
    t_grad, t_hvp = seconds["gradient"], seconds["hvp"]
    t_hvp_fwd, t_matvec = seconds["hvp_forward"], seconds["operator_matvec"]
    ours = operator.matvec(flat_v)

    hvp_results: dict[str, object] = {
        "gradient_seconds": t_grad,
        "hvp_seconds": t_hvp,
        "hvp_in_gradients": t_hvp / t_grad,
        "hvp_forward_over_reverse_in_gradients": t_hvp_fwd / t_grad,
        "operator_matvec_seconds": t_matvec,
        "operator_matvec_in_gradients": t_matvec / t_grad,
        "target_hvp_in_gradients_at_most": 3.5,
        "forward_over_reverse_agrees": relative(
            ps.flatten(ps.hvp(model, loss_fn, batch, v, method="forward_over_reverse")), ours
        ),
    }
    if not has_curvlinops:
        hvp_results["curvlinops"] = "not installed (pip install -e '.[bench]')"
    else:
        t_curv, t_curv_one_shot = seconds["curvlinops_matvec"], seconds["curvlinops_one_shot"]
        theirs = torch.cat([t.flatten() for t in curvlinops_operator @ v_list])
        hvp_results.update(
            {
                "curvlinops_one_shot_default_construction_seconds": t_curv_one_shot,
                "speedup_one_shot_hvp_vs_curvlinops_default_construction": t_curv_one_shot / t_hvp,
                "curvlinops_matvec_seconds": t_curv,
                "curvlinops_matvec_in_gradients": t_curv / t_grad,
                "speedup_operator_matvec_vs_curvlinops": t_curv / t_matvec,
                "speedup_one_shot_hvp_vs_curvlinops": t_curv / t_hvp,
                "target_speedup_vs_curvlinops_at_least": 3.0,
                "curvlinops_agrees": relative(theirs, ours),
            }
        )
    results["hvp"] = hvp_results

    # -- top eigenvalue -------------------------------------------------------------------
    reference_operator = ps.HessianOperator(model, loss_fn, batch).to_scipy()
    reference = scipy.sparse.linalg.eigsh(
        reference_operator, k=1, which="LA", tol=1e-10, v0=np.ones(size), return_eigenvectors=False
    )
    lambda_max = float(reference[0])
    magnitude = scipy.sparse.linalg.eigsh(
        reference_operator, k=1, which="LM", tol=1e-10, v0=np.ones(size), return_eigenvectors=False
    )
    eig_results: dict[str, object] = {
        "reference_top_eigenvalue": lambda_max,
        "reference_is_largest_magnitude": bool(
            abs(float(magnitude[0]) - lambda_max) < 1e-6 * abs(lambda_max)
        ),
    }
    # Two protocols. (1) The same nominal tol=1e-3 for both. PyHessian's tol bounds the change
    # between power iterates, not the error, so (2) also times each method at the loosest
    # tolerance of its grid whose eigenvalue is within 1e-3 of the reference.
    target_error = 1e-3

    def relative_error(value: float) -> float:
        return abs(value - lambda_max) / abs(lambda_max)

    def time_ours(tol: float) -> tuple[float, float, int]:
        found: dict[str, ps.EigenResult] = {}

        def run() -> None:
            found["r"] = ps.top_eigenvalues(model, loss_fn, batch, k=1, tol=tol)

        seconds = median_seconds(run, repeats=3, warmup=1)
        return seconds, relative_error(found["r"].eigenvalues[0]), found["r"].num_hvps

    ours_grid = {tol: time_ours(tol) for tol in (1e-1, 3e-2, 1e-2, 3e-3, 1e-3)}
    ours_matched = next(
        (tol for tol, (_, err, _) in ours_grid.items() if err <= target_error), None
    )
    eig_results["paramsym"] = {
        f"tol={tol:g}": {"seconds": t, "relative_error": e, "hvps": n}
        for tol, (t, e, n) in ours_grid.items()
    }
    try:
        from pyhessian import hessian as pyhessian_hessian
    except ImportError:
        eig_results["pyhessian"] = "not installed (pip install -e '.[bench]')"
    else:

        def time_theirs(tol: float) -> tuple[float, float]:
            found: dict[str, float] = {}

            def run() -> None:
                torch.manual_seed(0)  # PyHessian draws its start vector from the global RNG
                computer = pyhessian_hessian(model, loss_fn, data=batch, cuda=False)
                found["value"] = computer.eigenvalues(maxIter=1000, tol=tol, top_n=1)[0][0]

            seconds = median_seconds(run, repeats=3, warmup=1)
            return seconds, relative_error(found["value"])

        theirs_grid = {tol: time_theirs(tol) for tol in (1e-3, 1e-4, 1e-5, 1e-6)}
        theirs_matched = next(
            (tol for tol, (_, err) in theirs_grid.items() if err <= target_error), None
        )
        eig_results["pyhessian"] = {
            f"tol={tol:g}": {"seconds": t, "relative_error": e}
            for tol, (t, e) in theirs_grid.items()
        }
        eig_results["same_nominal_tol_1e-3"] = {
            "speedup_vs_pyhessian": theirs_grid[1e-3][0] / ours_grid[1e-3][0],
            "paramsym_relative_error": ours_grid[1e-3][1],
            "pyhessian_relative_error": theirs_grid[1e-3][1],
        }
        if ours_matched is not None and theirs_matched is not None:
            eig_results["matched_accuracy_1e-3"] = {
                "paramsym_tol": ours_matched,
                "pyhessian_tol": theirs_matched,
                "paramsym_seconds": ours_grid[ours_matched][0],
                "pyhessian_seconds": theirs_grid[theirs_matched][0],
                "speedup_vs_pyhessian": theirs_grid[theirs_matched][0] / ours_grid[ours_matched][0],
                "default_tol_speedup_vs_pyhessian": theirs_grid[theirs_matched][0]
                / ours_grid[1e-3][0],
                "target_speedup_vs_pyhessian_at_least": 2.0,
            }
    results["top_eigenvalue"] = eig_results

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
