"""Ensembles from random group elements (dissertation §2.9) and their adversarial robustness.

A trained model is copied ``members`` times, each copy moved by a random element
g = I + εM of the data-dependent GL(h) action on one hidden layer ``U σ(V h + b)`` (the
pseudo-inverse batch action, Eq. 2.54 / 3.6):

    g·(U, [V b]) = (U π(g, H), g [V b]),     π(g, H) = σ(H) σ(gH)⁺,   H = [V b][h; 1]

(columns are samples, as in the paper; :class:`~paramsym.symmetry.PseudoInverseGL`). The
ensemble predicts the **mode** of the members' labels. No retraining or search is needed.
The action is exact on a batch only when σ(gH) has full column rank (k ≤ h samples); on more
samples each member's change of the layer output is an orthogonal projection, bounded by
‖Uσ(H)‖ (Prop 3.4.1), and the ensemble reports the measured change on its reference batch.

Which H defines π is not specified in the text (notes 001a §9.10); ``reference=`` chooses:

``"fixed"`` (default)
    π is computed once, when the ensemble is built, on a reference batch (e.g. training
    inputs); the members are ordinary networks with new weights, whose predictions on any
    input do not depend on the rest of the batch (rebuild the ensemble after changing the
    model).
``"batch"``
    π is recomputed on every evaluated batch, the paper's "modified activation"
    σ′(H) = π(g, H)σ(gH): exact on batches of at most h samples, and a member's prediction
    for one sample depends on the other samples of its batch.

Baselines (notes 001a §3; the text announces four and lists five with the method), all with
g = I + εM, M_ij ~ N(0, 1) (the text says only "a random matrix"):

==================  ===============================================================
``group``           (U π(g, H), g V), the method
``g_inverse``       (U g⁻¹, g V): the exact action of a *linear* activation
``random_diagonal`` (U g′, g V), g′ = I + εD, D diagonal with N(0, 1) entries
``shuffle``         (U π′, g V), π′ = the entries of π(g, H) randomly permuted
``perm_interp``     (U P_ε⁻¹, P_ε V), P_ε = (I + (ε/2)(I + S)) / (1 + ε), S a random
                    permutation matrix (P_ε is doubly stochastic and invertible)
==================  ===============================================================

Here V stands for [V b]. :func:`fgsm` and :func:`pgd` attack any differentiable
``x -> logits`` (a model, or :meth:`GroupEnsemble.logits`, the members' mean logits, as a
differentiable stand-in for the vote); :func:`attack_accuracy` gives the accuracy curve of
Fig 2.9. The attack strengths and steps of the paper are not given in the text.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from paramsym.core.params import Params, check_finite, functional_call, params_of
from paramsym.core.seeding import make_generator
from paramsym.errors import (
    InvalidArgumentError,
    ShapeError,
    UnanalysedModuleWarning,
)
from paramsym.symmetry.detect import symmetries as find_symmetries
from paramsym.symmetry.nonlinear import LayerPair, PseudoInverseGL

__all__ = [
    "KINDS",
    "AttackCurve",
    "EnsembleConfig",
    "EnsembleMember",
    "GroupEnsemble",
    "accuracy",
    "attack_accuracy",
    "fgsm",
    "find_hidden_layer",
    "group_ensemble",
    "interpolated_permutation",
    "majority_vote",
    "pgd",
    "pseudo_inverse_mixing",
]

EnsembleKind = Literal["group", "g_inverse", "random_diagonal", "shuffle", "perm_interp"]
Reference = Literal["fixed", "batch"]
KINDS: tuple[str, ...] = ("group", "g_inverse", "random_diagonal", "shuffle", "perm_interp")
LossFn = Callable[[Tensor, Tensor], Tensor]
Logits = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class EnsembleConfig:
    """How to build a :class:`GroupEnsemble`.

    Attributes:
        kind: the transformation (module docstring): ``"group"`` or a baseline.
        epsilon: ε in g = I + εM (and in g′, P_ε).
        members: number of transformed copies.
        reference: ``"fixed"`` (π from one reference batch) or ``"batch"`` (π from each
            evaluated batch).
    """

    kind: EnsembleKind = "group"
    epsilon: float = 0.1
    members: int = 10
    reference: Reference = "fixed"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgumentError(
                f"EnsembleConfig: kind must be one of {', '.join(KINDS)}, got {self.kind!r}"
            )
        if self.reference not in ("fixed", "batch"):
            raise InvalidArgumentError(
                f"EnsembleConfig: reference must be 'fixed' or 'batch', got {self.reference!r}"
            )
        if self.members < 1:
            raise InvalidArgumentError(f"EnsembleConfig: members must be >= 1, got {self.members}")
        if not self.epsilon >= 0:
            raise InvalidArgumentError(f"EnsembleConfig: epsilon must be >= 0, got {self.epsilon}")


@dataclass
class EnsembleMember:
    """One transformed copy: the element g and the kind's extra randomness.

    Attributes:
        g: I + εM, shape (h, h) (``perm_interp`` uses ``mixing`` instead).
        mixing: g′ (``random_diagonal``) or P_ε (``perm_interp``), else ``None``.
        shuffle: the permutation of the h² entries of π (``shuffle``), else ``None``.
    """

    g: Tensor
    mixing: Tensor | None = None
    shuffle: Tensor | None = None


def pseudo_inverse_mixing(
    pair: LayerPair, params: Mapping[str, Tensor], g: Tensor, x: Tensor
) -> Tensor:
    """π(g, H) = σ(H) σ(gH)⁺ (column convention), shape (h, h), for the inputs ``x`` of
    ``pair``: U π is the outgoing weight of :class:`~paramsym.symmetry.PseudoInverseGL`."""
    h = pair.inputs(params, x) @ pair.incoming(params).T  # (k, h), rows are samples
    s, s_g = pair.activation(h), pair.activation(h @ g.T)
    return (torch.linalg.pinv(s_g) @ s).T


def interpolated_permutation(permutation: Tensor, epsilon: float) -> Tensor:
    """P_ε = (I + (ε/2)(I + S)) / (1 + ε) for the permutation matrix S with S[i, p[i]] = 1:
    rows and columns sum to 1, P_0 = I, and P_ε → (I + S)/2 as ε → ∞."""
    width = permutation.numel()
    eye = torch.eye(width, dtype=torch.float64)
    s = eye[permutation]
    return (eye + 0.5 * epsilon * (eye + s)) / (1.0 + epsilon)


def _sample_member(
    kind: str, width: int, epsilon: float, generator: torch.Generator
) -> EnsembleMember:
    eye = torch.eye(width, dtype=torch.float64)
    g = eye + epsilon * torch.randn(width, width, generator=generator, dtype=torch.float64)
    if kind == "random_diagonal":
        d = torch.randn(width, generator=generator, dtype=torch.float64)
        return EnsembleMember(g, mixing=eye + epsilon * torch.diag(d))
    if kind == "shuffle":
        return EnsembleMember(g, shuffle=torch.randperm(width * width, generator=generator))
    if kind == "perm_interp":
        s = torch.randperm(width, generator=generator)
        return EnsembleMember(g, mixing=interpolated_permutation(s, epsilon))
    return EnsembleMember(g)


def find_hidden_layer(model: nn.Module, symmetry: PseudoInverseGL | None = None) -> PseudoInverseGL:
    """The pseudo-inverse action of the model's *last* hidden layer with a pointwise
    activation (the paper acts on the last two fully connected layers), or ``symmetry``.

    Modules paramsym cannot analyse (convolutions, pooling) before that layer are fine: they
    only compute the layer's input, so the warning about them is not repeated here.
    """
    if symmetry is not None:
        if not isinstance(symmetry, PseudoInverseGL):
            raise InvalidArgumentError(
                f"group_ensemble: symmetry must be a PseudoInverseGL, got {symmetry!r}"
            )
        return symmetry
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnanalysedModuleWarning)
        found = [
            s for s in find_symmetries(model, data_dependent=True) if isinstance(s, PseudoInverseGL)
        ]
    if not found:
        raise InvalidArgumentError(
            f"group_ensemble: {type(model).__name__} has no hidden layer Linear → pointwise σ → "
            "Linear with σ nonzero off zero (e.g. LeakyReLU, tanh) at the top level of an "
            "nn.Sequential; pass symmetry=PseudoInverseGL(...)"
        )
    return found[-1]


def _split_at(model: nn.Module, pair: LayerPair) -> tuple[nn.Module, nn.Module] | None:
    """(prefix, rest) of a top-level nn.Sequential at the pair's incoming layer, or ``None``."""
    if not isinstance(model, nn.Sequential):
        return None
    module_name = pair.incoming_weight.rsplit(".", 1)[0]
    names = list(model._modules)
    if module_name not in names:
        return None
    index = names.index(module_name)
    return model[:index], model[index:]


