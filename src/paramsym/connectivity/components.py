"""Connected components of minima (dissertation §3.2-3.3.1, Figs. 3.1).

**Square linear networks** (Prop. 3.2.1, Cor. 3.2.2). For ``L = ‖Y − W_l ⋯ W_1 X‖²`` with all
matrices h × h and X, Y invertible, the map

    f: GL_h^{l−1} → L⁻¹(0),  (g_1, …, g_{l−1}) ↦ (g_1 X⁻¹, g_2, …, g_{l−1}, Y (g_{l−1} ⋯ g_1)⁻¹)

is a homeomorphism with inverse (W_1 X, W_2, …, W_{l−1}), so the minimum has 2^{l−1}
components, labelled by ``(sign det(W_1 X), sign det W_2, …, sign det W_{l−1})``
(:func:`component_label`). :func:`square_linear_minimum` evaluates f; :func:`minimum_path`
joins two minima with the same label by an explicit zero-loss curve (a path in GL_h^{l−1}
pushed through f), which shows the labels are the components.

**Mode connectivity up to permutation** (Prop. 3.3.2, h ≥ 2). Permuting the hidden neurons,
``(P_1 W_1, P_2 W_2 P_1⁻¹, …, W_l P_{l−1}⁻¹)``, multiplies sign det of the i-th chart coordinate
by sgn(P_i) sgn(P_{i−1}). :func:`align_components` picks P_i = I or a transposition so that the
labels match: ``sgn P_i = sgn P_{i−1} · label_i · reference_label_i`` (P_0 = I).
**[ERRATUM]** The text writes the permuted point as ``(W_1 P_1, P_1⁻¹ W_2 P_2, …, P_{l−1} W_l)``,
which does not preserve W_l ⋯ W_1 (notes 001a §9.14); paramsym applies the action above through
the detected :class:`~paramsym.NeuronPermutation` symmetries. The proof's rule (P_i odd iff
``det(g_i g'_i P_{i−1}⁻¹) < 0``) is the sign recursion above and is kept; the tests check that
the labels then match and that a zero-loss path joins the two points.

**1-D residual network** (Prop. 3.2.3, Fig. 3.1). ``L = (Y − w_3 (w_2 w_1 X + ε X))²`` with
scalars: for every (w_1, w_2) with w_2 w_1 + ε ≠ 0 exactly one w_3 = Y / (X (w_2 w_1 + ε)) is a
minimum, so the minimum is the graph of a function over the plane minus the curve
w_1 w_2 = −ε: 4 components (the open quadrants) for ε = 0 and 3 (the region between the two
branches of the hyperbola and the two regions beyond them) for ε ≠ 0 [derived; it agrees with
the proof's S_0 ∪ S_1 decomposition]. :func:`residual_minimum_components` counts the
components numerically on a grid of that chart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import scipy.linalg
import scipy.ndimage
import torch
from torch import Tensor, nn

from paramsym.connectivity.paths import Path
from paramsym.core.linalg import matrix_exp
from paramsym.core.params import Params, resolve_params
from paramsym.errors import (
    InvalidArgumentError,
    InvalidGroupElementError,
    ShapeError,
    UnsupportedModuleError,
)
from paramsym.symmetry.detect import symmetries as detect_symmetries
from paramsym.symmetry.discrete import NeuronPermutation
from paramsym.symmetry.gl import HiddenGL

Label = tuple[int, ...]


@dataclass(frozen=True)
class SquareLinearChain:
    """The layers of a bias-free linear network with square h × h weights.

    Attributes:
        weights: parameter names of W_1, …, W_l (``W_1`` acts first).
        width: h.
        permutations: the :class:`~paramsym.NeuronPermutation` of each hidden layer
            (between W_i and W_{i+1}), as :func:`paramsym.symmetries` finds them.
    """

    weights: tuple[str, ...]
    width: int
    permutations: tuple[NeuronPermutation, ...] = field(repr=False)

    @property
    def depth(self) -> int:
        """l, the number of weight matrices."""
        return len(self.weights)


def square_linear_chain(model: nn.Module) -> SquareLinearChain:
    """Read W_1, …, W_l of a square linear network off the hidden GL(h) symmetries that
    :func:`paramsym.symmetries` finds (e.g. ``ps.mlp([h] * (l + 1), "identity", bias=False)``).

    Raises :class:`~paramsym.errors.UnsupportedModuleError` unless the model is a chain of
    bias-free linear layers with linear activations (every parameter a weight of the chain),
    and :class:`~paramsym.errors.ShapeError` unless every weight is square of one size h.
    """
    found = detect_symmetries(model)
    gl = [s for s in found if isinstance(s, HiddenGL)]
    if not gl:
        raise UnsupportedModuleError(
            f"square_linear_chain: {type(model).__name__} has no hidden GL(h) symmetry; Prop. "
            "3.2.1 is about linear networks W_l ⋯ W_1 (e.g. ps.mlp([h] * (l + 1), "
            "activation='identity', bias=False))"
        )
    names: list[str] = []
    for s in gl:
        incoming = [sl for sl in s.slots if sl.power > 0]
        outgoing = [sl for sl in s.slots if sl.power < 0]
        if len(incoming) != 1 or len(outgoing) != 1:
            raise UnsupportedModuleError(
                f"square_linear_chain: {s.name} acts on {[sl.name for sl in s.slots]}; Prop. "
                "3.2.1 needs bias-free layers (build the model with bias=False)"
            )
        if names and names[-1] != incoming[0].name:
            raise UnsupportedModuleError(
                f"square_linear_chain: the hidden layers of {type(model).__name__} do not form "
                "one chain W_l ⋯ W_1"
            )
        if not names:
            names.append(incoming[0].name)
        names.append(outgoing[0].name)
    params = dict(model.named_parameters())
    extra = sorted(set(params) - set(names))
    if extra:
        raise UnsupportedModuleError(
            f"square_linear_chain: parameters {extra} are not weights of the linear chain "
            f"{names}; Prop. 3.2.1 needs a bias-free linear network"
        )
    width = int(params[names[0]].shape[0])
    for name in names:
        if tuple(params[name].shape) != (width, width):
            raise ShapeError(
                f"square_linear_chain: '{name}' has shape {tuple(params[name].shape)}; Prop. "
                f"3.2.1 needs every weight square of one size ({width}, {width})"
            )
    by_input = {s.slots[0].name: s for s in found if isinstance(s, NeuronPermutation)}
    permutations = tuple(by_input[name] for name in names[:-1])
    return SquareLinearChain(tuple(names), width, permutations)


def _weights(chain: SquareLinearChain, params: Mapping[str, Tensor]) -> list[Tensor]:
    return [params[name] for name in chain.weights]


def _data_matrix(batch: Tensor, width: int, what: str) -> Tensor:
    """The paper's X (features × samples) from a row batch of shape (h, h): X = xᵀ."""
    if batch.shape != (width, width):
        raise ShapeError(
            f"{what}: expected a batch of h = {width} samples with {width} features (shape "
            f"({width}, {width})), got {tuple(batch.shape)}"
        )
    return batch.T


