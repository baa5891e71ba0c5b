"""Numerical verification of detected symmetries: act, run the model, compare.

Detection reasons about the model's structure; this module checks its claims on numbers. For
every symmetry reported exact and function-preserving, one random group element acts on the
parameters and buffers, and the model runs once on a batch (the user's ``example_input``, or
the synthesised ``(2, in_features)`` batch of a chain that starts with a linear layer). A
symmetry whose action changes the output by more than the tolerance of the parameters' dtype
(``sqrt(eps)``: 1.5e-8 in float64, 3.5e-4 in float32) is downgraded to approximate, with the
measured change in its notes and a :class:`~paramsym.errors.SymmetryVerificationWarning`
naming it. Data-dependent actions and loss (not function) symmetries are not checked here.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import Tensor, nn

from paramsym.core.params import buffer_copies, params_of, stateless_call
from paramsym.errors import SymmetryVerificationWarning
from paramsym.symmetry.base import Symmetry

VERIFY_PARAMETER_LIMIT = 1_000_000
"""``verify=None`` checks models with at most this many parameters (one forward per symmetry)."""


def _outputs(model: nn.Module, state: dict[str, Tensor], example_input: Any) -> Tensor:
    """Every floating tensor the forward returns, flattened and concatenated."""
    from paramsym.symmetry.graph.trace import as_arguments  # the graph package imports detect

    args, kwargs = as_arguments(example_input)
    with torch.no_grad():
        raw = stateless_call(model, state, args, kwargs)
    leaves = [t.reshape(-1) for t in pytree.tree_leaves(raw) if isinstance(t, Tensor)]
    floating = [t for t in leaves if t.is_floating_point()]
    return torch.cat(floating) if floating else torch.zeros(0)


def _change(
    symmetry: Symmetry,
    model: nn.Module,
    state: dict[str, Tensor],
    x: Any,
    reference: Tensor,
    dtype: torch.dtype,
) -> float:
    """Relative change of the output under one random element of the group."""
    generator = torch.Generator().manual_seed(0)
    g = symmetry.sample(scale=0.5, generator=generator, dtype=dtype)
    moved = symmetry.act(state, g)
    return float((_outputs(model, moved, x) - reference).norm()) / (float(reference.norm()) or 1.0)


@contextlib.contextmanager
def _without_dropout(model: nn.Module) -> Iterator[None]:
    """Dropout layers in evaluation mode inside the block (the analysis treats them as the
    identity; everything else keeps its mode, so training-mode BatchNorm uses batch
    statistics as the analysis assumes)."""
    dropouts = [m for m in model.modules() if isinstance(m, nn.modules.dropout._DropoutNd)]
    modes = [m.training for m in dropouts]
    for m in dropouts:
        m.train(False)
    try:
        yield
    finally:
        for m, mode in zip(dropouts, modes, strict=True):
            m.train(mode)


def verify_symmetries(
    model: nn.Module, found: Sequence[Symmetry], example_input: Any, *, synthesized: bool = False
) -> list[Symmetry]:
    """Check every exact, function-preserving, data-independent symmetry of ``found`` on
    ``example_input``; downgrade (``exact=False``, a note) and warn about those that fail.
    Returns ``found`` (the same objects). A ``synthesized`` batch the model cannot run (the
    chain does not start with a (batch, features) layer after all) skips the check."""
    params = params_of(model)
    if not params:
        return list(found)
    state = {**buffer_copies(model, params), **params}
    dtype = next(iter(params.values())).dtype
    tolerance = torch.finfo(dtype).eps ** 0.5
    failed = []
    with _without_dropout(model):
        try:
            reference = _outputs(model, state, example_input)
        except Exception:  # only a batch paramsym guessed can fail here: nothing to check on
            if not synthesized:
                raise
            return list(found)
        changes = {
            symmetry.name: _change(symmetry, model, state, example_input, reference, dtype)
            for symmetry in found
            if symmetry.exact and not symmetry.data_dependent and symmetry.preserves == "function"
        }
    for symmetry in found:
        if symmetry.name not in changes:
            continue
        change = changes[symmetry.name]
        if not change <= tolerance:
            symmetry.exact = False
            symmetry.notes = (
                *symmetry.notes,
                f"verification: a random element changed the output by {change:.2e} "
                f"(relative; tolerance {tolerance:.1e}), so it is reported as approximate",
            )
            failed.append(f"{symmetry.name} ({change:.1e})")
    if failed:
        warnings.warn(
            f"symmetries: {len(failed)} symmetries the analysis found exact change the output "
            f"when acted on, and are reported as approximate: {', '.join(failed[:8])}"
            + (f" and {len(failed) - 8} more" if len(failed) > 8 else "")
            + ". Please report the model: the analysis missed something in its forward",
            SymmetryVerificationWarning,
            stacklevel=3,
        )
    return list(found)
