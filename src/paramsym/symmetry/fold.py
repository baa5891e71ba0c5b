"""Folding norm weights into their readers: a function-preserving rewrite (notes 005 §4).

A norm layer's output ``y = γ ⊙ n + β`` (n the normalised input; β = 0 for RMSNorm) is read by
linear maps ``z = W y + b``. Folding puts the affine part into the readers,
``W ← W diag γ``, ``b ← b + W β``, and leaves a norm without weight: the function is unchanged.
What it opens: without γ, RMSNorm commutes with every orthogonal map of its input
(rms(Qx) = rms(x)), so on the folded model the residual stream of a decoder whose stream is
read only through RMSNorms has an orthogonal group (embeddings and writers by Q, readers by Qᵀ),
which detection then finds. LayerNorm also needs the mean projected out of every writer
(SliceGPT's computational invariance): where every reader of a stream is a LayerNorm and
nothing but linear maps and embeddings writes into it (a closed
:class:`~paramsym.symmetry.translation.StreamTranslation`), :func:`fold_norms` acts with the
translation that makes every write mean-free (``centering``), after which each of those
LayerNorms computes an RMSNorm and is replaced by a weightless one: the folded GPT-2, OPT or
Phi with an untied head then has the stream's orthogonal group too.

:func:`fold_norms` never changes the model it is given: it returns a new, equivalent model, and
reports what it folded and the output change it measured (the folded norm computes in the
model's own dtype: Hugging Face's ``LlamaRMSNorm`` computes in float32 even in a float64 model,
so there the folded model differs from the original by about 1e-7, and is the more exact one).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from paramsym.core.params import output_change
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.base import Slot, Symmetry, scale_along
from paramsym.symmetry.offset_scaling import OffsetNormScaling
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.symmetry.translation import StreamTranslation


class FoldedNorm(nn.Module):
    """A LayerNorm (``kind="layer"``) or RMSNorm (``kind="rms"``) over the last axis without
    weight or bias, computed in its input's dtype (half precision in float32)."""

    def __init__(self, kind: str, width: int, eps: float) -> None:
        super().__init__()
        if kind not in ("layer", "rms"):
            raise InvalidArgumentError(f"FoldedNorm: kind must be 'layer' or 'rms', got {kind!r}")
        self.kind, self.width, self.eps = kind, int(width), float(eps)

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        if dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        if self.kind == "layer":
            y = F.layer_norm(x, (self.width,), None, None, self.eps)
        else:
            y = F.rms_norm(x, (self.width,), None, self.eps)
        return y.to(dtype)

    def extra_repr(self) -> str:
        return f"{self.kind}, {self.width}, eps={self.eps:g}"


@dataclass
class FoldReport:
    """What :func:`fold_norms` did.

    Attributes:
        folded: norm module -> the reader weights its affine part went into.
        centered: the stream translations acted with to make their streams mean-free
            (their LayerNorms became weightless RMSNorms).
        skipped: norm module -> why it was left as it is (no linear reader, a reader that
            is also used elsewhere, a weight used as ``1 + weight``, ...).
        output_change: max |f_folded(x) − f(x)| / max |f(x)| on the example input
            (:func:`paramsym.core.params.output_change`).
    """

    folded: dict[str, list[str]] = field(default_factory=dict)
    centered: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    output_change: float = 0.0


