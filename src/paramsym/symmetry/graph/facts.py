"""What the graph walk learns about feature spaces, as plain records.

Every op that computes features creates a **space** for its output's feature axis (the last
axis of a ``linear``, axis 1 of a ``conv2d``, ...). A :class:`Member` says which features of
which space a tensor axis holds. The walk (:mod:`paramsym.symmetry.graph.walk`) then records,
per op, how the spaces it reads and writes are related, separately for each group **family**:

* :class:`Link`: two members carry the same group element (an activation's input and output,
  the operands of a residual add); for rescaling with an exponent ratio (σ of degree α maps
  scale c to c^α);
* :class:`Attach`: a parameter (or buffer) axis transforms with a member's features, by a
  :class:`Law` (the rows of the weight that produced it, the columns of the weight that reads
  it, BatchNorm's running variance, ...);
* :class:`Block`: the family cannot act on the member's features (an op it does not commute
  with, the model's input or output, a parameter used in an unrecognised way);
* :class:`Absorb`: an op is invariant to the family on its input (a normalisation layer to
  rescaling), possibly only approximately;
* :class:`Cut`: the features of a space are split at a position (a slice, attention heads),
  so no group may mix features across it.

:mod:`paramsym.symmetry.graph.solve` turns these into symmetries.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Family(str, enum.Enum):
    """The group families detection decides about, per feature space."""

    PERMUTATION = "permutation"
    SIGN = "sign"
    SCALING = "scaling"
    GL = "gl"
    ORTHOGONAL = "orthogonal"
    ROTARY = "rotary"
    """Scaled rotations of the pairs a rotary embedding rotates (a subgroup of GL that
    commutes with the rotations): it passes where GL does and through the rotary op."""


ALL_FAMILIES: frozenset[Family] = frozenset(Family)
DIAGONAL = frozenset({Family.PERMUTATION, Family.SIGN, Family.SCALING})
"""Families that commute with per-feature (diagonal) operations."""


class Law(str, enum.Enum):
    """How a parameter axis transforms when its features do (h features, element g).

    ========== ================ ============= ============ ============
    law        GL / O           scaling c     sign s       permutation
    ========== ================ ============= ============ ============
    VECTOR     g · T            c^e T         s T          P T
    COVECTOR   T · g⁻¹          c^−e T        s T          T Pᵀ
    SQUARE     (blocks)         c^2e T        T            P T
    INVARIANT  (blocks)         T             T            P T
    ========== ================ ============= ============ ============

    VECTOR: rows of the weight producing the features, biases, BatchNorm's running mean;
    COVECTOR: columns of the weight reading them; SQUARE: BatchNorm's running variance;
    INVARIANT: per-feature parameters that are only re-indexed (a norm layer's weight).
    """

    VECTOR = "vector"
    COVECTOR = "covector"
    SQUARE = "square"
    INVARIANT = "invariant"


@dataclass(frozen=True)
class Member:
    """Features ``[start, stop)`` of space ``space`` along one tensor axis, each repeated
    ``block`` times contiguously (``block > 1`` after flattening (C, H, W) to C·H·W).

    ``heads > 1``: the features were split into ``heads`` equal runs (attention heads) and the
    axis holds one run, the run being chosen by another axis of the tensor (its head axis,
    see :attr:`~paramsym.symmetry.graph.values.TensorValue.head_axes`). ``repeat > 1``: each
    run is repeated that many times along the head axis (key/value heads shared by a group of
    query heads), so the head axis has ``heads · repeat`` entries."""

    space: int
    start: int
    stop: int
    block: int = 1
    heads: int = 1
    repeat: int = 1

    @property
    def width(self) -> int:
        return self.stop - self.start

    @property
    def head_width(self) -> int:
        return self.width // self.heads

    def narrow(self, start: int, stop: int) -> Member:
        """Features ``[start, stop)`` counted within this member."""
        return Member(self.space, self.start + start, self.start + stop, self.block)


@dataclass(frozen=True)
class Link:
    """``b`` carries the element of ``a``: for rescaling raised to ``ratio`` (σ of degree α:
    c ↦ c^α); with ``dual``, contragrediently (g ↦ g⁻ᵀ, c ↦ c⁻¹: a key against its query)."""

    a: Member
    b: Member
    families: frozenset[Family]
    ratio: float = 1.0
    dual: bool = False
    tie: bool = False
    """One parameter region read in both spaces (:func:`~.solve.family_links`): it joins their
    classes, but does not make a fixed space (an input) movable."""


@dataclass(frozen=True)
class Attach:
    member: Member
    name: str  # parameter or buffer name
    axis: int
    offset: int  # position of member.start along the axis
    law: Law
    block: int = 1
    families: frozenset[Family] = ALL_FAMILIES
    diagonal: bool = False
    """The op reads this region entry by entry, one feature each (a depthwise convolution's
    weight): two classes may then both act on it, as diagonal elements commute."""


@dataclass(frozen=True)
class Block:
    member: Member
    families: frozenset[Family]
    reason: str


@dataclass(frozen=True)
class Absorb:
    member: Member
    families: frozenset[Family]
    module: str = ""
    note: str = ""
    exact: bool = True
    common_only: bool = False  # only one common scale is absorbed (LayerNorm)


@dataclass(frozen=True)
class Cut:
    space: int
    position: int


@dataclass(frozen=True)
class Attention:
    """One attention op: its head-split query, key and value members and the output member
    (one head per query head). ``group``: query heads per key/value head (grouped-query
    attention; 1 otherwise). ``bias``: a member on the head axis of what is added to the
    scores (a per-head position bias read from a parameter), which head permutations must
    move too; ``fixed_bias``: the scores get a per-head term no parameter holds (ALiBi slopes
    computed from the head index), so heads cannot be permuted."""

    module: str
    query: Member
    key: Member
    value: Member
    output: Member
    group: int = 1
    bias: Member | None = None
    fixed_bias: str = ""


@dataclass(frozen=True)
class Rotary:
    """A rotary embedding on ``member`` (head-split, heads of ``head_width``): in each head,
    coordinates ``[0, rotated)`` are rotated in ``pairs`` (local indices), the rest pass."""

    member: Member
    pairs: tuple[tuple[int, int], ...]
    rotated: int


@dataclass
class Space:
    """A feature space of ``width`` features, created by an op of ``module``. ``sources``:
    the families in which the op's attached parameters fully determine the features (the rows
    of a linear map); in any other family the space must be linked to the op's input, or it
    is fixed (nothing can act on it)."""

    index: int
    width: int
    module: str
    sources: frozenset[Family] = frozenset()


@dataclass
class Facts:
    """Everything the walk recorded (see the module docstring)."""

    spaces: list[Space] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    attaches: list[Attach] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    absorbs: list[Absorb] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)
    attention: list[Attention] = field(default_factory=list)
    rotary: list[Rotary] = field(default_factory=list)
    unexplained: dict[str, str] = field(default_factory=dict)  # parameter -> why
    pinned: set[tuple[str, int]] = field(default_factory=set)
    """(parameter, axis) read along that axis by an op whose input no group moves (a linear
    map on the model's input): no class may move the parameter along it."""

    def new_space(
        self, width: int, module: str, sources: frozenset[Family] = frozenset()
    ) -> Member:
        space = Space(len(self.spaces), int(width), module, frozenset(sources))
        self.spaces.append(space)
        return Member(space.index, 0, space.width)

    def link(
        self,
        a: Member | None,
        b: Member,
        families: frozenset[Family],
        ratio: float = 1.0,
        *,
        dual: bool = False,
    ) -> None:
        """Link ``a`` and ``b`` in ``families`` (nothing when ``a`` is None: then ``b`` stays
        unlinked, so fixed unless its space is a source)."""
        if a is not None and families:
            if a.width != b.width:
                raise AssertionError(f"linking members of widths {a.width} and {b.width}")
            self.links.append(Link(a, b, frozenset(families), ratio, dual))

    def block(self, member: Member | None, families: frozenset[Family], reason: str) -> None:
        if member is not None and families:
            self.blocks.append(Block(member, frozenset(families), reason))

    def attach(
        self,
        member: Member,
        name: str,
        axis: int,
        law: Law,
        *,
        offset: int = 0,
        block: int = 1,
        families: frozenset[Family] = ALL_FAMILIES,
        diagonal: bool = False,
    ) -> None:
        self.attaches.append(
            Attach(member, name, axis, offset, law, block, frozenset(families), diagonal)
        )

    def absorb(self, member: Member, families: frozenset[Family], **kwargs: object) -> None:
        self.absorbs.append(Absorb(member, frozenset(families), **kwargs))  # type: ignore[arg-type]

    def cut(self, member: Member, every: int) -> None:
        """Cut ``member``'s features into consecutive runs of ``every``."""
        for position in range(member.start, member.stop + 1, every):
            self.cuts.append(Cut(member.space, position))
