"""From the walk's facts to symmetries: atoms, classes, checks, and the symmetry objects.

Per family:

1. **Live spaces.** A space is movable in a family only if its op's parameters produce it
   there (a *source*) or a link ties it to an input; every other space is fixed.
2. **Atoms.** The cuts (slices, groups, heads) and every member boundary split each space
   into atoms; boundaries are carried across links until nothing changes, so linked members
   split alike.
3. **Classes.** Linked atoms are merged (union-find, with exponent ratios for rescaling:
   σ of degree α maps c to c^α). A class is one group's worth of features: one element acts
   on all its atoms.
4. **Checks.** A class is dropped when it is blocked anywhere, reaches a fixed space, has no
   parameter producing it, touches a parameter used in an unrecognised way, shares a
   parameter region with another class (tied or shared weights), or needs two different
   transformations of one region; only a common scale survives a LayerNorm.
5. **Symmetries.** Each surviving class becomes a :class:`~paramsym.symmetry.Symmetry` of its
   family acting on its slots.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from paramsym.symmetry.attention import QueryKeyGL, ValueOutputGL
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.discrete import NeuronPermutation, SignFlip
from paramsym.symmetry.gl import HiddenGL
from paramsym.symmetry.graph.facts import Attach, Facts, Family, Law, Link, Member
from paramsym.symmetry.orthogonal import HiddenOrthogonal
from paramsym.symmetry.rotary import RotaryQueryKey
from paramsym.symmetry.scaling import PositiveScaling

Atom = tuple[int, int, int]  # (space, start, stop)


@dataclass
class Class:
    """One class of atoms in one family, with what acts on it."""

    atoms: list[Atom]
    exponents: dict[Atom, float]
    attaches: list[tuple[Atom, Attach]] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exact: bool = True
    absorbed_by: list[str] = field(default_factory=list)
    common_only: bool = False

    @property
    def width(self) -> int:
        return self.atoms[0][2] - self.atoms[0][1]

    @property
    def key(self) -> tuple[int, int]:
        space, start, _ = min(self.atoms)
        return space, start


class _UnionFind:
    """Union-find over atoms with a multiplicative exponent relative to the root."""

    def __init__(self) -> None:
        self.parent: dict[Atom, Atom] = {}
        self.weight: dict[Atom, float] = {}
        self.inconsistent: set[Atom] = set()

    def find(self, x: Atom) -> tuple[Atom, float]:
        if x not in self.parent:
            self.parent[x], self.weight[x] = x, 1.0
            return x, 1.0
        path = []
        while self.parent[x] != x:
            path.append(x)
            x = self.parent[x]
        root, total = x, 1.0
        for node in reversed(path):  # compress: weight relative to the root
            total *= self.weight[node]
            self.weight[node] = total
            self.parent[node] = root
        return (root, self.weight[path[0]]) if path else (root, 1.0)

    def union(self, a: Atom, b: Atom, ratio: float) -> None:
        """Merge with exponent(b) = ratio · exponent(a)."""
        ra, wa = self.find(a)
        rb, wb = self.find(b)
        if ra == rb:
            if abs(wb - ratio * wa) > 1e-9 * max(1.0, abs(wb)):
                self.inconsistent.add(ra)
            return
        self.parent[rb] = ra
        self.weight[rb] = ratio * wa / wb
        if rb in self.inconsistent:
            self.inconsistent.add(ra)


_TIEABLE = (Family.PERMUTATION, Family.SIGN)
"""Families in which one parameter region read by two ops ties their features together
whatever the two reads are: a permutation or sign flip transforms rows and columns alike
(P T = T Pᵀ re-indexing, s T = T s⁻¹), so a weight used twice (tied embeddings, a reused
layer) constrains the two feature spaces to one element. In rescaling and the matrix groups
(c vs 1/c, g vs g⁻ᵀ) a region ties two spaces only where both ops read it alike (the same
law: a layer applied twice, as ALBERT's shared layers are, moves its weight once for both
calls); a region read once as a vector and once as a covector (a tied embedding's table
against the LM head) is a conflict there, and both classes are dropped."""


def family_links(facts: Facts, family: Family) -> list[Link]:
    """The links of ``family``, with the ties of shared parameter regions where it allows
    (:data:`_TIEABLE`)."""
    links = [link for link in facts.links if family in link.families]
    first: dict[tuple[str, int, int, int, int], Attach] = {}
    for attach in facts.attaches:
        if family not in attach.families or attach.law in (Law.SQUARE, Law.INVARIANT):
            continue
        key = (attach.name, attach.axis, attach.offset, attach.block, attach.member.width)
        other = first.setdefault(key, attach)
        if other.member == attach.member:
            continue
        if family in _TIEABLE or other.law is attach.law:
            links.append(Link(other.member, attach.member, frozenset({family}), tie=True))
    return links


def _atoms(facts: Facts, family: Family, links: list[Link]) -> dict[int, list[int]]:
    """Sorted cut positions per space after carrying them across this family's links."""
    cuts: dict[int, set[int]] = {s.index: {0, s.width} for s in facts.spaces}

    def add(member: Member) -> None:
        cuts[member.space].update((member.start, member.stop))

    for c in facts.cuts:
        cuts[c.space].add(c.position)
    for attach in facts.attaches:
        add(attach.member)
    for block in facts.blocks:
        add(block.member)
    for absorb in facts.absorbs:
        add(absorb.member)
    for link in links:
        add(link.a)
        add(link.b)
    changed = True
    while changed:
        changed = False
        for link in links:
            for src, dst in ((link.a, link.b), (link.b, link.a)):
                for p in list(cuts[src.space]):
                    if src.start < p < src.stop:
                        q = dst.start + p - src.start
                        if q not in cuts[dst.space]:
                            cuts[dst.space].add(q)
                            changed = True
    return {space: sorted(points) for space, points in cuts.items()}