class GroupEnsemble:
    """Transformed copies of a model that vote (dissertation §2.9); build with
    :func:`group_ensemble`.

    Attributes:
        model: the original network (not changed).
        symmetry: the :class:`~paramsym.symmetry.PseudoInverseGL` of the transformed layer.
        config: the :class:`EnsembleConfig`.
        members: one :class:`EnsembleMember` each.
        layer_changes: per member, ‖σ(H′)U′ᵀ − σ(H)Uᵀ‖_F / ‖σ(H)Uᵀ‖_F, the relative change of
            the layer's output on the reference batch (empty without one). Zero up to rounding
            only for the ``group`` kind with at most h reference samples (then ``exact``).
        exact: whether every member left the layer's output on the reference batch unchanged
            (:class:`~paramsym.symmetry.ActionReport` of the pseudo-inverse action; always
            ``False`` for the baselines, which are not symmetries).
    """

    def __init__(
        self,
        model: nn.Module,
        symmetry: PseudoInverseGL,
        config: EnsembleConfig,
        members: Sequence[EnsembleMember],
        x_reference: Tensor | None,
    ) -> None:
        self.model, self.symmetry, self.config = model, symmetry, config
        self.members = list(members)
        self._split = _split_at(model, symmetry.pair)
        # The same action on the layer's own input, so the prefix runs once per batch.
        self._pair = dataclasses.replace(symmetry.pair, features=lambda p, h: h)
        self._action = PseudoInverseGL(self._pair, symmetry.width, site=symmetry.site)
        self.layer_changes: list[float] = []
        self.exact = False
        self._fixed: list[Params] | None = None
        if x_reference is not None:
            base = params_of(model)
            inputs = symmetry.pair.features(base, x_reference)
            moved = [self._member_params(m, base, inputs) for m in self.members]
            self.layer_changes = [self._layer_change(base, p, inputs) for p, _ in moved]
            self.exact = config.kind == "group" and all(exact for _, exact in moved)
            if config.reference == "fixed":
                self._fixed = [p for p, _ in moved]

    # -- members ---------------------------------------------------------------------------
    def _member_params(
        self, member: EnsembleMember, params: Params, inputs: Tensor
    ) -> tuple[Params, bool]:
        """The member's parameters, with π (group, shuffle) computed on the layer ``inputs``,
        and whether the move was exact there (only the group action can be)."""
        pair, kind = self._pair, self.config.kind
        ref = params[pair.incoming_weight]
        g = member.g.to(dtype=ref.dtype, device=ref.device)
        stacked = pair.incoming(params)
        u = params[pair.outgoing_weight]
        if kind == "group":
            new, report = self._action.act_with_report(params, g, inputs)
            return new, report.exact
        if kind == "g_inverse":
            return pair.with_incoming(params, g @ stacked, u @ torch.linalg.inv(g)), False
        if kind == "random_diagonal":
            assert member.mixing is not None
            return pair.with_incoming(params, g @ stacked, u @ member.mixing.to(g)), False
        if kind == "shuffle":
            assert member.shuffle is not None
            pi = pseudo_inverse_mixing(pair, params, g, inputs)
            shuffled = pi.reshape(-1)[member.shuffle.to(pi.device)].reshape(pi.shape)
            return pair.with_incoming(params, g @ stacked, u @ shuffled), False
        assert member.mixing is not None  # perm_interp
        p = member.mixing.to(g)
        return pair.with_incoming(params, p @ stacked, u @ torch.linalg.inv(p)), False

    def _layer_change(self, old: Params, new: Params, inputs: Tensor) -> float:
        def output(params: Params) -> Tensor:
            pair = self._pair
            hidden = pair.activation(pair.inputs(params, inputs) @ pair.incoming(params).T)
            return hidden @ params[pair.outgoing_weight].T

        with torch.no_grad():
            before = output(old)
            change = torch.linalg.norm(output(new) - before) / torch.linalg.norm(before)
        return float(change)

    def _layer_inputs(self, base: Params, x: Tensor) -> Tensor:
        return self.symmetry.pair.features(base, x)

    def member_params(self, x: Tensor | None = None) -> list[Params]:
        """Every member's parameters: the fixed ones, or (``reference="batch"``) those for
        the batch ``x``."""
        if self._fixed is not None:
            return self._fixed
        if x is None:
            raise InvalidArgumentError(
                "GroupEnsemble.member_params: reference='batch' members depend on the batch; pass x"
            )
        base = params_of(self.model)
        inputs = self._layer_inputs(base, x)
        return [self._member_params(m, base, inputs)[0] for m in self.members]

    # -- predictions -----------------------------------------------------------------------
    def member_outputs(self, x: Tensor) -> Tensor:
        """Every member's output on ``x``, shape ``(members, k, classes)``; differentiable in
        ``x`` (with ``reference="batch"`` also through π). The modules before the transformed
        layer run once per batch when the model is a flat ``nn.Sequential``."""
        check_finite([("x", x)], "GroupEnsemble")
        base = params_of(self.model)
        if self._split is None:
            return torch.stack([functional_call(self.model, p, x) for p in self.member_params(x)])
        prefix, rest = self._split
        own = set(dict(prefix.named_parameters()))
        inputs = functional_call(prefix, {k: base[k] for k in own}, x)  # x itself when empty
        if self._fixed is not None:
            all_params = self._fixed
        else:
            all_params = [self._member_params(m, base, inputs)[0] for m in self.members]
        keep = set(dict(rest.named_parameters()))
        return torch.stack(
            [functional_call(rest, {k: p[k] for k in keep}, inputs) for p in all_params]
        )

    def logits(self, x: Tensor) -> Tensor:
        """Mean of the members' outputs, shape ``(k, classes)``: a differentiable stand-in for
        the vote (what :func:`fgsm` and :func:`pgd` attack)."""
        return self.member_outputs(x).mean(dim=0)

    def predict(self, x: Tensor) -> Tensor:
        """The majority vote of the members' labels, shape ``(k,)`` (the paper's mode); ties go
        to the tied class with the largest mean softmax probability."""
        with torch.no_grad():
            return majority_vote(self.member_outputs(x))

    def __call__(self, x: Tensor) -> Tensor:
        return self.logits(x)


