"""Training and tracking shared by the seed 004 functional-dimension experiments.

The paper's architecture, the "He variant" initialisation, the batched training of a cohort
of networks with Adam and the FD / linear-region measurements along training, used by
``fd-univariate``, ``fd-bivariate``, ``fd-weight-decay`` and ``fd-energy``.

The common setup is described in :mod:`paramsym.experiments.functional_dimension`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

import paramsym as ps
import paramsym.data
from paramsym.experiments.registry import Progress

HIDDEN = (10, 10, 10, 10)
"""Hidden widths of the paper's architecture (n0, 10, 10, 10, 10 | 1)."""

COLOURS = {
    "f1": "tab:blue",
    "f2": "tab:red",
    "f3": "tab:green",
    "g1": "tab:blue",
    "g2": "tab:red",
    "g3": "tab:green",
    "heating": "tab:red",
    "cooling": "tab:blue",
}

# -- training and tracking (shared) ---------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One training set: a label (target name or weight decay) and float32 tensors."""

    label: str
    x: Tensor
    y: Tensor
    weight_decay: float


@dataclass(frozen=True)
class Schedule:
    """The optimisation and measurement settings shared by the four experiments (seed 004 §5)."""

    seed: int
    runs: int
    epochs: int
    every: int
    learning_rate: float
    batch_size: int


@dataclass
class Trajectory:
    """What one run (one initialisation on one task) recorded.

    Attributes:
        label, run, weight_decay: the task, the index of the initialisation, its weight decay.
        epochs, fd32, fd64, regions, loss: one entry per checkpoint (0, every, 2·every, …, last).
        r2: r² on the training data after training.
        predictions: model outputs on a probe grid at every checkpoint (1-D tasks only).
    """

    label: str
    run: int
    weight_decay: float
    epochs: list[int] = field(default_factory=list)
    fd32: list[int] = field(default_factory=list)
    fd64: list[int] = field(default_factory=list)
    regions: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    r2: float = math.nan
    predictions: list[Tensor] = field(default_factory=list)


def init_seed(seed: int, run: int) -> int:
    """The seed of run ``run``'s generator (initialisation, then minibatch order)."""
    return seed * 1000 + run


