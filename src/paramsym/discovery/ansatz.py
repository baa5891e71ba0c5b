"""Ansätze for exact linear symmetry discovery: finite bases of linear maps of the parameters.

Exact discovery looks for generators A, linear maps of the flattened parameters θ ∈ R^P, with
⟨∇_θ ℓ(θ; x), A θ⟩ = 0 for all θ and data (the infinitesimal invariance of dissertation
Thm 6.3.1 for the action a(g, θ) = gθ; the idea of LieSD, Hu et al.). An *ansatz* restricts A
to the span of a basis, A = Σ_j c_j B_j, so that each (θ, x) gives one linear equation in the
coefficients c ∈ R^K:

    row_j(θ, x) = ⟨∇_θ ℓ(θ; x), B_j θ⟩,        Σ_j row_j c_j = 0.

Three ansätze:

* :class:`FullAnsatz`: all of gl(P), B_{ik} = E_{ik}; K = P² (tiny models, P ≲ 60).
* :class:`LayerPairAnsatz`: left and right multiplications of the weights of consecutive
  linear layers, the structure every known hidden-layer symmetry has (Table 1.1, Cor 6.4.3):
  for ``W_{l+1} σ(W_l a + b_l)`` the generators act as ``W_l ↦ M_l W_l, b_l ↦ M_l b_l`` and
  ``W_{l+1} ↦ W_{l+1} N_l`` with M_l, N_l ∈ gl(h_l) independent, so the constraint itself
  finds N = −M (GL of a linear layer) or M = −N diagonal (ReLU rescaling). Optional edge
  blocks: the right multiplication of the first weight (``W_1 ↦ W_1 N_0``, acting on the
  input space) and the left multiplication of the last layer (``W_L ↦ M_L W_L, b_L ↦ M_L b_L``,
  acting on the outputs, where a softmax cross-entropy's translation lives).
* :class:`~paramsym.discovery.basis.BasisAnsatz`: a user basis of P × P matrices or linear
  maps of params dicts.

Coefficients are vectors of length K (``size``); several generators at once are (K, d).
Parameters are flattened in the order of ``names`` (the model's ``named_parameters`` order),
each tensor row-major.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.chain import LINEAR_TYPES

MATRIX_LIMIT = 4096
"""Largest parameter count P for which a generator is also returned as a dense P × P matrix."""

LinearMap = Callable[[Mapping[str, Tensor]], Mapping[str, Tensor]]
"""A linear map of params dicts: ``B(θ) -> {name: tensor}`` with the shapes of θ."""

BasisElement = Tensor | LinearMap


class Ansatz(abc.ABC):
    """A basis B_1 … B_K of linear maps of the flattened parameters θ ∈ R^P.

    Attributes:
        names: parameter names in flattening order.
        shapes: their shapes.
        size: K, the number of basis elements (unknown coefficients).
    """

    kind: ClassVar[str]

    def __init__(self, names: Sequence[str], shapes: Sequence[torch.Size]) -> None:
        self.names = tuple(names)
        self.shapes = tuple(torch.Size(s) for s in shapes)
        self.offsets: dict[str, tuple[int, torch.Size]] = {}
        offset = 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            self.offsets[name] = (offset, shape)
            offset += shape.numel()
        self.numel = offset
        self.size = 0

    # -- flattening ----------------------------------------------------------------------------
    def flatten(self, params: Mapping[str, Tensor]) -> Tensor:
        """θ as a vector of shape (P,) in this ansatz's order (other keys are ignored)."""
        missing = [n for n in self.names if n not in params]
        if missing:
            raise InvalidArgumentError(
                f"{self.kind} ansatz: parameters {missing} are missing from the params dict"
            )
        return torch.cat([params[n].reshape(-1) for n in self.names])

    def unflatten(self, vector: Tensor) -> Params:
        """A vector of shape (P,) (or (P, d)) as a params dict (with a trailing axis d)."""
        trailing = tuple(vector.shape[1:])
        return {
            name: vector[start : start + shape.numel()].reshape(*shape, *trailing)
            for name, (start, shape) in self.offsets.items()
        }

    # -- the basis -----------------------------------------------------------------------------
    @abc.abstractmethod
    def rows(self, theta: Tensor, grads: Tensor) -> Tensor:
        """Constraint rows ``⟨g_b, B_j θ⟩`` for gradients ``grads`` (b, P) at θ (P,): (b, K)."""

    @abc.abstractmethod
    def field(self, coefficients: Tensor, theta: Tensor) -> Tensor:
        """Tangents ``Σ_j c_j B_j θ`` of coefficients (K,) or (K, d) at θ (P,): (P,) or (P, d)."""

    @abc.abstractmethod
    def matrix(self, coefficients: Tensor) -> Tensor:
        """The generator ``Σ_j c_j B_j`` as a dense (P, P) matrix (P ≤ :data:`MATRIX_LIMIT`)."""

    def redundancy(self) -> Tensor:
        """Orthonormal rows (q, K) spanning {c : Σ_j c_j B_j = 0}: coefficient directions that
        generate nothing (default: none)."""
        return torch.zeros(0, self.size, dtype=torch.float64)

    def bracket(self, c1: Tensor, c2: Tensor) -> Tensor | None:
        """Coefficients of the commutator A₁A₂ − A₂A₁ when the ansatz is closed under it
        (``None`` otherwise: then closure is checked on matrices)."""
        return None

    def blocks(self, coefficients: Tensor) -> dict[str, Tensor]:
        """The generator's named pieces, e.g. ``{"A": (P, P)}`` or ``{"left[0]": M, ...}``."""
        return {"coefficients": coefficients}

    def describe(self) -> str:
        return f"{self.kind} ({self.size} unknowns on {self.numel} parameters)"

    def _check_matrix_size(self) -> None:
        if self.numel > MATRIX_LIMIT:
            raise InvalidArgumentError(
                f"{self.kind} ansatz: a dense generator matrix needs P ≤ {MATRIX_LIMIT} "
                f"parameters, the model has {self.numel}; use tangent_field instead"
            )


