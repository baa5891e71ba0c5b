"""Samples for exact discovery: parameter draws θ, data batches, and loss gradients.

Parameter draws (``theta=``):

* ``"init"`` (default): the model's own initialisation drawn again, by calling
  ``reset_parameters()`` on a copy of every module that has one, under a seed taken from the
  discovery's generator. Parameters of modules without ``reset_parameters`` are drawn as in
  ``"gaussian"``; a parameter whose initialisation is a constant (BatchNorm's and LayerNorm's
  weight 1 and bias 0) gets Gaussian noise around it, otherwise every draw would share that
  point and any generator that vanishes there (M·1 = 0 on a norm layer's weight) would pass
  for a symmetry. A symmetry must hold at every θ, and the init distribution covers the
  region where the model is used.
* ``"gaussian"``: θ = θ₀ + s · rms(θ₀_k) · ε per tensor k, ε ~ N(0, I), around the model's
  current point θ₀ (``s = theta_scale``; a zero tensor uses rms 1). Useful to study the
  symmetries near a trained point.
* a callable ``theta(generator) -> params dict``.

Data (``data=``): one ``(x, y)`` batch, a sequence or iterable of batches (cycled), or a
callable that returns a fresh batch (called with the generator if it takes an argument). In a
batch, x is a tensor or a mapping of tensors with the batch axis first (keyword inputs, as a
Hugging Face model takes them: ``{"input_ids": ids}`` or a tokenizer's ``BatchEncoding``;
:mod:`paramsym.core.batches`), and y a tensor. The model is called as
:func:`paramsym.functional_call` calls it: a mapping as keyword inputs, with
``use_cache=False`` for a decoder. ``loss_fn`` receives what the model returns (a
``ModelOutput`` too).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from paramsym.core.backends import differentiable_attention
from paramsym.core.batches import (
    Inputs,
    as_inputs,
    batch_length,
    floats_to,
    one_sample_batch,
    samples,
    tensors,
)
from paramsym.core.params import Params, check_finite, functional_call
from paramsym.errors import InvalidArgumentError, NonFiniteError, ShapeError

Batch = tuple[Inputs, Tensor]
"""``(x, y)``: x a tensor or named tensors (keyword inputs), batch axis first; y a tensor."""
ThetaSpec = Literal["init", "gaussian"] | Callable[[torch.Generator], Mapping[str, Tensor]]
DataSpec = Batch | Iterable[Batch] | Callable[..., Batch]
LossFn = Callable[[Any, Tensor], Tensor]


def _seed(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (1,), generator=generator))


class ParameterSampler:
    """Draws θ (a params dict over ``names``, in ``dtype``) as the module docstring describes."""

    def __init__(
        self,
        model: nn.Module,
        names: Sequence[str],
        spec: ThetaSpec,
        scale: float,
        dtype: torch.dtype,
        generator: torch.Generator,
        center: Mapping[str, Tensor] | None = None,
    ) -> None:
        if not callable(spec) and spec not in ("init", "gaussian"):
            raise InvalidArgumentError(
                f"theta: expected 'init', 'gaussian' or a callable, got {spec!r}"
            )
        if not (math.isfinite(scale) and scale > 0):
            raise InvalidArgumentError(f"theta_scale must be finite and > 0, got {scale}")
        self.names = list(names)
        self.spec = spec
        self.scale = float(scale)
        self.dtype = dtype
        self.generator = generator
        own = dict(model.named_parameters())
        base = {n: (center[n] if center is not None else own[n]).detach() for n in self.names}
        self.center = {n: t.to(dtype) for n, t in base.items()}
        self.notes: list[str] = []
        self.keep = POINTS_KEPT  # draws kept with the result (draw_sample)
        self._copy: nn.Module | None = None
        self._uncovered: list[str] = []
        self._constant: list[str] = []
        if spec == "init":
            self._copy = copy.deepcopy(model)
            covered = set()
            for prefix, module in self._copy.named_modules():
                if callable(getattr(module, "reset_parameters", None)):
                    for n, _ in module.named_parameters(recurse=False):
                        covered.add(f"{prefix}.{n}" if prefix else n)
            self._uncovered = [n for n in self.names if n not in covered]
            if self._uncovered:
                self.notes.append(
                    f"parameters {self._uncovered[:5]} have no reset_parameters(); they are "
                    "drawn around the model's values as with theta='gaussian'"
                )

    def _gaussian(self, name: str) -> Tensor:
        return self._spread(self.center[name])

    def _spread(self, t: Tensor) -> Tensor:
        """t + s · rms(t) · ε (rms 1 for a zero tensor)."""
        rms = float(t.pow(2).mean().sqrt()) if t.numel() else 0.0
        noise = torch.randn(t.shape, generator=self.generator, dtype=self.dtype).to(t.device)
        return t + self.scale * (rms if rms > 0 else 1.0) * noise

    def draw(self) -> Params:
        """One θ as a dict of fresh tensors."""
        if callable(self.spec):
            drawn = self.spec(self.generator)
            missing = [n for n in self.names if n not in drawn]
            if missing:
                raise InvalidArgumentError(f"theta callable: the draw lacks parameters {missing}")
            out = {n: drawn[n].detach().to(self.dtype, copy=True) for n in self.names}
        elif self.spec == "gaussian":
            out = {n: self._gaussian(n) for n in self.names}
        else:
            assert self._copy is not None
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(_seed(self.generator))
                with torch.no_grad():
                    for module in self._copy.modules():
                        reset = getattr(module, "reset_parameters", None)
                        if callable(reset) and any(True for _ in module.parameters(recurse=False)):
                            reset()
            own = dict(self._copy.named_parameters())
            out = {}
            for n in self.names:
                if n in self._uncovered:
                    out[n] = self._gaussian(n)
                    continue
                value = own[n].detach().to(self.dtype, copy=True)
                if value.numel() > 1 and bool((value == value.reshape(-1)[0]).all()):
                    # a constant initialisation (a norm layer's weight 1 and bias 0) would
                    # make every draw the same point there: spread it so that θ is generic
                    if n not in self._constant:
                        self._constant.append(n)
                        self.notes.append(
                            f"parameter {n} is constant at initialisation; it is drawn with "
                            "Gaussian noise around that value so that the draws are generic"
                        )
                    value = self._spread(value)
                out[n] = value
        check_finite(out, "discover_symmetries (a sampled θ)")
        return out


BATCH_FORMS = (
    "an (x, y) pair: x a tensor or a mapping of tensors with the batch axis first (keyword "
    "inputs such as {'input_ids': ids}), y a tensor"
)


def _check_batch(batch: Any, dtype: torch.dtype, where: str) -> Batch:
    """``batch`` as ``(x, y)`` with x's floating tensors and a floating y in ``dtype``; raises
    naming what is wrong (and the accepted forms)."""
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise InvalidArgumentError(
            f"{where}: a batch must be {BATCH_FORMS}; got {type(batch).__name__}"
        )
    x, y = batch
    if not isinstance(x, (Tensor, Mapping)):
        raise InvalidArgumentError(
            f"{where}: a batch must be {BATCH_FORMS}; got x of type {type(x).__name__}"
        )
    if not isinstance(y, Tensor):
        raise InvalidArgumentError(
            f"{where}: a batch must be {BATCH_FORMS}; got y of type {type(y).__name__}"
        )
    if isinstance(x, Tensor) and x.numel() == 0:
        raise InvalidArgumentError(f"{where}: the batch x is empty")
    x = floats_to(as_inputs(x, where, "the batch x"), dtype)
    if y.is_floating_point():
        y = y.to(dtype)
    if any(t.is_floating_point() and not bool(torch.isfinite(t).all()) for t in tensors(x)):
        raise NonFiniteError(f"{where}: the batch x has NaN or infinite entries")
    if not any(bool((t != 0).any()) for t in tensors(x)):
        raise InvalidArgumentError(
            f"{where}: the input batch x is all zero; the loss gradients then carry no "
            "information about how the parameters act on data, so no symmetry can be "
            "decided. Pass real (or random) inputs"
        )
    return x, y


def _is_single_batch(data: Any) -> bool:
    """Whether ``data`` is one ``(x, y)`` batch rather than a sequence of batches."""
    return (
        isinstance(data, (tuple, list))
        and len(data) == 2
        and (isinstance(data[0], (Tensor, Mapping)) or isinstance(data[1], Tensor))
    )


class DataStream:
    """Batches from ``data`` (see the module docstring), checked and cast to ``dtype``."""

    def __init__(self, data: DataSpec, dtype: torch.dtype, generator: torch.Generator) -> None:
        self.dtype = dtype
        self.generator = generator
        self.single: Batch | None = None
        self._draw: Callable[[], Any] | None = None
        self._sequence: list[Any] | None = None
        self._iterable: Iterable[Any] | None = None
        self._iterator: Iterator[Any] | None = None
        self._index = 0
        self._pending: Batch | None = None
        if _is_single_batch(data):
            self.single = _check_batch(data, dtype, "discover_symmetries(data)")
            self.kind = "batch"
        elif callable(data):
            takes_generator = _takes_argument(data)
            self._draw = (lambda: data(generator)) if takes_generator else data
            self.kind = "callable"
        elif isinstance(data, Sequence):
            if len(data) == 0:
                raise InvalidArgumentError(
                    "discover_symmetries(data): the list of batches is empty"
                )
            self._sequence = list(data)
            self.kind = "sequence"
        elif isinstance(data, Iterable):
            self._iterable = data
            self.kind = "iterable"
        else:
            raise InvalidArgumentError(
                "discover_symmetries(data): expected an (x, y) batch, an iterable of batches or "
                f"a callable returning one, got {type(data).__name__}"
            )

    def peek(self) -> Batch:
        """The batch :meth:`next` returns next, without consuming it (an example input)."""
        if self._pending is None:
            self._pending = self.next()
        return self._pending

    def next(self) -> Batch:
        if self._pending is not None:
            batch, self._pending = self._pending, None
            return batch
        if self.single is not None:
            return self.single
        if self._draw is not None:
            return _check_batch(self._draw(), self.dtype, "discover_symmetries(data())")
        if self._sequence is not None:
            batch = self._sequence[self._index % len(self._sequence)]
            self._index += 1
            return _check_batch(batch, self.dtype, "discover_symmetries(data[i])")
        assert self._iterable is not None
        for _ in range(2):
            if self._iterator is None:
                self._iterator = iter(self._iterable)
            try:
                return _check_batch(next(self._iterator), self.dtype, "discover_symmetries(data)")
            except StopIteration:
                if self._iterator is self._iterable:  # a one-shot iterator cannot restart
                    break
                self._iterator = None
        raise InvalidArgumentError(
            "discover_symmetries(data): the iterator of batches ran out; pass a list, a "
            "re-iterable loader or a callable"
        )


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return len(required) >= 1


def _joined(xs: Sequence[Inputs], join: Callable[[list[Tensor]], Tensor]) -> Inputs:
    """The batches' inputs joined tensor by tensor (``torch.cat`` or ``torch.stack``)."""
    plain = [x for x in xs if isinstance(x, Tensor)]
    if len(plain) == len(xs):
        return join(plain)
    named = [x for x in xs if isinstance(x, dict)]
    if len(named) != len(xs) or any(x.keys() != named[0].keys() for x in named):
        raise ShapeError(
            "discover_symmetries(data): every batch's x must have the same form, a tensor or a "
            "mapping with the same keys; got "
            + ", ".join(sorted({str(sorted(x)) if isinstance(x, dict) else "a tensor" for x in xs}))
        )
    return {k: join([x[k] for x in named]) for k in named[0]}


