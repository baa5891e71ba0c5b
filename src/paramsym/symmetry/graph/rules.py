"""Symmetry rules of aten ops: how each op's input and output feature spaces relate.

One function per op kind, registered with :func:`~paramsym.symmetry.graph.walk.rule`. The
rules state the equivariance each op satisfies (dissertation Prop. 1.2.3): a pointwise σ
passes permutations, rescaling when homogeneous (c ↦ c^α), sign flips when odd, GL only when
linear; a linear map ends every group on its input (the columns compensate, a COVECTOR) and
starts a new space on its output (the rows, a VECTOR); normalisation layers absorb
rescalings (only approximately when ``eps > 0``) and pass permutations with their per-feature
parameters and running statistics; a residual add links its operands' spaces, so a residual
stream gets one element shared by every block that reads or writes it.
"""

from __future__ import annotations

from typing import Any

from paramsym.nn.activations import ActivationSpec, get_activation
from paramsym.symmetry.graph.facts import (
    ALL_FAMILIES,
    Family,
    Law,
    Member,
)
from paramsym.symmetry.graph.values import (
    ParamValue,
    TensorValue,
)
from paramsym.symmetry.graph.walk import OpCall, Walk, blank, rule

PERM = frozenset({Family.PERMUTATION})
PER_CHANNEL = frozenset({Family.SIGN, Family.SCALING})
LINEAR_ONLY = frozenset({Family.GL, Family.ORTHOGONAL, Family.ROTARY})
NOT_LINEAR = ALL_FAMILIES - LINEAR_ONLY


def fresh(
    walk: Walk, like: Member, module: str, sources: frozenset[Family] = frozenset()
) -> Member:
    """A new space with ``like``'s width, laid out like it (same ``block`` and heads)."""
    new = walk.facts.new_space(like.width, module, sources)
    if like.heads > 1:
        walk.facts.cut(new, like.head_width)
    return Member(new.space, 0, new.stop, like.block, like.heads)


def derive(
    walk: Walk,
    call: OpCall,
    x: TensorValue,
    passing: frozenset[Family],
    *,
    ratio: float = 1.0,
    shape: tuple[int, ...] | None = None,
) -> TensorValue:
    """Output of an op acting feature by feature: each member of ``x`` gets a new space linked
    to it in ``passing`` (blocked in the other families)."""
    axes = {}
    for axis, member in x.axes.items():
        out = fresh(walk, member, call.module)
        walk.facts.link(member, out, passing, ratio)
        walk.facts.block(member, ALL_FAMILIES - passing, f"{call.where}")
        axes[axis] = out
    out_shape = tuple(shape) if shape is not None else x.shape
    return TensorValue(out_shape, axes, dict(x.head_axes) if out_shape == x.shape else {})


def block_other_axes(walk: Walk, call: OpCall, x: TensorValue, keep: int) -> None:
    """Block members on axes other than ``keep``: the op mixes entries along them."""
    for axis, member in x.axes.items():
        if axis != x.axis(keep):
            walk.facts.block(member, ALL_FAMILIES, f"{call.where} mixes entries along it")


def _tensor(call: OpCall, value: Any, walk: Walk) -> TensorValue | None:
    if isinstance(value, TensorValue):
        return value
    if isinstance(value, ParamValue):
        walk.unexplained(value, call)
    return None


# -- pointwise activations -----------------------------------------------------------------


def _families(spec: ActivationSpec) -> tuple[frozenset[Family], float]:
    passing = {Family.PERMUTATION}
    if spec.odd:
        passing.add(Family.SIGN)
    if spec.degree is not None:
        passing.add(Family.SCALING)
    if spec.linear:
        passing |= LINEAR_ONLY
    return frozenset(passing), float(spec.degree or 1.0)


