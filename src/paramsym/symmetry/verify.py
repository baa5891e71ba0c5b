"""Numerical verification of detected symmetries: act, run the model, compare.

Detection reasons about the model's structure; this module checks its claims on numbers. For
every symmetry reported exact and function-preserving, random group elements act on the
parameters and buffers, and the model runs on a batch (the user's ``example_input``, or the
synthesised ``(2, in_features)`` batch of a chain that starts with a linear layer), once per
element (:func:`verification_elements`):

* a continuous group acts with one element drawn at scale 0.5 that is not numerically the
  identity (``sample(..., non_identity=True)``);
* a finite group (permutations, sign flips, head permutations) acts with ``VERIFY_DRAWS``
  distinct non-identity elements, or all of them when it has fewer (the one swap of S_2): a
  plain random draw is the identity with probability 1/|G|, half the time for two heads, and
  the identity passes any check. A group whose only element is the identity has nothing to
  check.

Elements are drawn in the parameters' dtype, and every family casts an element to the
parameters' dtype before deriving anything from it (an inverse, a power), so an exact
symmetry moves the output by rounding only. A symmetry whose worst element changes the output
by more than the tolerance of the lowest precision the forward computes in (``sqrt(eps)``:
1.5e-8 in float64, 3.5e-4 in float32; Hugging Face's ``LlamaRMSNorm`` and BLOOM's softmax
compute in float32 inside a float64 model, where rounding alone moves the output by ~1e-7:
:func:`compute_dtype`) is downgraded to approximate, with the measured change in its notes and a
:class:`~paramsym.errors.SymmetryVerificationWarning` naming it. Data-dependent actions and loss
(not function) symmetries are not checked here.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from paramsym.core.params import buffer_copies, params_of, stateless_call
from paramsym.errors import InvalidArgumentError, SymmetryVerificationWarning
from paramsym.symmetry.base import GroupElement, Symmetry, numerically_equal

VERIFY_PARAMETER_LIMIT = 1_000_000
"""``verify=None`` checks models with at most this many parameters (a few forwards per
symmetry)."""

VERIFY_DRAWS = 3
"""Distinct non-identity elements a finite group is checked with (all of them when fewer)."""

VERIFY_SCALE = 0.5
"""Scale of the element drawn from a continuous group (see :meth:`Symmetry.sample`)."""

VERIFY_EXAMPLES = 16
"""A batch whose tensors share a leading (batch) size above this is checked on its first
``VERIFY_EXAMPLES`` examples: the check is of the model's structure, and its cost should not
grow with the batch an analysis runs on (a teleport's 1024 examples made it 3 gradients of a
small MLP per call)."""

_DISTINCT_ATTEMPTS = 32
"""Non-identity draws from a finite group in search of ``VERIFY_DRAWS`` distinct ones."""


class _FloatingDtypes(TorchDispatchMode):
    """Records the dtype of every floating tensor an op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in pytree.tree_leaves(out):
            if isinstance(leaf, Tensor) and leaf.is_floating_point():
                self.dtypes.add(leaf.dtype)
        return out


def compute_dtype(recorded: set[torch.dtype], dtype: torch.dtype) -> torch.dtype:
    """The lowest-precision floating dtype among ``dtype`` and ``recorded``, the dtypes the
    forward computed in (each op's outputs, recorded by :class:`_FloatingDtypes`)."""
    return max(recorded | {dtype}, key=lambda d: torch.finfo(d).eps)


def _outputs(model: nn.Module, state: dict[str, Tensor], example_input: Any) -> Tensor:
    """Every floating tensor the forward returns, flattened and concatenated."""
    from paramsym.symmetry.graph.trace import as_arguments  # the graph package imports detect

    args, kwargs = as_arguments(example_input, model)
    with torch.no_grad():
        raw = stateless_call(model, state, args, kwargs)
    leaves = [t.reshape(-1) for t in pytree.tree_leaves(raw) if isinstance(t, Tensor)]
    floating = [t for t in leaves if t.is_floating_point()]
    return torch.cat(floating) if floating else torch.zeros(0)


def leading_examples(example_input: Any, count: int = VERIFY_EXAMPLES) -> Any:
    """``example_input`` cut to its first ``count`` examples where every tensor in it has one
    leading size above ``count`` (a batch); otherwise unchanged.

    >>> leading_examples({"x": torch.zeros(100, 3), "mask": torch.ones(100)})["x"].shape
    torch.Size([16, 3])
    >>> leading_examples(torch.zeros(3, 100)).shape
    torch.Size([3, 100])
    """
    leaves = [t for t in pytree.tree_leaves(example_input) if isinstance(t, Tensor)]
    sizes = {t.shape[0] if t.dim() else -1 for t in leaves}  # -1: a scalar, no batch
    if len(sizes) != 1 or next(iter(sizes)) <= count:
        return example_input
    return pytree.tree_map(lambda t: t[:count] if isinstance(t, Tensor) else t, example_input)


