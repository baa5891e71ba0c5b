"""Permutations of whole attention heads, built once the classes of every family are known.

A head permutation moves whole heads: head i's rows of the query, key and value projections
(and their biases), its columns of the output projection, and its column of every per-head
bias table added to the scores (T5's ``relative_attention_bias``, Swin's
``relative_position_bias_table``), to head p(i). It is offered for an attention op when

* every feature of every head is in a valid class of a family that acts head by head
  (GL, the rotary group or permutations for queries and keys; GL or permutations for values
  and outputs), so nothing outside the attention reads one head differently from another;
* the scores get no per-head term that no parameter holds (ALiBi slopes computed from the
  head index), see :class:`~paramsym.symmetry.graph.facts.Attention`;
* each head's parameter regions are head 0's shifted by whole heads (one block slot each).

Under grouped-query attention (G query heads per key/value head) two groups act (notes 005
§2): whole groups permuted together (the key/value head with its G query heads and their
output columns), and, per group, its G query heads among themselves (keys and values stay).
A query head never moves to another group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from paramsym.symmetry.attention import HeadPermutation
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.graph.facts import Attention, Facts, Family, Law, Link, Member

Range = tuple[int, int, int]  # (space, start, stop)
Entry = tuple[str, int, int, int]  # (parameter, axis, offset, length)

_QUERY_KEY = (Family.GL, Family.ROTARY, Family.PERMUTATION)
_VALUE_OUTPUT = (Family.GL, Family.PERMUTATION)


def _head(member: Member, i: int) -> Range:
    d = member.head_width
    return member.space, member.start + i * d, member.start + (i + 1) * d


def _covered(ranges: Iterable[Range], atoms: set[Range]) -> bool:
    """Whether valid atoms cover every feature of every range."""
    by_space: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for space, start, stop in atoms:
        by_space[space].append((start, stop))
    for space, start, stop in ranges:
        position = start
        for a, b in sorted(by_space.get(space, [])):
            if a <= position < b:
                position = b
        if position < stop:
            return False
    return True


class _Producers:
    """Trace features back through links to the spaces whose parameters produce them."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.incoming: dict[int, list[Link]] = defaultdict(list)
        for link in facts.links:
            if not link.dual:  # a key against its query: no derivation
                self.incoming[link.b.space].append(link)

    def sources(self, piece: Range, depth: int = 0) -> list[Range] | None:
        """The source ranges ``piece`` comes from, with the ranges on the way that parameters
        are added to as vectors (a bias added after ``x @ Wᵀ``, Falcon's), or None when part
        of it has none."""
        space, start, stop = piece
        if self.facts.spaces[space].sources or depth > 64:
            return [piece] if self.facts.spaces[space].sources else None
        found: list[Range] = [piece] if self._added(piece) else []
        position = start
        for link in sorted(self.incoming.get(space, []), key=lambda k: k.b.start):
            lo, hi = max(position, link.b.start), min(stop, link.b.stop)
            if lo != position or hi <= lo:
                continue
            shift = link.a.start - link.b.start
            upstream = self.sources((link.a.space, lo + shift, hi + shift), depth + 1)
            if upstream is None:
                return None
            found += upstream
            position = hi
        return _merged(found) if position >= stop else None

    def _added(self, piece: Range) -> bool:
        """Whether parameters attach to ``piece`` only as vectors covering it whole."""
        space, start, stop = piece
        overlapping = [
            a
            for a in self.facts.attaches
            if a.member.space == space and a.member.start < stop and start < a.member.stop
        ]
        return bool(overlapping) and all(
            a.law is Law.VECTOR and a.member.start <= start and stop <= a.member.stop
            for a in overlapping
        )

    def entries(self, pieces: list[Range], laws: tuple[Law, ...]) -> list[Entry] | None:
        """The parameter regions of ``pieces`` (attaches of ``laws``), or None when a piece
        has an attach of another law (something else reads or scales it)."""
        found: list[Entry] = []
        for space, start, stop in pieces:
            for attach in self.facts.attaches:
                m = attach.member
                if m.space != space or m.stop <= start or stop <= m.start:
                    continue
                if attach.law not in laws or not (m.start <= start and stop <= m.stop):
                    return None
                offset = attach.offset + (start - m.start) * attach.block
                found.append((attach.name, attach.axis, offset, (stop - start) * attach.block))
        return _merged_entries(found)


def _merged(pieces: list[Range]) -> list[Range]:
    out: list[Range] = []
    for piece in sorted(set(pieces)):
        if out and out[-1][0] == piece[0] and out[-1][2] == piece[1]:
            out[-1] = (piece[0], out[-1][1], piece[2])
        else:
            out.append(piece)
    return out


def _merged_entries(entries: list[Entry]) -> list[Entry]:
    out: list[Entry] = []
    for entry in sorted(set(entries)):
        last = out[-1] if out else None
        if last and last[:2] == entry[:2] and last[2] + last[3] == entry[2]:
            out[-1] = (*last[:3], last[3] + entry[3])
        else:
            out.append(entry)
    return out


def _block_slots(found: list[list[Entry] | None]) -> list[Slot] | None:
    """One block slot per parameter region when unit i's regions are unit 0's shifted by i
    whole regions; None otherwise (or when a unit has none)."""
    units = [u for u in found if u is not None]
    if len(units) != len(found):
        return None
    first = units[0]
    if not first or any(len(u) != len(first) for u in units):
        return None
    for j, (name, axis, offset, length) in enumerate(first):
        for i, unit in enumerate(units):
            if unit[j] != (name, axis, offset + i * length, length):
                return None
    return [Slot(name, axis, 1.0, offset, length) for name, axis, offset, length in first]


