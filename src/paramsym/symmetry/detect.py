"""``symmetries(model, example_input=x)``: find the parameter-space symmetries of a model.

With an ``example_input`` the forward is traced and the symmetries are found on the
computation graph (:mod:`paramsym.symmetry.graph`): any architecture, any ``forward``. Modules
with a block analyser (below) are analysed by it, and the graph leaves their parameters
alone. Without one, or when the forward cannot be traced (with a warning naming torch's
reason), the model's modules are walked from the root:

* a module with a *block analyser* (see :func:`register_block`, and the
  ``paramsym_symmetries(prefix)`` method a user's module may define) is analysed as a whole:
  attention (``nn.MultiheadAttention``, :class:`~paramsym.nn.MultiHeadAttention`),
  ``nn.TransformerEncoderLayer``/``DecoderLayer``/``Encoder``/``Decoder``
  (:mod:`paramsym.symmetry.attention_blocks`),
  :class:`~paramsym.nn.LoRALinear`, :class:`~paramsym.nn.RBFNetwork`,
  :class:`~paramsym.nn.TinyTransformer`, and the landscapes of :mod:`paramsym.landscapes`;
* an ``nn.Sequential`` is analysed as a chain (:mod:`paramsym.symmetry.chain`); a module in it
  that is not a chain element is walked on its own, so blocks inside it are still found;
* any other module is walked child by child.

Symmetries found inside a block preserve that block's function, so they are symmetries of the
whole model however the blocks are wired. Nothing is silently dropped: every module whose
parameters no analysis covered, and every chain element that blocks propagation, is reported
in an :class:`~paramsym.errors.UnanalysedModuleWarning` (or an
:class:`~paramsym.errors.UnsupportedModuleError` with ``strict=True``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.calls import call_arguments, call_notes
from paramsym.core.model_checks import ChainHazard, chain_hazards, random_modules, require_module
from paramsym.core.params import check_finite
from paramsym.errors import (
    InvalidArgumentError,
    TrainingModeWarning,
    UnanalysedModuleWarning,
    UnsupportedModuleError,
)
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.chain import chain_symmetries, flatten_sequential
from paramsym.symmetry.verify import VERIFY_PARAMETER_LIMIT, verify_symmetries

BlockAnalyser = Callable[[nn.Module, str, "BlockContext"], list[Symmetry]]
"""``(module, prefix, context) -> symmetries``; ``prefix`` is ``"name."`` (or ``""``) to put
before the module's own parameter names."""

_BLOCKS: dict[type[nn.Module], BlockAnalyser] = {}


def register_block(module_type: type[nn.Module], analyser: BlockAnalyser) -> None:
    """Teach :func:`symmetries` the symmetries of a block type (subclasses included).

    The analyser returns the symmetries acting inside one instance, with parameter names
    ``prefix + <name inside the block>``; it may hand children back to the generic walk with
    ``context.walk(child, name)``. A module can instead define
    ``paramsym_symmetries(self, prefix) -> list[Symmetry]``.
    """
    _BLOCKS[module_type] = analyser


@dataclass
class BlockContext:
    """What a block analyser may use: the loss, and the generic walk for child modules."""

    loss_fn: Callable[..., Any] | None
    at_output: bool
    _walker: _Walker = field(repr=False)

    def walk(self, module: nn.Module, name: str) -> None:
        """Analyse ``module`` (named ``name`` in the model) with the generic walk."""
        self._walker.module(module, name, at_input=False, at_output=False)

    def report(self, text: str) -> None:
        """Report a part of the block that could not be analysed."""
        self._walker.unanalysed.append(text)


