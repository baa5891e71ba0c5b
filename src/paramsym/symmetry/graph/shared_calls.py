"""The absorbed translations of a layer applied more than once (ALBERT's shared layers, a block
reused in a loop).

The finders of :mod:`~paramsym.symmetry.graph.absorptions` and its siblings move a parameter
only where one op uses it (:meth:`~paramsym.symmetry.graph.absorptions._Params.movable`): a
tensor read twice would carry the move to its other use. A layer applied twice reads each of
its tensors twice, once per call, and there each call is an instance of the same pattern:
moving the tensors once leaves every call's output unchanged when every call is a site of the
same symmetry. Here the finders run again with that rule lifted (:data:`SHARED_USES`), and a
symmetry they find is kept when

* **site-driven** families (a norm's readers, an embedding sum, …): the same symmetry (class,
  name, moved tensors) was found at as many sites as each tensor it moves has uses, so every
  use is a site where the move cancels;
* **group-driven** families (key and value biases, read off a query–key or value–output group):
  the group itself holds across the calls (:func:`~paramsym.symmetry.graph.solve.family_links`
  ties a region that two calls read alike), so the biases it names move in every call.

Symmetries already found with the one-use rule are not repeated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.trace import TracedGraph

SHARED_USES: ContextVar[bool] = ContextVar("shared_uses", default=False)
"""While true, :meth:`~paramsym.symmetry.graph.absorptions._Params.movable` accepts a tensor
used by several ops (this module's second pass)."""

SiteFinder = Callable[[TracedGraph, dict[str, str]], list[Symmetry]]
GroupFinder = Callable[[TracedGraph, dict[str, str], Sequence[Symmetry]], list[Symmetry]]


@contextmanager
def shared_uses() -> Iterator[None]:
    """Lift the one-use rule of the finders for the duration of the block."""
    token = SHARED_USES.set(True)
    try:
        yield
    finally:
        SHARED_USES.reset(token)


def _key(s: Symmetry) -> tuple[str, str, tuple[str, ...]]:
    return type(s).__name__, s.name, tuple(s.parameter_names)


def _moved(s: Symmetry) -> set[str]:
    return set(s.parameter_names) - set(s.reads)


def uses(traced: TracedGraph) -> dict[str, int]:
    """Parameter name -> the number of ops in the graph that read it."""
    return {
        traced.parameters[node.name]: len(node.users)
        for node in traced.graph.nodes
        if node.op == "placeholder" and node.name in traced.parameters
    }


def shared_call_symmetries(
    traced: TracedGraph,
    unexplained: dict[str, str],
    found: Sequence[Symmetry],
    site_finders: Sequence[SiteFinder],
    group_finders: Sequence[GroupFinder],
) -> list[Symmetry]:
    """The symmetries the finders add once tensors used by several calls may move (module
    docstring); nothing when no understood tensor has more than one use."""
    counts = uses(traced)
    shared = {name for name, n in counts.items() if n > 1 and name not in unexplained}
    if not shared:
        return []
    with shared_uses():
        by_site = [s for finder in site_finders for s in finder(traced, unexplained)]
        by_group = [s for finder in group_finders for s in finder(traced, unexplained, found)]
    known = {_key(s) for s in found}
    sites = Counter(_key(s) for s in by_site)
    out: list[Symmetry] = []
    tagged = [(s, True) for s in by_site] + [(s, False) for s in by_group]
    for s, site_driven in tagged:
        key, moved = _key(s), _moved(s)
        if key in known or not moved & shared:
            continue
        if site_driven and any(counts[name] != sites[key] for name in moved):
            continue  # a use of a moved tensor that is not a site of this symmetry
        known.add(key)
        out.append(s)
    return out