def _norm_kind(module: nn.Module) -> tuple[str, float] | None:
    """("layer" | "rms", eps) of a norm layer over the last axis with a weight, else None."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, nn.Parameter) or weight.ndim != 1:
        return None
    if isinstance(module, nn.LayerNorm):
        return "layer", float(module.eps)
    if isinstance(module, nn.RMSNorm):
        return "rms", float(module.eps) if module.eps is not None else 1e-6
    eps = getattr(module, "variance_epsilon", None)  # Hugging Face's RMSNorms (Llama, T5, ...)
    if isinstance(eps, float) and getattr(module, "bias", None) is None:
        return "rms", eps
    return None


def _readers(name: str, found: Sequence[Symmetry]) -> list[Slot] | str:
    """The reader slots of the norm ``name`` (its rescaling's covector slots), or why none."""
    for s in found:
        if not isinstance(s, PositiveScaling) or not s.exact:
            continue
        incoming = {t.name for t in s.slots if t.power > 0}
        if f"{name}.weight" not in incoming:
            continue
        if not incoming <= {f"{name}.weight", f"{name}.bias"}:
            return "its rescaling also moves other parameters"
        readers = [t for t in s.slots if t.power < 0]
        if not readers or any(t.offset is not None or t.block != 1 for t in readers):
            return "read in part, or by something other than linear maps"
        return readers
    return "no exact rescaling of its weight against linear readers (e.g. the model's output)"


def _offset_norms(found: Sequence[Symmetry]) -> dict[str, OffsetNormScaling]:
    """Norm module -> its exact ``1 + γ`` rescaling (Gemma's RMSNorm: the readers of a norm
    whose weight is stored as an offset from one)."""
    return {
        s.weight.rpartition(".")[0]: s
        for s in found
        if isinstance(s, OffsetNormScaling) and s.exact and s.weight.endswith(".weight")
    }


def _is_norm(module: nn.Module) -> bool:
    """A module fold_norms must account for: a normalisation layer by type or by name."""
    return isinstance(
        module, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)
    ) or type(module).__name__.endswith(("Norm", "Norm1d", "Norm2d", "Norm3d"))


def fold_norms(
    model: nn.Module, example_input: Any, *, center: bool = True, add_bias: bool = False
) -> nn.Module:
    """A new model equal to ``model`` as a function, with every norm layer's weight (and
    LayerNorm's bias) folded into the linear maps that read it (module docstring).

    Args:
        model: any model with LayerNorm / RMSNorm layers (``nn.LayerNorm``, ``nn.RMSNorm``,
            Hugging Face's ``*RMSNorm``), left unchanged.
        example_input: a batch the model accepts (as for :func:`paramsym.symmetries`): the
            readers are read off the traced graph.
        center: project the mean out of every write into a residual stream that only
            LayerNorms read (module docstring), so that those LayerNorms fold into RMSNorms.
        add_bias: where a LayerNorm's bias is read by an ``nn.Linear`` without bias (the
            LM head of GPT-2 or OPT), give it a zero bias to take it; otherwise that norm is
            left as it is (named in ``skipped``).

    Returns:
        A deep copy with each foldable norm replaced by a :class:`FoldedNorm`; its
        ``paramsym_fold`` attribute is the :class:`FoldReport`. Norms whose weight cannot be
        folded (the final norm of a base model, whose output is the model's) are kept, and
        every normalisation module not folded is named in ``skipped`` with the reason. A
        Gemma-style RMSNorm, ``x̂ · (1 + γ)``, folds its ``1 + γ`` (found as the catalogue's
        :class:`~paramsym.symmetry.OffsetNormScaling`).

    """
    from paramsym.symmetry.detect import symmetries

    found = symmetries(model, example_input=example_input, verify=False)
    folded = copy.deepcopy(model)
    modules = dict(folded.named_modules())
    report = FoldReport()
    centered = _center(folded, found, report) if center else set()
    offsets = _offset_norms(found)
    with torch.no_grad():
        for name, module in list(modules.items()):
            if not name:
                continue
            kind = _norm_kind(module)
            gamma = None
            if name in offsets:  # x̂ · (offset + γ): the effective weight is offset + γ
                kind = ("rms", _eps(module))
                gamma = offsets[name].offset + module.get_parameter("weight").detach()
                readers: list[Slot] | str = list(offsets[name].readers)
            elif kind is None:
                if _is_norm(module):
                    report.skipped[name] = _unfoldable(module)
                continue
            else:
                readers = _readers(name, found)
            if kind[0] == "layer" and name in centered:
                kind = ("rms", kind[1])  # its input is mean-free now
            if isinstance(readers, list):
                readers = _bias_takers(modules, module, readers, add_bias) or readers
            if isinstance(readers, str):
                report.skipped[name] = readers
                continue
            _fold_one(modules, module, readers, gamma)
            parent, _, child = name.rpartition(".")
            setattr(modules[parent] if parent else folded, child,
                    FoldedNorm(kind[0], module.weight.numel(), kind[1]))  # fmt: skip
            report.folded[name] = [t.name for t in readers]
    report.output_change = output_change(model, folded, example_input)
    folded.paramsym_fold = report  # type: ignore[assignment]
    return folded