_ACTIVATIONS: dict[str, Any] = {
    "relu": lambda c: get_activation("relu"),
    "tanh": lambda c: get_activation("tanh"),
    "sigmoid": lambda c: get_activation("sigmoid"),
    "silu": lambda c: get_activation("silu"),
    "gelu": lambda c: get_activation("gelu", approximate=c.arg(1, "approximate", "none")),
    "leaky_relu": lambda c: get_activation(
        "leaky_relu", negative_slope=c.arg(1, "negative_slope", 0.01)
    ),
    "elu": lambda c: (
        get_activation("elu", alpha=c.arg(1, "alpha", 1.0))
        if c.arg(2, "scale", 1) == 1 and c.arg(3, "input_scale", 1) == 1
        else None
    ),
    "softplus": lambda c: get_activation(
        "softplus", beta=c.arg(1, "beta", 1.0), threshold=c.arg(2, "threshold", 20.0)
    ),
}

_ODD_ONLY = {"hardtanh", "softsign", "sin", "atan", "asinh", "erf", "tanhshrink"}
_POINTWISE = {
    "exp", "log", "cos", "sqrt", "rsqrt", "reciprocal", "hardswish", "hardsigmoid", "mish",
    "selu", "celu", "log_sigmoid", "relu6", "gelu_", "exp2", "log1p", "expm1", "square",
}  # fmt: skip


@rule(*_ACTIVATIONS)
def activation(walk: Walk, call: OpCall) -> Any:
    x = _tensor(call, call.args[0], walk)
    spec = _ACTIVATIONS[call.op](call)
    if x is None or spec is None:
        return walk.fallback(call)
    passing, degree = _families(spec)
    return derive(walk, call, x, passing, ratio=degree)


@rule(*_ODD_ONLY, *_POINTWISE, "abs", "neg", "pow")
def pointwise(walk: Walk, call: OpCall) -> Any:
    x = _tensor(call, call.args[0], walk)
    if x is None:
        return walk.fallback(call)
    if call.op == "neg":
        return derive(walk, call, x, ALL_FAMILIES)
    if call.op == "abs":
        return derive(walk, call, x, PERM | {Family.SCALING})
    if call.op == "pow":
        power = call.arg(1, "exponent")
        if not isinstance(power, (int, float)) or power != int(power) or power < 1:
            return derive(walk, call, x, PERM)
        spec = get_activation("monomial", power=int(power))
        passing, degree = _families(spec)
        return derive(walk, call, x, passing, ratio=degree)
    if call.op == "square":
        return derive(walk, call, x, PERM | {Family.SCALING}, ratio=2.0)
    return derive(walk, call, x, PERM | ({Family.SIGN} if call.op in _ODD_ONLY else set()))


@rule("dropout", "alpha_dropout", "feature_dropout", "native_dropout", heads=True)
def dropout(walk: Walk, call: OpCall) -> Any:
    """Dropout is the identity in evaluation mode; in training mode its random mask is not
    moved with the features, so symmetries hold in distribution only."""
    x = _tensor(call, call.args[0], walk)
    if x is None:
        return walk.fallback(call)
    if call.op == "native_dropout":
        return [x, blank(call.shape[1])]
    return x


# -- linear maps ---------------------------------------------------------------------------


def _weight_axes(weight: ParamValue, out_axis: int, in_axis: int) -> tuple[int, int] | None:
    out_dim, in_dim = weight.original(out_axis), weight.original(in_axis)
    if out_dim is None or in_dim is None:
        return None
    return out_dim, in_dim


