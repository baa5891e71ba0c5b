"""Which symmetries a teleport moves along: the default choice on a model, and the checks on
a user's list (continuous, on parameters only, not frozen, exact on the batch)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor, nn

from paramsym.errors import ApproximateActionWarning, InvalidArgumentError
from paramsym.symmetry.base import Symmetry
from paramsym.teleportation.objectives import LossFn


def default_symmetries(
    model: nn.Module,
    loss_fn: LossFn | None = None,
    example_input: Any = None,
    *,
    allow_approximate: bool = False,
) -> list[Symmetry]:
    """The continuous symmetries ``ps.symmetries`` finds on ``model`` (on the graph traced on
    ``example_input`` when given; not data-dependent) that a teleport moves along by default:
    the exact ones (a teleport is a move within a level set; the approximate ones, such as a
    norm's input scale invariance with eps > 0, only with ``allow_approximate``), without
    those that also move buffers (BatchNorm's scale invariance, which would move its running
    statistics, which teleport does not carry), those that move a frozen parameter
    (``requires_grad=False``: it stays where it is). The absorbed translations whose shift
    depends on parameters they read (:attr:`~paramsym.symmetry.Symmetry.reads`: a norm's β
    into its readers' biases, a LayerNorm reader's rows along γ⁻¹, ...) are in: they keep
    the function exactly, and gradient transport carries ∇L along them exactly
    (:mod:`~paramsym.teleportation.read_shifts`)."""
    from paramsym.symmetry.detect import symmetries

    frozen = frozen_parameters(model)
    found = symmetries(model, example_input=example_input, loss_fn=loss_fn)
    return [
        s
        for s in found
        if s.dim > 0
        and (s.exact or allow_approximate)
        and not s.buffer_names
        and getattr(s, "default_teleport", True)
        and (s.moves_frozen or not frozen & set(s.parameter_names))
    ]


def frozen_parameters(model: nn.Module) -> set[str]:
    """Names of the parameters with ``requires_grad=False``."""
    return {name for name, p in model.named_parameters() if not p.requires_grad}


def continuous_symmetries(
    symmetries: Sequence[Symmetry] | None,
    model: nn.Module,
    loss_fn: LossFn,
    x: Any,
    allow_approximate: bool = False,
    *,
    function_only: bool = False,
) -> list[Symmetry]:
    """``symmetries`` checked, or the default choice (:func:`default_symmetries`; only the
    symmetries of the function when ``function_only``, for an objective that reads more than
    the loss: see :attr:`~paramsym.teleportation.Objective.keeps_function`)."""
    if symmetries is None:
        # One detector: the graph traced on the batch, for chains too (a chain of convs is
        # only seen there), as ps.symmetries(model, example_input=x) does.
        found = default_symmetries(model, loss_fn, x, allow_approximate=allow_approximate)
        if function_only:
            found = [s for s in found if s.preserves == "function"]
        if not found:
            raise InvalidArgumentError(
                "teleport: ps.symmetries found no continuous symmetry teleport can use on this "
                "model (approximate ones, and those that move buffers or frozen parameters, "
                "are left out: allow_approximate=True adds the approximate ones); pass "
                "symmetries=..., e.g. the data-dependent GL actions of "
                "ps.symmetries(model, data_dependent=True)"
            )
        return found
    chosen = list(symmetries)
    frozen = frozen_parameters(model)
    for s in chosen:
        if not isinstance(s, Symmetry):
            raise InvalidArgumentError(
                f"teleport: symmetries must be Symmetry objects, got {type(s).__name__}"
            )
        if s.buffer_names:
            raise InvalidArgumentError(
                f"teleport: {s.name} also moves the buffers {sorted(s.buffer_names)} (running "
                "statistics), which teleport does not carry; teleport along symmetries that act "
                "on parameters only (the default choice leaves these out)"
            )
        if not s.moves_frozen and frozen & set(s.parameter_names):
            raise InvalidArgumentError(
                f"teleport: {s.name} moves the frozen parameters "
                f"{sorted(frozen & set(s.parameter_names))} (requires_grad=False); teleport "
                "keeps frozen parameters fixed: unfreeze them (requires_grad_(True)) to "
                "teleport along this symmetry (the default choice leaves it out)"
            )
        if s.preserves == "distribution":
            raise InvalidArgumentError(
                f"teleport: {s.name} preserves the loss only in expectation over the data "
                "distribution, not on a batch; teleport along function or loss symmetries"
            )
    continuous = [s for s in chosen if s.dim > 0]
    if not continuous:
        names = ", ".join(s.name for s in chosen) or "none"
        raise InvalidArgumentError(
            f"teleport: no continuous symmetry to move along (got {names}); discrete "
            "symmetries have no Lie algebra to ascend on"
        )
    return continuous


def check_exactness(
    symmetries: Sequence[Symmetry], params: Mapping[str, Tensor], x: Any, allow: bool
) -> None:
    """Refuse (or, with ``allow``, warn about) data-dependent actions inexact on this batch."""
    for s in symmetries:
        report_fn = getattr(s, "act_with_report", None)
        if not s.data_dependent or report_fn is None:
            continue
        _, report = report_fn(params, s.identity(dtype=next(iter(params.values())).dtype), x)
        if report.exact:
            continue
        what = (
            f"{s.name} is not exact on this batch ({report.batch_size} samples, hidden width "
            f"{report.width}, rank {report.rank}; {s.notes[0] if s.notes else ''})"
        )
        if not allow:
            raise InvalidArgumentError(
                f"teleport: {what}. Use a smaller teleport batch, or pass "
                "allow_approximate=True to move anyway with the loss guard (max_loss_drift)"
            )
        warnings.warn(
            f"teleport: {what}; steps that move the loss by more than max_loss_drift are "
            "shrunk or stopped",
            ApproximateActionWarning,
            stacklevel=3,
        )