def _atoms_in(cuts: dict[int, list[int]], member: Member) -> list[Atom]:
    points = cuts[member.space]
    return [
        (member.space, a, b)
        for a, b in itertools.pairwise(points)
        if member.start <= a and b <= member.stop
    ]


_CONTRAGREDIENT = (Family.GL, Family.ROTARY)
"""Matrix families whose dual element g⁻ᵀ differs from g (O(h) has g⁻ᵀ = g)."""


def _ratio(link: Link, family: Family) -> float:
    """The exponent ratio a link imposes in ``family``: the activation degree for rescaling,
    −1 for a contragredient (dual) link in rescaling and GL; O(h), permutations and sign
    flips are their own inverse transposes, so 1 there."""
    sign = -1.0 if link.dual else 1.0
    if family is Family.SCALING:
        return sign * link.ratio
    return sign if family in _CONTRAGREDIENT else 1.0


def classes(facts: Facts, family: Family) -> list[Class]:
    """The classes of ``family`` with their attaches, blocks and absorbs (steps 1-3)."""
    links = family_links(facts, family)
    cuts = _atoms(facts, family, links)
    uf = _UnionFind()
    for space, points in cuts.items():
        for a, b in itertools.pairwise(points):
            uf.find((space, a, b))
    linked: set[int] = set()
    for link in links:
        if not link.tie:
            linked.add(link.b.space)
        ratio = _ratio(link, family)
        for (s, a, b), (t, c, d) in zip(
            _atoms_in(cuts, link.a), _atoms_in(cuts, link.b), strict=True
        ):
            uf.union((s, a, b), (t, c, d), ratio)
    groups: dict[Atom, Class] = {}
    for atom in list(uf.parent):
        root, weight = uf.find(atom)
        cls = groups.setdefault(root, Class([], {}))
        cls.atoms.append(atom)
        cls.exponents[atom] = weight
        if root in uf.inconsistent:
            cls.blocked.append("rescaling exponents disagree around a cycle")
    by_atom = {atom: groups[uf.find(atom)[0]] for atom in uf.parent}
    for made in facts.spaces:
        if family not in made.sources and made.index not in linked:
            for atom in _atoms_in(cuts, Member(made.index, 0, made.width)):
                where = f"'{made.module}'" if made.module else "the model"
                by_atom[atom].blocked.append(f"features computed in {where} are fixed")
    for record in facts.blocks:
        if family in record.families:
            for atom in _atoms_in(cuts, record.member):
                by_atom[atom].blocked.append(record.reason)
    for absorb in facts.absorbs:
        if family not in absorb.families:
            continue
        atoms = _atoms_in(cuts, absorb.member)
        for atom in atoms:
            cls = by_atom[atom]
            cls.absorbed_by.append(absorb.module)
            cls.exact &= absorb.exact
            if absorb.note and absorb.note not in cls.notes:
                cls.notes.append(absorb.note)
            if absorb.common_only:
                cls.common_only = True
                if len(atoms) > 1:
                    cls.blocked.append(f"'{absorb.module}' absorbs only one common scale")
    for attach in facts.attaches:
        if family in attach.families:
            for atom in _atoms_in(cuts, attach.member):
                by_atom[atom].attaches.append((atom, attach))
    return sorted(groups.values(), key=lambda c: c.key)


