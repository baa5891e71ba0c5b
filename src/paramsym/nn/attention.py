"""Multi-head attention with separate projections, and a small pre-LayerNorm transformer."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError, ShapeError


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017) with separate query/key/value/output layers.

    For head i, ``Q_i = x W^Q_iᵀ + b^Q_i`` (rows ``i·d_k … (i+1)·d_k`` of ``q_proj``), likewise
    K (``k_proj``) and V (``v_proj``, width ``d_v``); ``out = Σ_i softmax(Q_i K_iᵀ/√d_k) V_i
    W^O_iᵀ + b^O`` with ``W^O_i`` the columns ``i·d_v … (i+1)·d_v`` of ``out_proj``. Separate
    ``d_k`` and ``d_v`` make the per-head GL(d_k) and GL(d_v) symmetries (Ex. 1.2.11-1.2.12)
    visible as different groups.

    Shapes: ``x`` (batch, seq, d_model); ``context`` (batch, seq_kv, d_model) for
    cross-attention (default: ``x``); output (batch, seq, d_model).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_k: int | None = None,
        d_v: int | None = None,
        *,
        bias: bool = True,
        causal: bool = False,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if num_heads < 1 or d_model < 1:
            raise InvalidArgumentError(
                "MultiHeadAttention: d_model and num_heads must be >= 1, "
                f"got {d_model}, {num_heads}"
            )
        if d_k is None and d_model % num_heads:
            raise InvalidArgumentError(
                f"MultiHeadAttention: d_model={d_model} is not divisible by num_heads={num_heads}; "
                "pass d_k explicitly"
            )
        self.d_model, self.num_heads = d_model, num_heads
        self.d_k = d_k or d_model // num_heads
        self.d_v = d_v or self.d_k
        self.causal = causal

        def linear(n_in: int, n_out: int) -> nn.Linear:
            return nn.Linear(n_in, n_out, bias=bias, dtype=dtype, device=device)

        self.q_proj = linear(d_model, num_heads * self.d_k)
        self.k_proj = linear(d_model, num_heads * self.d_k)
        self.v_proj = linear(d_model, num_heads * self.d_v)
        self.out_proj = linear(num_heads * self.d_v, d_model)

    def _heads(self, t: Tensor, width: int) -> Tensor:
        batch, seq, _ = t.shape
        return t.view(batch, seq, self.num_heads, width).transpose(1, 2)

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ShapeError(
                f"MultiHeadAttention: input must be (batch, seq, {self.d_model}), "
                f"got {tuple(x.shape)}"
            )
        source = x if context is None else context
        q = self._heads(self.q_proj(x), self.d_k)
        k = self._heads(self.k_proj(source), self.d_k)
        v = self._heads(self.v_proj(source), self.d_v)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)
        if self.causal:
            seq_q, seq_k = scores.shape[-2:]
            mask = torch.ones(seq_q, seq_k, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        heads = torch.softmax(scores, dim=-1) @ v  # (batch, heads, seq, d_v)
        batch, _, seq, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(batch, seq, self.num_heads * self.d_v))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}, d_v={self.d_v}"


class TransformerBlock(nn.Module):
    """Pre-LayerNorm block: ``x + attention(LN(x))``, then ``x + mlp(LN(x))`` with
    ``mlp = Sequential(Linear(d, d_ff), GELU, Linear(d_ff, d))``."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        causal: bool = True,
        d_k: int | None = None,
        d_v: int | None = None,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, num_heads, d_k, d_v, causal=causal)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """A small decoder-only transformer: token and position embeddings, pre-LN blocks, a final
    LayerNorm and a linear read-out. Input (batch, seq) token ids, output (batch, seq, vocab)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 32,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int = 64,
        max_len: int = 64,
        *,
        d_k: int | None = None,
        d_v: int | None = None,
        causal: bool = True,
    ) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, causal=causal, d_k=d_k, d_v=d_v)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))
