"""When to teleport during training: a set K of optimizer-step indices (Algorithm 1).

Step k means "after k optimizer steps, before the gradient of step k is computed": K = {0} is
a teleport before training, ``every(100)`` the Rosenbrock runs' teleports at steps 100, 200, …
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from paramsym.errors import InvalidArgumentError


@dataclass(frozen=True)
class Schedule:
    """Teleport at step k when ``k in steps``, or when ``start <= k < stop`` and
    ``(k - start) % every == 0`` (``every > 0``). Build it with the class methods.

    >>> Schedule.every(100, start=100, stop=1000).due(300), Schedule.at([4]).due(3)
    (True, False)
    >>> Schedule.epochs([1, 3], steps_per_epoch=50).steps
    frozenset({50, 150})
    """

    steps: frozenset[int] = frozenset()
    every_n: int = 0
    start: int = 0
    stop: int | None = None

    def due(self, step: int) -> bool:
        """Whether to teleport before the gradient of optimizer step ``step``."""
        if step in self.steps:
            return True
        if self.every_n <= 0 or step < self.start or (self.stop is not None and step >= self.stop):
            return False
        return (step - self.start) % self.every_n == 0

    @classmethod
    def at(cls, steps: Iterable[int]) -> Schedule:
        """At the given optimizer steps (0 = before training)."""
        chosen = frozenset(int(k) for k in steps)
        if any(k < 0 for k in chosen):
            raise InvalidArgumentError(f"Schedule.at: steps must be >= 0, got {sorted(chosen)}")
        return cls(steps=chosen)

    @classmethod
    def every(cls, n: int, *, start: int = 0, stop: int | None = None) -> Schedule:
        """Every ``n`` steps from ``start`` (inclusive) to ``stop`` (exclusive)."""
        if n < 1 or start < 0 or (stop is not None and stop < start):
            raise InvalidArgumentError(
                f"Schedule.every: need n >= 1 and 0 <= start <= stop, got n={n}, "
                f"start={start}, stop={stop}"
            )
        return cls(every_n=int(n), start=int(start), stop=stop)

    @classmethod
    def epochs(cls, epochs: Iterable[int], *, steps_per_epoch: int) -> Schedule:
        """At the start of the given epochs (epoch e begins at step e · steps_per_epoch)."""
        if steps_per_epoch < 1:
            raise InvalidArgumentError(
                f"Schedule.epochs: steps_per_epoch must be >= 1, got {steps_per_epoch}"
            )
        return cls.at(int(e) * steps_per_epoch for e in epochs)

    @classmethod
    def first_epoch(cls, steps_per_epoch: int, *, every: int = 1) -> Schedule:
        """Every ``every`` steps during the first epoch only."""
        return cls.every(every, start=0, stop=steps_per_epoch)

    @classmethod
    def never(cls) -> Schedule:
        """No teleport (the baseline of a comparison)."""
        return cls()
