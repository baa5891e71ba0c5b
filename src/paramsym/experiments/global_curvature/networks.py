"""Stacked networks and settings of the seed 002 global-curvature experiments.

A batch of MLPs with stacked weights (forward, losses, gradients, GD, mean Hessians), the
three networks of Figs 2–4 / 7–9 / 11–13 and the matrix heatmaps of the figures, used by
``global-curvature-structure``, ``surrogate-spectrum``, and by ``factor-estimation`` and
``symo-training`` (:mod:`paramsym.experiments.symo_training`).

Networks, data and ensembles (notes 002 §4.2 and the **[code]** facts there): students are
``ps.mlp`` networks with N(0, fan_in^(−2p)) weights (p = 1/2 for Tanh, p = 1 for the ReLU figure)
and N(0, 1/9) biases, the loss is ‖Ŷ − Y‖²/(2n), data are :func:`paramsym.data.teacher_student`
(input eigenvalues logspace(0, −5) for Tanh, logspace(2.5, −2.5) for ReLU). The N students are
evaluated together as one batch of networks with stacked weights (:func:`stacked_losses`), which
is much faster than ``vmap`` over ``functional_call`` for thousands of tiny networks (tested
against :func:`paramsym.symo.ensemble_gradients` and :func:`paramsym.symo.global_hessian`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

import paramsym as ps
from paramsym.core.params import Params
from paramsym.data import teacher_student
from paramsym.symo import (
    CurvatureStructure,
    GaussianInit,
    GroupName,
    init_ensemble,
)

F64 = torch.float64

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "identity": lambda h: h,
}
"""The hidden activations of the seed's networks."""

GROUPS: dict[str, GroupName] = {
    "tanh": "signed_permutation",
    "relu": "permutation",
    "identity": "orthogonal",
}
"""The largest symmetry group of each activation (notes 002 §2.1)."""


# -- a batch of MLPs with stacked weights ----------------------------------------------------------


def stacked_forward(
    structure: CurvatureStructure, activation: str, params: Mapping[str, Tensor], x: Tensor
) -> Tensor:
    """Outputs of N MLPs (Eq. 5) on shared inputs ``x`` ``(n, d_0)``: ``(N, n, d_L)``.

    ``params`` is a stacked params dict ``{name: (N, *shape)}`` in ``structure``'s layout."""
    layout = structure.layout
    sigma = ACTIVATIONS[activation]
    h = x
    for layer, (w, b) in enumerate(zip(layout.weight_names, layout.bias_names, strict=True)):
        if layer:
            h = sigma(h)
        h = torch.matmul(h, params[w].transpose(-1, -2))
        if b is not None:
            h = h + params[b].unsqueeze(-2)
    return h


def stacked_losses(
    structure: CurvatureStructure,
    activation: str,
    params: Mapping[str, Tensor],
    batch: tuple[Tensor, Tensor],
) -> Tensor:
    """‖Ŷ − Y‖²_F/(2n) of each of the N networks (the authors' loss): shape ``(N,)``."""
    x, y = batch
    error = stacked_forward(structure, activation, params, x) - y
    return error.pow(2).sum((-1, -2)) / (2 * len(y))


def stacked_gradients(
    structure: CurvatureStructure,
    activation: str,
    params: Mapping[str, Tensor],
    batch: tuple[Tensor, Tensor],
    *,
    chunk: int = 2000,
) -> Params:
    """∇L of each network, ``{name: (N, *shape)}``: one backward pass of the summed losses of
    ``chunk`` networks at a time (they share no parameter, so each gets its own gradient)."""
    n = structure.batch_shape(params, "stacked_gradients: params")[0]
    parts: list[dict[str, Tensor]] = []
    for start in range(0, n, chunk):
        leaves = {k: v[start : start + chunk].detach().requires_grad_() for k, v in params.items()}
        with torch.enable_grad():
            total = stacked_losses(structure, activation, leaves, batch).sum()
            grads = torch.autograd.grad(total, list(leaves.values()))
        parts.append(dict(zip(leaves, grads, strict=True)))
    return {k: torch.cat([part[k] for part in parts]) for k in params}


