"""The :class:`Symmetry` protocol: a group acting on a model's parameters.

A symmetry is a group G with an action ``act(θ, g)`` on parameter dicts that leaves the
network function (or, for a *loss symmetry*, the loss) unchanged (dissertation Def. 1.2.1,
1.3.1). Conventions shared by every implementation:

* ``act`` is a left action: ``act(act(θ, g2), g1) == act(θ, compose(g1, g2))`` and
  ``act(θ, identity()) == θ``.
* Continuous groups are parameterised through the Lie algebra: ``exp(ξ)`` maps coordinates
  ``ξ`` of shape ``(dim,)`` in a fixed basis to a group element, and
  ``tangent(θ, ξ) = d/dt act(θ, exp(t ξ))|_{t=0}`` is the infinitesimal action (a params dict).
  Discrete groups have ``dim == 0`` and zero tangents.
* Group elements are tensors (or tuples of them for products). ``check_element`` validates
  one and raises :class:`~paramsym.errors.InvalidGroupElementError` or
  :class:`~paramsym.errors.ShapeError` naming the symmetry and what is wrong.
* ``act`` and ``tangent`` return a new dict with every key of ``params``; tensors the
  symmetry does not touch are passed through (``act``) or zero (``tangent``).

Most families act on one hidden layer of width h: a set of *slots* (parameter name, neuron
axis, power) along which the layer's neurons are indexed. :class:`NeuronSymmetry` implements
``act`` and ``tangent`` once for all of them; a family supplies how a group element and an
algebra element transform one slot.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import InvalidArgumentError, MissingParameterError, ShapeError

GroupElement = Tensor | tuple["GroupElement", ...]
"""A group element: a tensor, or a tuple of elements for a product of symmetries."""

Preserves = Literal["function", "loss", "distribution"]
"""What the action leaves unchanged: the network function, the loss, or an expectation over the
data distribution (dissertation Def. 1.2.1, 1.3.1, 1.3.6)."""

Region = tuple[str, int, int, int | None]
"""(parameter, axis, start, stop) touched by an action; ``stop=None`` means to the end."""

NON_IDENTITY_DRAWS = 64
"""Draws :meth:`Symmetry.sample` makes with ``non_identity=True`` before it gives up."""


def tree_add(a: GroupElement, b: GroupElement) -> GroupElement:
    """Entrywise ``a + b`` of two group elements of the same structure (tensors or tuples)."""
    if isinstance(a, tuple):
        if not isinstance(b, tuple):
            raise TypeError("tree_add: a tuple element plus a tensor")
        return tuple(tree_add(p, q) for p, q in zip(a, b, strict=True))
    if isinstance(b, tuple):
        raise TypeError("tree_add: a tensor element plus a tuple")
    return a + b


def numerically_equal(a: GroupElement, b: GroupElement) -> bool:
    """Whether two elements of the same structure agree: integer tensors exactly, floating
    ones entrywise to ``sqrt(eps)`` of the coarser dtype (so an element that differs from the
    identity only by rounding counts as the identity)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple)) or len(a) != len(b):
            return False
        return all(numerically_equal(p, q) for p, q in zip(a, b, strict=True))
    if a.shape != b.shape:
        return False
    if not (a.is_floating_point() or b.is_floating_point()):
        return torch.equal(a.cpu(), b.cpu())
    coarser = max(
        (t.dtype for t in (a, b) if t.is_floating_point()), key=lambda d: torch.finfo(d).eps
    )
    difference = (a.detach().cpu().double() - b.detach().cpu().double()).abs()
    return not bool((difference > torch.finfo(coarser).eps ** 0.5).any())


def tree_to(g: GroupElement, device: torch.device | str | None) -> GroupElement:
    """``g`` (a tensor or a tuple of elements) moved to ``device`` (``None``: left where it is)."""
    if isinstance(g, tuple):
        return tuple(tree_to(part, device) for part in g)
    return g if device is None else g.to(device)


