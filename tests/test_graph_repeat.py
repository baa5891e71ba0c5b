"""A stack of identical blocks traced once per distinct block (``symmetry/graph/repeat.py``).

The oracle is the full trace: on every model the repetition applies to, detection with it
must report exactly what detection without it reports (classes, names, dimensions, exactness,
every slot, the unexplained parameters). Where a block differs, or the forward reads the
blocks in a way the repetition cannot copy, the full trace runs and says nothing.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.symmetry.graph import analyse
from paramsym.symmetry.graph.repeat import KEEP, block_list

transformers = pytest.importorskip("transformers")

from hf_models import example_input  # noqa: E402
from paramsym.nn.hf import hf_tiny  # noqa: E402

F64 = torch.float64
LAYERS = 5


def _key(s: ps.Symmetry) -> tuple:
    slots = tuple((t.name, t.axis, t.power, t.offset, t.block) for t in getattr(s, "slots", ()))
    return type(s).__name__, s.name, s.group, s.dim, s.exact, slots


def _both(model: nn.Module, x: object) -> tuple:
    repeated = analyse(model, x)
    full = analyse(model, x, repeat_blocks=False)
    return repeated, full


def _assert_same(repeated, full) -> None:
    assert sorted(map(_key, repeated.symmetries)) == sorted(map(_key, full.symmetries))
    assert [s.name for s in repeated.symmetries] == [s.name for s in full.symmetries]
    assert repeated.unexplained == full.unexplained


@pytest.mark.parametrize("kind", ["llama", "gemma", "phi", "gpt2-lm", "opt", "bloom"])
def test_repeated_blocks_give_what_the_full_trace_gives(kind: str) -> None:
    model, x = hf_tiny(kind, layers=LAYERS), example_input(kind)
    repeated, full = _both(model, x)
    assert repeated.notes
    assert f"{KEEP} of the {LAYERS} identical blocks" in repeated.notes[0]
    assert not full.notes
    _assert_same(repeated, full)
    # every block's parameters are moved by some symmetry, not only the traced blocks'
    moved = {n for s in repeated.symmetries for n in s.parameter_names}
    assert any(".4." in n for n in moved)
    assert any(".3." in n for n in moved)
    assert len(repeated.walk.traced.graph.nodes) == len(full.walk.traced.graph.nodes)


def test_note_reaches_the_user() -> None:
    model, x = hf_tiny("llama", layers=LAYERS), example_input("llama")
    found = ps.symmetries(model, example_input=x, verify=False)
    assert any("identical blocks of 'layers'" in note for note in found.notes)


class Block(nn.Module):
    """A residual MLP block with its own forward and a per-block index attribute."""

    def __init__(self, width: int, index: int, activation: str = "relu") -> None:
        super().__init__()
        self.index = index
        self.activation = activation
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = torch.relu if self.activation == "relu" else torch.tanh
        return x + self.down(act(self.up(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, width: int = 6, depth: int = 6, read_all: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(3, width)
        self.blocks = nn.ModuleList(Block(width, i) for i in range(depth))
        self.head = nn.Linear(width, 2)
        self.read_all = read_all

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, seen = self.embed(x), []
        for block in self.blocks:
            h = block(h)
            seen.append(h)
        return self.head(h + sum(seen) if self.read_all else h)


def _stack(**kwargs: object) -> nn.Module:
    torch.manual_seed(0)
    model = Stack(**kwargs).double().eval()  # type: ignore[arg-type]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def test_a_hand_written_stack_is_repeated_with_its_index_attribute() -> None:
    model, x = _stack(), torch.randn(4, 3, dtype=F64)
    assert block_list(model) is not None  # ``index`` differs by block: it is the block's own
    repeated, full = _both(model, x)
    assert repeated.notes
    _assert_same(repeated, full)
    assert sum("blocks.5.up" in s.name for s in repeated.symmetries) >= 2


def test_blocks_that_differ_or_are_read_out_of_line_are_traced_in_full() -> None:
    x = torch.randn(4, 3, dtype=F64)
    odd = _stack()
    odd.blocks[4].activation = "tanh"  # one block computes something else
    assert block_list(odd) is None
    read_all = _stack(read_all=True)  # the head reads every block's output
    shared = _stack()
    shared.blocks[3].up = shared.blocks[1].up  # one layer in two blocks
    assert block_list(shared) is None
    for model in (odd, read_all, shared):
        repeated, full = _both(model, x)
        assert not repeated.notes
        _assert_same(repeated, full)
    swin = hf_tiny("swin", layers=LAYERS)  # shifted windows in every other block
    assert block_list(swin) is None