def majority_vote(outputs: Tensor) -> Tensor:
    """Most frequent argmax over members, shape ``(k,)`` from ``(members, k, classes)``; ties
    broken by the larger mean softmax probability (then the smaller label)."""
    if outputs.ndim != 3:
        raise ShapeError(
            "majority_vote: outputs must be (members, samples, classes), got "
            f"{tuple(outputs.shape)}"
        )
    classes = outputs.shape[-1]
    counts = F.one_hot(outputs.argmax(dim=-1), classes).sum(dim=0).to(outputs.dtype)
    confidence = torch.softmax(outputs, dim=-1).mean(dim=0)  # in [0, 1]: never outweighs a vote
    return (counts + 0.5 * confidence).argmax(dim=-1)


def group_ensemble(
    model: nn.Module,
    x_reference: Tensor | None = None,
    *,
    kind: EnsembleKind = "group",
    epsilon: float = 0.1,
    members: int = 10,
    reference: Reference = "fixed",
    symmetry: PseudoInverseGL | None = None,
    generator: torch.Generator | int | None = None,
) -> GroupEnsemble:
    """An ensemble of ``members`` copies of ``model`` moved by random g = I + εM (§2.9).

    Args:
        model: a trained classifier, an ``nn.Sequential`` whose last hidden layer is
            Linear → pointwise σ → Linear (anything, e.g. convolutions, may come before).
            Put it in evaluation mode first if it has dropout or batch normalisation.
        x_reference: the batch that defines π for ``reference="fixed"`` (required there);
            with ``"batch"`` optional, only for :attr:`GroupEnsemble.reports`.
        kind: ``"group"`` or a baseline (module docstring).
        epsilon: ε.
        members: ensemble size.
        reference: ``"fixed"`` or ``"batch"`` (module docstring).
        symmetry: the layer's :class:`~paramsym.symmetry.PseudoInverseGL` (default: that of
            the last hidden layer found by ``ps.symmetries(model, data_dependent=True)``).
        generator: randomness of the group elements.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([4, 16, 3], activation="leaky_relu", seed=0, dtype=torch.float64)
    >>> x = torch.randn(10, 4, dtype=torch.float64)
    >>> ensemble = group_ensemble(model, x, epsilon=0.05, members=5, generator=0)
    >>> bool((ensemble.predict(x) == model(x).argmax(dim=1)).all())  # exact: 10 ≤ 16 samples
    True
    """
    config = EnsembleConfig(kind, epsilon, members, reference)
    found = find_hidden_layer(model, symmetry)
    if reference == "fixed" and x_reference is None:
        raise InvalidArgumentError(
            "group_ensemble(reference='fixed'): pass x_reference, the batch that defines π(g, H)"
        )
    gen = make_generator(generator)
    sampled = [_sample_member(kind, found.width, epsilon, gen) for _ in range(members)]
    for member in sampled:
        found.check_element(member.g)  # raises for a (numerically) singular I + εM
        if member.mixing is not None:
            found.check_element(member.mixing)
    return GroupEnsemble(model, found, config, sampled, x_reference)