class FullAnsatz(Ansatz):
    """All of gl(P): the generator is any P × P matrix A, coefficient ``c[i·P + k] = A[i, k]``,
    and ``row(θ, g) = vec(g θᵀ)``. K = P²."""

    kind = "full"

    def __init__(self, names: Sequence[str], shapes: Sequence[torch.Size]) -> None:
        super().__init__(names, shapes)
        self.size = self.numel * self.numel

    def rows(self, theta: Tensor, grads: Tensor) -> Tensor:
        return (grads[:, :, None] * theta[None, None, :]).reshape(grads.shape[0], self.size)

    def field(self, coefficients: Tensor, theta: Tensor) -> Tensor:
        p = self.numel
        if coefficients.ndim == 1:
            return coefficients.reshape(p, p) @ theta
        a = coefficients.T.reshape(-1, p, p)  # (d, P, P)
        return (a @ theta).T

    def matrix(self, coefficients: Tensor) -> Tensor:
        return coefficients.reshape(self.numel, self.numel)

    def bracket(self, c1: Tensor, c2: Tensor) -> Tensor:
        a, b = self.matrix(c1), self.matrix(c2)
        return (a @ b - b @ a).reshape(-1)

    def blocks(self, coefficients: Tensor) -> dict[str, Tensor]:
        return {"A": self.matrix(coefficients)}


@dataclass(frozen=True)
class PairBlock:
    """One block of :class:`LayerPairAnsatz`: a left (``M T``, rows) or right (``T N``, columns)
    multiplication of one linear layer's weight, an h × h matrix at ``start`` in the coefficient
    vector (row-major). A left block also multiplies the layer's bias."""

    name: str
    side: Literal["left", "right"]
    module: str
    weight: str
    bias: str | None
    size: int
    start: int

    @property
    def stop(self) -> int:
        return self.start + self.size * self.size


def linear_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The linear modules (``nn.Linear``, :class:`~paramsym.nn.NTKLinear`) in module order."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, LINEAR_TYPES)]


def features(module: nn.Module, attr: str) -> int:
    """``in_features`` / ``out_features`` of a linear module as an int."""
    return int(getattr(module, attr))


def _join(prefix: str, attr: str) -> str:
    return f"{prefix}.{attr}" if prefix else attr