def _slot(atom: Atom, attach: Attach, power: float, full: dict[str, tuple[int, ...]]) -> Slot:
    _space, start, stop = atom
    offset = attach.offset + (start - attach.member.start) * attach.block
    length = (stop - start) * attach.block
    shape = full.get(attach.name)
    whole = shape is not None and offset == 0 and shape[attach.axis] == length
    return Slot(attach.name, attach.axis, power, None if whole else offset, attach.block)


_POWER = {Law.VECTOR: 1.0, Law.COVECTOR: -1.0, Law.SQUARE: 2.0, Law.INVARIANT: 0.0}


def slots_of(cls: Class, family: Family, shapes: dict[str, tuple[int, ...]]) -> list[Slot] | None:
    """The class's slots in ``family``, or ``None`` if they conflict or the family cannot
    act on one of them."""
    slots: dict[tuple[str, int, int | None], Slot] = {}
    for atom, attach in cls.attaches:
        law = attach.law
        if family in (*_CONTRAGREDIENT, Family.ORTHOGONAL) and law in (
            Law.SQUARE,
            Law.INVARIANT,
        ):
            return None
        if family is Family.SIGN and law in (Law.SQUARE, Law.INVARIANT):
            continue
        if family is Family.SCALING:
            if law is Law.INVARIANT:
                continue
            power = _POWER[law] * cls.exponents[atom]
        elif family is Family.PERMUTATION:
            power = 1.0
        else:  # GL, O: g or g⁻ᵀ; an atom at exponent −1 (a key) takes the dual
            power = _POWER[law] * (cls.exponents[atom] if family in _CONTRAGREDIENT else 1.0)
        slot = _slot(atom, attach, power, shapes)
        key = (slot.name, slot.axis, slot.offset)
        if key in slots and slots[key] != slot:
            if family is Family.ORTHOGONAL and _same_but_dual(slots[key], slot):
                continue  # g⁻ᵀ = g: a tied weight read and written moves once, consistently
            return None
        slots[key] = slot
    return list(slots.values())


def _same_but_dual(a: Slot, b: Slot) -> bool:
    return (a.name, a.axis, a.offset, a.block) == (b.name, b.axis, b.offset, b.block) and (
        a.power == -b.power
    )


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else name


def _join(modules: list[str]) -> str:
    if len(modules) <= 2:
        return ",".join(modules)
    return f"{modules[0]},…,{modules[-1]}"


def site(cls: Class, producers: list[str]) -> str:
    """Readable ``producers->readers`` label: the modules whose ops produce the class's
    features and those whose weights read or absorb them (first and last when many)."""
    readers = [_module(a.name) for _, a in cls.attaches if a.law is Law.COVECTOR]
    readers = list(dict.fromkeys([*readers, *(m for m in cls.absorbed_by if m)]))
    label = _join(list(dict.fromkeys(producers))) or "?"
    return f"{label}->{_join(readers)}" if readers else label


