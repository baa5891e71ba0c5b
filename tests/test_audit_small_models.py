"""The completeness audit on the small models of the papers and of the zoo: CNNs with BatchNorm in
evaluation mode, a ResNet block, LSTM and GRU classifiers, the residual MLP and plain MLPs.

Each model's catalogue names every flat direction of its function (``report.complete``), or,
where ReLU-type units are dead or always active on inputs like the example, the audit says which
flat directions belong to this point and these inputs: ``missing == unreached +
point_degenerate`` and nothing reached is missing at the second point (whose inputs spread wider:
:data:`~paramsym.tangent_kernel.completeness.WIDE_SPREAD`). The families that close the gaps —
the two biases of a recurrent layer (``recurrent_bias``), a convolution's channels and bias traded
with an evaluation-mode BatchNorm (``batchnorm_scaling``, ``batchnorm_shift``), and a residual
stream's bias and unread directions (``linear_shift``, ``unread``) — keep the output to 1e-12
under random draws, have closed-form tangents equal to their actions' derivatives, carry
gradients exactly, and, removed from the catalogue, make the audit report their dimensions on
their tensors.

The BatchNorm models have their running statistics computed from inputs like the example's (as a
trained model has them): the zoo draws them at random, which leaves channels almost never or
always active on such inputs, so its flat count there depends on the data; the "dead" variants
move one channel of each model off on purpose.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.core.params import first_output, functional_call, params_of
from paramsym.core.ranks import decide_rank
from paramsym.curvature import tangent_matrix
from paramsym.nn.zoo import (
    ZOO,
    LSTMClassifier,
    ResidualBlockNet,
    SimpleCNN,
    randomize_norm_layers,
)
from paramsym.symmetry.base import Symmetry
from paramsym.teleportation.orbit import Orbit

pytestmark = pytest.mark.usefixtures("one_thread")

NEW_FAMILIES = ("recurrent_bias", "batchnorm_scaling", "batchnorm_shift", "linear_shift", "unread")
Case = tuple[nn.Module, torch.Tensor]


def _images(count: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(count, 2, 4, 4, dtype=torch.float64, generator=generator)


def _calibrated(model: nn.Module) -> nn.Module:
    """Running statistics of every BatchNorm from 256 inputs like the example (cumulative)."""
    randomize_norm_layers(model, generator=torch.Generator().manual_seed(5))
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None
    model.train()
    with torch.no_grad():
        model(_images(256, 1))
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = 0.1  # torch's default again
    return model.eval()


def _cnn_bn() -> Case:
    torch.manual_seed(0)
    model = SimpleCNN(in_channels=2, channels=(3, 3), input_size=4, batchnorm=True)
    return _calibrated(model.double()), _images(16, 2)


def _resnet_block() -> Case:
    torch.manual_seed(0)
    return _calibrated(ResidualBlockNet(in_channels=2, width=4).double()), _images(16, 2)


def _off(norm: nn.Module, channel: int, sign: float) -> None:
    """Move one channel's running mean by 4 standard deviations: its ReLU is then off (sign 1)
    or on (sign −1) for almost every input like the example, not for wider ones."""
    assert isinstance(norm, nn.BatchNorm2d)
    with torch.no_grad():
        step = 4 * norm.running_var[channel].sqrt() * norm.weight[channel].sign()
        norm.running_mean[channel] += sign * step


def _cnn_bn_dead() -> Case:
    model, x = _cnn_bn()
    _off(model.bn1, 0, 1.0)
    _off(model.bn2, 1, -1.0)
    return model, x


def _resnet_block_dead() -> Case:
    model, x = _resnet_block()
    _off(model.bn1, 0, 1.0)
    _off(model.block.bn1, 1, -1.0)
    return model, x


def _recurrent(cell: str) -> Callable[[], Case]:
    def build() -> Case:
        torch.manual_seed(0)
        model = LSTMClassifier(input_size=3, hidden_size=4, num_classes=2, cell=cell)
        return model.double().eval(), torch.randn(4, 5, 3, dtype=torch.float64)

    return build


def _residual_mlp() -> Case:
    torch.manual_seed(0)
    entry = ZOO["residual-mlp"]
    return entry.build().double(), entry.example_input(torch.Generator().manual_seed(0)).double()


def _mlp(activation: str, seed: int) -> Callable[[], Case]:
    def build() -> Case:
        model = ps.mlp([4, 6, 6, 3], activation=activation, seed=seed, dtype=torch.float64)
        generator = torch.Generator().manual_seed(seed)
        return model, torch.randn(64, 4, dtype=torch.float64, generator=generator)

    return build


BUILDERS: dict[str, Callable[[], Case]] = {
    "lstm": _recurrent("lstm"),
    "gru": _recurrent("gru"),
    "residual-mlp": _residual_mlp,
    "cnn-bn": _cnn_bn,
    "resnet-block": _resnet_block,
    "mlp-leaky_relu": _mlp("leaky_relu", 1),
    "mlp-tanh": _mlp("tanh", 0),
    "mlp-gelu": _mlp("gelu", 0),
    "mlp-sigmoid": _mlp("sigmoid", 0),
    # degenerate on inputs like the example (dead or always-active units)
    "cnn-bn-dead": _cnn_bn_dead,
    "resnet-block-dead": _resnet_block_dead,
    "mlp-relu": _mlp("relu", 0),
    "mlp-relu-seed1": _mlp("relu", 1),
    "mlp-leaky_relu-seed2": _mlp("leaky_relu", 2),
}
COMPLETE = [name for name in BUILDERS if "relu-seed" not in name and not name.endswith(
    ("dead", "mlp-relu"))]  # fmt: skip
DEGENERATE = [name for name in BUILDERS if name not in COMPLETE]


class _Audited:
    """Each model, its catalogue and its audit, made once for the module."""

    def __init__(self) -> None:
        self.cases: dict[str, tuple[nn.Module, torch.Tensor, list[Symmetry], ps.AuditReport]] = {}

    def __call__(self, name: str) -> tuple[nn.Module, torch.Tensor, list[Symmetry], ps.AuditReport]:
        if name not in self.cases:
            model, x = BUILDERS[name]()
            catalogue = ps.symmetries(model, example_input=x)
            self.cases[name] = (model, x, catalogue, ps.audit(model, x, catalogue=catalogue))
        return self.cases[name]


@pytest.fixture(scope="module")
def audited() -> _Audited:
    return _Audited()


@pytest.mark.parametrize("name", COMPLETE)
def test_catalogue_names_every_flat_direction(audited: _Audited, name: str) -> None:
    report = audited(name)[3]
    assert (report.missing, report.unreached, report.not_flat) == (0, 0, [])
    assert report.named == report.flat
    assert report.missing_elsewhere == 0
    assert report.complete, report.ranks


def test_flat_counts_are_the_families_dimensions(audited: _Audited) -> None:
    """What the families add up to, where they do not overlap: the per-channel rescalings of
    the ReLUs and the BatchNorm families, the recurrent biases, the leaky ReLU rescalings."""
    expected = {"lstm": 4 * 4, "gru": 2 * 4, "cnn-bn": 2 * 3 * 3, "resnet-block": 4 + 4 + 3 * 4,
                "mlp-leaky_relu": 12, "mlp-tanh": 0}  # fmt: skip
    for name, flat in expected.items():
        assert audited(name)[3].flat == flat, name
    # residual MLP: 347 parameters, a function of 143 numbers less 16 ReLU rescalings
    assert audited("residual-mlp")[3].flat == 347 - (143 - 16)


@pytest.mark.parametrize("name", DEGENERATE)
def test_degenerate_directions_are_unreached_or_point_degenerate(
    audited: _Audited, name: str
) -> None:
    """Dead units leave their parameters unreached (zero columns of J); units always on (or
    almost never reached) leave reached directions that the second point, on wider inputs,
    does not have. Nothing reached is missing there: the catalogue names all of it."""
    report = audited(name)[3]
    assert report.missing > 0
    assert report.missing == report.unreached + report.point_degenerate
    assert report.missing_elsewhere == report.unreached_elsewhere
    assert report.not_flat == []
    assert not report.complete


def _family(catalogue: list[Symmetry], prefix: str) -> list[Symmetry]:
    return [s for s in catalogue if s.name.startswith(prefix + "[")]


FAMILY_CASES = [
    ("lstm", "recurrent_bias"),
    ("gru", "recurrent_bias"),
    ("cnn-bn", "batchnorm_scaling"),
    ("cnn-bn", "batchnorm_shift"),
    ("resnet-block", "batchnorm_scaling"),
    ("residual-mlp", "linear_shift"),
    ("residual-mlp", "unread"),
]


@pytest.mark.parametrize(("name", "prefix"), FAMILY_CASES)
def test_new_families_keep_the_function(audited: _Audited, name: str, prefix: str) -> None:
    model, x, catalogue, _ = audited(name)
    found = _family(catalogue, prefix)
    assert found
    params = params_of(model)
    state = {**params, **{k: b.detach() for k, b in model.named_buffers()}}
    before = first_output(functional_call(model, params, x))
    generator = torch.Generator().manual_seed(0)
    for s in found:
        assert s.exact
        assert not s.data_dependent
        assert s.preserves == "function"
        for point in (params, state):  # statistics read from the model, or from the state
            for _ in range(3):
                g = s.sample(scale=0.5, generator=generator, dtype=torch.float64)
                moved = s.act(point, g)
                after = first_output(functional_call(model, moved, x))
                assert (after - before).abs().max() <= 1e-12 * before.abs().max(), s.name
                assert any(not torch.equal(moved[k], point[k]) for k in s.parameter_names)
                back = s.act(moved, s.inverse(g))
                assert all(torch.allclose(back[k], point[k], atol=1e-12) for k in point)
                twice = s.act(s.act(point, g), g)
                once = s.act(point, s.compose(g, g))
                assert all(torch.allclose(twice[k], once[k], atol=1e-12) for k in point)
        xi = torch.randn(s.dim, generator=generator, dtype=torch.float64)
        closed, generic = s.tangent(params, xi), Symmetry.tangent(s, params, xi)
        assert all(torch.allclose(closed[k], generic[k], atol=1e-12) for k in params), s.name


@pytest.mark.parametrize(("name", "prefix"), FAMILY_CASES)
def test_gradients_transport_exactly_along_the_new_families(
    audited: _Audited, name: str, prefix: str
) -> None:
    """A loss gradient carried along a move (the VJP of the inverse action, through what the
    action reads) is the gradient at the moved point."""
    model, x, catalogue, _ = audited(name)
    s = _family(catalogue, prefix)[0]
    params = params_of(model)
    target = torch.randn_like(first_output(functional_call(model, params, x)))

    def gradient(point: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        leaves = {k: v.clone().requires_grad_(True) for k, v in point.items()}
        loss = ((first_output(functional_call(model, leaves, x)) - target) ** 2).sum()
        return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))

    orbit = Orbit([s], x, "exp", params)
    g = s.sample(scale=0.5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    moved, moves = orbit.move(params, [s.check_element(g)])
    carried, direct = orbit.transport(gradient(params), moves), gradient(moved)
    scale = max(float(v.abs().max()) for v in direct.values())
    for k in params:
        assert torch.allclose(carried[k], direct[k], atol=1e-10 * scale), (s.name, k)


def _rank(symmetries: list[Symmetry], params: dict[str, torch.Tensor]) -> int:
    if not symmetries:
        return 0
    stacked = torch.cat([tangent_matrix(s, params) for s in symmetries])
    singular = torch.linalg.svdvals(stacked)
    return decide_rank(singular, eps=torch.finfo(torch.float64).eps, size=stacked.shape[1]).rank


@pytest.mark.parametrize(("name", "prefix"), FAMILY_CASES)
def test_audit_reports_a_removed_family_on_its_tensors(
    audited: _Audited, name: str, prefix: str
) -> None:
    """Without a family the audit reports what it alone spans: all of its dimension where it
    overlaps nothing else (recurrent biases, the BatchNorm families), else its share beyond
    the rest of the catalogue (the residual stream's bias and unread directions overlap its
    GL and its first bias shift); carried mostly by its own tensors."""
    model, x, catalogue, _ = audited(name)
    removed = _family(catalogue, prefix)
    kept = [s for s in catalogue if s not in removed]
    report = ps.audit(model, x, catalogue=kept, points=1)
    counted = [s for s in catalogue if s.dim and s.exact and not s.data_dependent]
    params = params_of(model)
    alone = _rank(counted, params) - _rank([s for s in counted if s not in removed], params)
    assert report.missing == alone > 0
    if prefix not in ("linear_shift", "unread"):
        assert report.missing == sum(s.dim for s in removed)
    tensors = {t for s in removed for t in s.parameter_names}
    assert max(report.carriers, key=report.carriers.__getitem__) in tensors
    assert sum(report.carriers.get(t, 0.0) for t in tensors) >= 0.6 * report.missing


class _Outputs(nn.Module):
    """A recurrent layer's outputs at every step (its final states are batch-second)."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