class LayerPairAnsatz(Ansatz):
    """Left and right multiplications of consecutive linear layers (see the module docstring).

    Supported models: every parameter belongs to an ``nn.Linear`` (or
    :class:`~paramsym.nn.NTKLinear`) module, and consecutive linear modules (in module order)
    chain, ``out_features`` of one equal to ``in_features`` of the next, as in an MLP (an
    ``nn.Sequential`` or any module that calls its linear layers in definition order). Other
    models raise :class:`~paramsym.errors.InvalidArgumentError`; use ``ansatz="full"`` or a
    user basis for them.

    Blocks, for linear layers 0 … L−1 of widths n₀ → n₁ → … → n_L:

    * ``left[l]`` (n_{l+1} × n_{l+1}) on the rows of W_l and b_l, for l < L−1 (hidden layers),
      and for l = L−1 when ``output_block`` (the outputs);
    * ``right[l]`` (n_l × n_l) on the columns of W_l, for l ≥ 1, and for l = 0 when
      ``input_block`` (the inputs).

    A bias-free layer with both a left and a right block has one redundant direction
    (M = I, N = −I generates nothing), returned by :meth:`redundancy`.
    """

    kind = "layer_pairs"

    def __init__(
        self,
        model: nn.Module,
        names: Sequence[str] | None = None,
        *,
        input_block: bool = False,
        output_block: bool = True,
    ) -> None:
        layers = linear_layers(model)
        if not layers:
            raise InvalidArgumentError(
                f"layer_pairs ansatz: {type(model).__name__} has no nn.Linear layers; use "
                "ansatz='full' or a basis"
            )
        owned = set()
        for prefix, module in layers:
            owned.add(_join(prefix, "weight"))
            if module.bias is not None:
                owned.add(_join(prefix, "bias"))
        all_names = [n for n, _ in model.named_parameters()]
        names = list(all_names if names is None else names)
        foreign = [n for n in names if n not in owned]
        if foreign:
            raise InvalidArgumentError(
                f"layer_pairs ansatz: parameters {foreign[:5]} do not belong to nn.Linear "
                "layers; the ansatz supports MLP-like models whose parameters are all linear "
                "layers' weights and biases (use ansatz='full' for tiny models, or a basis)"
            )
        for (name_a, a), (name_b, b) in itertools.pairwise(layers):
            if features(a, "out_features") != features(b, "in_features"):
                raise InvalidArgumentError(
                    f"layer_pairs ansatz: linear layers '{name_a}' ({a.out_features} outputs) "
                    f"and '{name_b}' ({b.in_features} inputs) do not chain; the ansatz needs "
                    "consecutive nn.Linear layers of matching widths (an MLP)"
                )
        params = dict(model.named_parameters())
        super().__init__(names, [params[n].shape for n in names])
        self.layers = [prefix for prefix, _ in layers]
        self.blocks_: list[PairBlock] = []
        start = 0
        last = len(layers) - 1
        for index, (prefix, module) in enumerate(layers):
            weight = _join(prefix, "weight")
            bias = _join(prefix, "bias") if module.bias is not None else None
            if weight not in self.offsets or (bias is not None and bias not in self.offsets):
                raise InvalidArgumentError(
                    f"layer_pairs ansatz: the params must include '{weight}'"
                    + (f" and '{bias}'" if bias else "")
                )
            if index > 0 or input_block:
                h = features(module, "in_features")
                self.blocks_.append(
                    PairBlock(f"right[{prefix}]", "right", prefix, weight, None, h, start)
                )
                start += h * h
            if index < last or output_block:
                h = features(module, "out_features")
                self.blocks_.append(
                    PairBlock(f"left[{prefix}]", "left", prefix, weight, bias, h, start)
                )
                start += h * h
        self.size = start
        self.input_block = input_block
        self.output_block = output_block

    @property
    def pair_blocks(self) -> tuple[PairBlock, ...]:
        return tuple(self.blocks_)

    def _tensor(self, vector: Tensor, name: str) -> Tensor:
        start, shape = self.offsets[name]
        return vector[start : start + shape.numel()].reshape(shape)

    def rows(self, theta: Tensor, grads: Tensor) -> Tensor:
        b = grads.shape[0]
        out = []
        for block in self.blocks_:
            w = self._tensor(theta, block.weight)
            start, shape = self.offsets[block.weight]
            g_w = grads[:, start : start + shape.numel()].reshape(b, *shape)
            if block.side == "left":  # ⟨g_W, M W⟩ + ⟨g_b, M b⟩ = ⟨g_W Wᵀ + g_b bᵀ, M⟩
                c = g_w @ w.T
                if block.bias is not None:
                    start_b, shape_b = self.offsets[block.bias]
                    g_b = grads[:, start_b : start_b + shape_b.numel()]
                    c = c + g_b[:, :, None] * self._tensor(theta, block.bias)[None, None, :]
            else:  # ⟨g_W, W N⟩ = ⟨Wᵀ g_W, N⟩
                c = w.T @ g_w
            out.append(c.reshape(b, -1))
        return torch.cat(out, dim=1)

    def _block(self, coefficients: Tensor, block: PairBlock) -> Tensor:
        """The block's matrix: (h, h) or (h, h, d)."""
        h = block.size
        piece = coefficients[block.start : block.stop]
        return piece.reshape(h, h, *piece.shape[1:])

    def field(self, coefficients: Tensor, theta: Tensor) -> Tensor:
        single = coefficients.ndim == 1
        c = coefficients[:, None] if single else coefficients
        out = torch.zeros(self.numel, c.shape[1], dtype=theta.dtype, device=theta.device)
        for block in self.blocks_:
            m = self._block(c, block)  # (h, h, d)
            w = self._tensor(theta, block.weight)
            start, shape = self.offsets[block.weight]
            if block.side == "left":
                rate = torch.einsum("opd,pi->oid", m, w)
                if block.bias is not None:
                    start_b, shape_b = self.offsets[block.bias]
                    rate_b = torch.einsum("opd,p->od", m, self._tensor(theta, block.bias))
                    out[start_b : start_b + shape_b.numel()] += rate_b
            else:
                rate = torch.einsum("oi,ijd->ojd", w, m)
            out[start : start + shape.numel()] += rate.reshape(shape.numel(), -1)
        return out[:, 0] if single else out

    def matrix(self, coefficients: Tensor) -> Tensor:
        self._check_matrix_size()
        a = torch.zeros(self.numel, self.numel, dtype=coefficients.dtype)
        for block in self.blocks_:
            m = self._block(coefficients, block)
            start, shape = self.offsets[block.weight]
            rows, cols = int(shape[0]), int(shape[1])
            stop = start + rows * cols
            if block.side == "left":
                a[start:stop, start:stop] += torch.kron(m, torch.eye(cols, dtype=m.dtype))
                if block.bias is not None:
                    start_b, _ = self.offsets[block.bias]
                    a[start_b : start_b + rows, start_b : start_b + rows] += m
            else:
                a[start:stop, start:stop] += torch.kron(
                    torch.eye(rows, dtype=m.dtype), m.T.contiguous()
                )
        return a

    def redundancy(self) -> Tensor:
        directions = []
        by_module: dict[str, dict[str, PairBlock]] = {}
        for block in self.blocks_:
            by_module.setdefault(block.module, {})[block.side] = block
        for sides in by_module.values():
            if "left" in sides and "right" in sides and sides["left"].bias is None:
                c = torch.zeros(self.size, dtype=torch.float64)
                for side, sign in (("left", 1.0), ("right", -1.0)):
                    block = sides[side]
                    diagonal = torch.arange(block.size) * (block.size + 1) + block.start
                    c[diagonal] = sign
                directions.append(c / c.norm())
        if not directions:
            return super().redundancy()
        return torch.stack(directions)

    def bracket(self, c1: Tensor, c2: Tensor) -> Tensor:
        out = torch.zeros_like(c1)
        for block in self.blocks_:
            m1, m2 = self._block(c1, block), self._block(c2, block)
            # left: [M₁, M₂]; right: T ↦ T N acts anti-homomorphically, so [R₁, R₂] = R_{N₂N₁−N₁N₂}
            value = m1 @ m2 - m2 @ m1 if block.side == "left" else m2 @ m1 - m1 @ m2
            out[block.start : block.stop] = value.reshape(-1)
        return out

    def blocks(self, coefficients: Tensor) -> dict[str, Tensor]:
        return {block.name: self._block(coefficients, block) for block in self.blocks_}

    def describe(self) -> str:
        edges = [b.name for b in self.blocks_]
        return f"layer_pairs ({self.size} unknowns in blocks {', '.join(edges)})"