# -- adversarial attacks --------------------------------------------------------------------------


def _check_attack(x: Tensor, epsilon: float, clamp: tuple[float, float] | None, name: str) -> None:
    if not epsilon >= 0:
        raise InvalidArgumentError(f"{name}: epsilon must be >= 0, got {epsilon}")
    if clamp is not None and not clamp[0] < clamp[1]:
        raise InvalidArgumentError(
            f"{name}: clamp must be (low, high) with low < high, got {clamp}"
        )
    check_finite([("x", x)], name)


def _input_gradient(logits: Logits, loss_fn: LossFn, x: Tensor, y: Tensor) -> Tensor:
    with torch.enable_grad():
        leaf = x.detach().requires_grad_(True)
        loss = loss_fn(logits(leaf), y)
        (gradient,) = torch.autograd.grad(loss, leaf)
    return gradient


def _clamp(x: Tensor, clamp: tuple[float, float] | None) -> Tensor:
    return x if clamp is None else x.clamp(clamp[0], clamp[1])


def fgsm(
    logits: Logits,
    loss_fn: LossFn,
    x: Tensor,
    y: Tensor,
    epsilon: float,
    *,
    clamp: tuple[float, float] | None = None,
) -> Tensor:
    """Fast gradient sign method (Goodfellow et al. 2015): ``x + ε sign(∇_x loss)``, clipped to
    ``clamp`` (e.g. (0, 1) for images). ``logits`` is any differentiable ``x -> output``."""
    _check_attack(x, epsilon, clamp, "fgsm")
    gradient = _input_gradient(logits, loss_fn, x, y)
    return _clamp(x.detach() + epsilon * gradient.sign(), clamp).detach()


