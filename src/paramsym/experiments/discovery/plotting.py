"""Heat maps of learned generators h_i and group elements exp(h_i) over the flattened
parameters (dissertation Figs 6.3-6.5, 6.7), with lines at the boundaries of the weight
matrices so that the coupling between layers can be read off."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure


def block_edges(sizes: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """``(name, start, stop)`` of each parameter tensor in the flattened θ, in order.

    >>> block_edges({"W1": 4, "W2": 2})
    [('W1', 0, 4), ('W2', 4, 6)]
    """
    out, start = [], 0
    for name, size in sizes.items():
        out.append((name, start, start + int(size)))
        start += int(size)
    return out


def generator_heatmaps(
    generators: Sequence[Any],
    elements: Sequence[Any] | None,
    sizes: Mapping[str, int],
    *,
    title: str,
    labels: Sequence[str] | None = None,
) -> Figure:
    """One column per generator: h_i (top row) and, when given, exp(h_i) (bottom row), each a
    (P, P) matrix drawn with a diverging colour map centred at 0 (h_i, each scaled to its own
    largest entry) or at 1 on the diagonal (exp(h_i) − I is drawn, so that the identity is
    white). ``sizes`` maps parameter names to their entry counts, in flattening order; their
    boundaries are drawn as grey lines and the blocks labelled on the first axes."""
    k = len(generators)
    rows = 1 if elements is None else 2
    figure, axes = plt.subplots(rows, k, figsize=(2.6 * k + 0.6, 2.8 * rows + 0.8), squeeze=False)
    edges = block_edges(sizes)
    for i in range(k):
        panels = [(np.asarray(generators[i], dtype=float), f"h{i + 1}")]
        if elements is not None:
            e = np.asarray(elements[i], dtype=float)
            panels.append((e - np.eye(e.shape[0]), f"exp(h{i + 1}) − I"))
        for row, (matrix, name) in enumerate(panels):
            ax = axes[row][i]
            scale = float(np.abs(matrix).max()) or 1.0
            ax.imshow(matrix, cmap="RdBu_r", vmin=-scale, vmax=scale, interpolation="nearest")
            for _, _, stop in edges[:-1]:
                ax.axhline(stop - 0.5, color="grey", lw=0.6)
                ax.axvline(stop - 0.5, color="grey", lw=0.6)
            label = name if labels is None or row else f"{name}: {labels[i]}"
            ax.set_title(f"{label}\n(max |·| {scale:.2g})", fontsize=8)
            ax.set_xticks([(a + b - 1) / 2 for _, a, b in edges])
            ax.set_yticks([(a + b - 1) / 2 for _, a, b in edges])
            bottom = row == len(panels) - 1  # x labels only under the last row: no overlap
            ax.set_xticklabels(
                [n for n, _, _ in edges] if i == 0 and bottom else [], fontsize=6, rotation=90
            )
            ax.set_yticklabels([n for n, _, _ in edges] if i == 0 else [], fontsize=6)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return figure