def _analyser(module: nn.Module) -> BlockAnalyser | None:
    hook = getattr(module, "paramsym_symmetries", None)
    if callable(hook):
        return lambda m, prefix, context: list(hook(prefix))
    for cls in type(module).__mro__:
        if cls in _BLOCKS:
            return _BLOCKS[cls]
    return None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class _Walker:
    def __init__(self, loss_fn: Callable[..., Any] | None) -> None:
        self.loss_fn = loss_fn
        self.found: list[Symmetry] = []
        self.unanalysed: list[str] = []

    def module(self, module: nn.Module, name: str, *, at_input: bool, at_output: bool) -> None:
        analyser = _analyser(module)
        if analyser is not None:
            context = BlockContext(self.loss_fn, at_output, self)
            self.found.extend(analyser(module, f"{name}." if name else "", context))
        elif isinstance(module, nn.Sequential):
            self.sequential(module, name, at_input=at_input, at_output=at_output)
        else:
            own = [n for n, _ in module.named_parameters(recurse=False)]
            if own:
                label = f"'{name}'" if name else "the model"
                self.unanalysed.append(
                    f"{label} ({type(module).__name__}): parameters {own} outside any analysed "
                    "block"
                )
            for child_name, child in module.named_children():
                self.module(child, _join(name, child_name), at_input=False, at_output=False)

    def sequential(self, seq: nn.Sequential, name: str, *, at_input: bool, at_output: bool) -> None:
        nodes = list(flatten_sequential(seq, name))
        for node in nodes:
            if node.kind != "unknown":
                continue
            if _analyser(node.module) is not None or any(True for _ in node.module.children()):
                # A block or container: find what is inside; the chain stops at it.
                self.module(node.module, node.name, at_input=False, at_output=False)
                if _analyser(node.module) is None:
                    self.unanalysed.append(
                        f"{node.label}: a container with its own forward; the chain stops at "
                        "it (pass example_input to trace through it)"
                    )
            else:
                self.unanalysed.append(f"{node.label}: not a module type paramsym can analyse")
        self.found.extend(
            chain_symmetries(nodes, at_input=at_input, at_output=at_output, loss_fn=self.loss_fn)
        )


def symmetries(
    model: nn.Module,
    example_input: Any = None,
    strict: bool = False,
    data_dependent: bool = False,
    *,
    loss_fn: Callable[..., Any] | None = None,
    verify: bool | None = None,
) -> list[Symmetry]:
    """Find the parameter-space symmetries of ``model``.

    Args:
        model: any ``nn.Module``.
        example_input: a batch the model accepts (a tensor, a tuple of positional inputs, or a
            dict of keyword inputs such as ``{"input_ids": ids}``). The forward is traced on
            it with ``torch.export`` and the symmetries are found on the graph: linear maps
            (``Linear``, ``Conv1d/2d/3d`` with groups, ``ConvTranspose``, Hugging Face
            ``Conv1D``, ``Embedding``), pointwise activations, normalisation layers (with
            their running statistics), pooling, views and slices, and residual adds (one
            group element on both operands). Without it, only ``nn.Sequential`` chains of
            linear layers (see :mod:`paramsym.symmetry.chain`) and registered blocks are
            analysed.
        strict: raise :class:`~paramsym.errors.UnsupportedModuleError` naming every module
            (or op) that cannot be analysed, and when the forward cannot be traced, instead
            of warning.
        data_dependent: also return the data-dependent actions (whose ``act`` needs the input
            batch) of the hidden layers of a model that is an ``nn.Sequential``.
        loss_fn: the training loss; a softmax cross-entropy (``nn.CrossEntropyLoss`` or
            ``F.cross_entropy``) adds the last layer's translation as a loss symmetry.
        verify: act with one random element of every exact symmetry and run the model on the
            example input (or on a synthesised ``(2, in_features)`` batch for a chain that
            starts with a linear layer); a symmetry that changes the output is downgraded to
            approximate with a :class:`~paramsym.errors.SymmetryVerificationWarning`
            (:mod:`paramsym.symmetry.verify`). ``None`` (default): on for models with at most
            a million parameters when there is an input to run. Verification first checks
            that the parameters are finite (:class:`~paramsym.errors.NonFiniteError`);
            detection itself reads only the architecture.

    Returns:
        The symmetries in model order (per feature space: continuous groups, then
        permutations and sign flips, then data-dependent actions). Each knows the parameter
        (and buffer) names it acts on (``parameter_names``), so it works on any params dict of
        this model; symmetries that move BatchNorm running statistics need them in the dict
        (``{**ps.params_of(model), **dict(model.named_buffers())}``).

    >>> import paramsym as ps
    >>> for s in ps.symmetries(ps.mlp([4, 8, 8, 3], activation="relu")):
    ...     print(s.name, s.group)
    rescaling[0->2] (R>0)^8
    permutation[0->2] S_8
    rescaling[2->4] (R>0)^8
    permutation[2->4] S_8
    """
    require_module(model, "symmetries")
    random = random_modules(model) if example_input is not None else []
    if random:
        _warn_training_mode(model, random)
    found, batch = _detect(model, example_input, strict, data_dependent, loss_fn)
    graph_notes = list(getattr(found, "notes", ()))  # how the graph was made (repeated blocks)
    if batch is None and isinstance(model, nn.Sequential):
        batch = _linear_input(model)
    size = sum(p.numel() for p in model.parameters())
    if verify is None:
        verify = size <= VERIFY_PARAMETER_LIMIT
    if verify and batch is not None and not random:  # a random forward: nothing to compare
        # detection reads the architecture only; the values matter where the model runs
        check_finite(model.named_parameters(), f"symmetries({type(model).__name__})")
        synthesized = batch is not example_input
        found = verify_symmetries(model, found, batch, synthesized=synthesized)
    notes = call_notes(model, example_input) if example_input is not None else []
    return Symmetries(found, [*notes, *graph_notes])