@dataclass(frozen=True)
class Slot:
    """One axis of one parameter tensor along which a hidden layer's neurons are indexed.

    Attributes:
        name: parameter name, e.g. ``"0.weight"``.
        axis: the axis indexed by the hidden neuron (0 for the rows of the incoming weight and
            for biases, 1 for the columns of the outgoing weight).
        power: how the group element enters. For a matrix group, ``+1`` transforms the slot
            as ``g · T`` along ``axis`` (incoming) and ``-1`` as ``g⁻ᵀ · T`` along ``axis``,
            which for the columns of an outgoing weight is ``T · g⁻¹``. For a scaling group,
            the slot is multiplied by ``c**power`` (e.g. ``-α`` on the outgoing weight of an
            α-homogeneous activation).
        offset: ``None`` if the whole axis is the neuron axis (its size is ``width · block``);
            otherwise the neurons occupy ``[offset, offset + width · block)`` of a longer axis,
            e.g. one attention head's rows in a packed ``in_proj_weight``.
        block: entries per neuron along the axis (1 for neurons; ``head_dim`` when whole
            attention heads are permuted).
    """

    name: str
    axis: int
    power: float = 1.0
    offset: int | None = None
    block: int = 1

    def length(self, width: int) -> int:
        """Number of entries along ``axis`` that the slot covers."""
        return width * self.block

    def region(self, width: int) -> Region:
        start = self.offset or 0
        return (
            self.name,
            self.axis,
            start,
            None if self.offset is None else start + self.length(width),
        )


SlotLike = Slot | str | tuple[str, int] | tuple[str, int, float]


def make_slots(items: Iterable[SlotLike], *, axis: int, power: float) -> tuple[Slot, ...]:
    """Normalise ``"name"``, ``("name", axis)``, ``("name", axis, power)`` or :class:`Slot`."""
    slots = []
    for item in items:
        if isinstance(item, Slot):
            slots.append(item)
        elif isinstance(item, str):
            slots.append(Slot(item, axis, power))
        elif isinstance(item, tuple) and len(item) in (2, 3):
            slots.append(
                Slot(str(item[0]), int(item[1]), float(item[2]) if len(item) == 3 else power)
            )
        else:
            raise InvalidArgumentError(
                f"slot {item!r}: expected a parameter name, (name, axis), (name, axis, power) "
                "or a Slot"
            )
    return tuple(slots)