def stacked_gd(
    structure: CurvatureStructure,
    activation: str,
    params: Mapping[str, Tensor],
    batch: tuple[Tensor, Tensor],
    *,
    steps: int,
    lr: float,
) -> Params:
    """``steps`` full-batch GD steps of every network (GD is equivariant, so the ensemble's
    distribution stays invariant: Theorem 2.2, Corollary 2.3)."""
    current = dict(params)
    for _ in range(steps):
        grads = stacked_gradients(structure, activation, current, batch)
        current = {k: current[k] - lr * grads[k] for k in current}
    return current


def mean_hessians(
    structure: CurvatureStructure,
    activation: str,
    params: Mapping[str, Tensor],
    batch: tuple[Tensor, Tensor],
    sizes: Sequence[int],
    *,
    chunk: int = 500,
) -> list[Tensor]:
    """The global Hessian E_θ ∇²L (Eq. 95) over the first k networks, for each k in ``sizes``,
    in :func:`paramsym.flatten` order: by double backprop, row r of every network's Hessian is
    ∂(∂L/∂θ_r)/∂θ, one backward pass for all networks of a chunk."""
    flat = structure.flatten(params)
    n, p = flat.shape
    wanted = sorted(set(sizes))
    if wanted[0] < 1 or wanted[-1] > n:
        raise ps.InvalidArgumentError(f"mean_hessians: sizes must be in 1..{n}, got {sizes}")
    total = torch.zeros(p, p, dtype=flat.dtype)
    found: dict[int, Tensor] = {}
    done = 0
    for stop in wanted:
        while done < stop:
            end = min(stop, done + chunk)
            theta = flat[done:end].detach().requires_grad_()
            with torch.enable_grad():
                loss = stacked_losses(structure, activation, structure.unflatten(theta), batch)
                grad = torch.autograd.grad(loss.sum(), theta, create_graph=True)[0]
                for r in range(p):
                    row = torch.autograd.grad(grad[:, r].sum(), theta, retain_graph=True)[0]
                    total[r] += row.sum(0).detach()
            done = end
        found[stop] = total / stop
    return [found[k] for k in sizes]


