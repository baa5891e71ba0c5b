"""Experiments reproducing the seeds' figures and tables (see :mod:`.registry`)."""

from paramsym.experiments.registry import (
    Claim,
    ClaimOutcome,
    ClaimTally,
    Experiment,
    Progress,
    Result,
    SilentProgress,
    all_experiments,
    experiment,
    get,
)

__all__ = [
    "Claim",
    "ClaimOutcome",
    "ClaimTally",
    "Experiment",
    "Progress",
    "Result",
    "SilentProgress",
    "all_experiments",
    "experiment",
    "get",
]