def component_label(
    model: nn.Module, params: Mapping[str, Tensor] | None = None, x: Tensor | None = None
) -> Label:
    """``(sign det(W_1 X), sign det W_2, …, sign det W_{l−1})`` (Prop. 3.2.1): equal labels ⇔
    the same component of the minimum of a square linear network.

    Args:
        model: a square linear network (:func:`square_linear_chain`).
        params: the point (default: the model's parameters).
        x: the input batch, shape (h, h) (rows are samples, X = xᵀ). Without it the first
            entry is sign det W_1, which differs from the paper's by the constant sign det X:
            labels of two points compare the same way.

    Raises :class:`~paramsym.errors.InvalidArgumentError` if a W_i (i < l) is singular: such a
    point is not a minimum of a full-rank problem.
    """
    chain = square_linear_chain(model)
    weights = _weights(chain, resolve_params(model, params))
    coordinates = list(weights[:-1])
    if x is not None:
        coordinates[0] = coordinates[0] @ _data_matrix(x, chain.width, "component_label")
    label = []
    for name, matrix in zip(chain.weights, coordinates, strict=False):
        sign = int(torch.linalg.slogdet(matrix.detach().double()).sign)
        if sign == 0:
            raise InvalidArgumentError(
                f"component_label: '{name}' is singular, so this point is not on the minimum of "
                "a full-rank square linear network"
            )
        label.append(sign)
    return tuple(label)