class Symmetries(list[Symmetry]):
    """The list :func:`symmetries` returns, with ``notes``: how the model was called to find
    them (e.g. ``use_cache=False`` for a Hugging Face decoder, called directly or inside a
    user's module, see :mod:`paramsym.core.calls`) and how its graph was made (a stack of
    identical blocks traced once per distinct block, see
    :mod:`paramsym.symmetry.graph.repeat`; a cache's writes left out, see
    :mod:`paramsym.symmetry.graph.trace`)."""

    def __init__(self, found: list[Symmetry] = (), notes: list[str] = ()) -> None:  # type: ignore[assignment]
        super().__init__(found)
        self.notes = tuple(notes)


def _warn_training_mode(model: nn.Module, random: list[str]) -> None:
    """Detection on a traced forward with dropout in training mode (the chain analysis of an
    ``nn.Sequential`` without input notes it on each symmetry instead)."""
    listing = ", ".join(f"'{name}'" for name in random[:3])
    more = f" and {len(random) - 3} more" if len(random) > 3 else ""
    warnings.warn(
        f"symmetries: {type(model).__name__} is in training mode with dropout {listing}{more}: "
        "the symmetries are those of the evaluation-mode function (dropout the identity); "
        "in training mode they hold in distribution only, and they are not verified "
        "numerically (the forward is random). Call model.eval() first",
        TrainingModeWarning,
        stacklevel=3,
    )


def _detect(
    model: nn.Module,
    example_input: Any,
    strict: bool,
    data_dependent: bool,
    loss_fn: Callable[..., Any] | None,
) -> tuple[list[Symmetry], Any]:
    """The symmetries and the batch they were found on (``None``: the module analysis)."""
    if example_input is not None:
        found = _from_graph(model, example_input, strict, data_dependent, loss_fn)
        if found is not None:
            return found, example_input
    if example_input is None and isinstance(model, nn.Sequential):
        hazards = chain_hazards(model)
        if hazards:
            example_input = _synthetic_input(model, hazards)
            found = _from_graph(model, example_input, strict, data_dependent, loss_fn)
            if found is not None:
                return found, example_input
    walker = _Walker(loss_fn)
    walker.module(model, "", at_input=True, at_output=True)
    if walker.unanalysed:
        if example_input is None and not walker.found and _needs_trace(model):
            raise InvalidArgumentError(
                f"symmetries({type(model).__name__}): '{type(model).__name__}' has its own "
                "forward, which paramsym can only see by tracing it: pass "
                "example_input=<a batch the model accepts>"
            )
        _report(model, walker.unanalysed, strict, traced=example_input is not None)
    found = walker.found
    if not data_dependent:
        found = [s for s in found if not s.data_dependent]
    return found, example_input


def _synthetic_input(model: nn.Sequential, hazards: list[ChainHazard]) -> Tensor:
    """:func:`_linear_input`, or the error that asks for ``example_input``."""
    batch = _linear_input(model)
    if batch is None:
        raise InvalidArgumentError(
            f"symmetries({type(model).__name__}): {hazards[0].message}, which the module-by-module "
            "reading of an nn.Sequential cannot see: pass example_input=<a batch the model "
            "accepts> to trace the forward"
        )
    return batch


def _linear_input(model: nn.Sequential) -> Tensor | None:
    """A (2, in_features) batch for a chain whose first parametrised module is a linear layer
    (``None`` otherwise): the shape the chain analysis assumes."""
    first = next((m for m in model.modules() if next(m.parameters(False), None) is not None), None)
    features = getattr(first, "in_features", None)
    if first is None or not isinstance(features, int):
        return None
    weight = next(first.parameters())
    if not weight.is_floating_point():
        return None
    generator = torch.Generator().manual_seed(0)
    return torch.randn(2, features, generator=generator, dtype=weight.dtype).to(weight.device)