def pgd(
    logits: Logits,
    loss_fn: LossFn,
    x: Tensor,
    y: Tensor,
    epsilon: float,
    *,
    steps: int = 10,
    step_size: float | None = None,
    random_start: bool = True,
    generator: torch.Generator | int | None = None,
    clamp: tuple[float, float] | None = None,
) -> Tensor:
    """Projected gradient descent in the L∞ ball of radius ε (Madry et al. 2018): from x (or a
    uniform random point of the ball), ``steps`` signed-gradient steps of ``step_size``
    (default 2.5ε/steps), each projected back onto the ball and ``clamp``."""
    _check_attack(x, epsilon, clamp, "pgd")
    if steps < 1:
        raise InvalidArgumentError(f"pgd: steps must be >= 1, got {steps}")
    alpha = 2.5 * epsilon / steps if step_size is None else float(step_size)
    origin = x.detach()
    if random_start:
        gen = make_generator(generator)
        noise = torch.rand(origin.shape, generator=gen, dtype=torch.float64)
        adversarial = origin + epsilon * (2 * noise.to(origin) - 1)
    else:
        adversarial = origin.clone()
    adversarial = _clamp(adversarial, clamp)
    for _ in range(steps):
        gradient = _input_gradient(logits, loss_fn, adversarial, y)
        moved = adversarial + alpha * gradient.sign()
        adversarial = _clamp(origin + (moved - origin).clamp(-epsilon, epsilon), clamp).detach()
    return adversarial