def square_linear_minimum(
    model: nn.Module, elements: Sequence[Tensor], x: Tensor, y: Tensor
) -> Params:
    """f(g_1, …, g_{l−1}) = (g_1 X⁻¹, g_2, …, g_{l−1}, Y (g_{l−1} ⋯ g_1)⁻¹), Eq. B.1: a zero-loss
    point of ``‖Y − W_l ⋯ W_1 X‖²``, as a params dict of ``model``.

    Args:
        model: a square linear network of depth l (:func:`square_linear_chain`).
        elements: l − 1 invertible h × h matrices.
        x, y: the data as row batches of shape (h, h) (X = xᵀ, Y = yᵀ), both invertible.
    """
    chain = square_linear_chain(model)
    h = chain.width
    if len(elements) != chain.depth - 1:
        raise ShapeError(
            f"square_linear_minimum: a network with {chain.depth} layers needs "
            f"{chain.depth - 1} group elements, got {len(elements)}"
        )
    for i, g in enumerate(elements):
        if tuple(g.shape) != (h, h):
            raise ShapeError(
                f"square_linear_minimum: element {i} has shape {tuple(g.shape)}, expected "
                f"({h}, {h})"
            )
        _check_invertible(g, f"square_linear_minimum: element {i}")
    X = _data_matrix(x, h, "square_linear_minimum(x)")
    Y = _data_matrix(y, h, "square_linear_minimum(y)")
    _check_invertible(X, "square_linear_minimum: x")
    _check_invertible(Y, "square_linear_minimum: y")
    return _chart(chain, list(elements), X, Y)


def _chart(chain: SquareLinearChain, elements: list[Tensor], X: Tensor, Y: Tensor) -> Params:
    """f(g) of Eq. B.1 (differentiable in the elements)."""
    product = elements[0]
    for g in elements[1:]:
        product = g @ product  # g_{l−1} ⋯ g_1
    first = torch.linalg.solve(X.T, elements[0].T).T  # g_1 X⁻¹
    last = torch.linalg.solve(product.T, Y.T).T  # Y (g_{l−1} ⋯ g_1)⁻¹
    weights = [first, *elements[1:], last]
    return dict(zip(chain.weights, weights, strict=True))


def _check_invertible(matrix: Tensor, what: str) -> None:
    singular_values = torch.linalg.svdvals(matrix.detach().double())
    if (
        not bool(torch.isfinite(singular_values).all())
        or float(singular_values[-1])
        <= float(singular_values[0]) * matrix.shape[0] * torch.finfo(matrix.dtype).eps
    ):
        raise InvalidGroupElementError(f"{what} is singular (or not finite)")


@dataclass
class ComponentAlignment:
    """Permutations that move a minimum into a reference's component (Prop. 3.3.2).

    Attributes:
        permutations: one index tensor per hidden layer (P_1, …, P_{l−1}), applied through
            the hidden layers' :class:`~paramsym.NeuronPermutation` actions.
        odd: whether each P_i is odd (a transposition of neurons 0 and 1) or the identity.
        params: the permuted point (same function, same loss).
        label_before, label_after, reference_label: component labels (sign det W_1, …).
    """

    permutations: list[Tensor]
    odd: list[bool]
    params: Params = field(repr=False)
    label_before: Label
    label_after: Label
    reference_label: Label

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("params")
        out["permutations"] = [p.tolist() for p in self.permutations]
        return out


