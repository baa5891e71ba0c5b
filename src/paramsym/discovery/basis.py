"""A user basis for exact discovery, and the choice of ansatz from its name.

A basis is a list of P × P matrices acting on the flattened parameters (in the model's
``named_parameters`` order, each tensor row-major) or of linear maps of params dicts; both
give the rows ⟨∇ℓ(θ; x), B_j θ⟩ of :mod:`paramsym.discovery.ansatz`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from paramsym.core.linalg import svd
from paramsym.discovery.ansatz import (
    Ansatz,
    BasisElement,
    FullAnsatz,
    LayerPairAnsatz,
    features,
    linear_layers,
)
from paramsym.discovery.channels import ChannelAnsatz
from paramsym.errors import InvalidArgumentError, ShapeError


class BasisAnsatz(Ansatz):
    """A user basis: P × P matrices acting on the flattened parameters, or linear maps of
    params dicts (``B(θ) -> dict`` with the shapes of θ); the two may be mixed.

    Matrices give dense generator matrices and brackets; linear maps are turned into matrices
    when ``K · P² ≤ 5·10⁷`` (by applying them to the P unit vectors), otherwise generators are
    available as tangent fields only. Elements are used as given: scale them to operator norm
    about 1 (the constraint rows are normalised so that such an element's entries are ≤ 1, and
    the decision threshold is relative to that), and linearly dependent ones are removed as
    redundant directions.
    """

    kind = "basis"

    def __init__(
        self, names: Sequence[str], shapes: Sequence[torch.Size], basis: Sequence[BasisElement]
    ) -> None:
        super().__init__(names, shapes)
        if len(basis) == 0:
            raise InvalidArgumentError("basis ansatz: the basis is empty")
        p = self.numel
        for j, element in enumerate(basis):
            if isinstance(element, Tensor):
                if tuple(element.shape) != (p, p):
                    raise ShapeError(
                        f"basis ansatz: element {j} has shape {tuple(element.shape)}, expected "
                        f"({p}, {p}) for the model's {p} parameters (in named_parameters order)"
                    )
            elif not callable(element):
                raise InvalidArgumentError(
                    f"basis ansatz: element {j} is a {type(element).__name__}; give (P, P) "
                    "matrices or linear maps of params dicts"
                )
        self.basis = list(basis)
        self.size = len(basis)
        self._matrices: Tensor | None = None
        if all(isinstance(e, Tensor) for e in basis) or len(basis) * p * p <= 5 * 10**7:
            self._matrices = torch.stack([self._as_matrix(e) for e in self.basis])

    def _apply(self, element: BasisElement, theta: Tensor) -> Tensor:
        """B θ for θ of shape (P,) or (P, n)."""
        if isinstance(element, Tensor):
            return element.to(theta.dtype) @ theta
        if theta.ndim == 2:
            return torch.stack([self._apply(element, t) for t in theta.T], dim=1)
        image = element(self.unflatten(theta))
        try:
            return torch.cat([image[n].reshape(-1) for n in self.names])
        except KeyError as missing:
            raise InvalidArgumentError(
                f"basis ansatz: a linear map returned no entry for parameter {missing}; it must "
                "return every parameter (zeros where it does not act)"
            ) from None

    def _as_matrix(self, element: BasisElement) -> Tensor:
        if isinstance(element, Tensor):
            return element.to(torch.float64)
        return self._apply(element, torch.eye(self.numel, dtype=torch.float64))

    def images(self, theta: Tensor) -> Tensor:
        """T_θ = [B_1 θ, …, B_K θ], shape (P, K)."""
        if self._matrices is not None:
            return (self._matrices.to(theta.dtype) @ theta).T
        return torch.stack([self._apply(e, theta) for e in self.basis], dim=1)

    def rows(self, theta: Tensor, grads: Tensor) -> Tensor:
        return grads @ self.images(theta)

    def field(self, coefficients: Tensor, theta: Tensor) -> Tensor:
        return self.images(theta) @ coefficients

    def matrix(self, coefficients: Tensor) -> Tensor:
        if self._matrices is None:
            raise InvalidArgumentError(
                "basis ansatz: the basis maps are too large to turn into matrices "
                f"({self.size} maps on {self.numel} parameters); use tangent_field"
            )
        return torch.einsum("k,kij->ij", coefficients.to(self._matrices.dtype), self._matrices)

    def redundancy(self) -> Tensor:
        if self._matrices is not None:
            stacked = self._matrices.reshape(self.size, -1)
        else:  # evaluate at enough random points to pin down the maps' linear relations
            generator = torch.Generator().manual_seed(0)
            points = -(-self.size // self.numel) + 2
            stacked = torch.cat(
                [
                    self.images(torch.randn(self.numel, generator=generator, dtype=torch.float64))
                    for _ in range(points)
                ]
            ).T
        # U must be square (its trailing columns are the relations); V never is needed, and a
        # full one is (P·points)² entries: 29472² for three points of a 9824-parameter model
        u, s, _ = svd(stacked, full_matrices=stacked.shape[0] > stacked.shape[1])
        rank = int((s > s.max() * 1e-10).sum()) if s.numel() else 0
        return u[:, rank:].T.contiguous()

    def blocks(self, coefficients: Tensor) -> dict[str, Tensor]:
        out = {"coefficients": coefficients}
        if self._matrices is not None:
            out["A"] = self.matrix(coefficients)
        return out


AnsatzSpec = Literal["layer_pairs", "channels", "full"] | Ansatz | Sequence[BasisElement]
"""``"layer_pairs"``, ``"channels"``, ``"full"``, an :class:`Ansatz`, or a basis (matrices /
linear maps)."""

EDGE_BLOCK_LIMIT = 64
"""``"layer_pairs"`` includes the input block when the model has at most this many inputs, and
the output block when it has at most this many outputs (each adds width² unknowns)."""


def _is_mlp(model: nn.Module, names: Sequence[str]) -> bool:
    """Whether every parameter in ``names`` belongs to a chain of ``nn.Linear`` layers."""
    layers = linear_layers(model)
    owned = {f"{p}.{a}" if p else a for p, m in layers for a, _ in m.named_parameters()}
    chained = all(
        features(a, "out_features") == features(b, "in_features")
        for (_, a), (_, b) in itertools.pairwise(layers)
    )
    return bool(layers) and chained and set(names) <= owned


def make_ansatz(
    model: nn.Module, names: Sequence[str], spec: AnsatzSpec, example_input: Any = None
) -> Ansatz:
    """Build the ansatz named by ``spec`` for ``model``'s parameters ``names``.

    ``"layer_pairs"`` is :class:`LayerPairAnsatz` on an MLP and, on any other model, the same
    blocks read off the traced graph (:class:`~paramsym.discovery.channels.ChannelAnsatz`,
    traced with ``example_input``); ``"channels"`` asks for the latter on any model."""
    params = dict(model.named_parameters())
    shapes = [params[n].shape for n in names]
    if isinstance(spec, Ansatz):
        if spec.names != tuple(names):
            raise InvalidArgumentError(
                f"ansatz: built for parameters {list(spec.names)[:4]}…, the model has "
                f"{list(names)[:4]}…"
            )
        return spec
    if isinstance(spec, str):
        if spec == "full":
            return FullAnsatz(names, shapes)
        if spec == "channels" or (spec == "layer_pairs" and not _is_mlp(model, names)):
            if example_input is None:
                raise InvalidArgumentError(
                    f"ansatz {spec!r} on {type(model).__name__}: the layer pairs are read off "
                    "the traced graph, which needs an example input (pass example_input)"
                )
            return ChannelAnsatz(model, names, example_input)
        if spec == "layer_pairs":
            layers = linear_layers(model)
            first = features(layers[0][1], "in_features") if layers else 0
            last = features(layers[-1][1], "out_features") if layers else 0
            return LayerPairAnsatz(
                model,
                names,
                input_block=first <= EDGE_BLOCK_LIMIT,
                output_block=last <= EDGE_BLOCK_LIMIT,
            )
        raise InvalidArgumentError(
            f"ansatz: unknown name {spec!r}; use 'layer_pairs', 'channels', 'full', an Ansatz, "
            "or a list of basis matrices / linear maps"
        )
    if isinstance(spec, Sequence):
        return BasisAnsatz(names, shapes, list(cast(Sequence[BasisElement], spec)))
    raise InvalidArgumentError(
        f"ansatz: expected 'layer_pairs', 'full', an Ansatz or a basis list, got "
        f"{type(spec).__name__}"
    )
