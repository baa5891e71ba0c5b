"""A short tour of paramsym on a demo model (``make demo``).

Builds a small classifier, lists the parameter-space symmetries paramsym finds from its
layers, checks that each one really leaves the function (or the loss) unchanged, and shows the
curvature primitives: the flat directions a continuous symmetry creates (orbit dimension) and
the top of the Hessian spectrum.
"""

from __future__ import annotations

import time

import torch
from torch import nn

import paramsym as ps


def demo_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 16),
        nn.BatchNorm1d(16),
        nn.ReLU(),  # BatchNorm, then a homogeneous σ
        nn.Linear(16, 12),
        nn.Tanh(),  # an odd σ
        nn.Linear(12, 12),  # a linear hidden layer: GL(12)
        nn.Linear(12, 4),
    ).double()


def main() -> None:
    model = demo_model().train()
    x = torch.randn(64, 8, dtype=torch.float64)
    y = torch.randint(0, 4, (64,))
    loss_fn = nn.CrossEntropyLoss()
    theta = ps.params_of(model)
    print(model, "\n")

    found = ps.symmetries(model, loss_fn=loss_fn)
    print(f"{len(found)} symmetries found from the layers:\n")
    print(f"{'name':<24} {'group':<10} {'dim':>4}  {'kind':<9} change after g·θ   orbit dim")
    generator = torch.Generator().manual_seed(0)
    for s in found:
        g = s.sample(scale=0.5, generator=generator, dtype=torch.float64)
        moved = s.act(theta, g)
        with torch.no_grad():
            before, after = model(x), ps.functional_call(model, moved, x)
            if s.preserves == "loss":
                before, after = loss_fn(before, y), loss_fn(after, y)
        change = float((after - before).norm() / before.norm())
        kind = "exact" if s.exact else "approx."
        what = "loss" if s.preserves == "loss" else "output"
        orbit = ps.orbit_dimension(model, s)
        print(f"{s.name:<24} {s.group:<10} {s.dim:>4}  {kind:<9} {what} {change:8.1e}   {orbit:>5}")
        for note in s.notes:
            print(f"{'':<26}note: {note}")

    print("\nCurvature at the initial point:")
    start = time.perf_counter()
    top = ps.top_eigenvalues(model, loss_fn, (x, y), k=3, tol=1e-6)
    elapsed = time.perf_counter() - start
    values = ", ".join(f"{v:.4f}" for v in top.eigenvalues)
    print(f"  top Hessian eigenvalues: {values}  ({top.num_hvps} HVPs, {elapsed:.2f}s)")
    trace = ps.hutchinson_trace(model, loss_fn, (x, y), num_samples=200)
    print(f"  Hessian trace (Hutchinson, 200 probes): {trace.estimate:.3f} ± {trace.stderr:.3f}")
    gl = next(s for s in found if s.name.startswith("GL"))
    print(
        f"  {gl.name} moves θ along {ps.orbit_dimension(model, gl)} flat directions: "
        "the loss is constant on its orbit"
    )
    data_dependent_tour()
    transformer_tour()


def data_dependent_tour() -> None:
    """The nonlinear GL(h) action of a tanh layer: exact on k ≤ h samples, reported otherwise."""
    print("\nData-dependent GL(16) on the tanh layer of a 4-16-3 network:")
    torch.manual_seed(0)
    model = ps.mlp([4, 16, 3], activation="tanh").double()
    pinv = next(
        s for s in ps.symmetries(model, data_dependent=True) if s.name.startswith("pinv_GL")
    )
    g = pinv.sample(scale=0.3, dtype=torch.float64)
    for k in (8, 16, 32):
        x = torch.randn(k, 4, dtype=torch.float64)
        _, report = pinv.act_with_report(ps.params_of(model), g, x)
        state = "exact" if report.exact else "approximate"
        print(f"  k = {k:2d} samples: {state:<11} output change {report.relative_change:.1e}")


def transformer_tour() -> None:
    """Attention symmetries of a two-block transformer leave its logits unchanged."""
    torch.manual_seed(0)
    model = ps.nn.TinyTransformer(vocab_size=20, d_model=16, num_heads=4, num_layers=2).double()
    found = ps.symmetries(model)
    continuous = ps.ProductSymmetry([s for s in found if s.dim])
    tokens = torch.randint(0, 20, (2, 10))
    theta = ps.params_of(model)
    moved = continuous.act(theta, continuous.sample(scale=0.5, dtype=torch.float64))
    with torch.no_grad():
        change = float((ps.functional_call(model, moved, tokens) - model(tokens)).norm())
    print(
        f"\nTinyTransformer: {len(found)} symmetries, acting together on a {continuous.dim}-dim "
        f"group ({sum(1 for s in found if 'attention' in s.name)} attention ones); "
        f"logits change by {change:.1e}"
    )


if __name__ == "__main__":
    main()