# -- the three networks of Figs 2–4 / 7–9 / 11–13 --------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One network of the structure figures (notes 002 §4.2).

    Attributes:
        name: short label, e.g. ``"tanh2"``.
        figures: the seed's figure numbers (covariance, Hessian, surrogate).
        widths, activation, bias: the MLP.
        weight_power: weight std fan_in^(−p) (1/2: the Tanh runs, 1: the ReLU figure).
        eig_range: (smallest, largest) eigenvalue of the input covariance.
        lr: the GD learning rate of the 20 training steps (the authors' 0.2 for Tanh; 0.003
            for ReLU instead of their 0.01, see the experiment's notes).
    """

    name: str
    figures: tuple[str, str, str]
    widths: tuple[int, ...]
    activation: str
    bias: bool
    weight_power: float
    eig_range: tuple[float, float]
    lr: float

    def structure(self) -> CurvatureStructure:
        return CurvatureStructure.from_widths(
            self.widths,
            GROUPS[self.activation],
            bias=self.bias,
        )

    def data(self, points: int, seed: int) -> tuple[Tensor, Tensor]:
        """``points`` fixed training points of a teacher with the same architecture."""
        dataset = teacher_student(
            self.widths,
            self.activation,
            points,
            0,
            eig_range=self.eig_range,
            bias=self.bias,
            seed=seed,
            dtype=F64,
        )
        return dataset.train

    def ensemble(self, n: int, seed: int) -> Params:
        """``n`` students drawn from the invariant initialisation (App. D)."""
        init = GaussianInit(weight_power=self.weight_power, bias_std=1.0 / 3.0)
        return init_ensemble(self.structure(), n, init=init, seed=seed, dtype=F64)


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting("tanh2", ("2", "7", "11"), (5, 5, 5), "tanh", True, 0.5, (1e-5, 1.0), 0.2),
        Setting("tanh3", ("3", "8", "12"), (5, 5, 5, 5), "tanh", True, 0.5, (1e-5, 1.0), 0.2),
        Setting(
            "relu3",
            ("4", "9", "13"),
            (5, 5, 5, 5),
            "relu",
            False,
            1.0,
            (10**-2.5, 10**2.5),
            0.003,
        ),
    )
}
"""Tanh 2-layer (5,5,5) with bias; Tanh 3-layer (5,5,5,5) with bias; ReLU 3-layer without bias."""


def settings(names: Sequence[str]) -> list[Setting]:
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise ps.InvalidArgumentError(
            f"unknown setting(s) {unknown}; choose from {sorted(SETTINGS)}"
        )
    return [SETTINGS[n] for n in names]


def prefix_sizes(n: int, smallest: int = 100, count: int = 6) -> list[int]:
    """Ensemble sizes log-spaced from ``smallest`` to ``n`` (the residual-vs-N curve)."""
    values = np.unique(np.geomspace(min(smallest, n), n, count).round().astype(int))
    return [int(v) for v in values]


def loglog_slope(sizes: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of log(values) against log(sizes)."""
    return float(np.polyfit(np.log(sizes), np.log(values), 1)[0])


def cross_layer_fraction(structure: CurvatureStructure, matrix: Tensor) -> float:
    """‖weight–weight blocks between different layers‖_F / ‖weight blocks‖_F (Fig 3: the deep
    Tanh covariance is "mostly" block-diagonal, Theorem 3.1; Fig 4: ReLU is not)."""
    spans = {name: (a, b) for name, a, b in structure.block_boundaries()}
    weights = [spans[w] for w in structure.layout.weight_names]
    cross = torch.tensor(0.0, dtype=matrix.dtype)
    total = torch.tensor(0.0, dtype=matrix.dtype)
    for i, (a, b) in enumerate(weights):
        for j, (c, d) in enumerate(weights):
            block = matrix[a:b, c:d].pow(2).sum()
            total += block
            if i != j:
                cross += block
    return float((cross / total).sqrt())


def paper_view(structure: CurvatureStructure, matrix: Tensor) -> Tensor:
    """``matrix`` in the paper's column-major Vec(W_1, b_1, …) order (Eq. 16)."""
    order = structure.paper_order()
    return matrix[order][:, order]


def matrix(table: Mapping[str, list[Any]], column: str) -> np.ndarray:
    p = round(math.sqrt(len(table[column])))
    return np.asarray(table[column], dtype=float).reshape(p, p)


def heatmap(axes: Any, matrix: np.ndarray, structure: CurvatureStructure, title: str) -> None:
    """One panel of Figs 2–4: symmetric colour scale, ticks at the W_ℓ/b_ℓ boundaries."""
    scale = float(np.quantile(np.abs(matrix), 0.99)) or 1.0
    axes.imshow(matrix, cmap="RdBu_r", vmin=-scale, vmax=scale, interpolation="nearest")
    bounds = [b for _, _, b in structure.block_boundaries()][:-1]
    labels = [_param_label(structure, n) for n, _, _ in structure.block_boundaries()]
    starts = [a for _, a, _ in structure.block_boundaries()]
    for b in bounds:
        axes.axhline(b - 0.5, color="k", linewidth=0.6)
        axes.axvline(b - 0.5, color="k", linewidth=0.6)
    axes.set_xticks(starts, labels, fontsize=7)
    axes.set_yticks(starts, labels, fontsize=7)
    axes.set_title(title, fontsize=9)


def _param_label(structure: CurvatureStructure, name: str) -> str:
    layout = structure.layout
    if name in layout.weight_names:
        return f"W{layout.weight_names.index(name) + 1}"
    return f"b{layout.bias_names.index(name) + 1}"