def _center(model: nn.Module, found: Sequence[Symmetry], report: FoldReport) -> set[str]:
    """Act on ``model`` with the centering of every exact, closed stream translation; the
    LayerNorm modules whose inputs are mean-free now."""
    params = dict(model.named_parameters())
    readers: set[str] = set()
    with torch.no_grad():
        for s in found:
            if not (isinstance(s, StreamTranslation) and s.exact and s.closed):
                continue
            state = {name: params[name].detach() for name in s.parameter_names}
            for name, value in s.act(state, s.centering(state)).items():
                params[name].copy_(value)
            readers.update(s.readers)
            report.centered.append(s.name)
    return readers


def _bias_takers(
    modules: dict[str, nn.Module], norm: nn.Module, readers: list[Slot], add_bias: bool
) -> str | None:
    """Why a LayerNorm's bias cannot go into its readers (``None``: it can; with ``add_bias``
    each ``nn.Linear`` reader without bias gets a zero one first)."""
    beta = getattr(norm, "bias", None)
    if beta is None or not bool(beta.detach().ne(0).any()):
        return None
    owners = [modules[slot.name.rpartition(".")[0]] for slot in readers]
    missing = [o for o in owners if not isinstance(getattr(o, "bias", None), nn.Parameter)]
    for slot, owner in zip(readers, owners, strict=True):
        if owner in missing and not (add_bias and isinstance(owner, nn.Linear)):
            return (
                f"its bias is read by '{slot.name.rpartition('.')[0]}', which has no bias to "
                "take it (fold_norms(..., add_bias=True) gives an nn.Linear reader one)"
            )
    for owner in missing:
        weight = owner.get_parameter("weight")
        owner.bias = nn.Parameter(weight.new_zeros(weight.shape[0]))
    return None


def _eps(module: nn.Module) -> float:
    """A norm module's eps (``eps`` or Hugging Face's ``variance_epsilon``; 1e-6 if unset)."""
    for attribute in ("eps", "variance_epsilon"):
        value = getattr(module, attribute, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 1e-6


def _unfoldable(module: nn.Module) -> str:
    """Why a normalisation module is not one fold_norms folds."""
    if isinstance(module, nn.modules.batchnorm._NormBase):
        return "a batch norm (statistics over the batch or running ones): not folded here"
    if isinstance(module, nn.GroupNorm):
        return "a group norm (over channel groups): not folded here"
    if not isinstance(getattr(module, "weight", None), nn.Parameter):
        return "no weight to fold"
    return (
        f"a {type(module).__name__} whose weight the catalogue finds no exact rescaling of "
        "against linear readers (a computed or read-elsewhere weight)"
    )


def _fold_one(
    modules: dict[str, nn.Module], norm: nn.Module, readers: list[Slot], gamma: Tensor | None
) -> None:
    if gamma is None:
        gamma = getattr(norm, "weight").detach()  # noqa: B009  (untyped nn.Module getattr)
    beta = getattr(norm, "bias", None)
    for slot in readers:
        owner_name, _, param = slot.name.rpartition(".")
        owner = modules[owner_name]
        weight = getattr(owner, param)
        if beta is not None and bool(beta.detach().ne(0).any()):
            bias = getattr(owner, "bias")  # noqa: B009  (checked by _bias_takers)
            bias.add_(torch.tensordot(weight.detach(), beta.detach(), dims=([slot.axis], [0])))
        weight.copy_(scale_along(weight.detach(), slot.axis, gamma))
