"""Estimating the factors of the gradient covariance (seed 002 §3.4, App. K).

**Single model (Eqs. 37–39, corrected).** The factors of one gradient g are the Reynolds
projection of g gᵀ, i.e. its average over the group orbit, (1/|G|) Σ_G G g gᵀ Gᵀ, which is the
least-squares fit of Eqs. 186–188: ``M_τ = S_τ S_τᵀ / dim τ`` with ``S_τ = Q_τᵀ g`` (shape
``(n_τ, D_τ)``, :meth:`~paramsym.symo.structure.CurvatureStructure.coordinates`). For a 2-layer
odd network without bias, S = [G_1ᵀ; G_2] and this is Φ_1 = G_1ᵀG_1/d_1, Φ_2 = G_2G_2ᵀ/d_1 and
Ψ_1 = G_1ᵀG_2ᵀ/d_1 — the corrected forms of Eqs. 190/193 (the paper prints G_2ᵀG_2, a
d_1 × d_1 matrix) and Eq. 194 (the paper prints G_1ᵀG_2, whose shapes do not match); notes 002
§2.5, checked in the tests against the exact group average.

**Mean.** The Reynolds projection of g itself is its trivial coordinates (Eqs. 26–28, 113–117:
only the trivial type can have a mean; for odd activations that is b_L alone). The covariance
(Eq. 3) differs from the second moment only in the trivial block: M_trivial − m mᵀ. For one
gradient this difference is exactly zero (the trivial type is one-dimensional), so centring
only makes sense over an ensemble or a running average (``center=True``). ``FactorTracker``
subtracts the invariant part of its running mean (the mean the theory allows, Eqs. 26–28,
113–117); ``ensemble_moments`` projects the sample covariance of N models, as the dense
Monte-Carlo estimate of Figs. 2–4 does.

**Running average (Eqs. 192–194).** ``FactorTracker`` keeps an EMA of the single-gradient
factors with Adam's bias correction 1/(1 − β_hᵗ), t = 1 at the first update.

**Ensembles.** Every function here accepts gradients with leading batch dimensions — e.g. the
gradients of K models from ``torch.func.vmap`` — and then averages over them: the global
curvature of Eq. 3 estimated from K models instead of one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError
from paramsym.symo.factors import Factors
from paramsym.symo.structure import CurvatureStructure


def _batch_mean(x: Tensor, nb: int) -> Tensor:
    return x.reshape(-1, *x.shape[nb:]).mean(0) if nb else x


def gradient_second_moment(structure: CurvatureStructure, grads: Mapping[str, Tensor]) -> Factors:
    """Factors of the Reynolds projection of g gᵀ (Eqs. 37–39, corrected); with leading batch
    dimensions in ``grads``, of the average of g gᵀ over them."""
    batch = structure.batch_shape(grads, "gradient_second_moment: grads")
    nb = len(batch)
    coords = structure.coordinates(grads)
    blocks = {}
    for t in structure.types:
        s = coords[t.key]
        gram = s @ s.transpose(-1, -2) / t.dim
        blocks[t.key] = _batch_mean(gram, nb)
    return Factors(structure, blocks)


def gradient_mean(structure: CurvatureStructure, grads: Mapping[str, Tensor]) -> Tensor:
    """The Reynolds projection of g (its trivial coordinates), shape ``(mean_dimension,)``,
    averaged over leading batch dimensions. Expand it with
    :meth:`~paramsym.symo.structure.CurvatureStructure.invariant_vector`."""
    batch = structure.batch_shape(grads, "gradient_mean: grads")
    if structure.mean_dimension == 0:
        first = next(iter(grads.values()))
        return first.new_zeros(0)
    trivial = structure.coordinates(grads, keys=["trivial"])["trivial"][..., 0]
    return _batch_mean(trivial, len(batch))


def centered(second_moment: Factors, mean: Tensor) -> Factors:
    """Covariance factors from second-moment factors and an *invariant* mean given by its
    trivial coordinates ``mean``: subtract m mᵀ from the trivial block (Eq. 3)."""
    structure = second_moment.structure
    if mean.shape != (structure.mean_dimension,):
        raise InvalidArgumentError(
            f"centered: mean must have shape ({structure.mean_dimension},), got {tuple(mean.shape)}"
        )
    if structure.mean_dimension == 0:
        return second_moment
    blocks = dict(second_moment.blocks)
    blocks["trivial"] = blocks["trivial"] - torch.outer(mean, mean).to(blocks["trivial"])
    return Factors(structure, blocks)


@dataclass
class GradientMoments:
    """Mean and covariance of gradients, in factor form.

    Attributes:
        mean: trivial coordinates of the mean gradient, shape ``(mean_dimension,)``.
        covariance: factors of Σ = E g gᵀ − μ μᵀ (of the second moment if not centred).
        n: how many gradients were averaged.
    """

    mean: Tensor
    covariance: Factors
    n: int


def ensemble_moments(
    structure: CurvatureStructure, grads: Mapping[str, Tensor], *, center: bool = True
) -> GradientMoments:
    """Global-curvature factors from a batch of gradients of shape ``(N, *param_shape)``
    (one per model), without the dense matrix: the Reynolds projection of the sample
    covariance (1/N) Σ_n (g_n − ḡ)(g_n − ḡ)ᵀ (Eqs. 2–3), or of the second moment
    (1/N) Σ_n g_n g_nᵀ if ``center=False``. Equal to
    ``Factors.from_dense(structure, gradient_covariance(...))`` (tested). ``mean`` is the
    trivial part of ḡ."""
    batch = structure.batch_shape(grads, "ensemble_moments: grads")
    if len(batch) != 1 or batch[0] < 1:
        raise InvalidArgumentError(
            f"ensemble_moments: grads need one leading model dimension, got batch shape {batch}"
        )
    second = gradient_second_moment(structure, grads)
    average = {k: g.mean(0) for k, g in grads.items()}
    mean = gradient_mean(structure, average)
    if center:
        second = second.add(gradient_second_moment(structure, average), alpha=-1.0)
    return GradientMoments(mean, second, batch[0])


class FactorTracker:
    """Exponential moving average of single-gradient factors with bias correction
    (Eqs. 192–194): ``F_t = β_h F_{t−1} + (1 − β_h) F̂(g_t)``, reported as ``F_t / (1 − β_hᵗ)``.

    Args:
        structure: the network's structure.
        beta: β_h (0.95 in the paper; 0 keeps only the latest gradient).
        center: also track the mean and report the covariance (see the module docstring).

    Feed it the gradients of any training loop (the factor-estimation study trains with GD):

    >>> import torch, paramsym as ps
    >>> from paramsym.symo import CurvatureStructure, FactorTracker
    >>> model = ps.mlp([3, 4, 2], "tanh", bias=False, seed=0)
    >>> tracker = FactorTracker(CurvatureStructure.from_model(model), beta=0.9)
    >>> tracker.update({k: torch.randn(p.shape) for k, p in model.named_parameters()})
    >>> tracker.factors().blocks["def1"].shape, tracker.step
    (torch.Size([5, 5]), 1)
    """

    def __init__(
        self, structure: CurvatureStructure, beta: float = 0.95, *, center: bool = False
    ) -> None:
        if not 0.0 <= beta < 1.0:
            raise InvalidArgumentError(f"FactorTracker: beta must be in [0, 1), got {beta}")
        self.structure = structure
        self.beta = float(beta)
        self.center = bool(center)
        self.step = 0
        self.second_moment: dict[str, Tensor] = {}
        self.mean: Tensor | None = None

    def update(self, grads: Mapping[str, Tensor]) -> None:
        """Add one gradient (or a batch of gradients, averaged) to the running average."""
        estimate = gradient_second_moment(self.structure, grads)
        mean = gradient_mean(self.structure, grads) if self.center else None
        self.second_moment = ema_update(self.second_moment, estimate.blocks, self.beta)
        if mean is not None:
            self.mean = (
                mean * (1 - self.beta)
                if self.mean is None
                else (self.beta * self.mean + (1 - self.beta) * mean)
            )
        self.step += 1

    def factors(self) -> Factors:
        """The bias-corrected estimate (covariance if ``center``, else second moment)."""
        if self.step == 0:
            raise InvalidArgumentError("FactorTracker.factors: no gradient has been added yet")
        correction = 1.0 - self.beta**self.step
        second = Factors(self.structure, {k: v / correction for k, v in self.second_moment.items()})
        if self.center and self.mean is not None:
            return centered(second, self.mean / correction)
        return second

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {"step": self.step, "beta": self.beta, "center": self.center}
        state.update({f"second_moment.{k}": v.clone() for k, v in self.second_moment.items()})
        if self.mean is not None:
            state["mean"] = self.mean.clone()
        return state

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore a :meth:`state_dict`."""
        step, beta = state["step"], state["beta"]
        if not isinstance(step, int) or not isinstance(beta, float):
            raise InvalidArgumentError("FactorTracker.load_state_dict: not a FactorTracker state")
        self.step, self.beta, self.center = step, beta, bool(state["center"])
        prefix = "second_moment."
        self.second_moment = {
            k[len(prefix) :]: v.clone()
            for k, v in state.items()
            if k.startswith(prefix) and isinstance(v, Tensor)
        }
        mean = state.get("mean")
        self.mean = mean.clone() if isinstance(mean, Tensor) else None


def ema_update(
    running: Mapping[str, Tensor], new: Mapping[str, Tensor], beta: float
) -> dict[str, Tensor]:
    """``β · running + (1 − β) · new`` per block, starting from zero (Eqs. 192–194)."""
    return {
        k: (1 - beta) * v if k not in running else beta * running[k] + (1 - beta) * v
        for k, v in new.items()
    }


def correlation(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of the entries of two tensors (Table 1, Fig. 10 compare factor
    estimates this way, e.g. ``correlation(f1.block("def1", "0.weight", "0.weight"), ...)``)."""
    x = a.reshape(-1).to(torch.float64)
    y = b.reshape(-1).to(torch.float64)
    if x.numel() != y.numel() or x.numel() < 2:
        raise InvalidArgumentError(
            f"correlation: need two tensors with the same number (>= 2) of entries, got "
            f"{x.numel()} and {y.numel()}"
        )
    x = x - x.mean()
    y = y - y.mean()
    denominator = torch.linalg.vector_norm(x) * torch.linalg.vector_norm(y)
    if float(denominator) == 0.0:
        raise InvalidArgumentError("correlation: one of the tensors is constant")
    return float((x @ y) / denominator)