def accuracy(
    predict: Callable[[Tensor], Tensor], x: Tensor, y: Tensor, *, batch_size: int = 512
) -> float:
    """Fraction of ``predict(x) == y``, evaluated in batches; ``predict`` returns labels (k,)
    (e.g. :meth:`GroupEnsemble.predict`) or outputs (k, classes), reduced by argmax."""
    if x.shape[0] != y.shape[0]:
        raise ShapeError(f"accuracy: {x.shape[0]} inputs but {y.shape[0]} labels")
    correct = 0
    with torch.no_grad():
        for start in range(0, x.shape[0], batch_size):
            out = predict(x[start : start + batch_size])
            labels = out.argmax(dim=-1) if out.ndim > 1 else out
            correct += int((labels == y[start : start + batch_size]).sum())
    return correct / max(1, x.shape[0])


@dataclass
class AttackCurve:
    """Accuracy under an attack at several strengths (Fig 2.9).

    Attributes:
        attack: ``"fgsm"`` or ``"pgd"``.
        epsilons: the strengths.
        accuracy: accuracy of the defended predictor at each ε (ε = 0: clean accuracy).
        settings: the attack's other arguments.
    """

    attack: str
    epsilons: list[float]
    accuracy: list[float]
    settings: dict[str, Any] = field(default_factory=dict)


def attack_accuracy(
    logits: Logits,
    predict: Callable[[Tensor], Tensor],
    loss_fn: LossFn,
    x: Tensor,
    y: Tensor,
    epsilons: Sequence[float],
    *,
    attack: Literal["fgsm", "pgd"] = "fgsm",
    batch_size: int = 256,
    **settings: Any,
) -> AttackCurve:
    """Accuracy of ``predict`` on inputs attacked through ``logits`` (white-box when they are
    the same model, transfer when ``logits`` is another one), for each ε.

    Args:
        logits: the differentiable model the attack follows.
        predict: the predictor evaluated on the attacked inputs (labels or outputs).
        loss_fn: the loss the attack increases (e.g. ``F.cross_entropy``).
        x, y: the test inputs and labels.
        epsilons: attack strengths.
        attack: ``"fgsm"`` or ``"pgd"``; ``settings`` go to :func:`fgsm` / :func:`pgd`.
        batch_size: samples per attacked batch.
    """
    if attack not in ("fgsm", "pgd"):
        raise InvalidArgumentError(
            f"attack_accuracy: attack must be 'fgsm' or 'pgd', got {attack!r}"
        )
    method = fgsm if attack == "fgsm" else pgd
    curve = []
    for epsilon in epsilons:
        attacked = torch.cat(
            [
                method(
                    logits,
                    loss_fn,
                    x[start : start + batch_size],
                    y[start : start + batch_size],
                    float(epsilon),
                    **settings,
                )
                for start in range(0, x.shape[0], batch_size)
            ]
        )
        curve.append(accuracy(predict, attacked, y, batch_size=batch_size))
    return AttackCurve(attack, [float(e) for e in epsilons], curve, dict(settings))