def align_components(
    model: nn.Module, params: Mapping[str, Tensor], reference: Mapping[str, Tensor]
) -> ComponentAlignment:
    """Permute the hidden neurons of ``params`` so that its component label equals
    ``reference``'s (Prop. 3.3.2, with the corrected action of the module docstring).

    Needs h ≥ 2 when a layer's sign must change (S_1 has no odd permutation).
    """
    chain = square_linear_chain(model)
    before = component_label(model, params)
    target = component_label(model, reference)
    point = dict(params)
    permutations, odd = [], []
    previous_sign = 1
    for i, action in enumerate(chain.permutations):
        sign = previous_sign * before[i] * target[i]
        p = torch.arange(chain.width)
        if sign < 0:
            if chain.width < 2:
                raise InvalidArgumentError(
                    "align_components: the components differ but h = 1, and S_1 has no odd "
                    "permutation (Prop. 3.3.2 needs h ≥ 2)"
                )
            p[0], p[1] = 1, 0
        point = action.act(point, p)
        permutations.append(p)
        odd.append(sign < 0)
        previous_sign = sign
    return ComponentAlignment(
        permutations=permutations,
        odd=odd,
        params=point,
        label_before=before,
        label_after=component_label(model, point),
        reference_label=target,
    )


def _positive_qr(g: Tensor) -> tuple[Tensor, Tensor]:
    """g = Q R with R upper triangular with positive diagonal (unique for invertible g)."""
    q, r = torch.linalg.qr(g)
    signs = torch.sign(torch.diagonal(r))
    return q * signs, signs[:, None] * r


def _rotation_log(rotation: Tensor) -> Tensor:
    """A real antisymmetric log of a rotation (det +1), via ``scipy.linalg.logm``."""
    log = np.asarray(scipy.linalg.logm(rotation.detach().to("cpu", torch.float64).numpy()))
    if np.iscomplexobj(log):
        if float(np.abs(log.imag).max()) > 1e-8 * max(1.0, float(np.abs(log.real).max())):
            raise InvalidGroupElementError(
                "minimum_path: the rotation between the two points has eigenvalue −1, where the "
                "principal logarithm is not real; perturb one of the points"
            )
        log = log.real
    generator = torch.as_tensor(log, dtype=rotation.dtype, device=rotation.device)
    return 0.5 * (generator - generator.T)


def minimum_path(
    model: nn.Module,
    params_a: Mapping[str, Tensor],
    params_b: Mapping[str, Tensor],
    x: Tensor,
    y: Tensor,
) -> Path:
    """A zero-loss curve from ``params_a`` (t = 0) to ``params_b`` (t = 1) on the minimum of a
    square linear network, when the two have the same component label.

    Each chart coordinate g_i (g_1 = W_1 X, g_i = W_i) is written g = Q R (Q orthogonal, R upper
    triangular with positive diagonal) and moved along ``Q_a exp(t log(Q_aᵀ Q_b))`` and
    ``(1 − t) R_a + t R_b``, which stays in g's component of GL_h; f (Eq. B.1) maps the result
    onto the minimum. Differentiable in t (so :func:`~paramsym.connectivity.curve_geometry`
    applies).

    Raises :class:`~paramsym.errors.InvalidArgumentError` when a point is not a zero-loss
    minimum or the labels differ (align them first with :func:`align_components`).
    """
    chain = square_linear_chain(model)
    h = chain.width
    X = _data_matrix(x, h, "minimum_path(x)")
    Y = _data_matrix(y, h, "minimum_path(y)")
    ends = []
    for what, params in (("params_a", params_a), ("params_b", params_b)):
        weights = _weights(chain, params)
        product = X
        for w in weights:
            product = w @ product
        error = float(torch.linalg.norm(product - Y) / torch.linalg.norm(Y))
        if error > 10 * torch.finfo(Y.dtype).eps ** 0.5:
            raise InvalidArgumentError(
                f"minimum_path: {what} is not a zero-loss minimum (‖W_l⋯W_1 X − Y‖/‖Y‖ = "
                f"{error:.2e})"
            )
        coordinates = [weights[0] @ X, *weights[1:-1]]
        ends.append([_positive_qr(g) for g in coordinates])
    label_a = component_label(model, params_a, x)
    label_b = component_label(model, params_b, x)
    if label_a != label_b:
        raise InvalidArgumentError(
            f"minimum_path: the points lie in different components (labels {label_a} and "
            f"{label_b}); no path on the minimum joins them. Align them with align_components "
            "(Prop. 3.3.2)"
        )
    pieces = []
    for (q_a, r_a), (q_b, r_b) in zip(ends[0], ends[1], strict=True):
        pieces.append((q_a, _rotation_log(q_a.T @ q_b), r_a, r_b - r_a))

    def path(t: Tensor) -> Params:
        elements = [q @ matrix_exp(t * log) @ (r + t * dr) for q, log, r, dr in pieces]
        return _chart(chain, elements, X, Y)

    return path


