"""The query–key group of attention with rotary position embeddings (RoPE; notes 005 §1).

RoPE rotates each pair of a head's query and key coordinates by an angle proportional to the
position: the score between a query at m and a key at n is ``q_mᵀ R((m − n)Θ) k_n``, R
block-diagonal with one 2×2 rotation per pair. A map q ↦ A q, k ↦ B k keeps every score iff
``Aᵀ R(φΘ) B = R(φΘ)`` for all φ; at φ = 0, B = A⁻ᵀ, and A must commute with every R(φΘ).
With distinct frequencies that is the commutant of the rotations: on each pair a scaled
rotation ``a·R(α)`` (a > 0; a < 0 is α + π), and nothing across pairs. The group per head is
(ℝ>0 × SO(2))^{d/2} ≅ (ℂ*)^{d/2}, dimension d (2 per pair), not GL(d) (d²).

Which coordinates pair up is the model's choice, read off the graph by detection
(:mod:`paramsym.symmetry.graph.patterns`): Hugging Face's ``rotate_half`` pairs j with
j + d/2, the original code 2j with 2j + 1. Under grouped-query attention one element acts on a
key/value head and on every query head of its group.

Lie algebra: per pair p = (i, j), coordinates (ξ_2p, ξ_2p+1) = (α, β) give the block
``[[α, −β], [β, α]]`` on rows/columns (i, j) of an h×h matrix; ``exp`` of it is
``e^α R(β)`` on the pair.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError, InvalidGroupElementError
from paramsym.symmetry.base import GroupElement, SlotLike
from paramsym.symmetry.gl import GeneralLinearGroup, MatrixNeuronSymmetry


class RotaryQueryKey(GeneralLinearGroup, MatrixNeuronSymmetry):
    """Scaled rotations of the rotated pairs of one head's (or one key/value group's) queries
    and keys: queries by g, keys by g⁻ᵀ, g block-diagonal over ``pairs`` with blocks a·R(α).

    Args:
        width: coordinates acted on (the head's rotated coordinates), ``2 · len(pairs)``.
        pairs: the rotated pairs ``(i, j)`` in local coordinates ``0 … width − 1``, each
            coordinate in exactly one pair.
        incoming, outgoing, site, exact, notes: as for :class:`~paramsym.symmetry.HiddenGL`
            (incoming: the query rows and biases; outgoing: the key rows and biases, power −1).

    >>> import torch
    >>> s = RotaryQueryKey(4, [(0, 2), (1, 3)], [("q.weight", 0)], [("k.weight", 0, -1.0)])
    >>> s.group, s.dim
    ('(C*)^2', 4)
    >>> g = s.exp(torch.tensor([0.1, 0.5, 0.0, 1.0], dtype=torch.float64))
    >>> bool((g[0, 1] == 0) and (g[0, 0] == g[2, 2]) and (g[0, 2] == -g[2, 0]))
    True
    """

    family = "attention_QK_rotary"
    group_symbol = "(C*)^{}"

    def __init__(
        self,
        width: int,
        pairs: Sequence[tuple[int, int]],
        incoming: Sequence[SlotLike],
        outgoing: Sequence[SlotLike],
        *,
        site: str | None = None,
        exact: bool = True,
        notes: Sequence[str] = (),
    ) -> None:
        pairs = tuple((int(i), int(j)) for i, j in pairs)
        covered = sorted(k for pair in pairs for k in pair)
        if covered != list(range(width)):
            raise InvalidArgumentError(
                f"RotaryQueryKey: pairs {pairs} must cover each of the {width} coordinates once"
            )
        self.pairs = pairs
        super().__init__(width, incoming, outgoing, site=site, exact=exact, notes=notes)

    @staticmethod
    def _group(width: int) -> str:
        return f"(C*)^{width // 2}"

    @staticmethod
    def _algebra_dimension(width: int) -> int:
        return width

    def _index(self) -> tuple[Tensor, Tensor]:
        first = torch.tensor([i for i, _ in self.pairs])
        second = torch.tensor([j for _, j in self.pairs])
        return first, second

    def _algebra(self, xi: Tensor) -> Tensor:
        first, second = self._index()
        alpha, beta = xi.reshape(-1, 2).unbind(1)
        m = xi.new_zeros(self.width, self.width)
        m = m.index_put((first, first), alpha).index_put((second, second), alpha)
        return m.index_put((first, second), -beta).index_put((second, first), beta)

    def _validated_inverse_transpose(self, g: GroupElement) -> tuple[Tensor, Tensor]:
        """Check ``g`` as GL does, and that it is block-diagonal over the pairs with blocks
        ``[[x, −y], [y, x]]`` (to √eps of its dtype, relative); return it with g⁻ᵀ."""
        g, g_inv_t = super()._validated_inverse_transpose(g)
        first, second = self._index()
        x = (g[first, first] + g[second, second]) / 2
        y = (g[second, first] - g[first, second]) / 2
        expected = torch.zeros_like(g).index_put((first, first), x).index_put((second, second), x)
        expected = expected.index_put((first, second), -y).index_put((second, first), y)
        error = float((g - expected).abs().max().detach())
        scale = max(float(g.abs().max().detach()), 1.0)
        if not error <= torch.finfo(g.dtype).eps ** 0.5 * scale:
            raise InvalidGroupElementError(
                f"{self.name}: a group element must be a scaled rotation on each rotated pair "
                f"{self.pairs[:4]}{'…' if len(self.pairs) > 4 else ''} and zero elsewhere "
                f"(off by {error:.1e}); a general GL element breaks the rotary embedding"
            )
        return g, g_inv_t