def valid(
    cls: Class,
    unexplained: dict[str, str],
    conflicted: set[int],
    pinned: set[tuple[str, int]] | frozenset[tuple[str, int]] = frozenset(),
) -> bool:
    """Step 4 of the module docstring, for one class (``pinned``: :attr:`Facts.pinned`)."""
    if cls.blocked or id(cls) in conflicted:
        return False
    if any((attach.name, attach.axis) in pinned for _, attach in cls.attaches):
        return False
    if not any(a.law is Law.VECTOR for _, a in cls.attaches):
        return False
    return not any(attach.name in unexplained for _, attach in cls.attaches)


def conflicts(all_classes: list[Class]) -> set[int]:
    """Ids of classes that share a parameter region with another class (tied or reused
    weights): acting on one would change the other's features. Regions an op reads entry by
    entry (``diagonal`` attaches: a depthwise weight, column of one class and row of the next)
    may be shared, since diagonal elements commute."""
    spans: dict[tuple[str, int], list[tuple[int, int, Class, bool]]] = defaultdict(list)
    for cls in all_classes:
        for atom, attach in cls.attaches:
            offset = attach.offset + (atom[1] - attach.member.start) * attach.block
            length = (atom[2] - atom[1]) * attach.block
            spans[(attach.name, attach.axis)].append(
                (offset, offset + length, cls, attach.diagonal)
            )
    found: set[int] = set()
    for items in spans.values():
        items.sort(key=lambda t: t[0])
        for i, (_, stop, cls, diagonal) in enumerate(items):
            for start, _, other, other_diagonal in items[i + 1 :]:
                if start >= stop:
                    break
                if other is not cls and not (diagonal and other_diagonal):
                    found.update((id(cls), id(other)))
    return found


def build(
    cls: Class,
    family: Family,
    slots: list[Slot],
    producers: list[str],
    role: tuple[str, str, int] | None = None,
    pairs: tuple[tuple[int, int], ...] = (),
) -> Symmetry:
    """The symmetry object of a valid class; ``producers`` name the modules producing it;
    ``role`` = (``"QK"``/``"VO"``, module, head) for one head's features of an attention op
    (then the GL is a :class:`~paramsym.symmetry.QueryKeyGL`/``ValueOutputGL``); ``pairs``:
    the rotated pairs of a ``ROTARY`` class (a :class:`~paramsym.symmetry.RotaryQueryKey`)."""
    name = site(cls, producers)
    if role is not None:
        kind, module, head = role
        name = f"{module}{head}"
        if family is Family.ROTARY:
            return RotaryQueryKey(cls.width, pairs, [s for s in slots if s.power > 0],
                                  [s for s in slots if s.power < 0], site=name)  # fmt: skip
        if family is Family.GL:
            group = QueryKeyGL if kind == "QK" else ValueOutputGL
            return group(cls.width, [s for s in slots if s.power > 0],
                         [s for s in slots if s.power < 0], site=name)  # fmt: skip
        name += f".{kind}"
    width = cls.width
    vector = [s for s in slots if s.power >= 0]
    covector = [s for s in slots if s.power < 0]
    notes = list(cls.notes)
    if family is Family.PERMUTATION:
        return NeuronPermutation(width, slots, (), site=name, notes=notes)
    if family is Family.SIGN:
        return SignFlip(width, vector, covector, site=name, notes=notes)
    if family is Family.SCALING:
        kind = "rescaling" if covector else "norm_scaling"
        return PositiveScaling(
            width,
            vector,
            covector,
            per_neuron=not cls.common_only,
            family=kind,
            site=name,
            exact=cls.exact,
            notes=notes,
        )
    if family is Family.GL:
        return HiddenGL(width, vector, covector, site=name, notes=notes)
    return HiddenOrthogonal(width, vector, covector, site=name, notes=notes)
