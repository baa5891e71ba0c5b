"""Random number generators for reproducible analyses."""

from __future__ import annotations

import torch


def make_generator(
    seed_or_generator: int | torch.Generator | None, *, default_seed: int = 0
) -> torch.Generator:
    """A CPU ``torch.Generator``: the one given, a new one seeded with the int given, or one
    seeded with ``default_seed`` when ``None`` (so library defaults are deterministic)."""
    if isinstance(seed_or_generator, torch.Generator):
        return seed_or_generator
    seed = default_seed if seed_or_generator is None else int(seed_or_generator)
    return torch.Generator().manual_seed(seed)