def _unit(
    producers: _Producers,
    record: Attention,
    queries: range,
    kv: list[int],
    bias: Member | None,
) -> list[Entry] | None:
    """The parameter regions of query heads ``queries`` (with their output columns and bias
    entries) and key/value heads ``kv``."""
    entries: list[Entry] = []
    rows = (Law.VECTOR,)
    parts = [(_head(record.query, i), rows) for i in queries]
    parts += [(_head(record.output, i), (Law.COVECTOR,)) for i in queries]
    parts += [(_head(record.key, g), rows) for g in kv]
    parts += [(_head(record.value, g), rows) for g in kv]
    if bias is not None:
        parts += [((bias.space, bias.start + i, bias.start + i + 1), rows) for i in queries]
    for piece, laws in parts:
        sources = [piece] if laws == (Law.COVECTOR,) else producers.sources(piece)
        found = producers.entries(sources, laws) if sources is not None else None
        if not found:
            return None
        entries += found
    return _merged_entries(entries)


def head_permutations(
    facts: Facts, valid_atoms: dict[Family, set[Range]]
) -> list[tuple[tuple[int, int], Symmetry]]:
    """The head permutations of every attention op (module docstring); (sort key, symmetry)
    pairs. ``valid_atoms``: per family, the atoms of its valid classes."""
    query_key = set().union(*(valid_atoms.get(f, set()) for f in _QUERY_KEY))
    value_output = set().union(*(valid_atoms.get(f, set()) for f in _VALUE_OUTPUT))
    producers = _Producers(facts)
    found: list[tuple[tuple[int, int], Symmetry, frozenset[str]]] = []
    for record in facts.attention:
        tables = _tables(producers, record)
        for key, symmetry in _of_attention(facts, record, query_key, value_output, producers):
            found.append((key, symmetry, tables))
    return _shared_tables(found)


def _tables(producers: _Producers, record: Attention) -> frozenset[str]:
    """The parameters holding ``record``'s per-head bias (none without one)."""
    bias = record.bias
    sources = producers.sources((bias.space, bias.start, bias.stop)) if bias else None
    entries = producers.entries(sources, (Law.VECTOR,)) if sources else None
    return frozenset(name for name, *_ in entries or ())


def _shared_tables(
    found: list[tuple[tuple[int, int], Symmetry, frozenset[str]]],
) -> list[tuple[tuple[int, int], Symmetry]]:
    """Head permutations of several attention ops that move one shared bias table (T5 reads
    block 0's ``relative_attention_bias`` in every block) are one group: the same permutation
    of every block's heads with the table. Those of different widths are dropped."""
    owners: dict[str, list[int]] = defaultdict(list)
    for i, (_, _, tables) in enumerate(found):
        for name in tables:
            owners[name].append(i)
    parent = list(range(len(found)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for indices in owners.values():
        for i in indices[1:]:
            parent[root(i)] = root(indices[0])
    merged: dict[int, list[int]] = defaultdict(list)
    for i in range(len(found)):
        merged[root(i)].append(i)
    out = []
    for indices in merged.values():
        if len(indices) == 1:
            out.append(found[indices[0]][:2])
            continue
        members = [found[i][1] for i in indices]
        widths = {getattr(m, "width", 0) for m in members}
        if len(widths) != 1:
            continue
        slots = list(dict.fromkeys(s for m in members for s in getattr(m, "slots", ())))
        sites = [getattr(m, "site", "") for m in members]
        site = f"{sites[0]},…,{sites[-1]}"
        out.append((found[indices[0]][0], HeadPermutation(widths.pop(), slots, (), site=site)))
    return out


def _of_attention(
    facts: Facts,
    record: Attention,
    query_key: set[Range],
    value_output: set[Range],
    producers: _Producers,
) -> list[tuple[tuple[int, int], Symmetry]]:
    """The head permutations of one attention op (module docstring)."""
    found: list[tuple[tuple[int, int], Symmetry]] = []
    heads, group = record.query.heads, record.group
    kv_heads = heads // group
    if record.fixed_bias or heads < 2:
        return found
    qk = [_head(record.query, i) for i in range(heads)]
    qk += [_head(record.key, g) for g in range(kv_heads)]
    vo = [_head(record.output, i) for i in range(heads)]
    vo += [_head(record.value, g) for g in range(kv_heads)]
    if not (_covered(qk, query_key) and _covered(vo, value_output)):
        return found
    key = (record.query.space, record.query.start)
    if kv_heads > 1:
        units = [
            _unit(producers, record, range(g * group, (g + 1) * group), [g], record.bias)
            for g in range(kv_heads)
        ]
        slots = _block_slots(units)
        if slots is not None:
            site = record.module or "attention"
            found.append((key, HeadPermutation(kv_heads, slots, (), site=site)))
    if group < 2:
        return found
    for g in range(kv_heads):
        units = [
            _unit(producers, record, range(i, i + 1), [], record.bias)
            for i in range(g * group, (g + 1) * group)
        ]
        slots = _block_slots(units)
        if slots is not None:
            site = f"{record.module or 'attention'}.kv_head{g}"
            found.append((key, HeadPermutation(group, slots, (), site=site)))
    return found
