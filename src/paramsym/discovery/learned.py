"""Learned symmetry discovery (dissertation §6.5): generators h₁…h_k ∈ gl(P) and an action
network a(g, θ, X) trained so that the infinitesimal action keeps the loss.

The parameters of the target model are flattened, θ ∈ R^P, and the learned group is generated
by k matrices h_i ∈ gl(P) acting through a learned map a: GL(P) × R^P × D → R^P (§6.5.1). The
action network is an MLP on the input encoding

    concat(vec(g) ∈ R^{P²}, θ ∈ R^P, vec(X) ∈ R^D)          (D = 0 with ``action_sees_data=False``)

(row-major vec; X is one sample's inputs, the labels Y are not an input, following the
data-dependent action a_X of Def. 1.3.3) with output θ' ∈ R^P. It is trained with the six terms
of objective (6.3) (:mod:`paramsym.discovery.learned_losses`) on random (θ, X, Y) samples, using
only the infinitesimal action v_i = D_g a|_{I,θ,X}(h_i): the exponential map appears only in
evaluation (:meth:`LearnedSymmetry.curve`, :meth:`LearnedSymmetry.group_elements`).

Choices the text leaves open (notes 001c §4, §9), made here and documented in
:class:`LearnedSymmetryConfig`: β = 1, γ₃ = 1, §6.5.3's weights γ₁ = 10, γ₂ = γ₄ = γ₅ = 1,
γ₆ = 0.1 as the defaults, SiLU activations (smooth, as Thm 6.3.1 assumes), Adam at 10⁻³ with a
cosine decay, batches of 100 samples, 2000 steps.

**The action's form and the generators' initialisation decide whether h is identifiable.** The
text's action is a bare MLP (``action="mlp"``). Its infinitesimal action is
v = J(θ, X) vec(h) with a Jacobian J the network learns freely, so any h can be remapped into
any vector field (notes §9.15), and nothing ties the learned h to the symmetry's generator.
Measured on the p = 2 linear net (§6.5.3, Fig 6.3), 200 steps, 16 seeds: the bare MLP
collapsed to h ≈ 0 (‖v‖ ≪ β; the invariance term wins against |β − ‖v‖| at γ₁ = 10) with
|cos(h, diag(1, −1))| between 0.006 and 0.77. With generators of norm ≈ 1 at initialisation,
h moves little from its random start in that many steps at lr 10⁻³. The default is therefore
``action="residual"``, a(g, θ, X) = gθ + MLP(vec(g), θ, vec(X)): the same network and inputs,
plus the linear action as a skip connection, which the network can correct (for
data-dependent or nonlinear symmetries). The generators start small (``init_scale=0.01``), so
the objective rather than the initialisation picks their direction. Measured in the same
setting: |cos| ≥ 0.9997 on all 16 seeds. The decay of the learning rate removes the
oscillation that the |·| of the invariance term leaves in h. What stays small is the scale:
Adam normalises each entry of h by the large, sign-flipping invariance gradient it sees, so
‖h‖ grows slowly (≈ 0.01 after 200 steps, ≈ 0.05 after 2000), and ‖v‖ stays below β (the
norm term near 1). Compare learned symmetries by direction, by their vector fields v_i, or by
the loss along their curves (:meth:`LearnedSymmetry.loss_along_curve`, Fig 6.6), using
normalised generators.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from paramsym.discovery.action_network import ActionNetwork
from paramsym.discovery.learned_config import (
    MAX_NETWORK_ENTRIES,
    FitHistory,
    LearnedSymmetryConfig,
)
from paramsym.discovery.learned_losses import (
    TERMS,
    FlatLoss,
    SampleLoss,
    Sampler,
    Samples,
    default_pairs,
    field_orthogonality_term,
    invariance_term,
    norm_term,
    orthogonality_term,
    per_sample_losses,
    sparsity_term,
    weighted_total,
)
from paramsym.errors import InvalidArgumentError, NonFiniteError, ShapeError

Callback = Callable[[int, dict[str, float]], None]
"""``callback(epoch, record)``: called after each finished epoch with its mean terms."""


class LearnedSymmetry(nn.Module):
    """Generators h₁…h_k ∈ gl(P) and a learned action a(g, θ, X) (§6.5), trained by
    :meth:`fit` with objective (6.3).

    Args:
        loss: the target, a per-sample loss ``loss(theta (P,), x, y) -> (n,)`` (or a scalar),
            e.g. :func:`~paramsym.discovery.learned_losses.flat_loss` of a model; it must work
            under ``torch.vmap`` and ``torch.func.jvp``.
        num_params: P (default: ``loss.num_params`` for a :class:`FlatLoss`).
        data_dim: D, the number of entries of one sample's x, needed when the action sees the
            data (``config.action_sees_data``).
        config: :class:`LearnedSymmetryConfig`.
        dtype, device: of the generators and the network (default: torch's default dtype, CPU).

    The trainable state (``state_dict``) is the generators ``h`` (k, P, P) and the action
    network; a state dict loads into any LearnedSymmetry built with the same P, D and config.
    """

    def __init__(
        self,
        loss: SampleLoss,
        num_params: int | None = None,
        *,
        data_dim: int | None = None,
        config: LearnedSymmetryConfig | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if not callable(loss):
            raise InvalidArgumentError("LearnedSymmetry: loss must be callable")
        cfg = config or LearnedSymmetryConfig()
        if num_params is None:
            if not isinstance(loss, FlatLoss):
                raise InvalidArgumentError(
                    "LearnedSymmetry: give num_params (P) unless loss is a flat_loss(...)"
                )
            num_params = loss.num_params
        if isinstance(num_params, bool) or int(num_params) != num_params or num_params < 1:
            raise InvalidArgumentError(
                f"LearnedSymmetry: num_params must be an integer ≥ 1, got {num_params!r}"
            )
        P = int(num_params)
        if cfg.action_sees_data:
            if data_dim is None or int(data_dim) < 1:
                raise InvalidArgumentError(
                    "LearnedSymmetry: the action sees the data (config.action_sees_data), so "
                    "give data_dim, the number of entries of one sample's x (e.g. x[0].numel())"
                )
            D = int(data_dim)
        else:
            D = 0
        if cfg.generators > P * P:
            raise InvalidArgumentError(
                f"LearnedSymmetry: {cfg.generators} generators cannot be independent in "
                f"gl({P}), which has dimension {P * P}"
            )
        inputs = P * P + P + D
        first = inputs * (cfg.hidden[0] if cfg.hidden else P)
        if first > MAX_NETWORK_ENTRIES:
            raise InvalidArgumentError(
                f"LearnedSymmetry: the action network's first layer would need {first:,} "
                f"weights (vec(g) has P² = {P * P:,} entries); at most {MAX_NETWORK_ENTRIES:,}. "
                "Learned discovery is for small P; use exact linear discovery for larger models"
            )
        object.__setattr__(self, "_loss", loss)  # never a submodule: not in state_dict
        self.config = cfg
        self.num_params = P
        self.data_dim = D
        kind = dtype or torch.get_default_dtype()
        with torch.random.fork_rng(devices=[]):
            if cfg.seed is not None:
                torch.manual_seed(cfg.seed)
            init = torch.randn(cfg.generators, P, P, dtype=kind) * (cfg.init_scale / P)
            self.h = nn.Parameter(init)
            self.network = ActionNetwork(inputs, cfg.hidden, P, cfg.activation)
        self.to(dtype=kind, device=device)
        self.history = FitHistory()
        self._optimizer: torch.optim.Optimizer | None = None

    # -- properties ------------------------------------------------------------------------
    @property
    def loss(self) -> SampleLoss:
        """The target per-sample loss (held outside ``state_dict``)."""
        value: SampleLoss = self.__dict__["_loss"]
        return value

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the generators and the network."""
        return self.h.dtype

    @property
    def device(self) -> torch.device:
        """The device of the generators and the network."""
        return self.h.device

    def generators(self) -> Tensor:
        """The learned generators h₁…h_k: a detached copy of shape (k, P, P)."""
        return self.h.detach().clone()

    def group_elements(self, t: float = 1.0) -> Tensor:
        """exp(t h_i) for each generator, (k, P, P) (Figs 6.3–6.5, 6.7, bottom rows)."""
        return torch.linalg.matrix_exp(t * self.generators())

    # -- the action ------------------------------------------------------------------------
    def _data(self, x: Tensor | None, batch: int) -> Tensor | None:
        if self.data_dim == 0:
            return None
        if x is None:
            raise InvalidArgumentError(
                "LearnedSymmetry: the action sees the data (config.action_sees_data): pass x"
            )
        flat = x.reshape(batch, -1).to(dtype=self.dtype, device=self.device)
        if flat.shape[1] != self.data_dim:
            raise ShapeError(
                f"LearnedSymmetry: one sample's x has {flat.shape[1]} entries, the action was "
                f"built for data_dim = {self.data_dim}"
            )
        return flat

    def _encode(self, g: Tensor, theta: Tensor, x: Tensor | None) -> Tensor:
        """concat(vec(g), θ, vec(X)) for a batch: (B, P² + P + D)."""
        batch = theta.shape[0]
        parts = [g.reshape(batch, -1), theta]
        data = self._data(x, batch)
        if data is not None:
            parts.append(data)
        return torch.cat(parts, dim=1)

    def _check_theta(self, theta: Tensor, what: str) -> Tensor:
        if theta.ndim not in (1, 2) or theta.shape[-1] != self.num_params:
            raise ShapeError(
                f"LearnedSymmetry.{what}: theta must have shape (P,) or (B, P) with P = "
                f"{self.num_params}, got {tuple(theta.shape)}"
            )
        return theta.to(dtype=self.dtype, device=self.device)

    def _check_matrix(self, g: Tensor, what: str) -> Tensor:
        P = self.num_params
        if g.ndim not in (2, 3) or g.shape[-2:] != (P, P):
            raise ShapeError(
                f"LearnedSymmetry.{what}: expected a (P, P) or (B, P, P) matrix with P = {P}, "
                f"got {tuple(g.shape)}"
            )
        return g.to(dtype=self.dtype, device=self.device)

    def act(self, g: Tensor, theta: Tensor, x: Tensor | None = None) -> Tensor:
        """a(g, θ, X): the learned action of g ∈ GL(P) on θ.

        Args:
            g: (P, P), or (B, P, P) with batched θ.
            theta: (P,) for one sample (then x is that sample's data) or (B, P).
            x: the data (one sample's, or (B, ...)); ignored by a data-independent action.

        Returns:
            θ' with the shape of ``theta``.
        """
        theta = self._check_theta(theta, "act")
        g = self._check_matrix(g, "act")
        single = theta.ndim == 1
        thetas = theta.unsqueeze(0) if single else theta
        batch = thetas.shape[0]
        xs = None if x is None else (x.unsqueeze(0) if single else x)
        gs = g.expand(batch, *g.shape[-2:]) if g.ndim == 2 else g
        if gs.shape[0] != batch:
            raise ShapeError(f"LearnedSymmetry.act: {gs.shape[0]} group elements for {batch} θ")
        out = self._forward_action(gs, thetas, xs)
        return out[0] if single else out

    def _forward_action(self, g: Tensor, theta: Tensor, x: Tensor | None) -> Tensor:
        """a(g, θ, X) on a batch: the network, plus gθ for the residual action."""
        out = self.network(self._encode(g, theta, x))
        if self.config.action == "residual":
            out = out + (g @ theta.unsqueeze(-1)).squeeze(-1)
        return out

    def _linearized(
        self, theta: Tensor, x: Tensor | None
    ) -> tuple[Tensor, Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]:
        """At (I, θ, X) for a batch θ (B, P): a(I, θ, X) (B, P), the map h (m, P, P) ↦
        D_g a(h) (m, B, P), and the map v (m, B, P) ↦ D_θ a(v) (m, B, P)."""
        P = self.num_params
        eye = torch.eye(P, dtype=self.dtype, device=self.device)
        out, push = self.network.linearize(self._encode(eye.expand(theta.shape[0], P, P), theta, x))
        first = self.network.linears[0].weight
        residual = self.config.action == "residual"

        def along_group(h: Tensor) -> Tensor:
            v = push((h.reshape(h.shape[0], P * P) @ first[:, : P * P].T).unsqueeze(1))
            return v + torch.einsum("mij,bj->mbi", h, theta) if residual else v

        def along_theta(v: Tensor) -> Tensor:
            d = push(v @ first[:, P * P : P * P + P].T)
            return d + v if residual else d

        return (out + theta if residual else out), along_group, along_theta

    def infinitesimal_action(
        self, theta: Tensor, x: Tensor | None = None, h: Tensor | None = None
    ) -> Tensor:
        """v = D_g a|_{I,θ,X}(h): the vector fields of the generators at θ (Thm 6.3.1).

        Args:
            theta: (P,) or (B, P).
            x: the data (one sample's, or (B, ...)).
            h: (P, P) or (m, P, P) Lie-algebra elements (default: the learned generators).

        Returns:
            (m, P) or (m, B, P) for m elements (m = k by default); (P,) or (B, P) for a single
            (P, P) ``h``.
        """
        theta = self._check_theta(theta, "infinitesimal_action")
        single = theta.ndim == 1
        thetas = theta.unsqueeze(0) if single else theta
        xs = None if x is None else (x.unsqueeze(0) if single else x)
        elements = self.h if h is None else self._check_matrix(h, "infinitesimal_action")
        one = elements.ndim == 2
        elements = elements.unsqueeze(0) if one else elements
        _, along_group, _ = self._linearized(thetas, xs)
        v = along_group(elements)
        v = v[:, 0] if single else v
        return v[0] if one else v

    def curve(
        self,
        t: float | Sequence[float] | Tensor,
        h: int | Tensor,
        theta: Tensor,
        x: Tensor | None = None,
    ) -> Tensor:
        """γ(t) = a(exp(t h), θ, X) (Fig 6.6): the orbit of θ under the one-parameter group of h.

        Args:
            t: curve parameters, a number or T values.
            h: a generator's index or a (P, P) Lie-algebra element.
            theta: (P,), one sample.
            x: that sample's data.

        Returns:
            (T, P), or (P,) for a number ``t``. The exponential map is used only here and in
            :meth:`group_elements`; far from t = 0 the network extrapolates beyond g = I, where
            it was trained.
        """
        theta = self._check_theta(theta, "curve")
        if theta.ndim != 1:
            raise ShapeError("LearnedSymmetry.curve: theta must be one sample of shape (P,)")
        element = self._element(h, "curve")
        ts = torch.as_tensor(t, dtype=self.dtype, device=self.device)
        scalar = ts.ndim == 0
        ts = ts.reshape(-1)
        g = torch.linalg.matrix_exp(ts[:, None, None] * element)
        thetas = theta.expand(ts.numel(), -1)
        xs = None if x is None else x.unsqueeze(0).expand(ts.numel(), *x.shape)
        out = self._forward_action(g, thetas, xs)
        return out[0] if scalar else out

    def _element(self, h: int | Tensor, what: str) -> Tensor:
        if isinstance(h, int) and not isinstance(h, bool):
            if not 0 <= h < self.config.generators:
                raise InvalidArgumentError(
                    f"LearnedSymmetry.{what}: generator index {h} outside "
                    f"0..{self.config.generators - 1}"
                )
            return self.h[h]
        if not isinstance(h, Tensor):
            raise InvalidArgumentError(
                f"LearnedSymmetry.{what}: h must be a generator index or a (P, P) tensor"
            )
        element = self._check_matrix(h, what)
        if element.ndim != 2:
            raise ShapeError(f"LearnedSymmetry.{what}: h must be one (P, P) matrix")
        return element

    def random_generators(
        self,
        count: int,
        theta: Tensor,
        x: Tensor | None = None,
        *,
        speed: float | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """``count`` random Lie-algebra elements (standard-normal entries), each scaled so that
        its vector field through the learned action has length ``speed`` at the one sample
        (θ (P,), x): the baseline of Fig 6.6 (curves of random h at matched speed). ``speed``
        defaults to the learned generators' mean ‖v_i‖ there. Returns (count, P, P)."""
        theta = self._check_theta(theta, "random_generators")
        if theta.ndim != 1:
            raise ShapeError("LearnedSymmetry.random_generators: theta must be one sample (P,)")
        if isinstance(count, bool) or int(count) != count or count < 1:
            raise InvalidArgumentError(
                f"LearnedSymmetry.random_generators: count must be an integer ≥ 1, got {count!r}"
            )
        P = self.num_params
        h = torch.randn(int(count), P, P, generator=generator, dtype=self.dtype).to(self.device)
        with torch.no_grad():
            if speed is None:
                speed = float(
                    torch.linalg.vector_norm(self.infinitesimal_action(theta, x), dim=-1).mean()
                )
            v = self.infinitesimal_action(theta, x, h)
            scale = speed / torch.linalg.vector_norm(v, dim=-1).clamp_min(1e-300)
        return h * scale.reshape(-1, 1, 1)

    @torch.no_grad()
    def loss_along_curve(
        self,
        t: float | Sequence[float] | Tensor,
        h: int | Tensor,
        theta: Tensor,
        x: Tensor,
        y: Tensor,
    ) -> Tensor:
        """The mean per-point loss of (x, y) at γ(t) = a(exp(t h), θ, X): shape (T,) (Fig 6.6).

        A symmetry keeps it at its value at t = 0; compare with curves of random h (scaled to the
        same speed ‖v‖ at θ, e.g. with :meth:`infinitesimal_action`)."""
        points = self.curve(t, h, theta, x)
        points = points.reshape(-1, self.num_params)
        count = points.shape[0]
        xs = x.unsqueeze(0).expand(count, *x.shape)
        ys = y.unsqueeze(0).expand(count, *y.shape)
        return per_sample_losses(self.loss, points, xs, ys).mean(dim=1)

    def data_sensitivity(self, theta: Tensor, x: Tensor, *, relative: bool = False) -> Tensor:
        """‖∂v_i/∂X‖_F for each generator at one sample (θ (P,), x): shape (k,).

        Non-zero means the learned infinitesimal action depends on the data (§6.5.4: "the
        derivative of the learned action with respect to data is indeed nonzero"). With
        ``relative``, ‖∂v_i/∂X‖_F ‖X‖ / ‖v_i‖: the relative change of the field per relative
        change of the data, free of the scales of v and X (≈ 1 when v changes on the scale of
        X), which is what makes "non-zero" comparable across models."""
        theta = self._check_theta(theta, "data_sensitivity")
        if theta.ndim != 1 or self.data_dim == 0:
            raise InvalidArgumentError(
                "LearnedSymmetry.data_sensitivity: needs one sample θ (P,) and an action that "
                "sees the data"
            )
        x = x.to(dtype=self.dtype, device=self.device)
        jac = torch.func.jacrev(lambda d: self.infinitesimal_action(theta, d))(x)
        norms = torch.linalg.vector_norm(jac.reshape(self.config.generators, -1), dim=1).detach()
        if not relative:
            return norms
        with torch.no_grad():
            speeds = torch.linalg.vector_norm(self.infinitesimal_action(theta, x), dim=-1)
        return norms * torch.linalg.vector_norm(x) / speeds.clamp_min(1e-300)

    # -- the objective -------------------------------------------------------------------------
    def loss_terms(self, theta: Tensor, x: Tensor, y: Tensor) -> dict[str, Tensor]:
        """The six terms of objective (6.3) on a batch (θ (B, P), x (B, ...), y (B, ...)).

        The same numbers as :func:`~paramsym.discovery.learned_losses.loss_terms` with
        ``action=self.act`` (the reference, by ``torch.func.jvp``), computed from one forward
        pass at (I, θ, X) with tangents pushed through the network by hand.
        """
        theta = self._check_theta(theta, "loss_terms")
        if theta.ndim != 2:
            raise ShapeError("LearnedSymmetry.loss_terms: theta must be a batch (B, P)")
        if x.shape[0] != theta.shape[0] or y.shape[0] != theta.shape[0]:
            raise ShapeError(
                f"LearnedSymmetry.loss_terms: {theta.shape[0]} θ but {x.shape[0]} x and "
                f"{y.shape[0]} y samples"
            )
        k = self.config.generators
        pairs = default_pairs(k)
        out, along_group, along_theta = self._linearized(theta, x)
        sums = torch.stack([self.h[i] + self.h[j] for i, j in pairs])
        tangents = along_group(torch.cat([self.h, sums]))
        v, v_sum = tangents[:k], tangents[k:]
        derivative = along_theta(v)
        residual = torch.stack([derivative[i] + v[j] - v_sum[p] for p, (i, j) in enumerate(pairs)])
        return {
            "invariance": invariance_term(self.loss, theta, x, y, v),
            "identity": torch.linalg.vector_norm(out - theta, dim=-1).mean(),
            "associativity": torch.linalg.vector_norm(residual, dim=-1).mean(),
            "norm": norm_term(v, self.config.beta),
            "orthogonality": field_orthogonality_term(v)
            if self.config.orthogonality == "fields"
            else orthogonality_term(self.h),
            "sparsity": sparsity_term(self.h),
        }

    def objective(self, terms: Mapping[str, Tensor]) -> Tensor:
        """The weighted total Σ γ_i L_i of objective (6.3)."""
        return weighted_total(terms, self.config.weights)

    # -- training ------------------------------------------------------------------------------
    def _prepare(self, samples: Samples, what: str) -> Samples:
        if not (isinstance(samples, (tuple, list)) and len(samples) == 3):
            raise InvalidArgumentError(
                f"LearnedSymmetry.fit: {what} must give (theta, x, y), got {type(samples).__name__}"
            )
        theta, x, y = samples
        if not all(isinstance(t, Tensor) for t in (theta, x, y)):
            raise InvalidArgumentError(f"LearnedSymmetry.fit: {what} must give three tensors")
        if theta.ndim != 2 or theta.shape[1] != self.num_params:
            raise ShapeError(
                f"LearnedSymmetry.fit: {what} gave theta of shape {tuple(theta.shape)}; "
                f"expected (B, {self.num_params}), the P this symmetry was built for"
            )
        if x.shape[0] != theta.shape[0] or y.shape[0] != theta.shape[0]:
            raise ShapeError(
                f"LearnedSymmetry.fit: {what} gave {theta.shape[0]} θ but {x.shape[0]} x and "
                f"{y.shape[0]} y samples"
            )
        if self.data_dim and x[0].numel() != self.data_dim:
            raise ShapeError(
                f"LearnedSymmetry.fit: {what} gave samples of x with {x[0].numel()} entries; "
                f"the action was built for data_dim = {self.data_dim}"
            )
        for name, t in (("theta", theta), ("x", x), ("y", y)):
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise NonFiniteError(f"LearnedSymmetry.fit: {what} gave non-finite {name}")

        def move(t: Tensor) -> Tensor:
            kind = self.dtype if t.is_floating_point() else t.dtype
            return t.to(dtype=kind, device=self.device)

        return move(theta), move(x), move(y)

    def _epoch_batches(
        self, samples: Sampler | Samples, generator: torch.Generator
    ) -> list[Samples] | Callable[[], Samples]:
        """One epoch's batches: a function drawing from the sampler, or the prepared fixed set
        in a fresh random order."""
        cfg = self.config
        if callable(samples):
            sampler = samples
            return lambda: self._prepare(sampler(cfg.batch_size, generator), "the sampler")
        order = torch.randperm(samples[0].shape[0], generator=generator).to(samples[0].device)
        theta, x, y = samples
        return [(theta[idx], x[idx], y[idx]) for idx in order.split(cfg.batch_size)]

    def fit(self, samples: Sampler | Samples, *, callback: Callback | None = None) -> FitHistory:
        """Train the generators and the action network on objective (6.3) (§6.5.2) with Adam.

        Args:
            samples: a :data:`Sampler` (a fresh batch each step, ``config.steps_per_epoch``
                steps per epoch, as §6.5.5) or a fixed set ``(theta (N, P), x (N, ...),
                y (N, ...))`` passed through in shuffled batches each epoch (§6.5.3–4's 2000 or
                10000 samples).
            callback: ``callback(epoch, record)`` after each epoch, with its mean terms.

        Returns:
            :attr:`history`, the per-epoch means of each term and the total. Epochs are
            recorded as they finish, so they survive an exception (a non-finite objective
            raises :class:`~paramsym.errors.NonFiniteError` before the step that would spoil
            the parameters). Calling ``fit`` again continues training (same optimiser).
        """
        if callback is not None and not callable(callback):
            raise InvalidArgumentError("LearnedSymmetry.fit: callback must be callable")
        cfg = self.config
        if self._optimizer is None:
            lr_h = cfg.lr if cfg.lr_generators is None else cfg.lr_generators
            self._optimizer = torch.optim.Adam(
                [
                    {"params": [self.h], "lr": lr_h},
                    {"params": list(self.network.parameters()), "lr": cfg.lr},
                ]
            )
        optimizer = self._optimizer
        generator = torch.Generator()
        if cfg.seed is None:
            generator.seed()
        else:
            generator.manual_seed(cfg.seed + 1_000_003 * self.history.epochs)
        source: Sampler | Samples = samples
        if not callable(samples):
            source = self._prepare(samples, "samples")  # once, and before the first epoch
        per_epoch = (
            cfg.steps_per_epoch if callable(source) else -(-source[0].shape[0] // cfg.batch_size)
        )
        lr_h = cfg.lr if cfg.lr_generators is None else cfg.lr_generators
        for group, lr in zip(optimizer.param_groups, (lr_h, cfg.lr), strict=True):
            group["lr"] = group["initial_lr"] = lr  # a new fit restarts the schedule
        scheduler = (
            torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs * per_epoch)
            if cfg.schedule == "cosine"
            else None
        )
        self.train()
        for _ in range(cfg.epochs):
            batches = self._epoch_batches(source, generator)
            steps = cfg.steps_per_epoch if callable(batches) else len(batches)
            sums = dict.fromkeys((*TERMS, "total"), 0.0)
            for step in range(steps):
                theta, x, y = batches() if callable(batches) else batches[step]
                terms = self.loss_terms(theta, x, y)
                total = self.objective(terms)
                if not bool(torch.isfinite(total)):
                    values = {k: float(v.detach()) for k, v in terms.items()}
                    raise NonFiniteError(
                        f"LearnedSymmetry.fit: the objective became {float(total.detach())} in "
                        f"epoch {self.history.epochs} step {step} (terms {values}); lower "
                        "config.lr, set config.grad_clip, or check the loss on the samples"
                    )
                optimizer.zero_grad()
                total.backward()
                if cfg.grad_clip is not None:
                    nn.utils.clip_grad_norm_(self.parameters(), cfg.grad_clip)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                self.history.steps += 1
                for key, value in terms.items():
                    sums[key] += float(value.detach())
                sums["total"] += float(total.detach())
            record = {key: value / steps for key, value in sums.items()}
            self.history.record(record)
            if callback is not None:
                callback(self.history.epochs - 1, record)
        self.eval()
        return self.history