def linear_map(
    walk: Walk,
    call: OpCall,
    x: TensorValue,
    x_axis: int,
    weight: ParamValue,
    bias: Any,
    w_out: int,
    w_in: int,
    out_shape: tuple[int, ...],
    out_axis: int,
) -> TensorValue:
    """Shared rule of linear maps: the input features end at the weight's columns (axis
    ``w_in``); the output features are a new space produced by its rows (``w_out``) and the
    bias. Members on other axes pass (the map is linear in them), but a bias added along the
    feature axis is constant across them, so only permutations pass then."""
    facts = walk.facts
    x_axis, out_axis = x.axis(x_axis), out_axis % len(out_shape)
    member = x.axes.get(x_axis)
    if member is not None:
        facts.attach(member, weight.name, w_in, Law.COVECTOR, block=member.block)
    else:
        # a fixed input (the model's): its columns stay put, which a class moving them
        # through another call of the same map (a layer applied twice) must respect
        facts.pinned.add((weight.name, w_in))
    width = out_shape[out_axis]
    out = facts.new_space(width, call.module, ALL_FAMILIES)
    facts.attach(out, weight.name, w_out, Law.VECTOR)
    if isinstance(bias, ParamValue):
        facts.attach(out, bias.name, bias.original(0) or 0, Law.VECTOR)
    elif bias is not None:
        walk.unexplained(bias, call)
        walk.block_all(x, f"{call.where}: bias is not a parameter")
    walk.origins[out.space] = (
        "linear",
        (weight.name, bias.name if isinstance(bias, ParamValue) else None, member is not None),
    )
    axes = {out_axis: out}
    for axis, other in x.axes.items():
        if axis == x_axis:
            continue
        passing = PERM if bias is not None else ALL_FAMILIES
        new = fresh(walk, other, call.module)
        facts.link(other, new, passing)
        facts.block(other, ALL_FAMILIES - passing, f"{call.where} adds a bias across it")
        axes[axis] = new
    return TensorValue(out_shape, axes)


@rule("linear")
def linear(walk: Walk, call: OpCall) -> Any:
    x, weight, bias = call.args[0], call.args[1], call.arg(2, "bias")
    axes = _weight_axes(weight, 0, 1) if isinstance(weight, ParamValue) else None
    if not isinstance(x, TensorValue) or axes is None:
        return walk.fallback(call)
    return linear_map(walk, call, x, -1, weight, bias, axes[0], axes[1], call.shape, -1)


@rule("addmm")
def addmm(walk: Walk, call: OpCall) -> Any:
    """``bias + x @ W`` with W of shape (in, out): Hugging Face's ``Conv1D`` (GPT-2)."""
    bias, x, weight = call.args[0], call.args[1], call.args[2]
    axes = _weight_axes(weight, 1, 0) if isinstance(weight, ParamValue) else None
    if not isinstance(x, TensorValue) or axes is None or not isinstance(bias, ParamValue):
        return walk.fallback(call)
    return linear_map(walk, call, x, -1, weight, bias, axes[0], axes[1], call.shape, -1)


@rule("mm", "matmul")
def matmul(walk: Walk, call: OpCall) -> Any:
    """``x @ W`` with a parameter W of shape (in, out) (``einsum``-free projections)."""
    x, weight = call.args[0], call.args[1]
    if isinstance(x, TensorValue) and isinstance(weight, ParamValue) and weight.ndim == 2:
        axes = _weight_axes(weight, 1, 0)
        if axes is not None:
            return linear_map(walk, call, x, -1, weight, None, axes[0], axes[1], call.shape, -1)
    if isinstance(x, TensorValue) and isinstance(weight, TensorValue):
        return bilinear(walk, call, x, weight)
    return walk.fallback(call)


def bilinear(walk: Walk, call: OpCall, a: TensorValue, b: TensorValue) -> TensorValue:
    """A product of two computed tensors (attention scores without a fused kernel): no rule
    relates their features yet, so they are blocked."""
    walk.block_all([a, b], f"{call.where} multiplies two computed tensors")
    return TensorValue(tuple(call.shape))


@rule("conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d",
      "conv_transpose3d")  # fmt: skip