def he_variant_init(model: nn.Module, generator: torch.Generator) -> nn.Module:
    """Draw every weight and bias of every ``nn.Linear`` from N(0, 2/fan_in) (seed 004 §5)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                std = math.sqrt(2.0 / module.in_features)
                for p in (module.weight, module.bias):
                    if p is not None:
                        p.copy_(std * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return model


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


class _Cohort:
    """All runs of several tasks as one batch of B networks with stacked parameters."""

    def __init__(self, tasks: Sequence[Task], schedule: Schedule) -> None:
        self.members = [(t, r) for t in tasks for r in range(schedule.runs)]
        widths = [tasks[0].x.shape[1], *HIDDEN, 1]
        self.template = ps.mlp(widths, activation="relu", seed=0)  # seed: global RNG untouched
        self.generators = [
            torch.Generator().manual_seed(init_seed(schedule.seed, r)) for _, r in self.members
        ]
        layers = [
            _linears(he_variant_init(copy.deepcopy(self.template), g)) for g in self.generators
        ]
        self.weights = [
            torch.stack([ls[i].weight.detach() for ls in layers]) for i in range(len(layers[0]))
        ]
        self.biases = [
            torch.stack([ls[i].bias.detach() for ls in layers]) for i in range(len(layers[0]))
        ]
        decay = torch.tensor([t.weight_decay for t, _ in self.members])
        # λ of each run, broadcast to the shape of each parameter (in ``parameters`` order)
        self._decays = [
            decay.view(-1, *[1] * (p.dim() - 1)).expand_as(p).contiguous() for p in self.parameters
        ]
        self.x = torch.stack([t.x for t, _ in self.members])  # (B, m, n0)
        self.y = torch.stack([t.y for t, _ in self.members])  # (B, m, 1)

    @property
    def parameters(self) -> list[Tensor]:
        """The stacked weights, then the stacked biases; ``epoch`` writes their gradients into
        their ``grad`` (they need no autograd: see ``epoch``)."""
        return [*self.weights, *self.biases]

    def forward(self, x: Tensor) -> Tensor:
        """Outputs of all B networks on their own inputs ``x`` of shape (B, k, n0)."""
        h = x
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            if i < len(self.weights) - 1:
                h = torch.relu(h)
        return h

    def epoch(self, optimizer: torch.optim.Optimizer, batch_size: int) -> None:
        """One pass over every run's data in its own shuffled minibatches of ``batch_size``.

        The loss is the sum of the runs' own MSELoss, so each run gets its own gradient; its
        weight decay λ is then added as ``grad ← grad + λ·θ`` before the Adam step, which is
        exactly what ``torch.optim.Adam(weight_decay=λ)`` does (coupled L2), run by run.
        Each run's data is put in its shuffled order once per epoch (one gather, then
        contiguous minibatches). The gradient is backpropagation written out for the ReLU MLP
        (δ_L = 2(f − y)/k, ∂/∂b_l = Σ_samples δ_l, ∂/∂W_l = (h_{l−1}ᵀ δ_l)ᵀ,
        δ_{l−1} = (δ_l W_l) ⊙ 1[h_{l−1} > 0]) with the same operations autograd runs for
        ``baddbmm``, ``relu`` and the mean of squares, so the same values bit for bit
        (tested), without autograd's graph: at these sizes the small tensor operations and
        their bookkeeping, not the arithmetic, set the time.
        """
        m = self.x.shape[1]
        order = torch.stack([torch.randperm(m, generator=g) for g in self.generators])
        rows = torch.arange(len(self.members)).unsqueeze(1)
        xs = self.x[rows, order].split(batch_size, dim=1)
        ys = self.y[rows, order].split(batch_size, dim=1)
        count = len(self.weights)
        weights, biases, parameters = self.weights, self.biases, self.parameters
        grads: list[Tensor] = []
        for p in parameters:
            grad = p.grad
            if grad is None:  # the first epoch, or optimizer.zero_grad() dropped it
                grad = p.grad = torch.zeros_like(p)
            grads.append(grad)
        weight_grads, bias_grads = grads[:count], grads[count:]
        with torch.no_grad():
            for x, y in zip(xs, ys, strict=True):
                h = x.contiguous()
                inputs = [h]  # h_{l-1} of each layer l (after the ReLU)
                for i in range(count):
                    h = torch.baddbmm(biases[i].unsqueeze(1), h, weights[i].transpose(1, 2))
                    if i < count - 1:
                        h = torch.relu(h)
                        inputs.append(h)
                error = h - y
                delta = error * (2.0 / (error.shape[1] * error.shape[2]))
                for i in reversed(range(count)):
                    torch.sum(delta, 1, out=bias_grads[i])
                    weight_grads[i].copy_(
                        torch.bmm(inputs[i].transpose(1, 2), delta).transpose(1, 2)
                    )
                    if i:
                        delta = torch.bmm(delta, weights[i]) * (inputs[i] > 0)
                torch._foreach_add_(grads, torch._foreach_mul(parameters, self._decays))
                optimizer.step()

    def jacobians(self, dtype: torch.dtype) -> Tensor:
        """The parameter Jacobians of all B networks on their own data, ``(B, m, P)`` in
        ``dtype``: row ``i`` of network ``b`` is ∂f_b(x_i)/∂θ_b with the parameters in
        ``ps.flatten`` order of the ``ps.mlp`` (weights row-major, each layer's bias after
        its weight), the matrix ``ps.parameter_jacobian`` gives for ``model(b)`` (tested).

        Backpropagation written out for the ReLU MLP, all networks and samples at once:
        δ_L = 1, δ_l = (W_{l+1}ᵀ δ_{l+1}) ⊙ 1[z_l > 0], ∂f/∂W_l = δ_l h_{l−1}ᵀ, ∂f/∂b_l = δ_l.
        """
        with torch.no_grad():
            weights = [w.detach().to(dtype) for w in self.weights]
            biases = [b.detach().to(dtype) for b in self.biases]
            inputs = [self.x.to(dtype)]  # h_{l-1} of each layer l
            masks = []
            for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
                if i < len(weights) - 1:
                    z = torch.baddbmm(b.unsqueeze(1), inputs[-1], w.transpose(1, 2))
                    masks.append(z > 0)
                    inputs.append(torch.relu(z))
            batch, m = self.x.shape[:2]
            delta = torch.ones(batch, m, 1, dtype=dtype)
            blocks: list[Tensor] = []
            for i in reversed(range(len(weights))):
                outer = delta.unsqueeze(-1) * inputs[i].unsqueeze(-2)  # (B, m, out, in)
                blocks[:0] = [outer.reshape(batch, m, -1), delta]
                if i:
                    delta = torch.bmm(delta, weights[i]) * masks[i - 1]
            return torch.cat(blocks, dim=2)

    def model(self, b: int) -> nn.Module:
        """Network ``b`` as a ``ps.mlp`` (the template, overwritten)."""
        with torch.no_grad():
            for layer, w, bias in zip(
                _linears(self.template), self.weights, self.biases, strict=True
            ):
                layer.weight.copy_(w[b])
                layer.bias.copy_(bias[b])
        return self.template


def functional_dimensions(cohort: _Cohort, dtype: torch.dtype) -> list[int]:
    """FD of each network of the cohort on its data: the rank of its Jacobian in ``dtype`` by
    ``ps.functional_dimension``'s rule (singular values above ``max(m, P)·eps·σ_max``; the
    paper's ``torch.linalg.matrix_rank`` rule), from :meth:`_Cohort.jacobians` and one
    batched SVD instead of one Jacobian per network (the same ranks; tested)."""
    jacobians = cohort.jacobians(dtype)
    singular = torch.linalg.svdvals(jacobians)  # (B, min(m, P)), largest first
    scale = max(jacobians.shape[1:]) * torch.finfo(dtype).eps
    threshold = (scale * singular[:, :1].double()).to(dtype)  # as the float threshold there
    return (singular > threshold).sum(dim=1).tolist()


def _measure(cohort: _Cohort, records: list[Trajectory], epoch: int, probe: Tensor | None) -> None:
    """Record FD (float32 and float64), linear regions and the training loss of every run."""
    with torch.no_grad():
        losses = (cohort.forward(cohort.x) - cohort.y).pow(2).mean(dim=(1, 2))
    fd32 = functional_dimensions(cohort, torch.float32)
    fd64 = functional_dimensions(cohort, torch.float64)
    for b, ((task, _), record) in enumerate(zip(cohort.members, records, strict=True)):
        model = cohort.model(b)
        record.epochs.append(epoch)
        record.fd32.append(fd32[b])
        record.fd64.append(fd64[b])
        record.regions.append(ps.linear_regions(model, task.x).count)
        record.loss.append(float(losses[b]))
        if probe is not None:
            with torch.no_grad():
                record.predictions.append(model(probe).flatten())


def adam(parameters: list[Tensor], learning_rate: float) -> torch.optim.Adam:
    """``torch.optim.Adam`` without its own weight decay (it is added run by run, see
    ``_Cohort.epoch``); the fused kernel where this torch has it (the same update, faster)."""
    try:
        return torch.optim.Adam(parameters, lr=learning_rate, fused=True)
    except RuntimeError:  # torch < 2.4 has no fused Adam on the CPU
        return torch.optim.Adam(parameters, lr=learning_rate)


def r2_score(prediction: Tensor, target: Tensor) -> float:
    """Coefficient of determination 1 − SS_res / SS_tot."""
    residual = float((prediction - target).pow(2).sum())
    total = float((target - target.mean()).pow(2).sum())
    return 1.0 - residual / total if total > 0 else math.nan


def train_and_track(
    tasks: Sequence[Task],
    schedule: Schedule,
    progress: Progress,
    probe: Tensor | None = None,
    description: str = "epochs",
) -> list[Trajectory]:
    """Train ``schedule.runs`` He-variant initialisations on each task with Adam (coupled L2
    weight decay of the task) and MSE in float32, and track FD (float32 and float64), linear
    regions and the loss at epoch 0, every ``schedule.every`` epochs and at the last epoch
    (seed 004 §5, Figs 2-6, 9). Tasks must have the same number of points and input width.

    Run ``r`` starts from the same initialisation, and sees the same minibatch order, on
    every task (seed 004 Fig 3 shares the seed between heating and cooling).
    """
    cohort = _Cohort(tasks, schedule)
    optimizer = adam(cohort.parameters, schedule.learning_rate)
    records = [Trajectory(t.label, r, t.weight_decay) for t, r in cohort.members]
    for epoch in progress.track(range(schedule.epochs + 1), description=description):
        if epoch % schedule.every == 0 or epoch == schedule.epochs:
            _measure(cohort, records, epoch, probe)
        if epoch < schedule.epochs:
            cohort.epoch(optimizer, schedule.batch_size)
    with torch.no_grad():
        outputs = cohort.forward(cohort.x)
    for b, record in enumerate(records):
        record.r2 = r2_score(outputs[b], cohort.y[b])
    return records