class Symmetry(abc.ABC):
    """A group acting on parameter dicts (see the module docstring for the conventions).

    Attributes:
        name: unique, readable name, e.g. ``"rescaling[0->2]"``.
        group: the group in words, e.g. ``"GL(8)"``, ``"(R>0)^8"``, ``"S_8"``.
        dim: dimension of the Lie algebra (0 for a discrete group).
        exact: whether the action preserves the function (or loss) exactly; ``False`` for
            approximations, e.g. normalisation layers with ``eps > 0``.
        data_dependent: whether the action needs the input batch ``x``.
        preserves: ``"function"`` (f(g·θ, x) = f(θ, x) for all x) or ``"loss"``.
        linear: whether ``act(·, g)`` is a linear map of the parameters for fixed g (then
            gradients transport as ``A(g)ᵀ ∇L(g·θ) = ∇L(θ)``).
        affine: whether ``act(·, g)`` is affine, θ ↦ A(g)θ + b(g) (linear maps, and
            translations such as the softmax's); gradients transport the same way.
        notes: caveats, e.g. about batch statistics or dropout.
    """

    def __init__(
        self,
        *,
        name: str,
        group: str,
        dim: int,
        exact: bool = True,
        data_dependent: bool = False,
        preserves: Preserves = "function",
        linear: bool = True,
        affine: bool | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.group = group
        self.dim = int(dim)
        self.exact = bool(exact)
        self.data_dependent = bool(data_dependent)
        self.preserves: Preserves = preserves
        self.linear = bool(linear)
        self.affine = self.linear if affine is None else bool(affine) or self.linear
        self.notes = tuple(notes)

    buffer_names: frozenset[str] = frozenset()
    """Buffers the action must move to stay exact (BatchNorm's running statistics in
    evaluation mode). ``act`` needs them in the params dict and raises naming them otherwise;
    ``tangent`` is a parameter-space vector and leaves them out."""

    translation: bool = False
    """Whether the action is a translation θ ↦ θ + b(g) (its linear part the identity): then
    ∇L(g·θ) = ∇L(θ), and no objective of ∇L alone changes along the group (gradient
    transport leaves such symmetries where they are)."""

    shifts_by_reads: bool = False
    """Whether the action only adds to :attr:`parameter_names` amounts that depend on the group
    element and on :attr:`reads` alone, act(θ, g) = θ + b(g, θ_reads), leaving the read
    parameters fixed (:mod:`paramsym.symmetry.absorption`). Then ∇L(g·θ) keeps its components
    on the moved parameters and changes on the read ones by −(∂b/∂θ_reads)ᵀ∇L, exactly: the
    gradient-transport teleport takes such actions
    (:func:`~paramsym.teleportation.transport_obstacle`)."""

    moves_frozen: bool = False
    """Whether the symmetry is built to move parameters with ``requires_grad=False`` (the
    scales of a :class:`~paramsym.teleportation.ScaledModel`). Teleportation keeps every other
    frozen parameter fixed: it leaves out (default) or refuses (explicit) symmetries that
    would move one."""

    # -- description -----------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def parameter_names(self) -> tuple[str, ...]:
        """Names of the parameters the action changes (buffers are in :attr:`buffer_names`)."""

    @property
    def reads(self) -> tuple[str, ...]:
        """Parameters the action reads but leaves unchanged: the amounts it moves
        :attr:`parameter_names` by depend on them (a norm's γ, a weight that absorbs a
        translated bias; :mod:`paramsym.symmetry.absorption`). A covector transported along the
        action changes on them too; empty for most families."""
        return ()

    @property
    def touched_regions(self) -> frozenset[Region]:
        """Regions (parameter, axis, start, stop) the action mixes. Two actions whose regions
        do not overlap commute (see :func:`regions_overlap`)."""
        return frozenset()

    @property
    def discrete(self) -> bool:
        """Whether the group is discrete (no Lie algebra, no flat directions)."""
        return self.dim == 0

    @property
    def order(self) -> int | None:
        """The number of elements of a finite group (``h!`` for S_h, ``2**h`` for (Z_2)^h);
        ``None`` for a continuous group, or a finite one whose family does not say."""
        return None

    def __repr__(self) -> str:
        flags = [] if self.exact else ["approximate"]
        if self.preserves == "loss":
            flags.append("loss symmetry")
        if self.data_dependent:
            flags.append("data-dependent")
        extra = f", {', '.join(flags)}" if flags else ""
        return f"{type(self).__name__}({self.name!r}, group={self.group}, dim={self.dim}{extra})"

    # -- group structure -------------------------------------------------------------------
    def identity(
        self, dtype: torch.dtype | None = None, device: torch.device | str | None = None
    ) -> GroupElement:
        """The identity element, in ``dtype`` (default: torch's default dtype) on ``device``."""
        return tree_to(self._identity(_default_dtype(dtype)), device)

    def sample(
        self,
        scale: float = 0.1,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        *,
        non_identity: bool = False,
    ) -> GroupElement:
        """A random element, drawn on the CPU from ``generator`` and moved to ``device``.
        Continuous groups return ``exp(M)`` for a Gaussian algebra element M of size about
        ``scale`` (see each family's ``_sample``); discrete groups ignore ``scale`` and draw
        uniformly.

        ``non_identity=True`` redraws until the element is not numerically the identity (some
        entry differs from :meth:`identity`'s by more than ``sqrt(eps)`` of ``dtype``): a
        uniform draw from the group without its identity for a finite group, which a check of
        the action needs (a random permutation of two heads is the identity half the time).
        Raises :class:`~paramsym.errors.InvalidArgumentError` for a group with no other
        element (:attr:`order` 1), or when ``NON_IDENTITY_DRAWS`` draws all gave the identity
        (``scale`` 0, or a finite group whose only element it is)."""
        dtype = _default_dtype(dtype)
        if not non_identity:
            return tree_to(self._sample(scale, generator, dtype), device)
        if self.order == 1:
            raise InvalidArgumentError(
                f"{self.name}: {self.group} has no element but the identity, so it has no "
                "non-identity element to sample"
            )
        identity = self._identity(dtype)
        for _ in range(NON_IDENTITY_DRAWS):
            g = self._sample(scale, generator, dtype)
            if not numerically_equal(g, identity):
                return tree_to(g, device)
        raise InvalidArgumentError(
            f"{self.name}: {NON_IDENTITY_DRAWS} draws from {self.group} at scale {scale} were "
            "all the identity; use a larger scale (a finite group whose only element is the "
            "identity has nothing else to draw)"
        )

    def _identity(self, dtype: torch.dtype) -> GroupElement:
        """The identity element on the CPU; what a family implements for :meth:`identity`."""
        raise NotImplementedError(f"{type(self).__name__} defines no identity element")

    def _sample(self, scale: float, generator: torch.Generator | None, dtype: torch.dtype) -> Any:
        """A random element on the CPU; what a family implements for :meth:`sample`."""
        raise NotImplementedError(f"{type(self).__name__} defines no sampling")

    @abc.abstractmethod
    def exp(self, xi: Tensor) -> GroupElement:
        """The exponential map from algebra coordinates ``xi`` (shape ``(dim,)``)."""

    def linear_element(self, xi: Tensor) -> GroupElement:
        """The first-order element ``e + ξ``: the identity plus d/dt exp(tξ) at t = 0, the
        I + T parameterisation of seed 001 (Algorithm 1). It need not lie in the group (for
        O(h) it never does); validate it with :meth:`check_element`. This default
        differentiates :meth:`exp` with ``torch.func.jvp``; families override it with the
        closed form (tested against this default)."""
        identity, rate = torch.func.jvp(self.exp, (torch.zeros_like(xi),), (xi,))[:2]
        return tree_add(identity, rate)

    @abc.abstractmethod
    def compose(self, g1: GroupElement, g2: GroupElement) -> GroupElement:
        """The product g1·g2, so that ``act(θ, compose(g1, g2)) == act(act(θ, g2), g1)``."""

    @abc.abstractmethod
    def inverse(self, g: GroupElement) -> GroupElement:
        """The inverse element."""

    @abc.abstractmethod
    def check_element(self, g: GroupElement) -> GroupElement:
        """Validate ``g`` (shape, membership); return it, or raise naming the problem."""

    # -- action ----------------------------------------------------------------------------
    @abc.abstractmethod
    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        """Return g·θ as a new params dict. ``x`` is the input batch (data-dependent actions)."""

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        """``d/dt act(θ, exp(t ξ))`` at t = 0, by forward-mode autodiff through ``act``.

        Families override this with a closed form; this generic version is their test oracle.
        """
        xi = self.check_xi(xi)
        if self.dim == 0:
            return {k: torch.zeros_like(t) for k, t in params.items()}
        zero = torch.zeros_like(xi)
        out = torch.func.jvp(lambda z: self.act(params, self.exp(z), x), (zero,), (xi,))[1]
        return dict(out)

    def cotangent_pullback(
        self, params: Mapping[str, Tensor], cotangent: Mapping[str, Tensor], x: Tensor | None = None
    ) -> Tensor:
        """T_sᵀ c, shape ``(dim,)``: a covector on parameter space (``cotangent``, e.g. ∇_θJ, a
        params-shaped dict) pulled back to the Lie algebra, ∂/∂ξ ⟨c, :meth:`tangent` (θ, ξ)⟩.
        This is ∂J(exp(ξ)·θ)/∂ξ at ξ = 0 for c = ∇_θJ (teleportation's ascent direction).

        Generic version: the tangent on :attr:`parameter_names` (and the :attr:`reads` it
        depends on), differentiated in ξ;
        slot-based families override it with one that reads only their slots' regions."""
        own = {k: params[k] for k in (*self.parameter_names, *self.reads) if k in params}
        ref = next(iter(own.values()), None)
        dtype = ref.dtype if ref is not None else torch.get_default_dtype()
        xi = torch.zeros(self.dim, dtype=dtype, device=ref.device if ref is not None else None)
        if self.dim == 0 or ref is None:
            return xi
        xi.requires_grad_(True)
        with torch.enable_grad():
            rate = self.tangent(own, xi, x)
            pairing = torch.stack([(rate[k] * cotangent[k]).sum() for k in own]).sum()
            (gradient,) = torch.autograd.grad(pairing, xi, allow_unused=True)
        return torch.zeros_like(xi) if gradient is None else gradient.detach()

    # -- helpers for implementations -------------------------------------------------------
    def check_xi(self, xi: Tensor) -> Tensor:
        """Validate Lie-algebra coordinates: a floating tensor of shape ``(dim,)``."""
        if not isinstance(xi, Tensor) or xi.shape != (self.dim,):
            shape = tuple(xi.shape) if isinstance(xi, Tensor) else type(xi).__name__
            raise ShapeError(
                f"{self.name}: Lie-algebra coordinates must be a tensor of shape ({self.dim},), "
                f"got {shape}"
            )
        if not xi.is_floating_point():
            raise InvalidArgumentError(f"{self.name}: Lie-algebra coordinates must be floating")
        return xi

    def _element_tensor(self, g: Any, shape: tuple[int, ...], what: str) -> Tensor:
        if not isinstance(g, Tensor):
            raise ShapeError(f"{self.name}: {what} must be a tensor, got {type(g).__name__}")
        if tuple(g.shape) != shape:
            raise ShapeError(f"{self.name}: {what} must have shape {shape}, got {tuple(g.shape)}")
        return g


def _default_dtype(dtype: torch.dtype | None) -> torch.dtype:
    return torch.get_default_dtype() if dtype is None else dtype


class NeuronSymmetry(Symmetry):
    """Base of the families acting on one hidden layer of ``width`` neurons through ``slots``.

    Subclasses implement :meth:`_prepare` (turn a validated element into what
    :meth:`_transform` needs, e.g. g and g⁻ᵀ), :meth:`_transform` (one slot under g) and, for
    continuous groups, :meth:`_algebra` and :meth:`_differential` (one slot under the
    infinitesimal generator).
    """

    def __init__(
        self,
        width: int,
        incoming: Sequence[SlotLike],
        outgoing: Sequence[SlotLike] = (),
        *,
        family: str,
        group: str,
        dim: int,
        outgoing_power: float = -1.0,
        site: str | None = None,
        exact: bool = True,
        notes: Sequence[str] = (),
    ) -> None:
        """``incoming`` slots default to axis 0 and power +1, ``outgoing`` slots to axis 1 and
        ``outgoing_power``; the name is ``"<family>[<site>]"``."""
        slots_in = make_slots(incoming, axis=0, power=1.0)
        slots_out = make_slots(outgoing, axis=1, power=outgoing_power)
        if width < 1:
            raise InvalidArgumentError(f"{family}: width must be >= 1, got {width}")
        if not slots_in and not slots_out:
            raise InvalidArgumentError(f"{family}: needs at least one slot")
        self.width = int(width)
        self.slots = slots_in + slots_out
        self.site = site or default_site(slots_in, slots_out)
        super().__init__(
            name=f"{family}[{self.site}]", group=group, dim=dim, exact=exact, notes=notes
        )

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.name for s in self.slots if s.name not in self.buffer_names))

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset(s.region(self.width) for s in self.slots)

    per_neuron: bool = True
    """Whether each neuron has its own group component (then slots must have size ``width``)."""

    def check_params(self, params: Mapping[str, Tensor], *, buffers: bool = True) -> None:
        """Raise unless each slot's parameter is present, finite, of size ``width`` on its axis
        (buffer slots too, unless ``buffers=False``)."""
        for slot in self.slots:
            if slot.name not in params and slot.name in self.buffer_names:
                if not buffers:
                    continue
                raise MissingParameterError(
                    f"{self.name} moves the buffer '{slot.name}' to keep the model's function "
                    "(running statistics used in evaluation mode), and params does not hold "
                    "it; pass the buffers with the parameters: "
                    "{**ps.params_of(model), **dict(model.named_buffers())}"
                )
            if slot.name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{slot.name}', which is not in params "
                    f"(got {sorted(params)[:8]}...); pass the parameters of the model the "
                    "symmetry was found on"
                )
            t = params[slot.name]
            if not self.per_neuron:
                continue
            size = t.shape[slot.axis] if slot.axis < t.ndim else None
            needed = slot.length(self.width)
            fits = (
                size == needed
                if slot.offset is None
                else size is not None and size >= slot.offset + needed
            )
            if not fits:
                where = "" if slot.offset is None else f" from offset {slot.offset}"
                raise ShapeError(
                    f"{self.name}: parameter '{slot.name}' has shape {tuple(t.shape)}, expected "
                    f"{needed} entries along axis {slot.axis}{where}"
                )
        check_finite(((n, params[n]) for n in self.parameter_names), self.name)

    def _read(self, t: Tensor, slot: Slot) -> Tensor:
        """The slot's region of ``t``, with the neuron axis at ``slot.axis`` (size ``width``)."""
        if slot.offset is None and slot.block == 1:
            return t
        region = t.narrow(slot.axis, slot.offset or 0, slot.length(self.width))
        return region.unflatten(slot.axis, (self.width, slot.block)) if slot.block > 1 else region

    def _write(self, t: Tensor, slot: Slot, region: Tensor) -> Tensor:
        """``t`` with the slot's region replaced by ``region`` (as returned by :meth:`_read`)."""
        if slot.block > 1:
            region = region.flatten(slot.axis, slot.axis + 1)
        if slot.offset is None:
            return region
        start, length = slot.offset, slot.length(self.width)
        before = t.narrow(slot.axis, 0, start)
        after = t.narrow(slot.axis, start + length, t.shape[slot.axis] - start - length)
        return torch.cat([before, region, after], dim=slot.axis)

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        self.check_params(params)
        return self.act_unchecked(params, g)

    def act_unchecked(self, params: Mapping[str, Tensor], g: GroupElement) -> Params:
        """:meth:`act` without validating ``params`` (presence, sizes, finiteness), for inner
        loops whose caller validated them once (weight matching's coordinate descent)."""
        ref = params[self.slots[0].name]
        prepared = self._prepare(g, ref.dtype, ref.device)
        out = dict(params)
        for slot in self.slots:
            t = out[slot.name]
            out[slot.name] = self._write(
                t, slot, self._transform(self._read(t, slot), slot, prepared)
            )
        return out

    @property
    def acts_in_place(self) -> bool:
        """Whether :meth:`act_in_place` is this family's action (its slots transformed one by
        one, linearly, no data): a subclass with its own :meth:`act`, an affine or a
        data-dependent one is not."""
        cls = type(self)
        return (
            self.linear
            and not self.data_dependent
            and cls.act is NeuronSymmetry.act
            and cls.act_unchecked is NeuronSymmetry.act_unchecked
        )

    def act_in_place(
        self,
        params: MutableMapping[str, Tensor],
        g: GroupElement,
        owned: set[str] | None = None,
    ) -> None:
        """:meth:`act_unchecked` writing each slot's region into the tensors of ``params``: no
        copy of the rest of a large tensor per group, as a per-head group acting on a packed
        projection would make. ``owned``: the names whose tensors the caller owns (``None``:
        all); another tensor is replaced, not written (a slot that covers it whole computes it
        out of place, else it is copied first), and its name added. Only where
        :attr:`acts_in_place`."""
        self._slot_by_slot(params, g, owned, transpose=False)

    def pull_back_in_place(
        self,
        covector: MutableMapping[str, Tensor],
        g: GroupElement,
        owned: set[str] | None = None,
    ) -> None:
        """m ← Aᵀ m for the linear action A: θ ↦ g·θ, region by region (the transpose of
        :meth:`act_in_place`, slots in reverse order), into ``covector`` as
        :meth:`act_in_place` writes ``params``; the parameters ``covector`` lacks are skipped
        (the slots are independent). With g⁻¹ this carries a gradient along a move by g:
        ∇L(g·θ) = A_{g⁻¹}ᵀ ∇L(θ). Only where :attr:`acts_in_place`."""
        self._slot_by_slot(covector, g, owned, transpose=True)

    def _slot_by_slot(
        self,
        tensors: MutableMapping[str, Tensor],
        g: GroupElement,
        owned: set[str] | None,
        transpose: bool,
    ) -> None:
        if not self.acts_in_place:
            raise InvalidArgumentError(f"{self.name}: its action is not slot by slot")
        present = [slot for slot in self.slots if slot.name in tensors]
        if not present:
            return
        ref = tensors[present[0].name]
        prepared = self._prepare(g, ref.dtype, ref.device)
        transform = self._transform_transpose if transpose else self._transform
        for slot in reversed(present) if transpose else present:
            name = slot.name
            if owned is not None and name not in owned:
                owned.add(name)
                if slot.offset is None and slot.block == 1:  # the whole tensor, out of place
                    tensors[name] = transform(tensors[name], slot, prepared)
                    continue
                tensors[name] = tensors[name].clone()
            self._transform_in_place(self._read(tensors[name], slot), slot, prepared, transpose)

    def _transform_in_place(
        self, region: Tensor, slot: Slot, prepared: Any, transpose: bool
    ) -> None:
        """``region`` ← :meth:`_transform` of it (its transpose where ``transpose``); a family
        whose map is elementwise writes it without a temporary (:class:`PositiveScaling`:
        6× faster on a 768 × 2304 projection)."""
        transform = self._transform_transpose if transpose else self._transform
        region.copy_(transform(region, slot, prepared))

    def _transform_transpose(self, t: Tensor, slot: Slot, prepared: Any) -> Tensor:
        """The transpose (adjoint) of :meth:`_transform`'s linear map, applied to ``t``: its
        VJP, which families override with the closed form."""
        vjp = torch.func.vjp(lambda region: self._transform(region, slot, prepared), t)[1]
        return vjp(t.clone())[0]

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        xi = self.check_xi(xi)
        self.check_params(params, buffers=False)
        out = {k: torch.zeros_like(t) for k, t in params.items()}
        if self.dim == 0:
            return out
        present = [slot for slot in self.slots if slot.name in params]
        ref = params[present[0].name]
        generator = self._algebra(xi.to(dtype=ref.dtype, device=ref.device))
        for slot in present:
            t = params[slot.name]
            rate = self._differential(self._read(t, slot), slot, generator)
            out[slot.name] = out[slot.name] + self._write(torch.zeros_like(t), slot, rate)
        return out

    def cotangent_pullback(
        self, params: Mapping[str, Tensor], cotangent: Mapping[str, Tensor], x: Tensor | None = None
    ) -> Tensor:
        """T_sᵀ c (see :meth:`Symmetry.cotangent_pullback`) from the slots' regions alone:
        Σ_slots ⟨rate of the slot, the slot's region of c⟩, differentiated in ξ, without
        :meth:`tangent`'s full-size zeros (a transformer's stream group reads every weight,
        its per-head groups one head's rows of a large matrix). ``params`` is not checked:
        the caller validated it. A subclass with its own :meth:`tangent` gets the generic
        version."""
        if type(self).tangent is not NeuronSymmetry.tangent:
            return super().cotangent_pullback(params, cotangent, x)
        present = [slot for slot in self.slots if slot.name in params]
        if not present or self.dim == 0:
            return super().cotangent_pullback(params, cotangent, x)
        total = None
        for slot in present:
            region = self._read(params[slot.name], slot)
            term = self._pairing(
                region, self._read(cotangent[slot.name], slot).to(region.dtype), slot
            )
            total = term if total is None else total + term
        assert total is not None
        return self._algebra_adjoint(total).detach()

    def _pairing(self, t: Tensor, c: Tensor, slot: Slot) -> Tensor:
        """∂⟨c, :meth:`_differential` (t, slot, M)⟩/∂M: the gradient of the pairing in the
        algebra element M (shaped as :meth:`_algebra`'s output), by autograd; families
        override it with the closed form."""
        zero = torch.zeros(self.dim, dtype=t.dtype, device=t.device)
        generator = self._algebra(zero).detach().requires_grad_(True)
        with torch.enable_grad():
            pairing = (self._differential(t, slot, generator) * c).sum()
            (gradient,) = torch.autograd.grad(pairing, generator, allow_unused=True)
        return torch.zeros_like(generator) if gradient is None else gradient

    def _algebra_adjoint(self, m: Tensor) -> Tensor:
        """The coordinates' gradient ∂⟨m, :meth:`_algebra` (ξ)⟩/∂ξ, shape ``(dim,)``: the
        adjoint of the linear map ξ ↦ M(ξ) (autograd; a reshape for GL)."""
        xi = torch.zeros(self.dim, dtype=m.dtype, device=m.device, requires_grad=True)
        with torch.enable_grad():
            (gradient,) = torch.autograd.grad((self._algebra(xi) * m).sum(), xi, allow_unused=True)
        return torch.zeros_like(xi) if gradient is None else gradient

    @abc.abstractmethod
    def _prepare(self, g: GroupElement, dtype: torch.dtype, device: torch.device) -> Any:
        """Validate ``g`` (as :meth:`check_element` does) and precompute what
        :meth:`_transform` needs from it, in the parameters' dtype and device: ``g`` is cast
        there first and everything derived from it (inverses, powers) computed from the cast
        element, so that the element and its inverse agree to the parameters' precision (a
        float32 g inverted before the cast moves a float64 model's output by ~1e-7)."""

    @abc.abstractmethod
    def _transform(self, t: Tensor, slot: Slot, prepared: Any) -> Tensor:
        """The slot's tensor after the action."""

    def _algebra(self, xi: Tensor) -> Tensor:
        """The algebra element (matrix or vector) with coordinates ``xi``."""
        raise NotImplementedError  # discrete groups never reach this (dim == 0)

    def _differential(self, t: Tensor, slot: Slot, generator: Tensor) -> Tensor:
        """The slot's tangent under the algebra element ``generator``."""
        raise NotImplementedError