def _needs_trace(model: nn.Module) -> bool:
    return not isinstance(model, nn.Sequential) and _analyser(model) is None


def _blocks(model: nn.Module, name: str = "") -> list[tuple[str, nn.Module]]:
    """The outermost modules with a block analyser (the root included)."""
    if _analyser(model) is not None:
        return [(name, model)]
    found = []
    for child_name, child in model.named_children():
        found += _blocks(child, _join(name, child_name))
    return found


def _from_graph(
    model: nn.Module,
    example_input: Any,
    strict: bool,
    data_dependent: bool,
    loss_fn: Callable[..., Any] | None,
) -> list[Symmetry] | None:
    """Graph detection with the registered blocks; ``None`` after a failed trace (warned)."""
    from paramsym.symmetry.graph import TraceError
    from paramsym.symmetry.graph.cache import cached_analyse

    label = type(model).__name__
    try:
        analysis = cached_analyse(model, example_input, loss_fn)
    except TraceError as failure:
        _check_runs(model, example_input)
        message = (
            f"symmetries: could not trace the forward of '{label}' ({failure.reason}); "
            "falling back to the module-by-module analysis, which sees nn.Sequential chains "
            "and registered blocks only"
        )
        if strict:
            raise UnsupportedModuleError(message) from None
        warnings.warn(message, UnanalysedModuleWarning, stacklevel=3)
        return None
    walker = _Walker(loss_fn)
    covered: set[str] = set()
    for name, block in _blocks(model):
        walker.module(block, name, at_input=False, at_output=False)
        prefix = f"{name}." if name else ""
        covered.update(prefix + p for p, _ in block.named_parameters())
    moves_block = {
        s.name for s in analysis.symmetries if covered & set(s.parameter_names)
    }  # graph symmetries touching a block's parameters: the block's analyser decides
    found = [s for s in analysis.symmetries if s.name not in moves_block] + walker.found
    parameters = {name for name, _ in model.named_parameters()}
    unanalysed = [
        f"parameter '{p}' ({why})"
        for p, why in analysis.unexplained.items()
        if p in parameters and p not in covered
    ] + walker.unanalysed
    if unanalysed:
        _report(model, unanalysed, strict, traced=True)
    if data_dependent and isinstance(model, nn.Sequential) and not chain_hazards(model):
        chain = _Walker(loss_fn)
        chain.module(model, "", at_input=True, at_output=True)
        found += [s for s in chain.found if s.data_dependent]
    return Symmetries(found, analysis.notes)


def _check_runs(model: nn.Module, example_input: Any) -> None:
    """Raise naming the input when the forward itself rejects ``example_input`` (then the
    failed trace says nothing about tracing)."""
    args, kwargs = call_arguments(model, example_input)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    except Exception as error:  # the model's own error, whatever its type
        given = list(kwargs) if kwargs else [type(a).__name__ for a in args]
        raise InvalidArgumentError(
            f"symmetries: the forward of '{type(model).__name__}' rejects example_input "
            f"({given}): {type(error).__name__}: {str(error).strip()[:200]}; pass a batch the "
            "model accepts"
        ) from error


def _report(model: nn.Module, unanalysed: list[str], strict: bool, *, traced: bool) -> None:
    listing = "; ".join(unanalysed[:10])
    more = f"; and {len(unanalysed) - 10} more" if len(unanalysed) > 10 else ""
    root = ""
    if not traced:
        root = " Pass example_input=<a batch> to trace the forward and analyse its graph."
        if _needs_trace(model):
            root = (
                f" '{type(model).__name__}' (the model) is not an nn.Sequential, so paramsym "
                "did not see how its parts connect and analysed its known blocks only." + root
            )
    if strict:
        raise UnsupportedModuleError(
            f"symmetries(strict=True): cannot analyse {len(unanalysed)} module(s): "
            f"{listing}{more}.{root}"
        )
    warnings.warn(
        f"symmetries: {len(unanalysed)} module(s) were not analysed, so symmetries involving "
        f"them are not reported: {listing}{more}.{root} Pass strict=True to make this an error.",
        UnanalysedModuleWarning,
        stacklevel=3,
    )