def _shapes(x: Inputs) -> Any:
    return {k: t.shape for k, t in x.items()} if isinstance(x, dict) else x.shape


def loss_gradients(
    model: nn.Module,
    loss_fn: LossFn,
    params: Mapping[str, Tensor],
    names: Sequence[str],
    batches: Sequence[Batch],
    per_example: bool,
) -> Tensor:
    """Flattened loss gradients at θ, shape (b, P): one row per example of every batch
    (``per_example``; a mapping x is split along the batch axis of its tensors) or one per
    batch. One ``vmap`` call when the shapes allow it, a loop otherwise (models that do not
    vmap)."""
    fixed = {k: v for k, v in params.items() if k not in names}
    theta = {n: params[n] for n in names}

    def loss(theta: dict[str, Tensor], xs: Inputs, ys: Tensor) -> Tensor:
        return loss_fn(functional_call(model, {**fixed, **theta}, xs), ys)

    gradient = torch.func.grad(loss)
    if per_example:
        xs = _joined([b[0] for b in batches], torch.cat)
        ys = torch.cat([b[1] for b in batches])
        count = batch_length(xs, "discover_symmetries(data)", "x")
        if ys.ndim == 0 or ys.shape[0] != count:
            raise ShapeError(
                f"discover_symmetries(data): per_example=True splits x and y into examples, but "
                f"x has {count} and y has shape {tuple(ys.shape)}; give y one row per example"
            )

        def one(theta: dict[str, Tensor], xi: Inputs, yi: Tensor) -> dict[str, Tensor]:
            return gradient(theta, one_sample_batch(xi), yi.unsqueeze(0))

        fn: Callable[[dict[str, Tensor], Any, Tensor], dict[str, Tensor]] = one
        pieces = list(zip(samples(xs), ys.split(1), strict=True))
    else:
        fn = gradient
        pieces = list(batches)
        same = all(
            _shapes(b[0]) == _shapes(batches[0][0]) and b[1].shape == batches[0][1].shape
            for b in batches
        )
        if not same:
            rows = [gradient(theta, bx, by) for bx, by in pieces]
            return torch.stack([torch.cat([r[n].reshape(-1) for n in names]) for r in rows])
        xs = _joined([b[0] for b in batches], torch.stack)
        ys = torch.stack([b[1] for b in batches])
    try:
        # the math attention kernel has batching rules; the fused CPU kernels' backward has
        # none, so vmap would fall back to a slow loop (with a warning per call)
        with differentiable_attention():
            grads = torch.func.vmap(fn, in_dims=(None, 0, 0))(theta, xs, ys)
    except (RuntimeError, NotImplementedError, ValueError):
        rows = [gradient(theta, bx, by) for bx, by in pieces]
        grads = {n: torch.stack([r[n] for r in rows]) for n in names}
    return torch.cat([grads[n].reshape(len(pieces), -1) for n in names], dim=1)


POINTS_KEPT = 4
"""Parameter draws kept with a result at least (for tangent fields and the catalogue
comparison); see :func:`points_to_keep`."""


def points_to_keep(unknowns: int, numel: int) -> int:
    """Draws to keep so that a field is tested at more values than the discovered span has
    dimensions: d ≤ ``unknowns`` generators have d free coefficients, and at k points a
    candidate field gives k · P equations, so with k · P ≤ d every field (a constant one
    included) would match some combination. At least :data:`POINTS_KEPT`; P + 2 for gl(P)."""
    return max(POINTS_KEPT, -(-(unknowns + 1) // max(1, numel)) + 1)


def draw_sample(
    sampler: ParameterSampler,
    stream: DataStream,
    fixed: Batch | None,
    batches_per_sample: int,
    points: list[Params],
) -> tuple[Params, list[Batch]]:
    """One parameter draw and its batches (the fixed batch of data-dependent discovery, else
    ``batches_per_sample`` fresh ones); the first ``sampler.keep`` draws are appended to
    ``points``."""
    point = sampler.draw()
    if len(points) < sampler.keep:
        points.append(point)
    batches = [fixed] if fixed is not None else [stream.next() for _ in range(batches_per_sample)]
    return point, batches