def test_recurrent_biases_are_summed_on_the_gates_that_add_them() -> None:
    """LSTM: all four gates; GRU: the reset and update gates, not the candidate's (whose hidden
    bias is multiplied by the reset gate); every layer and direction."""
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    for cell, kwargs, rows in [
        (nn.LSTM, {}, 16),
        (nn.GRU, {}, 8),
        (nn.RNN, {}, 4),
        (nn.GRU, {"num_layers": 2, "bidirectional": True}, 8),
    ]:
        torch.manual_seed(0)
        layer = _Outputs(cell(3, 4, batch_first=True, **kwargs)).double().eval()
        found = [s for s in ps.symmetries(layer, example_input=x) if "recurrent_bias" in s.name]
        layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
        assert [s.dim for s in found] == [rows] * layers, cell
        report = ps.audit(layer, x, points=1)
        assert report.missing == 0, (cell, kwargs)
        assert report.flat == rows * layers, (cell, kwargs)


def test_batchnorm_families_need_evaluation_mode_and_a_producer_bias() -> None:
    model, x = _cnn_bn()
    names = [s.name for s in ps.symmetries(model, example_input=x)]
    assert [n for n in names if n.startswith("batchnorm_")] == [
        "batchnorm_scaling[conv1->bn1]",
        "batchnorm_shift[conv1->bn1]",
        "batchnorm_scaling[conv2->bn2]",
        "batchnorm_shift[conv2->bn2]",
    ]
    model.train()
    assert not [s for s in ps.symmetries(model, example_input=x) if "batchnorm_" in s.name]
    block, x = _resnet_block()  # torchvision's convolutions have no bias: no shift
    names = [s.name for s in ps.symmetries(block, example_input=x)]
    assert sum(n.startswith("batchnorm_scaling[") for n in names) == 3
    assert not [n for n in names if n.startswith("batchnorm_shift[")]


def test_batchnorm_families_read_the_statistics_given_with_the_parameters() -> None:
    """With the running statistics in ``params`` (moved by a permutation, say), the families
    read those; the β compensation depends on them."""
    model, x = _cnn_bn()
    found = ps.symmetries(model, example_input=x)
    scaling = next(s for s in found if s.name == "batchnorm_scaling[conv1->bn1]")
    state = {**params_of(model), **{k: b.detach() for k, b in model.named_buffers()}}
    g = torch.tensor([2.0, 0.5, 1.5], dtype=torch.float64)
    other = dict(state, **{"bn1.running_mean": state["bn1.running_mean"] + 1.0})
    assert not torch.allclose(scaling.act(state, g)["bn1.bias"], scaling.act(other, g)["bn1.bias"])
    with pytest.raises(ps.InvalidGroupElementError):
        scaling.act(state, -g)