def regions_overlap(a: Region, b: Region) -> bool:
    """Whether two regions of the same parameter axis intersect."""
    if a[0] != b[0] or a[1] != b[1]:
        return False
    a_stop = a[3] if a[3] is not None else float("inf")
    b_stop = b[3] if b[3] is not None else float("inf")
    return a[2] < b_stop and b[2] < a_stop


# -- operations along one axis of a tensor ----------------------------------------------------


def matmul_along(t: Tensor, axis: int, matrix: Tensor) -> Tensor:
    """``matrix @ t`` along ``axis``: ``out[..., k, ...] = Σ_j matrix[k, j] t[..., j, ...]``."""
    return torch.movedim(torch.tensordot(matrix, t, dims=([1], [axis])), 0, axis)


def scale_along(t: Tensor, axis: int, factors: Tensor) -> Tensor:
    """Multiply slice k of ``t`` along ``axis`` by ``factors[k]``."""
    shape = [1] * t.ndim
    shape[axis] = factors.numel()
    return t * factors.reshape(shape)


def default_site(incoming: Sequence[Slot], outgoing: Sequence[Slot]) -> str:
    """Readable site label ``"<in module>-><out module>"`` from the slots' parameter names."""

    def module_of(slots: Sequence[Slot]) -> str:
        return slots[0].name.rsplit(".", 1)[0] if slots else "?"

    return f"{module_of(incoming)}->{module_of(outgoing)}" if outgoing else module_of(incoming)


