"""Rotations of the residual stream and of the heads' value–output maps that spread outliers
over every feature (QuaRot, Ashkboos et al. 2024; SpinQuant, Liu et al. 2024; notes 005 §7).

On a model whose norms are folded into their readers (:func:`paramsym.fold_norms`), the
residual stream has an orthogonal group (:class:`~paramsym.symmetry.HiddenOrthogonal` over
whole axes: writers ``W ← Q W``, readers ``W ← W Qᵀ``), and each attention head's value–output
pair a GL group (:class:`~paramsym.symmetry.ValueOutputGL`) of which every orthogonal matrix is
an element. Acting with a rotation keeps the function exactly; what it changes is how the
stream's and the heads' values spread over the coordinates: an outlier feature x_j of the
stream becomes (Q x)_i = Σ_j Q_ij x_j, shared by every coordinate when Q is "incoherent" (its
entries all of size 1/√d), so that a per-tensor or per-token 4-bit grid no longer spends its
range on one feature.

:func:`rotate` acts with a **randomized Hadamard** matrix (QuaRot: ``H diag(s) / √d``, H a
Hadamard matrix, s random signs; every entry ±1/√d) or a Haar-random orthogonal matrix on
every stream group and, with ``heads=True``, on every head's value–output group. Only the
rotations that are parameter symmetries are applied: QuaRot's *online* Hadamards (before the
down projection, on the keys) are extra computation at inference, not moves of the weights,
and are left out (notes 005 §7).

A Hadamard matrix of order d exists only for d = 1, 2 or a multiple of 4; :func:`hadamard`
builds those that are ``2^k`` (Sylvester) or ``2^k (q + 1)`` with q a prime ≡ 3 (mod 4)
(Paley's construction): every power of two, and 12, 20, 24, 44, 48, 768 (= 64 · 12),
896 (= 4 · 224), …; other widths raise, naming ``rotation="random"``.

The learned rotation (SpinQuant) is :func:`~paramsym.quantization.learn_rotation`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from paramsym.core.params import output_change
from paramsym.errors import InvalidArgumentError, PartialTransformWarning, UnsupportedModuleError
from paramsym.symmetry.attention import ValueOutputGL
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.gl import MatrixNeuronSymmetry
from paramsym.symmetry.orthogonal import HiddenOrthogonal

Rotation = Literal["hadamard", "random"]
ROTATIONS: tuple[str, ...] = ("hadamard", "random")
"""How :func:`rotate` draws its rotations: randomized Hadamard (QuaRot) or Haar-random."""


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % p for p in range(2, math.isqrt(n) + 1))


def _paley(order: int) -> Tensor:
    """Paley's Hadamard matrix of ``order`` = q + 1, q a prime ≡ 3 (mod 4): I + S with
    S = [[0, 1ᵀ], [−1, Q]], Q_ij = χ(j − i) the quadratic character mod q."""
    q = order - 1
    squares = {(i * i) % q for i in range(1, q)}
    chi = torch.tensor([0.0] + [1.0 if r in squares else -1.0 for r in range(1, q)])
    index = torch.arange(q)
    jacobsthal = chi[(index.unsqueeze(0) - index.unsqueeze(1)) % q]
    s = torch.zeros(order, order)
    s[0, 1:], s[1:, 0], s[1:, 1:] = 1.0, -1.0, jacobsthal
    return torch.eye(order) + s


def hadamard(n: int) -> Tensor:
    """A Hadamard matrix of order ``n`` (entries ±1, ``H Hᵀ = n I``), float64: Sylvester's
    ``2^k`` times, by a Kronecker product, Paley's ``q + 1`` (module docstring).

    Raises:
        InvalidArgumentError: no construction here for ``n``.

    >>> h = hadamard(12)
    >>> bool((h @ h.T == 12 * torch.eye(12, dtype=torch.float64)).all())
    True
    """
    if n < 1:
        raise InvalidArgumentError(f"hadamard: order must be ≥ 1, got {n}")
    power = 1
    while n % (2 * power) == 0:
        power *= 2
    sylvester = torch.ones(1, 1, dtype=torch.float64)
    base = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
    # the largest power-of-two factor left to Sylvester whose cofactor has a Paley matrix
    k = power
    while k >= 1:
        rest = n // k
        if rest == 1 or (rest % 4 == 0 and _is_prime(rest - 1) and (rest - 1) % 4 == 3):
            break
        k //= 2
    if k < 1:
        raise InvalidArgumentError(
            f"hadamard: no Hadamard matrix of order {n} is built here (orders 2^k·(q + 1), q a "
            "prime ≡ 3 mod 4); use rotation='random' for a Haar-random orthogonal matrix"
        )
    while sylvester.shape[0] < k:
        sylvester = torch.kron(sylvester, base)
    rest = n // k
    return sylvester if rest == 1 else torch.kron(sylvester, _paley(rest).to(torch.float64))


def random_rotation(
    n: int, kind: Rotation, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> Tensor:
    """An orthogonal (n, n) matrix: ``"hadamard"``, H diag(s)/√n with random signs s (every
    entry ±1/√n), or ``"random"``, Haar-distributed (QR of a Gaussian matrix, signs fixed)."""
    if kind == "hadamard":
        signs = torch.randint(0, 2, (n,), generator=generator).to(torch.float64) * 2 - 1
        return (hadamard(n) * signs / math.sqrt(n)).to(dtype)
    if kind == "random":
        q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
        return (q * torch.sign(torch.diagonal(r))).to(dtype)
    raise InvalidArgumentError(f"rotation must be one of {ROTATIONS}, got {kind!r}")


def rotatable(
    found: Sequence[Symmetry], *, heads: bool = True
) -> tuple[list[MatrixNeuronSymmetry], list[MatrixNeuronSymmetry]]:
    """(stream groups, head value–output groups) among ``found`` that a rotation may act with:
    exact, function-preserving, data-free; streams over whole axes."""
    exact = [
        s
        for s in found
        if isinstance(s, MatrixNeuronSymmetry)
        and s.exact
        and s.preserves == "function"
        and not s.data_dependent
    ]
    streams: list[MatrixNeuronSymmetry] = [
        s
        for s in exact
        if isinstance(s, HiddenOrthogonal) and all(t.offset is None for t in s.slots)
    ]
    values: list[MatrixNeuronSymmetry] = (
        [s for s in exact if isinstance(s, ValueOutputGL)] if heads else []
    )
    return streams, values


@dataclass
class RotationResult:
    """What :func:`rotate` (or :func:`~paramsym.quantization.learn_rotation`) did.

    Attributes:
        model: the folded, rotated model (a new one; the given model is unchanged).
        rotations: the orthogonal matrix acted with, by group name.
        streams: names of the stream groups rotated.
        heads: names of the value–output groups rotated.
        output_change: max |f_new(x) − f(x)| / max |f(x)| on the example input, against the
            given (unfolded) model.
        orthogonality: max over the rotations of max |QᵀQ − I|.
        untied: parameters given their own copy first (:func:`paramsym.untie`: a tied LM
            head), new name -> the name it was tied to.
        unfolded: norms left as they are (:attr:`~paramsym.symmetry.FoldReport.skipped`),
            name -> why; the stream they read cannot rotate.
    """

    model: nn.Module = field(repr=False)
    rotations: dict[str, Tensor] = field(default_factory=dict, repr=False)
    streams: list[str] = field(default_factory=list)
    heads: list[str] = field(default_factory=list)
    output_change: float = math.nan
    orthogonality: float = math.nan
    untied: dict[str, str] = field(default_factory=dict)
    unfolded: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [
            f"{type(self.model).__name__} rotated: {len(self.streams)} stream group(s), "
            f"{len(self.heads)} head value–output group(s); output change "
            f"{self.output_change:.2e}, max |QᵀQ − I| {self.orthogonality:.1e}"
        ]
        if self.untied:
            lines.append("untied first: " + ", ".join(self.untied))
        if not self.streams:
            lines.append("the residual stream was NOT rotated")
        lines += [f"norm left unfolded: {name} ({why})" for name, why in self.unfolded.items()]
        return "\n".join(lines)


def orthogonality(rotations: dict[str, Tensor]) -> float:
    """max over ``rotations`` of max |QᵀQ − I| (0.0 for none)."""
    return max(
        (
            float((q.T @ q - torch.eye(q.shape[0], dtype=q.dtype)).abs().max())
            for q in rotations.values()
        ),
        default=0.0,
    )


def prepared(
    model: nn.Module, example_input: Any, *, heads: bool, where: str, untie: bool = True
) -> tuple[nn.Module, list[MatrixNeuronSymmetry], list[MatrixNeuronSymmetry]]:
    """The folded copy of ``model`` (untied first with ``untie``) and its (stream, head)
    rotation groups; raises naming ``where`` when it has neither, and warns
    (:class:`~paramsym.errors.PartialTransformWarning`) when the stream has no group. The
    folded model carries ``paramsym_untie`` (where untied) and ``paramsym_fold``."""
    from paramsym.symmetry.detect import symmetries
    from paramsym.symmetry.fold import FoldReport, fold_norms
    from paramsym.symmetry.untying import untie as untie_copy

    source = untie_copy(model) if untie else model
    folded = fold_norms(source, example_input, add_bias=True)
    if untie:
        folded.paramsym_untie = source.paramsym_untie
    streams, values = rotatable(symmetries(folded, example_input=example_input), heads=heads)
    fold_report: FoldReport = folded.paramsym_fold  # type: ignore[assignment]
    skipped = fold_report.skipped
    if not streams and not values:
        raise UnsupportedModuleError(
            f"{where}: {type(model).__name__} has no exact rotation group after folding its "
            "norms (no residual stream read only through norms, e.g. a final norm read by the "
            "output, and no attention value–output maps); norms left unfolded: "
            f"{_listed(skipped)}"
        )
    if not streams:
        tied = "" if untie else " (untie=False: a tied LM head reads the stream)"
        warnings.warn(
            f"{where}: the residual stream of {type(model).__name__} was not rotated{tied}: "
            f"no orthogonal group of the whole stream after folding; norms left unfolded: "
            f"{_listed(skipped)}. Only the heads' value–output maps are rotated",
            PartialTransformWarning,
            stacklevel=3,
        )
    return folded, streams, values


def _listed(skipped: dict[str, str]) -> str:
    return "; ".join(f"{k} ({v})" for k, v in skipped.items()) or "none"


def transform_report(folded: nn.Module) -> dict[str, dict[str, str]]:
    """``untied`` and ``unfolded`` of a model :func:`prepared` made (for the results)."""
    untie_report = getattr(folded, "paramsym_untie", None)
    fold_report = getattr(folded, "paramsym_fold", None)
    return {
        "untied": dict(untie_report.untied) if untie_report is not None else {},
        "unfolded": dict(fold_report.skipped) if fold_report is not None else {},
    }


def act_all(
    model: nn.Module, groups: Sequence[MatrixNeuronSymmetry], elements: Sequence[Tensor]
) -> None:
    """Act on ``model``'s parameters in place with each group's element."""
    params = dict(model.named_parameters())
    state = {k: v.detach() for k, v in params.items()}
    for s, g in zip(groups, elements, strict=True):
        state.update(s.act({k: state[k] for k in s.parameter_names}, g))
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


def rotate(
    model: nn.Module,
    example_input: Any,
    *,
    rotation: Rotation = "hadamard",
    heads: bool = True,
    seed: int = 0,
    untie: bool = True,
) -> RotationResult:
    """``model`` folded and rotated (module docstring): QuaRot's weight rotations, on every
    stream and value–output group the detector finds.

    Args:
        model: any model :func:`paramsym.symmetries` traces (left unchanged).
        example_input: a batch the model accepts (dict inputs for Hugging Face models).
        rotation: ``"hadamard"`` (randomized Hadamard) or ``"random"`` (Haar).
        heads: rotate each head's value–output maps too (QuaRot's per-head Hadamard).
        seed: seeds the random signs / matrices (one per group, in detection order).
        untie: give parameters two modules share their own copies first
            (:func:`paramsym.untie`): a tied LM head reads the stream as columns of the table
            the lookup reads as rows, which no stream rotation can move consistently; untied,
            the head rotates with the stream (a saved model then has
            ``tie_word_embeddings=False``).

    Returns:
        :class:`RotationResult`.

    Raises:
        UnsupportedModuleError: no rotation group (a final-norm-read stream, no heads).
        InvalidArgumentError: ``rotation`` unknown, or no Hadamard matrix of a group's width.

    Warns:
        PartialTransformWarning: the stream could not be rotated (only heads were).
    """
    if rotation not in ROTATIONS:
        raise InvalidArgumentError(
            f"rotate: rotation must be one of {', '.join(map(repr, ROTATIONS))}, got {rotation!r}"
        )
    folded, streams, values = prepared(
        model, example_input, heads=heads, where="rotate", untie=untie
    )
    generator = torch.Generator().manual_seed(seed)
    dtype = next(folded.parameters()).dtype
    groups = [*streams, *values]
    elements = [random_rotation(s.width, rotation, generator, dtype) for s in groups]
    act_all(folded, groups, elements)
    rotations = {s.name: q for s, q in zip(groups, elements, strict=True)}
    return RotationResult(
        model=folded,
        rotations=rotations,
        streams=[s.name for s in streams],
        heads=[s.name for s in values],
        output_change=output_change(model, folded, example_input),
        orthogonality=orthogonality(rotations),
        **transform_report(folded),
    )
