"""A zoo of small models written the way people write them, for testing symmetry detection.

Each model has its own ``forward`` and the parameter names of the code it imitates
(torchvision's ResNet, nanoGPT / Hugging Face GPT-2, ``nn.LSTM``), so detection that works here
works on the graph, not on module types. Everything is built from torch alone (torchvision is
never imported); the Hugging Face builders import ``transformers`` when called.

The registry :data:`ZOO` maps a name to a :class:`ZooModel`: a builder of a fresh model in eval
mode and a small example batch. Registered builds also draw the affine parameters of every norm
layer and the running statistics of every BatchNorm at random (:func:`randomize_norm_layers`), so
that a symmetry which forgets to move them changes the output (with the defaults, 1, 0 and unit
variance, such a bug stays invisible).

>>> entry = zoo_model("resnet-block")
>>> model = entry.build()
>>> model(entry.example_input(torch.Generator().manual_seed(0))).shape
torch.Size([2, 3])
>>> "lstm" in available_zoo()
True
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (torch convention)
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.nn.activations import get_activation
from paramsym.nn.hf import hf_bert, hf_gpt2

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm)


@dataclass(frozen=True)
class ZooModel:
    """A registered test model.

    Attributes:
        name: registry key, e.g. ``"resnet18-tiny"``.
        build: returns a fresh, randomly initialised model in eval mode (default dtype).
        example_input: ``example_input(generator)`` returns a small batch: floats in the default
            dtype, or int64 token ids for language models.
        description: one line on what the model is and what its forward returns.
        needs: optional packages the builder imports, e.g. ``("transformers",)``.
    """

    name: str
    build: Callable[[], nn.Module]
    example_input: Callable[[torch.Generator], Tensor]
    description: str
    needs: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        """Whether every package in :attr:`needs` can be imported."""
        return all(importlib.util.find_spec(package) is not None for package in self.needs)


def randomize_norm_layers(
    model: nn.Module, *, generator: torch.Generator | None = None, scale: float = 0.3
) -> nn.Module:
    """Draw non-default affine parameters (and BatchNorm running statistics) in place.

    For every BatchNorm, LayerNorm and GroupNorm: ``weight ~ 1 + scale·N(0, 1)``,
    ``bias ~ scale·N(0, 1)``; for BatchNorm also ``running_mean ~ scale·N(0, 1)`` and
    ``running_var ~ exp(scale·N(0, 1))`` (positive). Returns ``model``.
    """
    draws = (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", None))
    with torch.no_grad():
        for module in model.modules():
            for attribute, offset in draws if isinstance(module, _NORMS) else ():
                tensor = getattr(module, attribute, None)
                if isinstance(tensor, Tensor):
                    noise = scale * torch.randn(
                        tensor.shape, generator=generator, dtype=tensor.dtype
                    )
                    tensor.copy_(noise.exp() if offset is None else offset + noise)
    return model


class SimpleCNN(nn.Module):
    """``conv1 → bn1 → act1 → conv2 → bn2 → act2 → flatten → fc``.

    Convolutions are ``Conv{dims}d`` with ``padding = kernel_size // 2`` (size-preserving for odd
    kernels); ``bn1``/``bn2`` are ``BatchNorm{dims}d`` or ``nn.Identity``. ``activation`` is one
    name from :func:`paramsym.nn.get_activation` or a pair (first, second layer).

    Shapes: input (batch, in_channels, *[input_size]*dims), output (batch, num_classes).
    """

    def __init__(
        self,
        *,
        dims: int = 2,
        in_channels: int = 3,
        channels: Sequence[int] = (8, 8),
        activation: str | tuple[str, str] = "relu",
        batchnorm: bool = False,
        num_classes: int = 3,
        kernel_size: int = 3,
        input_size: int = 8,
    ) -> None:
        super().__init__()
        if dims not in (1, 2):
            raise InvalidArgumentError(f"SimpleCNN: dims must be 1 or 2, got {dims}")
        if len(channels) != 2:
            raise InvalidArgumentError(f"SimpleCNN: channels must have 2 entries, got {channels}")
        acts = (activation, activation) if isinstance(activation, str) else tuple(activation)
        if len(acts) != 2:
            raise InvalidArgumentError(f"SimpleCNN: activation must be a name or a pair: {acts}")
        conv = nn.Conv1d if dims == 1 else nn.Conv2d
        norm = nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d
        c1, c2 = channels
        pad = kernel_size // 2
        out_size = input_size + 2 * (2 * pad - kernel_size + 1)  # after two stride-1 convolutions
        self.conv1 = conv(in_channels, c1, kernel_size, padding=pad)
        self.bn1 = norm(c1) if batchnorm else nn.Identity()
        self.act1 = get_activation(acts[0]).make_module()
        self.conv2 = conv(c1, c2, kernel_size, padding=pad)
        self.bn2 = norm(c2) if batchnorm else nn.Identity()
        self.act2 = get_activation(acts[1]).make_module()
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(c2 * out_size**dims, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.act2(self.bn2(self.conv2(x)))
        return self.fc(self.flatten(x))


def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """3×3 convolution with padding 1 and no bias (torchvision's ``conv3x3``)."""
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1×1 convolution without bias (torchvision's ``conv1x1``)."""
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: ``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))``
    with ``shortcut = downsample`` (``Sequential(conv1x1, BatchNorm2d)``) or the identity.

    Shapes: input (batch, inplanes, H, W), output (batch, planes, ⌈H/stride⌉, ⌈W/stride⌉).
    """

    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


def _init_like_torchvision(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d | nn.GroupNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class ResNet(nn.Module):
    """ResNet with basic blocks, laid out like ``torchvision.models.ResNet``.

    Modules ``conv1, bn1, relu, maxpool, layer1 … layerN, avgpool, fc``; ``layer{i}`` is a
    ``Sequential`` of ``layers[i-1]`` :class:`BasicBlock` s of width ``widths[i-1]`` (stride 2
    from the second stage on; a ``downsample`` shortcut where stride or width changes).
    ``small_stem`` replaces the 7×7/2 stem and max-pool by a 3×3/1 stem and ``nn.Identity`` (for
    CIFAR-sized or smaller inputs). Initialised as torchvision does (Kaiming fan-out convs,
    BatchNorm weight 1 and bias 0).

    Shapes: input (batch, in_channels, H, W), output (batch, num_classes).
    """

    def __init__(
        self,
        *,
        layers: Sequence[int] = (2, 2, 2, 2),
        widths: Sequence[int] = (64, 128, 256, 512),
        in_channels: int = 3,
        num_classes: int = 10,
        small_stem: bool = False,
    ) -> None:
        super().__init__()
        if len(layers) != len(widths) or not layers or min(layers) < 1:
            raise InvalidArgumentError(
                f"ResNet: layers and widths need the same positive length and layers >= 1, "
                f"got layers={tuple(layers)}, widths={tuple(widths)}"
            )
        self.inplanes = widths[0]
        if small_stem:
            self.conv1 = conv3x3(in_channels, self.inplanes)
            self.maxpool: nn.Module = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(in_channels, self.inplanes, 7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.num_stages = len(layers)
        for i, (blocks, width) in enumerate(zip(layers, widths, strict=True)):
            setattr(
                self, f"layer{i + 1}", self._make_layer(width, blocks, stride=1 if i == 0 else 2)
            )
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[-1] * BasicBlock.expansion, num_classes)
        _init_like_torchvision(self)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * BasicBlock.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * BasicBlock.expansion, stride),
                nn.BatchNorm2d(planes * BasicBlock.expansion),
            )
        stage = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * BasicBlock.expansion
        stage += [BasicBlock(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*stage)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(**kwargs: Any) -> ResNet:
    """ResNet-18 with torchvision's sizes (11,689,512 parameters for ``num_classes=1000``).

    Keyword arguments go to :class:`ResNet` (e.g. ``num_classes``, ``small_stem``).
    """
    return ResNet(**{"layers": (2, 2, 2, 2), "widths": (64, 128, 256, 512), **kwargs})


class ResidualBlockNet(nn.Module):
    """One :class:`BasicBlock` with identity shortcut inside a small net:
    ``conv1 → bn1 → relu → block → avgpool → fc``.

    Shapes: input (batch, in_channels, H, W), output (batch, num_classes).
    """

    def __init__(self, *, in_channels: int = 3, width: int = 8, num_classes: int = 3) -> None:
        super().__init__()
        self.conv1 = conv3x3(in_channels, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.block = BasicBlock(width, width)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.block(self.relu(self.bn1(self.conv1(x))))
        return self.fc(self.avgpool(x).flatten(1))


class ResidualMLP(nn.Module):
    """``h = inp(x); h = h + f2(relu(f1(h))); return out(h)``.

    Shapes: input (batch, in_features), output (batch, out_features).
    """

    def __init__(
        self, *, in_features: int = 4, width: int = 8, hidden: int = 16, out_features: int = 3
    ) -> None:
        super().__init__()
        self.inp = nn.Linear(in_features, width)
        self.f1 = nn.Linear(width, hidden)
        self.f2 = nn.Linear(hidden, width)
        self.out = nn.Linear(width, out_features)

    def forward(self, x: Tensor) -> Tensor:
        h = self.inp(x)
        h = h + self.f2(torch.relu(self.f1(h)))
        return self.out(h)


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention with ``F.scaled_dot_product_attention``.

    Separate ``q_proj, k_proj, v_proj`` (or one ``c_attn`` of width ``3·width`` split with
    ``.split(width, dim=-1)`` when ``packed_qkv``), heads split with ``view``/``transpose``, and
    ``out_proj``. Shapes: (batch, seq, width) → (batch, seq, width).
    """

    def __init__(self, width: int, heads: int, *, packed_qkv: bool = False) -> None:
        super().__init__()
        if width % heads:
            raise InvalidArgumentError(f"CausalSelfAttention: width={width} % heads={heads} != 0")
        self.width, self.heads, self.packed_qkv = width, heads, packed_qkv
        if packed_qkv:
            self.c_attn = nn.Linear(width, 3 * width)
        else:
            self.q_proj = nn.Linear(width, width)
            self.k_proj = nn.Linear(width, width)
            self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, width = x.shape
        if self.packed_qkv:
            q, k, v = self.c_attn(x).split(self.width, dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        head_dim = width // self.heads
        q = q.view(batch, seq, self.heads, head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.heads, head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.heads, head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(batch, seq, width)
        return self.out_proj(y)


class GPTMLP(nn.Module):
    """``proj(gelu(fc(x)))``, widths ``width → mlp_ratio·width → width``."""

    def __init__(self, width: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(width, mlp_ratio * width)
        self.act = nn.GELU()
        self.proj = nn.Linear(mlp_ratio * width, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.act(self.fc(x)))


class GPTBlock(nn.Module):
    """Pre-LN block: ``x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))``."""

    def __init__(
        self, width: int, heads: int, mlp_ratio: int = 4, *, packed_qkv: bool = False
    ) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, packed_qkv=packed_qkv)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = GPTMLP(width, mlp_ratio)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTStyle(nn.Module):
    """A nanoGPT-style decoder: ``wte``, ``wpe``, blocks ``h.0 … h.{layers-1}`` (:class:`GPTBlock`),
    ``ln_f`` and an untied ``lm_head`` (no bias).

    Shapes: input (batch, seq) int64 token ids with ``seq <= context``, output
    (batch, seq, vocab) logits.
    """

    def __init__(
        self,
        *,
        vocab: int = 32,
        context: int = 16,
        width: int = 16,
        heads: int = 2,
        layers: int = 2,
        mlp_ratio: int = 4,
        packed_qkv: bool = False,
    ) -> None:
        super().__init__()
        self.context = context
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(
            GPTBlock(width, heads, mlp_ratio, packed_qkv=packed_qkv) for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        if idx.ndim != 2 or idx.shape[1] > self.context:
            raise ShapeError(
                f"GPTStyle: input must be (batch, seq<={self.context}) ids, got {tuple(idx.shape)}"
            )
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class LSTMClassifier(nn.Module):
    """``rnn`` (``nn.LSTM`` or ``nn.GRU``, ``batch_first=True``) then ``fc`` on the last step.

    Shapes: input (batch, seq, input_size), output (batch, num_classes).
    """

    def __init__(
        self,
        *,
        input_size: int = 4,
        hidden_size: int = 8,
        num_classes: int = 3,
        cell: str = "lstm",
        num_layers: int = 1,
    ) -> None:
        super().__init__()
        cells = {"lstm": nn.LSTM, "gru": nn.GRU}
        if cell not in cells:
            raise InvalidArgumentError(
                f"LSTMClassifier: cell must be 'lstm' or 'gru', got {cell!r}"
            )
        self.rnn = cells[cell](input_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


def _images(*shape: int) -> Callable[[torch.Generator], Tensor]:
    return lambda generator: torch.randn(shape, generator=generator)


def _tokens(vocab: int, batch: int = 2, seq: int = 8) -> Callable[[torch.Generator], Tensor]:
    return lambda generator: torch.randint(0, vocab, (batch, seq), generator=generator)


def _fresh(factory: Callable[..., nn.Module], **kwargs: Any) -> Callable[[], nn.Module]:
    return lambda: randomize_norm_layers(factory(**kwargs)).eval()


_HF = ("transformers",)
_IMAGES, _TOKENS = _images(2, 3, 8, 8), _tokens(32)
_ENTRIES = (
    ZooModel("cnn", _fresh(SimpleCNN), _IMAGES, "SimpleCNN (Conv2d, ReLU); (2, 3, 8, 8) -> (2, 3)"),
    ZooModel(
        "cnn-bn",
        _fresh(SimpleCNN, batchnorm=True),
        _IMAGES,
        "SimpleCNN with BatchNorm2d; -> (2, 3)",
    ),
    ZooModel(
        "cnn1d-tanh",
        _fresh(SimpleCNN, dims=1, activation=("relu", "tanh")),
        _images(2, 3, 8),
        "SimpleCNN with Conv1d, ReLU then tanh; (2, 3, 8) -> (2, 3)",
    ),
    ZooModel(
        "resnet-block",
        _fresh(ResidualBlockNet),
        _IMAGES,
        "ResidualBlockNet: stem conv, one BasicBlock (identity shortcut), pool, fc; -> (2, 3)",
    ),
    ZooModel(
        "resnet18-tiny",
        _fresh(ResNet, widths=(4, 8, 8, 16), small_stem=True, num_classes=10),
        _images(2, 3, 16, 16),
        "torchvision-layout ResNet-18, widths (4, 8, 8, 16), 3x3 stem; (2, 3, 16, 16) -> (2, 10)",
    ),
    ZooModel("residual-mlp", _fresh(ResidualMLP), _images(2, 4), "ResidualMLP; (2, 4) -> (2, 3)"),
    ZooModel("gpt", _fresh(GPTStyle), _TOKENS, "GPTStyle, separate q/k/v; (2, 8) -> (2, 8, 32)"),
    ZooModel(
        "gpt-packed",
        _fresh(GPTStyle, packed_qkv=True),
        _TOKENS,
        "GPTStyle, one c_attn split into q/k/v; ids (2, 8) -> logits (2, 8, 32)",
    ),
    ZooModel(
        "lstm", _fresh(LSTMClassifier), _images(2, 5, 4), "LSTMClassifier; (2, 5, 4) -> (2, 3)"
    ),
    ZooModel(
        "gru", _fresh(LSTMClassifier, cell="gru"), _images(2, 5, 4), "LSTMClassifier with nn.GRU"
    ),
    ZooModel(
        "lstm-raw",
        _fresh(nn.LSTM, input_size=4, hidden_size=8, batch_first=True),
        _images(2, 5, 4),
        "a bare nn.LSTM(4, 8, batch_first=True); returns the tuple (output, (h_n, c_n))",
    ),
    ZooModel("hf-gpt2", _fresh(hf_gpt2), _TOKENS, "GPT2Model; returns a ModelOutput", _HF),
    ZooModel(
        "hf-gpt2-hidden",
        _fresh(hf_gpt2, last_hidden_state=True),
        _TOKENS,
        "HFLastHidden(GPT2Model): ids (2, 8) -> last_hidden_state (2, 8, 16)",
        _HF,
    ),
    ZooModel(
        "hf-bert", _fresh(hf_bert), _TOKENS, "BertModel with pooler; returns a ModelOutput", _HF
    ),
    ZooModel(
        "hf-bert-hidden",
        _fresh(hf_bert, pooler=False, last_hidden_state=True),
        _TOKENS,
        "HFLastHidden(BertModel without pooler): ids (2, 8) -> (2, 8, 16)",
        _HF,
    ),
)

ZOO: dict[str, ZooModel] = {entry.name: entry for entry in _ENTRIES}
"""The registered models by name (see :func:`available_zoo` for those whose needs are met)."""


def zoo_model(name: str) -> ZooModel:
    """The registered model ``name``; raises ``InvalidArgumentError`` listing the known names.

    >>> zoo_model("gpt").example_input(torch.Generator().manual_seed(0)).dtype
    torch.int64
    """
    try:
        return ZOO[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown zoo model {name!r}; known: {', '.join(ZOO)}") from None


def available_zoo() -> list[str]:
    """Names of the registered models whose optional packages (``needs``) can be imported."""
    return [name for name, entry in ZOO.items() if entry.available]