@dataclass
class MinimumComponents:
    """Components of the minimum of the 1-D residual network, counted on a chart grid.

    Attributes:
        epsilon: ε of the skip connection.
        count: number of connected components found.
        sizes: grid points in each component (largest first).
        points: (N, 3) points (w_1, w_2, w_3) of the minimum on the grid (for a 3-D plot).
        labels: (N,) component index of each point (0 … count − 1, ordered like ``sizes``).
        resolution, box, cap: the grid: ``resolution``² points on [−box, box]², keeping the
            points with |w_3| ≤ cap.
    """

    epsilon: float
    count: int
    sizes: list[int]
    points: Tensor = field(repr=False)
    labels: Tensor = field(repr=False)
    resolution: int
    box: float
    cap: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "count": self.count,
            "sizes": list(self.sizes),
            "resolution": self.resolution,
            "box": self.box,
            "cap": self.cap,
        }


def residual_minimum_components(
    epsilon: float,
    *,
    x: float = 1.0,
    y: float = 1.0,
    box: float = 3.0,
    resolution: int = 301,
    cap: float = 10.0,
) -> MinimumComponents:
    """Count the components of ``{(w_1, w_2, w_3): w_3 (w_2 w_1 x + ε x) = y}`` (Prop. 3.2.3).

    The minimum is the graph of w_3 = y / (x (w_1 w_2 + ε)) over the (w_1, w_2) plane minus the
    curve w_1 w_2 = −ε (module docstring). The chart is sampled on a ``resolution`` ×
    ``resolution`` grid of [−box, box]², the points with |w_3| ≤ ``cap`` are kept (a band
    around the singular curve is removed, where w_3 → ±∞), and the kept points are labelled
    by 4-connectivity (``scipy.ndimage.label``). A numerical count: it equals the true one when
    the grid resolves the band (spacing well below (|y/x|/cap)/box) and the box shows every
    component (box above √|ε|); ε = 0 gives 4 and ε ≠ 0 gives 3.
    """
    if x == 0 or y == 0:
        raise InvalidArgumentError(
            "residual_minimum_components: Prop. 3.2.3 assumes X, Y ≠ 0 (the minimum is empty or "
            "degenerate otherwise)"
        )
    if resolution < 3 or not (box > 0 and cap > 0):
        raise InvalidArgumentError(
            "residual_minimum_components: needs resolution >= 3, box > 0 and cap > 0"
        )
    axis = np.linspace(-box, box, resolution)
    w1, w2 = np.meshgrid(axis, axis, indexing="ij")
    denominator = x * (w1 * w2 + epsilon)
    safe = np.where(denominator != 0, denominator, 1.0)
    w3 = np.where(denominator != 0, y / safe, np.inf)
    kept = np.abs(w3) <= cap
    labelled, count = scipy.ndimage.label(kept)  # 4-connectivity in 2-D
    sizes = np.bincount(labelled.ravel(), minlength=count + 1)[1:]
    order = np.argsort(-sizes, kind="stable")
    relabel = np.empty(count, dtype=np.int64)
    relabel[order] = np.arange(count)
    points = np.stack([w1[kept], w2[kept], w3[kept]], axis=1)
    labels = relabel[labelled[kept] - 1]
    return MinimumComponents(
        epsilon=float(epsilon),
        count=int(count),
        sizes=[int(s) for s in sizes[order]],
        points=torch.as_tensor(points, dtype=torch.float64),
        labels=torch.as_tensor(labels),
        resolution=resolution,
        box=float(box),
        cap=float(cap),
    )