def verification_elements(
    symmetry: Symmetry, dtype: torch.dtype, generator: torch.Generator | None = None
) -> list[GroupElement]:
    """The elements verification acts with, drawn in ``dtype`` from ``generator`` (default:
    a fresh one seeded 0, so the check does not depend on the other symmetries).

    A continuous group gives one element at scale ``VERIFY_SCALE`` that is not numerically the
    identity; a finite group ``VERIFY_DRAWS`` distinct non-identity elements, or all
    ``order − 1`` of them when fewer (S_2: its one swap); a group whose only element is the
    identity (``order == 1``, or a finite group of unknown order that never draws anything
    else) none.

    >>> import torch
    >>> from paramsym.symmetry import NeuronPermutation
    >>> heads = NeuronPermutation(2, incoming=["0.weight"], outgoing=["2.weight"])
    >>> verification_elements(heads, torch.float64)
    [tensor([1, 0])]
    """
    generator = torch.Generator().manual_seed(0) if generator is None else generator
    order = symmetry.order
    if order == 1:
        return []
    if not symmetry.discrete:
        return [
            symmetry.sample(scale=VERIFY_SCALE, generator=generator, dtype=dtype, non_identity=True)
        ]
    wanted = VERIFY_DRAWS if order is None else min(VERIFY_DRAWS, order - 1)
    elements: list[GroupElement] = []
    for _ in range(_DISTINCT_ATTEMPTS):
        try:
            g = symmetry.sample(generator=generator, dtype=dtype, non_identity=True)
        except InvalidArgumentError:  # a finite group of unknown order with no other element
            break
        if not any(numerically_equal(g, h) for h in elements):
            elements.append(g)
            if len(elements) == wanted:
                break
    return elements


def _change(
    symmetry: Symmetry,
    model: nn.Module,
    state: dict[str, Tensor],
    x: Any,
    reference: Tensor,
    dtype: torch.dtype,
) -> float | None:
    """Largest relative change of the output under the :func:`verification_elements` of the
    group (``None`` when there are none)."""
    changes = [
        float((_outputs(model, symmetry.act(state, g), x) - reference).norm())
        / (float(reference.norm()) or 1.0)
        for g in verification_elements(symmetry, dtype)
    ]
    return max(changes) if changes else None


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
    ``example_input`` with its :func:`verification_elements` (in the parameters' dtype);
    downgrade (``exact=False``, a note) and warn about those that fail.
    Returns ``found`` (the same objects). A ``synthesized`` batch the model cannot run (the
    chain does not start with a (batch, features) layer after all) skips the check. A large
    batch is checked on its first examples (:func:`leading_examples`)."""
    params = params_of(model)
    if not params:
        return list(found)
    state = {**buffer_copies(model, params), **params}
    dtype = next(iter(params.values())).dtype
    failed = []
    with _without_dropout(model):
        recorder = _FloatingDtypes()
        # the first examples, then (where the leading axis was not the batch's after all)
        # the whole input
        candidates = list(
            {id(c): c for c in (leading_examples(example_input), example_input)}.values()
        )
        for k, candidate in enumerate(candidates):
            try:
                with recorder:
                    reference = _outputs(model, state, candidate)
            except Exception:
                if k + 1 < len(candidates):
                    continue
                if not synthesized:  # only a batch paramsym guessed can fail: nothing to check
                    raise
                return list(found)
            example_input = candidate
            break
        lowest = compute_dtype(recorder.dtypes, dtype)
        tolerance = torch.finfo(lowest).eps ** 0.5
        changes = {
            symmetry.name: _change(symmetry, model, state, example_input, reference, dtype)
            for symmetry in found
            if symmetry.exact and not symmetry.data_dependent and symmetry.preserves == "function"
        }
    for symmetry in found:
        change = changes.get(symmetry.name)
        if change is None:
            continue
        if not change <= tolerance:
            symmetry.exact = False
            symmetry.notes = (
                *symmetry.notes,
                f"verification: a random non-identity element changed the output by "
                f"{change:.2e} (relative; tolerance {tolerance:.1e}, the forward computing "
                f"in {lowest}), so it is reported as approximate",
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
