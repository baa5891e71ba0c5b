"""``curvature-intuition`` (seed 001, Fig 5.5): quick preset through the registry."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import paramsym.experiments.teleport.curvature_intuition as module
from paramsym.experiments.registry import Result, SilentProgress, get


@pytest.fixture(scope="module")
def outcome() -> tuple[Result, dict[str, bool | None], float]:
    """The quick run, its claims' verdicts and its runtime."""
    entry = get("curvature-intuition")
    start = time.perf_counter()
    result = entry.run(entry.presets["quick"], SilentProgress())
    elapsed = time.perf_counter() - start
    holds = {c.text: c.evaluate(result).holds for c in entry.claims}
    return result, holds, elapsed


def test_claims_as_measured(outcome: tuple[Result, dict[str, bool | None], float]) -> None:
    """κ exact, line limit 2/π, dependence on κ and on the family hold; E/r is not monotone in
    κ (it falls while κr ≲ 1.7–2 and rises after), so the text draws no direction from it."""
    result, holds, _ = outcome
    assert list(holds.values()) == [True, True, True, True]
    families = result.metrics["families"]
    for family in ("parabola", "circle"):
        assert families[family]["decreasing_small_kappa"]
        assert 1.0 < families[family]["argmin_kappa_r"] < 2.5


def test_tables() -> None:
    """Columns of both tables, and E/r a function of κr alone (two radii collapse)."""
    config = module.CurvatureIntuitionConfig(radii=(0.5, 2.0), kappa_points=5, angles=512)
    result = module.run_curvature_intuition(config, SilentProgress())
    curve, checks = result.series["curve"], result.series["kappa_check"]
    assert list(curve) == ["family", "r", "kappa", "kappa_r", "expected_over_r"]
    assert list(checks) == ["family", "kappa", "measured_kappa", "relative_error"]
    theta = 2 * math.pi * (np.arange(512) + 0.5) / 512
    for family in ("parabola", "circle"):
        a = module.expected_distance(family, 4.0, 0.5, theta)
        b = module.expected_distance(family, 1.0, 2.0, theta)
        assert a == pytest.approx(b, abs=1e-12)


def test_distances_exact() -> None:
    """Points on each curve are at distance 0; the circle's κ from ps.orbit_curvature is 1/r."""
    t = np.linspace(-2, 2, 9)
    assert np.abs(module.parabola_distance(0.7, t, 0.7 * t * t)).max() < 1e-12
    angle = np.linspace(0, 2 * math.pi, 9)
    on_circle = (1.5 * np.cos(angle), 1.5 * np.sin(angle) + 1.5)
    assert np.abs(module.circle_distance(1.5, *on_circle)).max() < 1e-12
    assert module.circle_curvature(1.5) == pytest.approx(1 / 1.5, rel=1e-12)
    assert module.parabola_curvature(0.7) == pytest.approx(1.4, rel=1e-12)
