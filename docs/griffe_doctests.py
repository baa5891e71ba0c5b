"""A griffe extension for the API reference: paramsym's docstrings read as Markdown.

* paramsym's docstrings carry doctests (``>>> ...`` lines and their output, run by pytest's
  ``--doctest-modules``) in their body, outside any "Examples" section. Markdown would render
  them as running text, and read outputs such as ``[0.5, 0.5]`` as links. Each doctest block
  (from a ``>>>`` line at the margin to the next blank line) is fenced as ``pycon``.
* Sphinx roles (``:class:`~paramsym.Slot```, ``:func:`...```) become optional
  cross-references: a link where the target is documented, the name in code font elsewhere.
"""

from __future__ import annotations

import re
from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """``text`` with every unindented doctest block wrapped in a ```` ```pycon ```` fence."""
    out: list[str] = []
    in_fence = in_doctest = False
    for line in text.splitlines():
        if in_doctest and not line.strip():
            out.append("```")
            in_doctest = False
        if not in_doctest and line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and not in_doctest and line.startswith(">>>"):
            out.append("```pycon")
            in_doctest = True
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([^`<>]+)`")


def _reference(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2).strip()
    shown = target.rsplit(".", 1)[-1] if short else target
    identifier = target.removesuffix("()")
    return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'


def roles_to_references(text: str) -> str:
    """``text`` with every Sphinx role outside code fences turned into an optional autoref."""
    parts = re.split(r"(^```.*?^```)", text, flags=re.S | re.M)
    return "".join(part if part.startswith("```") else ROLE.sub(_reference, part) for part in parts)


class FenceDoctests(griffe.Extension):
    """Fence the doctests and resolve the roles of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = roles_to_references(fence_doctests(obj.docstring.value))