class FamilyNeuronSymmetry(NeuronSymmetry):
    """A neuron symmetry of a fixed family whose group label and Lie-algebra dimension follow
    from the width: the shared constructor of permutations, sign flips, GL(h) and O(h).

    Args:
        width: hidden width h.
        incoming: parameters transformed as ``g · T`` (default axis 0): the incoming weight
            and bias, e.g. ``["0.weight", "0.bias"]``.
        outgoing: parameters transformed by the inverse (default axis 1): the outgoing
            weight, e.g. ``["2.weight"]``.
        site: label used in the name (default ``"<in module>-><out module>"``).
        exact, notes: see :class:`~paramsym.symmetry.Symmetry`.
    """

    family: ClassVar[str]
    group_symbol: ClassVar[str]
    """The group's label with ``{}`` for the width, e.g. ``"GL({})"``."""

    def __init__(
        self,
        width: int,
        incoming: Sequence[SlotLike],
        outgoing: Sequence[SlotLike],
        *,
        site: str | None = None,
        exact: bool = True,
        notes: Sequence[str] = (),
    ) -> None:
        super().__init__(
            width,
            incoming,
            outgoing,
            family=self.family,
            group=self._group(width),
            dim=self._algebra_dimension(width),
            site=site,
            exact=exact,
            notes=notes,
        )
        self._check_slots()

    @classmethod
    def _group(cls, width: int) -> str:
        return cls.group_symbol.format(width)

    @staticmethod
    def _algebra_dimension(width: int) -> int:
        """The Lie algebra's dimension (0 for a finite group)."""
        raise NotImplementedError

    def _check_slots(self) -> None:
        """Raise if the slots do not suit the family (default: any slots do)."""
