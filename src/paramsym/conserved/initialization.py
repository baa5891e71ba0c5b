"""Conserved quantities at initialisation: Xavier statistics and initialising with a chosen Q.

**Distribution at "Xavier" initialisation (§2.6).** For ``U σ(V X)`` with X = I,
U ∈ R^{m×h} ~ N(0, s_U²) and V ∈ R^{h×n} ~ N(0, s_V²) entrywise, Eq. 2.17's
Q = ½‖U‖² − Σ F_σ(V) has

    E[Q] = ½ m h s_U² − h n E[F_σ(v)],      Var[Q] = ½ m h s_U⁴ + h n Var[F_σ(v)]   [derived]

(:func:`~paramsym.conserved.elementwise.gaussian_moments` gives the moments of F_σ). The
dissertation's "Xavier" (Eq. 2.15) is s_U² = 1/h, s_V² = 1/n, i.e. variance 1/fan_in (LeCun
normal, not Glorot's 2/(fan_in + fan_out)); for σ = identity it gives

    E[Q] = (m − h)/2,      Var[Q] = m/(2h) + h/(2n).

**[ERRATUM]** Eq. 2.16 prints E[Q] = m − h, which drops the ½ of Eq. 2.14 (and its derivation
has a wrong sign); the Monte-Carlo test checks (m − h)/2. The variance is not in the text
(notes 001a §3): with it, Q ranges over a few units around (m − h)/2, the "small range" of
Figs 2.2-2.3.

**Initialising with a target Q** (:func:`init_with_q`), two ways:

``method="group"``
    Function-preserving: act with a diagonal element of the model's linear symmetry,
    W_i ↦ diag(c) W_i, W_{i+1} ↦ W_{i+1} diag(c)^{−α}, solving for c so that the moment map's
    trace (one common c) or diagonal (one c per neuron) equals the target [derived; notes 001a
    §3: x = c² solves ‖V‖²x² − Q*x − ‖U‖² = 0]. Exact, and the network's outputs do not change.
    Also works for Eq. 2.17's Q with identity, leaky_relu and relu (positively homogeneous σ).
``method="variance"``
    Redraw U and V with variances s_U², s_V² whose product s_U s_V is fixed (default: the
    Xavier product 1/√(hn), so the output scale stays) and whose E[Q] equals the target. This
    is how the dissertation sets Q (Figs 2.4, 2.7); it hits the target *in expectation* only,
    and the result says so (``exact=False`` and the achieved value).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import scipy.optimize
import torch
from torch import Tensor, nn

from paramsym.conserved.base import ConservedQuantity, slot_rows
from paramsym.conserved.elementwise import (
    ElementwiseQ,
    antiderivative_kind,
    closed_form_antiderivative,
    gaussian_moments,
)
from paramsym.conserved.moment import MomentMap, family_of
from paramsym.core.params import Params, params_of
from paramsym.core.seeding import make_generator
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.nn.activations import ActivationSpec, get_activation
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.detect import symmetries as find_symmetries
from paramsym.symmetry.gl import MatrixNeuronSymmetry
from paramsym.symmetry.scaling import PositiveScaling

InitMethod = Literal["group", "variance"]


# -- statistics at initialisation ---------------------------------------------------------------


@dataclass
class QStatistics:
    """Mean and variance of Eq. 2.17's Q at a Gaussian initialisation (plain numbers).

    Attributes:
        mean, variance: E[Q] and Var[Q] in closed form.
        outputs, hidden, inputs: m, h, n.
        activation: σ's name.
        u_std, v_std: the standard deviations of U's and V's entries.
    """

    mean: float
    variance: float
    outputs: int
    hidden: int
    inputs: int
    activation: str
    u_std: float
    v_std: float

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "std": self.std}


def _spec(activation: str | ActivationSpec) -> ActivationSpec:
    return get_activation(activation)


def _check_dims(outputs: int, hidden: int, inputs: int) -> None:
    if min(outputs, hidden, inputs) < 1:
        raise InvalidArgumentError(
            f"layer sizes must be positive, got outputs={outputs}, hidden={hidden}, inputs={inputs}"
        )


def xavier_q_statistics(
    outputs: int,
    hidden: int,
    inputs: int,
    activation: str | ActivationSpec = "identity",
    *,
    u_std: float | None = None,
    v_std: float | None = None,
) -> QStatistics:
    """E[Q] and Var[Q] of Eq. 2.17 (Eq. 2.14 for identity) at the dissertation's Xavier init.

    U ∈ R^{m×h} with entries N(0, u_std²) (default 1/h) and V ∈ R^{h×n} with N(0, v_std²)
    (default 1/n), as in Eq. 2.15. For identity: E[Q] = (m − h)/2 (**[ERRATUM]**: Eq. 2.16 says
    m − h) and Var[Q] = m/(2h) + h/(2n) [derived]. Activations: those of
    :data:`~paramsym.conserved.elementwise.CLOSED_FORM_ACTIVATIONS`.

    >>> stats = xavier_q_statistics(10, 50, 20)
    >>> round(stats.mean, 12), round(stats.variance, 12)
    (-20.0, 1.35)
    """
    _check_dims(outputs, hidden, inputs)
    spec = _spec(activation)
    su = 1.0 / math.sqrt(hidden) if u_std is None else float(u_std)
    sv = 1.0 / math.sqrt(inputs) if v_std is None else float(v_std)
    f_mean, f_var = gaussian_moments(spec, sv)
    mh, hn = outputs * hidden, hidden * inputs
    return QStatistics(
        mean=0.5 * mh * su**2 - hn * f_mean,
        variance=0.5 * mh * su**4 + hn * f_var,
        outputs=outputs,
        hidden=hidden,
        inputs=inputs,
        activation=spec.describe(),
        u_std=su,
        v_std=sv,
    )


def sample_xavier_q(
    outputs: int,
    hidden: int,
    inputs: int,
    samples: int,
    activation: str | ActivationSpec = "identity",
    *,
    u_std: float | None = None,
    v_std: float | None = None,
    generator: torch.Generator | int | None = None,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Monte-Carlo draws of Eq. 2.17's Q at the same initialisation as
    :func:`xavier_q_statistics`, shape ``(samples,)`` (the histograms of Figs 2.2-2.3)."""
    _check_dims(outputs, hidden, inputs)
    if samples < 1:
        raise InvalidArgumentError(f"sample_xavier_q: samples must be >= 1, got {samples}")
    spec = _spec(activation)
    function = closed_form_antiderivative(spec)
    su = 1.0 / math.sqrt(hidden) if u_std is None else float(u_std)
    sv = 1.0 / math.sqrt(inputs) if v_std is None else float(v_std)
    gen = make_generator(generator)
    per_sample = hidden * (outputs + inputs)
    chunk = max(1, 4_000_000 // per_sample)
    values = []
    for start in range(0, samples, chunk):
        k = min(chunk, samples - start)
        u = su * torch.randn(k, outputs * hidden, generator=gen, dtype=dtype)
        v = sv * torch.randn(k, hidden * inputs, generator=gen, dtype=dtype)
        values.append(0.5 * (u * u).sum(dim=1) - function(v).sum(dim=1))
    return torch.cat(values)


def q_init_scales(
    outputs: int,
    hidden: int,
    inputs: int,
    target: float,
    activation: str | ActivationSpec = "identity",
    *,
    product: float | None = None,
) -> tuple[float, float]:
    """(u_std, v_std) with ``u_std · v_std = product`` and E[Q] = ``target`` (Eq. 2.17).

    ``product`` defaults to the Xavier product 1/√(h n), which keeps the scale of the network's
    output. E[Q] decreases from +∞ to −∞ as v_std grows at fixed product, so every target has
    exactly one solution (found by ``scipy.optimize.brentq`` on log v_std).
    """
    _check_dims(outputs, hidden, inputs)
    spec = _spec(activation)
    p = 1.0 / math.sqrt(hidden * inputs) if product is None else float(product)
    if not p > 0:
        raise InvalidArgumentError(f"q_init_scales: product must be > 0, got {product}")

    def excess(log_v: float) -> float:
        sv = math.exp(log_v)
        try:
            return xavier_q_statistics(outputs, hidden, inputs, spec, u_std=p / sv, v_std=sv).mean
        except OverflowError:
            return -math.inf  # E[F_σ] overflowed: far below any target

    lo, hi = math.log(p) - 1.0, math.log(p) + 1.0
    for _ in range(200):
        if excess(lo) - target > 0:
            break
        lo -= 1.0
    for _ in range(200):
        if excess(hi) - target < 0:
            break
        hi += 1.0
    if not (excess(lo) - target > 0 > excess(hi) - target):
        raise InvalidArgumentError(
            f"q_init_scales: could not bracket E[Q] = {target} (product {p}); the target is "
            "outside the range float64 can represent"
        )
    log_v = scipy.optimize.brentq(lambda s: excess(s) - target, lo, hi, xtol=1e-14, rtol=1e-15)
    sv = math.exp(log_v)
    return p / sv, sv


# -- initialising with a target Q -----------------------------------------------------------------


@dataclass
class InitWithQResult:
    """What :func:`init_with_q` did.

    Attributes:
        quantity: name of the conserved quantity set.
        method: ``"group"`` or ``"variance"``.
        target: the target (a number, or a list per neuron).
        before, achieved: the quantity before and after (same form as ``target``).
        exact: ``True`` when ``achieved`` equals ``target`` up to rounding (group action);
            ``False`` for the variance method, which matches the target in expectation.
        expected: E[Q] at the chosen variances (variance method), else ``None``.
        u_std, v_std: the variances' square roots (variance method), else ``None``.
        function_preserved: whether the network function is unchanged (group method).
        params: the new parameters (detached; also copied into the model).
    """

    quantity: str
    method: str
    target: float | list[float]
    before: float | list[float]
    achieved: float | list[float]
    exact: bool
    function_preserved: bool
    expected: float | None = None
    u_std: float | None = None
    v_std: float | None = None
    params: Params = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("params")
        return out


def solve_scales(
    powers: Sequence[float], weights: Tensor, target: Tensor, *, what: str = "Q"
) -> Tensor:
    """Positive c (shape ``(K,)``) with ``Σ_s weights[s, k] c_k^{2 powers[s]} = target[k]``.

    Each term is monotone in c, all in the same direction (weights[s]·powers[s] of one sign),
    so each k has at most one solution; with powers ±1 it is the positive root of a quadratic
    in x = c² (A x − B/x = t), otherwise ``scipy.optimize.brentq`` on log c. Raises naming k when
    the target is outside the attainable range (e.g. a neuron with no incoming weight can only
    reach negative values).
    """
    weights = weights.to(torch.float64)
    target = target.to(torch.float64)
    powers_t = torch.tensor([float(p) for p in powers], dtype=torch.float64)
    direction = weights * powers_t[:, None]  # the sign of each term's slope in c
    if bool((direction < 0).any()) and bool((direction > 0).any()):
        raise InvalidArgumentError(f"solve_scales: {what} is not monotone in the scale")
    if bool((direction < 0).any()):
        weights, target = -weights, -target  # make it increasing
    growing = (weights * (powers_t[:, None] > 0)).sum(0)  # the part that grows without bound
    shrinking = -(weights * (powers_t[:, None] < 0)).sum(0)  # ... and the one that falls
    for k in range(target.numel()):
        t = float(target[k])
        if (float(growing[k]) == 0.0 and t >= 0.0) or (float(shrinking[k]) == 0.0 and t <= 0.0):
            reachable = (
                "no value (both terms vanish)"
                if float(growing[k]) == 0.0 and float(shrinking[k]) == 0.0
                else "only negative values"
                if float(growing[k]) == 0.0
                else "only positive values"
            )
            raise InvalidArgumentError(
                f"cannot set {what} of neuron {k} to {t:g}: rescaling reaches {reachable} "
                "(a neuron with all incoming or all outgoing weights zero)"
            )
    if set(powers_t.tolist()) <= {1.0, -1.0}:
        a, b = growing, shrinking
        root = torch.sqrt(target * target + 4 * a * b)
        # x = (t + √(t² + 4ab)) / (2a), in the form without cancellation for each sign of t
        x = torch.where(target >= 0, (target + root) / (2 * a), 2 * b / (root - target))
        return torch.sqrt(x)
    scales = []
    for k in range(target.numel()):
        column = weights[:, k].tolist()

        def excess(
            log_c: float, column: list[float] = column, t: float = float(target[k])
        ) -> float:
            return sum(w * math.exp(2 * p * log_c) for w, p in zip(column, powers, strict=True)) - t

        lo, hi = -1.0, 1.0
        while excess(lo) > 0:
            lo *= 2
        while excess(hi) < 0:
            hi *= 2
        scales.append(math.exp(scipy.optimize.brentq(excess, lo, hi, xtol=1e-15, rtol=1e-15)))
    return torch.tensor(scales, dtype=torch.float64)


def _as_target(target: float | Tensor | Sequence[float], width: int, name: str) -> Tensor:
    t = torch.as_tensor(target, dtype=torch.float64).detach().cpu()
    if t.ndim == 0:
        return t
    if t.shape != (width,):
        raise ShapeError(
            f"init_with_q: target for {name} must be a number (the trace) or one value per "
            f"neuron, shape ({width},), got {tuple(t.shape)}"
        )
    return t


def _plain(t: Tensor) -> float | list[float]:
    return float(t) if t.ndim == 0 else [float(v) for v in t.reshape(-1)]


def _moment_group(
    q: MomentMap, point: Params, target: float | Tensor | Sequence[float]
) -> tuple[Params, Tensor]:
    """Act with a diagonal element: c per neuron, or one c for a scalar target (the trace).
    Returns the new parameters and the target as a tensor."""
    symmetry = q.symmetry
    if q.family not in ("gl", "scaling"):
        raise InvalidArgumentError(
            f"init_with_q(method='group'): no diagonal subgroup known for {symmetry.name}; "
            "supported: GL(h) families and positive rescalings (set a product's factors one "
            "at a time)"
        )
    assert isinstance(symmetry, (PositiveScaling, MatrixNeuronSymmetry))
    width = symmetry.width
    common = isinstance(symmetry, PositiveScaling) and not symmetry.per_neuron
    target = _as_target(target, width, q.name)
    if common and target.ndim:
        raise ShapeError(f"init_with_q: {symmetry.name} has one common scale; give a number")
    powers, weights = [], []
    for slot in symmetry.slots:
        rows = slot_rows(point, slot, width) if not common else point[slot.name].reshape(1, -1)
        norms = (rows.to(torch.float64) ** 2).sum(dim=1).cpu()
        powers.append(slot.power)
        weights.append(slot.power * norms)
    stacked = torch.stack(weights)
    if target.ndim == 0:
        stacked = stacked.sum(dim=1, keepdim=True)
    scales = solve_scales(powers, stacked, target.reshape(-1), what=q.name)
    ref = point[symmetry.parameter_names[0]]
    per_neuron = scales.expand(width) if target.ndim == 0 and not common else scales
    per_neuron = per_neuron.to(dtype=ref.dtype, device=ref.device)
    element = per_neuron if isinstance(symmetry, PositiveScaling) else torch.diag(per_neuron)
    return symmetry.act(point, element), target


def _elementwise_group(q: ElementwiseQ, point: Params, target: Tensor) -> Params:
    """V_a ↦ c_a V_a, U_{:,a} ↦ U_{:,a}/c_a: function-preserving for positively homogeneous σ
    of degree 1, under which F_σ(c v) = c² F_σ(v) and Q_a = ½‖U_a‖² c⁻² − c² F_a."""
    spec = q.activation
    if q.custom or antiderivative_kind(spec) not in ("quadratic", "relu"):
        raise InvalidArgumentError(
            f"init_with_q(method='group'): {spec.describe()} has no function-preserving linear "
            "rescaling, so the group method cannot move Eq. 2.17's Q; use method='variance'"
        )
    if target.ndim and not q.per_neuron:
        raise ShapeError("init_with_q: ElementwiseQ(per_neuron=False) takes a number as target")
    outgoing, incoming = (t.to(torch.float64).cpu() for t in q.terms(point))
    weights = torch.stack([-incoming, outgoing])
    if target.ndim == 0:
        weights = weights.sum(dim=1, keepdim=True)
    scales = solve_scales([1.0, -1.0], weights, target.reshape(-1), what=q.name)
    v, u = point[q.names.incoming], point[q.names.outgoing]
    scales = scales.to(dtype=v.dtype, device=v.device).expand(v.shape[0])
    new = dict(point)
    new[q.names.incoming] = v * scales[:, None]
    new[q.names.outgoing] = u / scales[None, :]
    return new


def _default_quantity(model: nn.Module, method: InitMethod) -> ConservedQuantity:
    if method == "variance":
        return ElementwiseQ(model)
    for symmetry in find_symmetries(model):
        try:
            if family_of(symmetry) in ("gl", "scaling"):
                return MomentMap(symmetry)
        except InvalidArgumentError:
            continue
    raise InvalidArgumentError(
        f"init_with_q: {type(model).__name__} has no hidden layer with a linear continuous "
        "symmetry (GL or rescaling); pass quantity=ElementwiseQ(model) with method='variance'"
    )


def init_with_q(
    model: nn.Module,
    target: float | Tensor | Sequence[float],
    quantity: Symmetry | ConservedQuantity | None = None,
    *,
    method: InitMethod = "group",
    generator: torch.Generator | int | None = None,
    product: float | None = None,
) -> InitWithQResult:
    """Set a conserved quantity of ``model`` to ``target``, changing the model in place.

    Args:
        model: the network.
        target: a number, or one value per hidden neuron (group method).
            For a linear symmetry's moment map μ a number sets tr μ, a vector diag μ; for
            :class:`~paramsym.conserved.ElementwiseQ` the number is Eq. 2.17's Q (the paper's
            sign) and a vector its per-neuron terms.
        quantity: a linear symmetry (its moment map), a
            :class:`~paramsym.conserved.MomentMap` or an
            :class:`~paramsym.conserved.ElementwiseQ`; default: the first GL/rescaling of
            ``ps.symmetries(model)`` (group) or ``ElementwiseQ(model)`` (variance).
        method: ``"group"`` (exact, function-preserving) or ``"variance"`` (redraws U and V;
            E[Q] = target). See the module docstring.
        generator: randomness of the variance method.
        product: u_std · v_std for the variance method (default 1/√(h n)).

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 6, 2], activation="relu", seed=0, dtype=torch.float64)
    >>> x = torch.randn(4, 3, dtype=torch.float64)
    >>> before = model(x)
    >>> result = init_with_q(model, [0.5, -0.5, 1.0, 0.0, 2.0, -1.0])
    >>> result.exact, torch.allclose(model(x), before)
    (True, True)
    >>> [round(v, 12) for v in result.achieved]
    [0.5, -0.5, 1.0, 0.0, 2.0, -1.0]
    """
    if method not in ("group", "variance"):
        raise InvalidArgumentError(
            f"init_with_q: method must be 'group' or 'variance', got {method!r}"
        )
    point = params_of(model)
    if quantity is None:
        q = _default_quantity(model, method)
    elif isinstance(quantity, Symmetry):
        q = MomentMap(quantity, check_params=point)
    else:
        q = quantity
    before = q(point).detach()
    expected = u_std = v_std = None
    if method == "group":
        if isinstance(q, MomentMap):
            new, goal = _moment_group(q, point, target)
        elif isinstance(q, ElementwiseQ):
            goal = _as_target(target, q.names.hidden, q.name)
            new = _elementwise_group(q, point, goal)
        else:
            raise InvalidArgumentError(
                f"init_with_q: the group method supports MomentMap and ElementwiseQ, got {q.name}"
            )
    else:
        if not isinstance(q, ElementwiseQ):
            raise InvalidArgumentError(
                "init_with_q(method='variance'): supported for Eq. 2.17's ElementwiseQ of a "
                "two-layer whitened net (for a linear net it is ½ Tr[UᵀU − VVᵀ])"
            )
        goal = _as_target(target, q.names.hidden, q.name)
        if goal.ndim:
            raise ShapeError("init_with_q(method='variance'): the target must be a number")
        names = q.names
        u_std, v_std = q_init_scales(
            names.outputs,
            names.hidden,
            names.inputs,
            float(goal),
            names.activation,
            product=product,
        )
        expected = float(goal)
        gen = make_generator(generator)
        new = dict(point)
        for name, std in ((names.incoming, v_std), (names.outgoing, u_std)):
            ref = point[name]
            draw = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
            new[name] = (std * draw).to(dtype=ref.dtype, device=ref.device)
    _copy_into(model, new)
    achieved = q(new).detach()
    summary, before_summary = _summary(q, achieved, goal), _summary(q, before, goal)
    return InitWithQResult(
        quantity=q.name,
        method=method,
        target=_plain(goal),
        before=_plain(before_summary),
        achieved=_plain(summary),
        exact=method == "group",
        function_preserved=method == "group",
        expected=expected,
        u_std=u_std,
        v_std=v_std,
        params={k: t.detach().clone() for k, t in new.items()},
    )


def _summary(q: ConservedQuantity, value: Tensor, goal: Tensor) -> Tensor:
    """The value in the target's form: its trace for a number, its diagonal for a vector."""
    if goal.ndim == 0:
        return q.trace(value) if value.ndim else value
    return torch.diagonal(value) if value.ndim == 2 else value


def _copy_into(model: nn.Module, params: Mapping[str, Tensor]) -> None:
    own = dict(model.named_parameters())
    with torch.no_grad():
        for name, t in params.items():
            own[name].copy_(t)
