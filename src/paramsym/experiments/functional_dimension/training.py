"""Training and tracking shared by the seed 004 functional-dimension experiments.

The paper's architecture, the "He variant" initialisation, the batched training of a cohort
of networks with Adam and the FD / linear-region measurements along training, used by
``fd-univariate``, ``fd-bivariate``, ``fd-weight-decay`` and ``fd-energy``.

The common setup is described in :mod:`paramsym.experiments.functional_dimension`.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

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

    def epoch(self, optimizer: FusedAdam | torch.optim.Optimizer, batch_size: int) -> None:
        """One pass over every run's data in its own shuffled minibatches of ``batch_size``.

        The loss is the sum of the runs' own MSELoss, so each run gets its own gradient; its
        weight decay λ is then added as ``grad ← grad + λ·θ`` before the Adam step, which is
        exactly what ``torch.optim.Adam(weight_decay=λ)`` does (coupled L2), run by run.
        Each run's data is put in its shuffled order once per epoch (one gather, then
        contiguous minibatches). The gradient is backpropagation written out for the ReLU MLP
        (δ_L = 2(f − y)/k, ∂/∂b_l = Σ_samples δ_l, ∂/∂W_l = (h_{l−1}ᵀ δ_l)ᵀ,
        δ_{l−1} = (δ_l W_l) ⊙ 1[h_{l−1} > 0]) with the same operations autograd runs for
        ``baddbmm``, ``relu`` (its ``threshold_backward``) and the mean of squares, so the
        same values bit for bit (tested), without autograd's graph: at these sizes the small
        tensor operations and their bookkeeping, not the arithmetic, set the time. For the
        same reason ``adam`` gives a :class:`FusedAdam` (the fused kernel called directly)
        where this torch has one.
        """
        m = self.x.shape[1]
        order = torch.stack([torch.randperm(m, generator=g) for g in self.generators])
        rows = torch.arange(len(self.members)).unsqueeze(1)
        xs = self.x[rows, order].split(batch_size, dim=1)
        ys = self.y[rows, order].split(batch_size, dim=1)
        count = len(self.weights)
        weights, parameters = self.weights, self.parameters
        # views of the parameters, made once: the Adam step updates the parameters in place
        weights_t = [w.transpose(1, 2) for w in weights]
        biases_row = [b.unsqueeze(1) for b in self.biases]
        relu_backward = torch.ops.aten.threshold_backward.default
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
                    h = torch.baddbmm(biases_row[i], h, weights_t[i])
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
                        delta = relu_backward(torch.bmm(delta, weights[i]), inputs[i], 0)
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


class FusedAdam:
    """``torch.optim.Adam(parameters, lr=learning_rate, fused=True)`` (betas 0.9, 0.999, eps
    1e-8, no weight decay of its own, no amsgrad) without the optimizer object: the state it
    keeps (first and second moments, zero at the start, and each parameter's step count as a
    float32 scalar tensor on the parameter's device, as fused Adam keeps it) held here, and
    :meth:`step` the call its ``step`` ends in: the step counts incremented by one, then
    ``torch._fused_adam_`` on all the parameters at once. The same kernel with the same
    arguments on the same tensors, so the same update bit for bit (tested); what is left out
    is ``Optimizer.step``'s bookkeeping (hooks, profiling, the state lookups and lists built
    parameter by parameter on every call), which on the small minibatches of
    ``_Cohort.epoch`` took several times the kernel's own time.
    """

    betas = (0.9, 0.999)
    eps = 1e-8

    def __init__(self, parameters: Sequence[Tensor], learning_rate: float) -> None:
        self.parameters = list(parameters)
        self.learning_rate = learning_rate
        self.exp_avgs = [
            torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.parameters
        ]
        self.exp_avg_sqs = [
            torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.parameters
        ]
        self.steps = [
            torch.zeros((), dtype=torch.float32, device=p.device) for p in self.parameters
        ]

    def zero_grad(self) -> None:
        """Drop the parameters' gradients (``set_to_none``, as ``Optimizer.zero_grad``)."""
        for p in self.parameters:
            p.grad = None

    def step(self) -> None:
        """One Adam update of the parameters from their ``grad``; as ``torch.optim.Adam``, a
        parameter without a gradient is left alone and its step count is not advanced."""
        grads = [p.grad for p in self.parameters]
        # the gradients left after dropping the parameters without one are all tensors
        state: tuple[list[Tensor], ...] = (
            self.parameters,
            cast(list[Tensor], grads),
            self.exp_avgs,
            self.exp_avg_sqs,
            self.steps,
        )
        if any(g is None for g in grads):
            kept = [i for i, g in enumerate(grads) if g is not None]
            state = tuple([tensors[i] for i in kept] for tensors in state)
        parameters, present_grads, exp_avgs, exp_avg_sqs, steps = state
        if not parameters:
            return
        with torch.no_grad():
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(
                parameters,
                present_grads,
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=self.learning_rate,
                beta1=self.betas[0],
                beta2=self.betas[1],
                weight_decay=0.0,
                eps=self.eps,
                maximize=False,
            )


def adam(parameters: list[Tensor], learning_rate: float) -> FusedAdam | torch.optim.Adam:
    """Adam without its own weight decay (it is added run by run, see ``_Cohort.epoch``):
    :class:`FusedAdam` (``torch.optim.Adam``'s fused kernel called directly) where this torch
    has the fused kernel on the parameters' device, else ``torch.optim.Adam`` itself."""
    if _has_fused_adam(str(parameters[0].device)):
        return FusedAdam(parameters, learning_rate)
    return torch.optim.Adam(parameters, lr=learning_rate)  # torch < 2.4 on the CPU


@functools.cache
def _has_fused_adam(device: str) -> bool:
    """Whether ``torch._fused_adam_`` runs on ``device`` (on the CPU from torch 2.4): one call
    on a one-element tensor (rather than asking ``torch.optim.Adam(fused=True)``, whose first
    construction imports torch._dynamo, seconds)."""
    one = [torch.zeros(1, device=device) for _ in range(4)]
    try:
        torch._fused_adam_(
            one[:1],
            one[1:2],
            one[2:3],
            one[3:],
            [],
            [torch.ones((), device=device)],
            amsgrad=False,
            lr=0.0,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.0,
            eps=1e-8,
            maximize=False,
        )
    except (AttributeError, NotImplementedError, RuntimeError):
        return False
    return True


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