def convolution(walk: Walk, call: OpCall) -> Any:
    """Convolutions: channels on axis 1 (axis 0 for unbatched input). ``groups > 1`` splits
    the channels into groups that no permutation may mix; a depthwise convolution acts
    channel by channel, so it passes the diagonal families (its bias moves like the
    features); other grouped convolutions end the groups on their input (their columns
    read one group each, which the slots cannot express) — reported as blocked."""
    x, weight, bias = call.args[0], call.args[1], call.arg(2, "bias")
    if not isinstance(x, TensorValue) or not isinstance(weight, ParamValue):
        return walk.fallback(call)
    transposed = call.op.startswith("conv_transpose") or (
        call.op == "convolution" and bool(call.arg(6, "transposed", False))
    )
    if call.op == "convolution":
        groups = int(call.arg(8, "groups", 1))
    elif transposed:
        groups = int(call.arg(6, "groups", 1))
    else:
        groups = int(call.arg(6, "groups", 1))
    spatial = weight.ndim - 2
    channel = 1 if x.ndim == spatial + 2 else 0
    w_out, w_in = (1, 0) if transposed else (0, 1)
    axes = _weight_axes(weight, w_out, w_in)
    if axes is None:
        return walk.fallback(call)
    out_shape = tuple(call.shape)
    member = x.member(channel)
    c_in, c_out = x.shape[channel], out_shape[channel]
    block_other_axes(walk, call, x, channel)
    x = TensorValue(x.shape, {channel: member} if member is not None else {})
    if groups == 1:
        return linear_map(
            walk, call, x, channel, weight, bias, axes[0], axes[1], out_shape, channel
        )
    facts = walk.facts
    if groups == c_in == c_out and weight.shape[w_in] == 1 and not transposed:
        # depthwise: y_c = w_c * x_c + b_c, a linear map channel by channel. Permutations
        # pass it (the weight's rows and the bias permute with the channels); rescalings and
        # sign flips end on its input (the weight's row compensates) and start afresh on its
        # output (the row and the bias carry them), as at any linear map; GL stops.
        out = facts.new_space(c_out, call.module, PER_CHANNEL)
        facts.link(member, out, PERM)
        facts.block(member, LINEAR_ONLY, f"{call.where} is depthwise")
        if member is not None:
            facts.attach(
                member, weight.name, axes[0], Law.COVECTOR, families=PER_CHANNEL, diagonal=True
            )
        facts.attach(out, weight.name, axes[0], Law.INVARIANT, families=PERM)
        facts.attach(out, weight.name, axes[0], Law.VECTOR, families=PER_CHANNEL, diagonal=True)
        if isinstance(bias, ParamValue):
            facts.attach(out, bias.name, 0, Law.VECTOR)
        return TensorValue(out_shape, {channel: out})
    out = facts.new_space(c_out, call.module, ALL_FAMILIES)
    facts.attach(out, weight.name, axes[0], Law.VECTOR)
    if isinstance(bias, ParamValue):
        facts.attach(out, bias.name, 0, Law.VECTOR)
    facts.cut(out, c_out // groups)
    facts.block(member, ALL_FAMILIES, f"{call.where} has groups={groups}")
    if member is not None:
        facts.cut(member, c_in // groups)
    return TensorValue(out_shape, {channel: out})


@rule("embedding", "index", "index_select")
def embedding(walk: Walk, call: OpCall) -> Any:
    """An embedding table (num, dim): its columns produce the output features. Rows gathered
    by integer indices (``table[idx]``, ``table.index_select(0, idx)``: Swin's relative
    position bias table) are the same lookup."""
    if call.op == "embedding":
        weight = call.args[0]
    else:
        weight = _gathered_table(call)
        if weight is None:
            return walk.fallback(call)
    if not isinstance(weight, ParamValue) or weight.ndim != 2 or weight.original(1) is None:
        return walk.fallback(call)
    out = walk.facts.new_space(weight.shape[1], call.module, ALL_FAMILIES)
    walk.facts.attach(out, weight.name, weight.original(1) or 0, Law.VECTOR)
    shape = tuple(call.shape)
    return TensorValue(shape, {len(shape) - 1: out})


def _gathered_table(call: OpCall) -> ParamValue | None:
    """The 2-D parameter whose rows ``index``/``index_select`` gathers, or None."""
    table = call.args[0]
    if not isinstance(table, ParamValue) or table.ndim != 2:
        return None
    if call.op == "index_select":
        indices = call.args[2]
        if int(call.args[1]) % 2 != 0:
            return None
    else:
        given = call.args[1]
        if not isinstance(given, (list, tuple)) or len(given) != 1:
            return None
        indices = given[0]
    fixed = isinstance(indices, ParamValue) and indices.buffer  # an index buffer
    if not fixed and (not isinstance(indices, TensorValue) or indices.axes):
        return None
    return table


# -- normalisation -------------------------------------------------------------------------


def _eps_note(call: OpCall, eps: float) -> dict[str, Any]:
    if eps == 0.0:
        return {"exact": True}
    return {
        "exact": False,
        "note": (
            f"approximate: {call.op} in '{call.module}' has eps={eps:g} > 0, so scaling its "
            "input changes its output by O(eps / variance); exact for eps = 0"
        ),
    }


def _affine_start(walk: Walk, call: OpCall, out: Member, weight: Any, bias: Any) -> None:
    """A norm layer's output γ ⊙ n + β: γ and β move like the features under rescaling and,
    re-indexed, under permutations; under sign flips β flips and γ does not."""
    facts = walk.facts
    if isinstance(weight, ParamValue):
        facts.attach(out, weight.name, 0, Law.VECTOR, families=frozenset({Family.SCALING}))
        facts.attach(out, weight.name, 0, Law.INVARIANT, families=PERM | {Family.SIGN})
    if isinstance(bias, ParamValue):
        facts.attach(out, bias.name, 0, Law.VECTOR)


def _norm_output(walk: Walk, call: OpCall, width: int, weight: Any) -> Member:
    sources = frozenset({Family.SCALING}) if isinstance(weight, ParamValue) else frozenset()
    return walk.facts.new_space(width, call.module, sources)


@rule("batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
      "native_batch_norm", "_native_batch_norm_legit_functional")  # fmt: skip
def batch_norm(walk: Walk, call: OpCall) -> Any:
    """BatchNorm over axis 1: permutations pass (γ, β, running statistics re-indexed), sign
    flips pass (β and the running mean flip), per-channel rescaling of its input is absorbed
    (the running mean scales by c, the variance by c²; approximate when eps > 0), and a new
    rescaling starts at γ, β. GL and O(h) do not pass."""
    x, weight, bias = call.args[0], call.args[1], call.args[2]
    mean, var = call.args[3], call.args[4]
    if not isinstance(x, TensorValue) or x.ndim < 2:
        return walk.fallback(call)
    eps = float(call.args[7] if call.op == "batch_norm" else call.args[-1])
    if call.op in ("_native_batch_norm_legit_no_training",):
        eps = float(call.arg(6, "eps", 1e-5))
    facts = walk.facts
    member = x.member(1)
    block_other_axes(walk, call, x, 1)
    out = _norm_output(walk, call, x.shape[1], weight)
    facts.link(member, out, PERM | {Family.SIGN})
    _affine_start(walk, call, out, weight, bias)
    if member is not None:
        facts.block(member, LINEAR_ONLY, f"{call.where}")
        facts.absorb(
            member, frozenset({Family.SCALING}), module=call.module, **_eps_note(call, eps)
        )
        for stat, law in ((mean, Law.VECTOR), (var, Law.SQUARE)):
            if isinstance(stat, ParamValue):
                families = ALL_FAMILIES - ({Family.SIGN} if law is Law.SQUARE else set())
                facts.attach(member, stat.name, 0, law, families=families)
    result = TensorValue(x.shape, {1: out})
    if isinstance(call.shape, list):
        return [result, *[blank(s) for s in call.shape[1:]]]
    return result


@rule("layer_norm")
def layer_norm(walk: Walk, call: OpCall) -> Any:
    """LayerNorm over the last axis: permutations pass with γ, β; one common scale of its
    input is absorbed (approximate when eps > 0); a per-feature rescaling starts at γ, β."""
    x, shape, weight, bias = call.args[0], call.args[1], call.arg(2, "weight"), call.arg(3, "bias")
    if not isinstance(x, TensorValue) or len(shape) != 1:
        return walk.fallback(call)
    eps = float(call.arg(4, "eps", 1e-5))
    facts = walk.facts
    member = x.member(-1)
    out = _norm_output(walk, call, x.shape[-1], weight)
    facts.link(member, out, PERM)
    _affine_start(walk, call, out, weight, bias)
    if isinstance(weight, ParamValue):  # under sign flips γ is unchanged but LN is not odd
        facts.block(out, frozenset({Family.SIGN}), f"{call.where}")
    if member is not None:
        facts.block(member, ALL_FAMILIES - PERM - {Family.SCALING}, f"{call.where}")
        facts.absorb(
            member,
            frozenset({Family.SCALING}),
            module=call.module,
            common_only=True,
            **_eps_note(call, eps),
        )
    block_other_axes(walk, call, x, -1)
    return TensorValue(x.shape, {x.ndim - 1: out})


@rule("rms_norm")
def rms_norm(walk: Walk, call: OpCall) -> Any:
    """RMSNorm over the last axis: permutations and sign flips pass (γ re-indexed, not
    flipped); one common scale is absorbed; O(h) passes when there is no γ; γ rescales
    against the readers, unless it enters as ``offset + γ`` (Gemma)."""
    x, shape, weight = call.args[0], call.args[1], call.arg(2, "weight")
    if not isinstance(x, TensorValue) or len(shape) != 1:
        return walk.fallback(call)
    eps = call.arg(3, "eps")
    facts = walk.facts
    member = x.member(-1)
    block_other_axes(walk, call, x, -1)
    offset = call.kwargs.get("weight_offset", 0.0)
    out = _norm_output(walk, call, x.shape[-1], weight if not offset else None)
    passing = PERM | {Family.SIGN} | (frozenset() if weight is not None else {Family.ORTHOGONAL})
    facts.link(member, out, passing)
    if offset and isinstance(weight, ParamValue):
        # (offset + γ) ⊙: rescaling it is affine in γ, which no slot expresses; permutations
        # re-index γ, sign flips pass the norm and leave γ
        facts.attach(out, weight.name, 0, Law.INVARIANT, families=PERM | {Family.SIGN})
    else:
        _affine_start(walk, call, out, weight, None)
    if member is not None:
        facts.block(member, ALL_FAMILIES - passing - {Family.SCALING}, f"{call.where}")
        note = _eps_note(call, float(eps)) if eps is not None else {
            "exact": False, "note": f"approximate: {call.where} adds the default eps"}  # fmt: skip
        facts.absorb(
            member, frozenset({Family.SCALING}), module=call.module, common_only=True, **note
        )
    return TensorValue(x.shape, {x.ndim - 1: out})


@rule("group_norm")
def group_norm(walk: Walk, call: OpCall) -> Any:
    """GroupNorm: permutations within each group pass (the groups cut the channels); a new
    rescaling starts at γ, β."""
    x, groups, weight, bias = (
        call.args[0],
        int(call.args[1]),
        call.arg(2, "weight"),
        call.arg(3, "bias"),
    )
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    facts = walk.facts
    member = x.member(1)
    block_other_axes(walk, call, x, 1)
    out = _norm_output(walk, call, x.shape[1], weight)
    facts.cut(out, x.shape[1] // groups)
    facts.link(member, out, PERM)
    _affine_start(walk, call, out, weight, bias)
    facts.block(out, frozenset({Family.SIGN}), f"{call.where}")
    facts.block(member, ALL_FAMILIES - PERM, f"{call.where}")
    return TensorValue(x.shape, {1: out})
