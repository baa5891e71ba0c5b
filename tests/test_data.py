"""Tests of paramsym.data: the generators' formulas, the bundled sets and the file loaders.

The loaders are exercised on small files written here in the real formats (IDX, CIFAR-10
python pickles, UCI energy CSV/XLSX); nothing is downloaded.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import pickle
import random
import struct
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import paramsym.data as psd
from paramsym.errors import (
    DataFormatError,
    InvalidArgumentError,
    MissingDataError,
    ParamsymError,
)

# --------------------------------------------------------------------------- helpers

SMALL: dict[str, dict[str, Any]] = {
    "teacher_student": {"widths": (6, 5, 3), "n_train": 40, "n_test": 30},
    "sinusoid_1d": {"n": 25, "n_test": 11},
    "sinusoid_2d": {"grid": 4, "n_test_grid": 3, "noise": 0.1},
    "uniform_regression": {"n_samples": 4, "in_features": 5, "out_features": 8, "n_test": 2},
    "gaussian_classification": {"n_train": 30, "n_test": 20, "n_features": 4},
}
GENERATORS: dict[str, Callable[..., psd.Dataset]] = {
    "teacher_student": psd.teacher_student,
    "sinusoid_1d": psd.sinusoid_1d,
    "sinusoid_2d": psd.sinusoid_2d,
    "uniform_regression": psd.uniform_regression,
    "gaussian_classification": psd.gaussian_classification,
}
EXPECTED_SHAPES = {
    # name: (x_train, y_train, x_test, y_test)
    "teacher_student": ((40, 6), (40, 3), (30, 6), (30, 3)),
    "sinusoid_1d": ((25, 1), (25, 1), (11, 1), (11, 1)),
    "sinusoid_2d": ((16, 2), (16, 1), (9, 2), (9, 1)),
    "uniform_regression": ((4, 5), (4, 8), (2, 5), (2, 8)),
    "gaussian_classification": ((30, 4), (30,), (20, 4), (20,)),
}


def tensors(ds: psd.Dataset) -> list[torch.Tensor]:
    return [ds.x_train, ds.y_train, ds.x_test, ds.y_test]


def assert_plain(value: object) -> None:
    """Metadata must be plain data (JSON-serialisable: no tensors or arrays)."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str)
            assert_plain(item)
    elif isinstance(value, list):
        for item in value:
            assert_plain(item)
    else:
        assert value is None or isinstance(value, (str, int, float, bool)), type(value)


def write_idx(path: Path, array: np.ndarray, *, compress: bool, type_code: int = 0x08) -> Path:
    """Write ``array`` in the IDX format (big-endian), gzip-compressed if asked."""
    big_endian = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    header = struct.pack(">BBBB", 0, 0, type_code, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.astype(big_endian[type_code]).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(payload) if compress else payload)
    return path


MNIST_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def write_mnist(
    directory: Path, *, compress: bool, n_train: int = 5, n_test: int = 3, seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for name, array in arrays.items():
        write_idx(directory / (name + (".gz" if compress else "")), array, compress=compress)
    return arrays


def cifar_batch(n: int, seed: int) -> dict[bytes, Any]:
    rng = np.random.default_rng(seed)
    return {
        b"batch_label": b"testing batch",
        b"labels": [int(v) for v in rng.integers(0, 10, n)],
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [f"img_{i}.png".encode() for i in range(n)],
    }


CIFAR_NAMES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")


def write_cifar(directory: Path, *, sizes: tuple[int, ...] = (2, 2, 1, 3, 2, 4)) -> list[dict]:
    directory.mkdir(parents=True, exist_ok=True)
    batches = []
    for i, (name, n) in enumerate(zip(CIFAR_NAMES, sizes, strict=True)):
        batch = cifar_batch(n, seed=i)
        with (directory / name).open("wb") as handle:
            pickle.dump(batch, handle, protocol=2)  # protocol 2 as written by Python 2
        batches.append(batch)
    return batches


class RunsCommand:
    """Pickles to a call of ``os.system(command)``: what a crafted data file would contain."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (self.command,))


class CustomPayload:
    """A custom class: torch.load(weights_only=True) must refuse it."""

    def __init__(self) -> None:
        self.value = 3


ENERGY_HEADER = ["X1", "X2", "X3", "X4", "X5", "X6", "X7", "X8", "Y1", "Y2"]
ENERGY_ROWS = [
    [0.98, 514.5, 294.0, 110.25, 7.0, 2, 0.0, 0, 15.55, 21.33],
    [0.90, 563.5, 318.5, 122.5, 7.0, 3, 0.1, 1, 20.84, 28.28],
    [0.62, 808.5, 367.5, 220.5, 3.5, 5, 0.4, 5, 16.64, 16.03],
]


def write_energy_csv(path: Path, rows: list[list[Any]] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(ENERGY_HEADER)]
    lines += [",".join(str(v) for v in row) for row in (ENERGY_ROWS if rows is None else rows)]
    lines += [",,,,,,,,,", ""]  # empty trailing rows, as in the UCI files
    path.write_text("\n".join(lines) + "\n")
    return path


def numpy_global_state() -> Any:
    """numpy's legacy global random state (the one mnist1d seeds), as a tuple."""
    return np.random.get_state()  # noqa: NPY002 (checking the legacy global state)


def clear_data_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(psd.DATA_ENV_VAR, raising=False)


# --------------------------------------------------------------------------- synthetic: generic


@pytest.mark.parametrize("name", sorted(GENERATORS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_generator_shapes_and_dtypes(name: str, dtype: torch.dtype) -> None:
    ds = GENERATORS[name](dtype=dtype, **SMALL[name])
    assert [tuple(t.shape) for t in tensors(ds)] == list(EXPECTED_SHAPES[name])
    assert ds.x_train.dtype == ds.x_test.dtype == dtype
    if ds.task == "classification":
        assert ds.y_train.dtype == ds.y_test.dtype == torch.int64
        assert ds.num_classes == 3
    else:
        assert ds.y_train.dtype == ds.y_test.dtype == dtype
        assert ds.num_classes is None
    assert all(torch.isfinite(t).all() for t in tensors(ds))
    assert_plain(ds.metadata)
    json.dumps(ds.metadata)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generator_default_dtype_follows_torch_default(name: str) -> None:
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert GENERATORS[name](**SMALL[name]).x_train.dtype == torch.float64
        torch.set_default_dtype(torch.float32)
        assert GENERATORS[name](**SMALL[name]).x_train.dtype == torch.float32
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generator_determinism_by_seed(name: str) -> None:
    kwargs = SMALL[name] | ({"sampling": "uniform"} if name.startswith("sinusoid") else {})
    first = GENERATORS[name](seed=3, **kwargs)
    again = GENERATORS[name](seed=3, **kwargs)
    other = GENERATORS[name](seed=4, **kwargs)
    for a, b in zip(tensors(first), tensors(again), strict=True):
        assert torch.equal(a, b)
    assert first.metadata == again.metadata
    assert not torch.equal(first.x_train, other.x_train)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generators_leave_global_random_state_alone(name: str) -> None:
    torch_state = torch.get_rng_state()
    numpy_state = numpy_global_state()
    python_state = random.getstate()
    GENERATORS[name](**SMALL[name])
    assert torch.equal(torch.get_rng_state(), torch_state)
    after = numpy_global_state()
    assert after[0] == numpy_state[0]
    assert np.array_equal(after[1], numpy_state[1])
    assert random.getstate() == python_state


def test_float32_is_the_rounded_float64_data() -> None:
    ds64 = psd.teacher_student(widths=(6, 5, 3), n_train=20, n_test=5, dtype=torch.float64)
    ds32 = psd.teacher_student(widths=(6, 5, 3), n_train=20, n_test=5, dtype=torch.float32)
    assert torch.equal(ds32.x_train, ds64.x_train.float())
    assert torch.equal(ds32.y_train, ds64.y_train.float())


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: psd.sinusoid_1d(target="f4"), ["target", "'f1'", "'f2'", "'f3'"]),
        (lambda: psd.sinusoid_2d(target="f1"), ["target", "'g1'", "'g2'", "'g3'"]),
        (lambda: psd.sinusoid_1d(sampling="random"), ["sampling", "'grid'", "'uniform'"]),
        (lambda: psd.sinusoid_2d(sampling="sobol"), ["sampling", "'grid'", "'uniform'"]),
        (lambda: psd.sinusoid_1d(n=0), ["n must be an integer >= 1"]),
        (lambda: psd.sinusoid_1d(noise=-0.1), ["noise"]),
        (lambda: psd.sinusoid_2d(grid=0), ["grid"]),
        (lambda: psd.teacher_student(eig_range=(1.0, 1e-5)), ["eig_range", "0 < smallest"]),
        (lambda: psd.teacher_student(eig_range=(0.0, 1.0)), ["eig_range"]),
        (lambda: psd.teacher_student(eig_range=(1e-3,)), ["eig_range"]),
        (lambda: psd.teacher_student(widths=(5,)), ["widths"]),
        (lambda: psd.teacher_student(n_train=0), ["n_train"]),
        (lambda: psd.teacher_student(activation="swish"), ["swish"]),
        (lambda: psd.uniform_regression(n_samples=0), ["n_samples"]),
        (lambda: psd.uniform_regression(n_test=-1), ["n_test"]),
        (lambda: psd.gaussian_classification(num_classes=1), ["num_classes"]),
        (lambda: psd.gaussian_classification(separation=math.inf), ["separation"]),
        (lambda: psd.uniform_regression(dtype=torch.int64), ["dtype"]),
        (lambda: psd.uniform_regression(seed=1.5), ["seed"]),
    ],
)
def test_generator_argument_validation(call: Callable[[], object], words: list[str]) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        call()
    for word in words:
        assert word in str(info.value)


# --------------------------------------------------------------------------- teacher-student


def test_haar_orthogonal_is_orthogonal_and_unbiased() -> None:
    generator = torch.Generator().manual_seed(0)
    Q = psd.haar_orthogonal(7, generator)
    assert torch.allclose(Q.T @ Q, torch.eye(7, dtype=torch.float64), atol=1e-12)
    # Haar measure: every entry has mean 0. Without Mezzadri's sign correction, QR's sign
    # convention biases Q[0, 0] to about -0.5. 500 draws: Q00 has standard deviation 1/sqrt(3),
    # so its mean has standard error 0.026 (bound: 4.6 errors); Q00² ~ Beta(1/2, 1) has standard
    # deviation 0.30, so its mean has standard error 0.013 (bound: 4.5 errors).
    corner = torch.stack([psd.haar_orthogonal(3, generator)[0, 0] for _ in range(500)])
    assert abs(float(corner.mean())) < 0.12
    assert abs(float((corner**2).mean()) - 1 / 3) < 0.06  # E[Q00²] = 1/n


def test_teacher_student_eigenvalue_grid_in_metadata() -> None:
    ds = psd.teacher_student(widths=(5, 3, 2), n_train=3, n_test=0, eig_range=(1e-4, 1.0))
    assert ds.metadata["eigenvalues"] == pytest.approx([1.0, 1e-1, 1e-2, 1e-3, 1e-4], rel=1e-12)
    assert ds.metadata["eig_range"] == [1e-4, 1.0]
    assert ds.metadata["widths"] == [5, 3, 2]


def test_teacher_student_input_covariance_matches_the_log_grid() -> None:
    eigenvalues = np.logspace(0, -2, 8)  # seed 002's grid, largest first
    ds = psd.teacher_student(
        widths=(8, 4, 1), n_train=200_000, n_test=0, eig_range=(1e-2, 1.0), dtype=torch.float64
    )
    x = ds.x_train
    assert float(x.mean(0).abs().max()) < 0.01  # zero mean (standard error ≤ 1/sqrt(2e5))
    sample_eigenvalues = torch.linalg.eigvalsh(x.T @ x / x.shape[0]).flip(0).numpy()
    # Each sample eigenvalue has relative standard deviation ≈ sqrt(2/n) ≈ 0.003, plus a bias of
    # order (d/n)·λ_j/(λ_i − λ_j) ≲ 1e-4 here; 5% is > 10 standard deviations, yet far below
    # the grid's spacing factor 10^(2/7) ≈ 1.9, so a wrong spectrum cannot pass.
    np.testing.assert_allclose(sample_eigenvalues, eigenvalues, rtol=0.05)


def test_teacher_student_covariance_is_rotated() -> None:
    # C = Q diag(λ) Qᵀ with Q random: not diagonal in the standard basis.
    ds = psd.teacher_student(widths=(6, 2), n_train=20_000, n_test=0, dtype=torch.float64)
    cov = ds.x_train.T @ ds.x_train / ds.x_train.shape[0]
    off_diagonal = cov - torch.diag(torch.diagonal(cov))
    assert float(off_diagonal.abs().max()) > 0.05


def test_teacher_targets_are_the_teacher_applied_to_x() -> None:
    ds = psd.teacher_student(
        widths=(7, 5, 4, 2), activation="tanh", n_train=50, n_test=20, bias=True, seed=5,
        dtype=torch.float64,
    )  # fmt: skip
    teacher = psd.teacher_model(ds)
    with torch.no_grad():
        torch.testing.assert_close(teacher(ds.x_train), ds.y_train, rtol=0, atol=1e-12)
        torch.testing.assert_close(teacher(ds.x_test), ds.y_test, rtol=0, atol=1e-12)
    # biases are zero; weights are in the metadata as plain lists
    assert all(not any(row) for key, row in ds.metadata["teacher"].items() if "bias" in key)
    assert np.asarray(ds.metadata["teacher"]["0.weight"]).shape == (5, 7)


def test_teacher_model_replays_the_seed_when_weights_are_not_stored() -> None:
    ds = psd.teacher_student(widths=(7, 5, 2), n_train=10, n_test=0, seed=2, dtype=torch.float64)
    stored = psd.teacher_model(ds).state_dict()
    del ds.metadata["teacher"]
    replayed = psd.teacher_model(ds).state_dict()
    assert stored.keys() == replayed.keys()
    for key in stored:
        assert torch.equal(stored[key], replayed[key])


def test_teacher_model_rejects_other_datasets() -> None:
    with pytest.raises(InvalidArgumentError, match="teacher_student"):
        psd.teacher_model(psd.uniform_regression())


def test_teacher_weights_have_variance_one_over_fan_in() -> None:
    ds = psd.teacher_student(widths=(400, 300, 1), n_train=1, n_test=0, seed=1)
    weight = np.asarray(ds.metadata["teacher"]["0.weight"])
    # 120 000 entries: the sample variance has relative standard deviation sqrt(2/120000) ≈ 0.4%.
    assert weight.var() * 400 == pytest.approx(1.0, rel=0.03)
    assert abs(weight.mean()) < 5 * math.sqrt(1 / 400 / 120_000)  # 5 standard errors


def test_teacher_student_noise_only_on_training_targets() -> None:
    kwargs: dict[str, Any] = {
        "widths": (6, 4, 2), "n_train": 5000, "n_test": 30, "seed": 1, "dtype": torch.float64
    }  # fmt: skip
    clean = psd.teacher_student(noise=0.0, **kwargs)
    noisy = psd.teacher_student(noise=0.3, **kwargs)
    assert torch.equal(clean.x_train, noisy.x_train)
    assert torch.equal(clean.y_test, noisy.y_test)
    residual = noisy.y_train - clean.y_train
    assert float(residual.std()) == pytest.approx(0.3, rel=0.05)  # 10 000 draws: ~0.7% std


def test_teacher_student_defaults_match_seed_002() -> None:
    ds = psd.teacher_student(n_train=10, n_test=10)
    assert ds.x_train.shape == (10, 100)
    assert ds.y_train.shape == (10, 40)
    assert ds.metadata["activation"] == "tanh"
    assert ds.metadata["eigenvalues"][0] == pytest.approx(1.0)
    assert ds.metadata["eigenvalues"][-1] == pytest.approx(1e-5)


# --------------------------------------------------------------------------- sinusoids

F1D = {
    "f1": lambda x: 1.5 + np.sin(2 * np.pi * x),
    "f2": lambda x: 1.5 + np.sin(2 * np.pi * x) + 0.5 * np.sin(4 * np.pi * x),
    "f3": lambda x: (
        1.5 + np.sin(2 * np.pi * x) + 0.5 * np.sin(4 * np.pi * x) + 0.4 * np.sin(16 * np.pi * x)
    ),
}
G2D = {
    "g1": lambda x, y: 1.5 + np.sin(2 * np.pi * x) + np.sin(2 * np.pi * y),
    "g2": lambda x, y: (
        1.5 + np.sin(2 * np.pi * x) + np.sin(2 * np.pi * y) + 0.5 * np.sin(4 * np.pi * x)
    ),
    "g3": lambda x, y: (
        1.5 + np.sin(2 * np.pi * x) + np.sin(2 * np.pi * y) + 0.5 * np.sin(4 * np.pi * x)
        + 0.4 * np.sin(4 * np.pi * y)
    ),
}  # fmt: skip


@pytest.mark.parametrize("target", ["f1", "f2", "f3"])
def test_sinusoid_1d_without_noise_is_the_paper_function(target: str) -> None:
    ds = psd.sinusoid_1d(target=target, n=37, noise=0.0, n_test=101, dtype=torch.float64)
    assert ds.name == f"sinusoid_1d/{target}"
    grid = np.linspace(0, 1, 37)
    np.testing.assert_allclose(ds.x_train[:, 0].numpy(), grid, atol=1e-15)
    np.testing.assert_allclose(ds.y_train[:, 0].numpy(), F1D[target](grid), atol=1e-12)
    test_grid = np.linspace(0, 1, 101)
    np.testing.assert_allclose(ds.x_test[:, 0].numpy(), test_grid, atol=1e-15)
    np.testing.assert_allclose(ds.y_test[:, 0].numpy(), F1D[target](test_grid), atol=1e-12)


def test_sinusoid_1d_noise_on_inputs_and_outputs() -> None:
    n, noise = 20_000, 0.1
    ds = psd.sinusoid_1d(target="f3", n=n, noise=noise, dtype=torch.float64)
    grid = np.linspace(0, 1, n)
    x_noise = ds.x_train[:, 0].numpy() - grid
    y_noise = ds.y_train[:, 0].numpy() - F1D["f3"](grid)  # outputs are f(clean x) + noise
    for sample in (x_noise, y_noise):  # 20 000 draws: std within ~0.5%, mean within ~0.002
        assert sample.std() == pytest.approx(noise, rel=0.03)
        assert abs(sample.mean()) < 0.005
    assert abs(np.corrcoef(x_noise, y_noise)[0, 1]) < 0.05  # independent draws
    # the test set stays clean
    np.testing.assert_allclose(ds.y_test[:, 0].numpy(), F1D["f3"](ds.x_test[:, 0].numpy()))


def test_sinusoid_1d_uniform_sampling() -> None:
    ds = psd.sinusoid_1d(target="f1", n=500, noise=0.0, sampling="uniform", dtype=torch.float64)
    x = ds.x_train[:, 0].numpy()
    assert x.min() >= 0
    assert x.max() <= 1
    assert not np.allclose(np.sort(x), np.linspace(0, 1, 500))
    np.testing.assert_allclose(ds.y_train[:, 0].numpy(), F1D["f1"](x), atol=1e-12)


@pytest.mark.parametrize("target", ["g1", "g2", "g3"])
def test_sinusoid_2d_grid_is_the_paper_function(target: str) -> None:
    ds = psd.sinusoid_2d(target=target, grid=6, n_test_grid=9, dtype=torch.float64)
    assert ds.name == f"sinusoid_2d/{target}"
    axis = np.linspace(0, 1, 6)
    first, second = np.meshgrid(axis, axis, indexing="ij")
    np.testing.assert_allclose(ds.x_train[:, 0].numpy(), first.ravel(), atol=1e-15)
    np.testing.assert_allclose(ds.x_train[:, 1].numpy(), second.ravel(), atol=1e-15)
    expected = G2D[target](first.ravel(), second.ravel())
    np.testing.assert_allclose(ds.y_train[:, 0].numpy(), expected, atol=1e-12)
    x_test = ds.x_test.numpy()
    assert x_test.shape == (81, 2)
    np.testing.assert_allclose(ds.y_test[:, 0].numpy(), G2D[target](x_test[:, 0], x_test[:, 1]))


def test_sinusoid_2d_g3_differs_from_g2_only_in_y() -> None:
    # g3 - g2 = 0.4 sin(4πy) depends on the second coordinate only.
    g2 = psd.sinusoid_2d(target="g2", grid=5, dtype=torch.float64)
    g3 = psd.sinusoid_2d(target="g3", grid=5, dtype=torch.float64)
    y = g2.x_train[:, 1]
    torch.testing.assert_close(
        g3.y_train[:, 0] - g2.y_train[:, 0], 0.4 * torch.sin(4 * math.pi * y)
    )


def test_sinusoid_2d_uniform_sampling_and_noise() -> None:
    clean = psd.sinusoid_2d(grid=10, sampling="uniform", seed=2, dtype=torch.float64)
    noisy = psd.sinusoid_2d(grid=10, sampling="uniform", noise=0.05, seed=2, dtype=torch.float64)
    assert clean.x_train.shape == (100, 2)
    assert float(clean.x_train.min()) >= 0
    assert float(clean.x_train.max()) <= 1
    # same clean points, perturbed inputs and outputs
    assert 0 < float((noisy.x_train - clean.x_train).abs().max()) < 0.5
    assert 0 < float((noisy.y_train - clean.y_train).abs().max()) < 0.5


# --------------------------------------------------------------------------- simple generators


def test_uniform_regression_entries_are_uniform() -> None:
    ds = psd.uniform_regression(n_samples=2000, in_features=5, out_features=8, n_test=10)
    for t in tensors(ds):
        assert float(t.min()) >= 0
        assert float(t.max()) < 1
    assert float(ds.x_train.mean()) == pytest.approx(0.5, abs=0.01)  # 10 000 draws
    assert float(ds.x_train.var()) == pytest.approx(1 / 12, rel=0.05)
    assert psd.uniform_regression().x_test.shape == (0, 5)


def test_gaussian_classification_is_a_balanced_mixture() -> None:
    ds = psd.gaussian_classification(
        n_train=3001, n_test=300, n_features=5, num_classes=3, dtype=torch.float64
    )
    counts = torch.bincount(ds.y_train, minlength=3).tolist()
    assert sorted(counts) == [1000, 1000, 1001]
    assert torch.bincount(ds.y_test).tolist() == [100, 100, 100]
    means = torch.tensor(ds.metadata["means"])
    for c in range(3):
        members = ds.x_train[ds.y_train == c]
        # ~1000 samples of N(μ_c, I): the sample mean is within 4/sqrt(1000) ≈ 0.13
        assert float((members.mean(0) - means[c]).abs().max()) < 0.13
        assert float(members.var(0).mean()) == pytest.approx(1.0, rel=0.1)
    assert not torch.equal(ds.y_train, ds.y_train.sort().values)  # shuffled


def test_gaussian_classification_separation_scales_the_means() -> None:
    zero = psd.gaussian_classification(separation=0.0, n_features=20)
    assert np.allclose(zero.metadata["means"], 0.0)
    far = psd.gaussian_classification(separation=30.0, n_features=200, num_classes=2)
    distance = np.linalg.norm(np.subtract(*far.metadata["means"]))
    assert distance == pytest.approx(30.0 * math.sqrt(2), rel=0.2)


# --------------------------------------------------------------------------- bundled


@pytest.fixture(scope="module")
def digits_ds() -> psd.Dataset:
    return psd.digits(dtype=torch.float64)


def test_digits_shapes_and_classes(digits_ds: psd.Dataset) -> None:
    ds = digits_ds
    assert ds.x_train.shape == (1347, 64)
    assert ds.x_test.shape == (450, 64)
    assert ds.y_train.dtype == torch.int64
    assert ds.num_classes == 10
    assert ds.x_train.dtype == torch.float64
    assert float(ds.x_train.min()) == 0.0
    assert float(ds.x_train.max()) == 1.0
    assert torch.equal(ds.x_train * 16, (ds.x_train * 16).round())  # raw pixels 0..16
    assert set(ds.y_train.tolist()) == set(range(10))


def test_digits_split_is_stratified(digits_ds: psd.Dataset) -> None:
    train = torch.bincount(digits_ds.y_train, minlength=10).double()
    test = torch.bincount(digits_ds.y_test, minlength=10).double()
    total = train + test
    # stratified: each class's test count is its share of 25%, up to rounding
    assert float((test - 0.25 * total).abs().max()) <= 1.0


def test_digits_seed_changes_the_split(digits_ds: psd.Dataset) -> None:
    other = psd.digits(seed=1, dtype=torch.float64)
    assert not torch.equal(other.y_train, digits_ds.y_train)
    assert psd.digits(test_fraction=0.5).x_test.shape == (899, 64)
    with pytest.raises(InvalidArgumentError, match="test_fraction"):
        psd.digits(test_fraction=1.0)


def test_mnist1d_shapes_classes_and_determinism() -> None:
    ds = psd.mnist1d(num_samples=500, dtype=torch.float32)
    assert ds.x_train.shape == (400, 40)
    assert ds.x_test.shape == (100, 40)
    assert ds.x_train.dtype == torch.float32
    assert ds.y_train.dtype == torch.int64
    assert ds.num_classes == 10
    assert set(torch.cat([ds.y_train, ds.y_test]).tolist()) == set(range(10))
    assert torch.bincount(torch.cat([ds.y_train, ds.y_test])).tolist() == [50] * 10
    again = psd.mnist1d(num_samples=500, dtype=torch.float32)
    assert torch.equal(ds.x_train, again.x_train)
    other = psd.mnist1d(num_samples=500, seed=1, dtype=torch.float32)
    assert not torch.equal(ds.x_train, other.x_train)
    assert ds.metadata["args"]["num_samples"] == 500
    assert "url" not in ds.metadata["args"]


def test_mnist1d_leaves_the_callers_random_state_alone() -> None:
    np.random.seed(123)  # noqa: NPY002 (the legacy global state is what mnist1d touches)
    random.seed(456)
    torch_state = torch.get_rng_state()
    numpy_state = numpy_global_state()
    python_state = random.getstate()
    psd.mnist1d(num_samples=100)
    after = numpy_global_state()
    assert after[0] == numpy_state[0]
    assert np.array_equal(after[1], numpy_state[1])
    assert after[2:] == numpy_state[2:]
    assert random.getstate() == python_state
    assert torch.equal(torch.get_rng_state(), torch_state)
    # and the next draws are the ones the caller would have had
    assert np.random.rand() == np.random.RandomState(123).rand()  # noqa: NPY002


def test_mnist1d_validates_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="num_samples"):
        psd.mnist1d(num_samples=5)
    with pytest.raises(InvalidArgumentError, match="train_split"):
        psd.mnist1d(train_split=0.0)


# --------------------------------------------------------------------------- data directory


def test_data_directory_from_argument_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_data_env(monkeypatch)
    assert psd.data_directory(tmp_path) == tmp_path.absolute()
    assert psd.data_directory(str(tmp_path)) == tmp_path.absolute()
    monkeypatch.setenv("PARAMSYM_DATA", str(tmp_path))
    assert psd.data_directory() == tmp_path.absolute()
    other = tmp_path / "other"
    other.mkdir()
    assert psd.data_directory(other) == other  # the argument wins over the environment


def test_no_data_directory_says_how_to_give_one(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_data_env(monkeypatch)
    for call in (psd.data_directory, lambda: psd.mnist(), lambda: psd.load("cifar10")):
        with pytest.raises(MissingDataError) as info:
            call()
        assert "--data-dir" in str(info.value)
        assert "PARAMSYM_DATA" in str(info.value)
    monkeypatch.setenv("PARAMSYM_DATA", "")  # empty counts as unset
    with pytest.raises(MissingDataError, match="PARAMSYM_DATA"):
        psd.data_directory()


def test_bad_data_directory_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(MissingDataError, match="does not exist") as info:
        psd.data_directory(missing)
    assert str(missing) in str(info.value)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    monkeypatch.setenv("PARAMSYM_DATA", str(a_file))
    with pytest.raises(MissingDataError, match="not a directory") as info:
        psd.data_directory()
    assert str(a_file) in str(info.value)
    assert "PARAMSYM_DATA" in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, ParamsymError)


# --------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize(
    ("type_code", "dtype"),
    [(0x08, np.uint8), (0x09, np.int8), (0x0B, np.int16), (0x0C, np.int32),
     (0x0D, np.float32), (0x0E, np.float64)],
)  # fmt: skip
def test_read_idx_round_trip(tmp_path: Path, compress: bool, type_code: int, dtype: Any) -> None:
    rng = np.random.default_rng(0)
    array = (rng.standard_normal((3, 4, 5)) * 50).astype(dtype)
    path = write_idx(tmp_path / "array.idx", array, compress=compress, type_code=type_code)
    result = psd.read_idx(path)
    assert result.dtype == np.dtype(dtype)
    assert result.dtype.isnative
    np.testing.assert_array_equal(result, array)
    result[0, 0, 0] = 1  # writable


def test_read_idx_detects_gzip_by_content_not_name(tmp_path: Path) -> None:
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    gz_without_suffix = write_idx(tmp_path / "images", array, compress=True)
    plain_with_gz_suffix = write_idx(tmp_path / "labels.gz", array, compress=False)
    np.testing.assert_array_equal(psd.read_idx(gz_without_suffix), array)
    np.testing.assert_array_equal(psd.read_idx(plain_with_gz_suffix), array)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x01\x00\x08\x01" + struct.pack(">I", 2) + b"ab", "magic number"),
        (b"\x00\x00\x07\x01" + struct.pack(">I", 2) + b"ab", "magic number"),
        (b"\x00\x00", "too short"),
        (b"\x00\x00\x08\x03" + struct.pack(">I", 2), "truncated"),  # header cut short
        (b"\x00\x00\x08\x02" + struct.pack(">II", 2, 3) + b"abcde", "truncated"),
        (b"\x00\x00\x0b\x01" + struct.pack(">I", 2) + b"abc", "truncated"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 2) + b"abc", "trailing bytes"),
    ],
)
@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_malformed(tmp_path: Path, payload: bytes, message: str, compress: bool) -> None:
    path = tmp_path / "bad-idx1-ubyte"
    path.write_bytes(gzip.compress(payload) if compress else payload)
    with pytest.raises(DataFormatError, match=message) as info:
        psd.read_idx(path)
    assert str(path) in str(info.value)


def test_read_idx_damaged_gzip(tmp_path: Path) -> None:
    path = tmp_path / "damaged.gz"
    payload = (
        b"\x00\x00\x08\x01" + struct.pack(">I", 1000) + np.arange(1000).astype(np.uint8).tobytes()
    )
    path.write_bytes(gzip.compress(payload)[:-12])  # cut inside the stream and its trailer
    with pytest.raises(DataFormatError, match="gzip") as info:
        psd.read_idx(path)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------- MNIST


@pytest.mark.parametrize(
    ("subdir", "compress"), [("mnist", True), ("MNIST/raw", False), ("", True)]
)
def test_mnist_loader(tmp_path: Path, subdir: str, compress: bool) -> None:
    directory = tmp_path / subdir if subdir else tmp_path
    arrays = write_mnist(directory, compress=compress)
    ds = psd.mnist(tmp_path, dtype=torch.float64)
    assert ds.name == "mnist"
    assert ds.task == "classification"
    assert ds.num_classes == 10
    assert ds.x_train.shape == (5, 784)
    assert ds.x_test.shape == (3, 784)
    assert ds.y_train.dtype == torch.int64
    expected = arrays["train-images-idx3-ubyte"].reshape(5, 784) / 255.0
    np.testing.assert_allclose(ds.x_train.numpy(), expected)
    assert ds.y_test.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    assert float(ds.x_train.max()) <= 1.0
    suffix = ".gz" if compress else ""
    assert ds.metadata["files"] == [str(directory / (n + suffix)) for n in MNIST_NAMES]


def test_mnist_from_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_mnist(tmp_path / "mnist", compress=True)
    monkeypatch.setenv("PARAMSYM_DATA", str(tmp_path))
    ds = psd.load("mnist", dtype=torch.float32)
    assert ds.x_train.shape == (5, 784)
    assert ds.x_train.dtype == torch.float32


@pytest.mark.parametrize("subdir", ["fashion_mnist", "fashion-mnist", "FashionMNIST/raw"])
def test_fashion_mnist_subdirectories(tmp_path: Path, subdir: str) -> None:
    fashion = write_mnist(tmp_path / subdir, compress=True, seed=1)
    write_mnist(tmp_path / "mnist", compress=True, seed=2)  # must not be picked up
    ds = psd.load("fashion_mnist", data_dir=tmp_path)
    assert ds.name == "fashion_mnist"
    assert ds.y_train.tolist() == fashion["train-labels-idx1-ubyte"].tolist()
    assert psd.mnist(tmp_path, variant="fashion_mnist").metadata["files"] == ds.metadata["files"]


def test_mnist_missing_files_lists_names_and_directories(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as info:
        psd.mnist(tmp_path)
    message = str(info.value)
    for name in MNIST_NAMES:
        assert name in message
        assert f"{name}.gz" in message
    for directory in (tmp_path / "mnist", tmp_path / "MNIST" / "raw", tmp_path):
        assert str(directory.absolute()) in message
    assert "--data-dir" in message
    assert "PARAMSYM_DATA" in message


def test_mnist_partial_directory_says_what_is_missing(tmp_path: Path) -> None:
    write_mnist(tmp_path / "mnist", compress=True)
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(MissingDataError) as info:
        psd.mnist(tmp_path)
    assert f"{tmp_path / 'mnist'} has some of the files but lacks" in str(info.value)
    assert "t10k-labels-idx1-ubyte" in str(info.value).split("lacks:")[1]


def test_fashion_mnist_missing_lists_its_directories(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as info:
        psd.fashion_mnist(tmp_path)
    for sub in ("fashion_mnist", "fashion-mnist", "FashionMNIST/raw"):
        assert str(tmp_path / sub) in str(info.value)


def test_mnist_wrong_content(tmp_path: Path) -> None:
    write_mnist(tmp_path, compress=False)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.full(5, 10, np.uint8), compress=False)
    with pytest.raises(DataFormatError, match="label 10"):
        psd.mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(4, np.uint8), compress=False)
    with pytest.raises(DataFormatError, match="one per image"):
        psd.mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(5, np.uint8), compress=False)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((3, 8, 8), np.uint8), compress=False)
    with pytest.raises(DataFormatError, match=r"\(n, 28, 28\)"):
        psd.mnist(tmp_path)


def test_mnist_unknown_variant(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="'fashion_mnist'"):
        psd.mnist(tmp_path, variant="kmnist")


# --------------------------------------------------------------------------- CIFAR-10


@pytest.mark.parametrize("subdir", ["cifar-10-batches-py", ""])
def test_cifar10_loader(tmp_path: Path, subdir: str) -> None:
    batches = write_cifar(tmp_path / subdir if subdir else tmp_path)
    ds = psd.load("cifar10", data_dir=tmp_path, dtype=torch.float64)
    assert ds.x_train.shape == (10, 3, 32, 32)
    assert ds.x_test.shape == (4, 3, 32, 32)
    assert ds.y_train.dtype == torch.int64
    assert ds.num_classes == 10
    train_data = np.concatenate([b[b"data"] for b in batches[:5]])
    np.testing.assert_allclose(ds.x_train.numpy(), train_data.reshape(10, 3, 32, 32) / 255.0)
    assert ds.y_train.tolist() == [v for b in batches[:5] for v in b[b"labels"]]
    assert ds.y_test.tolist() == batches[5][b"labels"]
    assert len(ds.metadata["files"]) == 6


def test_cifar10_accepts_the_numpy_1_module_path(tmp_path: Path) -> None:
    # Files written with numpy < 2 (and the official files) name numpy.core.multiarray; on
    # numpy 2 that path is a deprecated shim, which the loader must not import.
    directory = tmp_path / "cifar-10-batches-py"
    write_cifar(directory)
    for name in CIFAR_NAMES:
        raw = (directory / name).read_bytes()
        assert b"numpy._core.multiarray" in raw or b"numpy.core.multiarray" in raw
        (directory / name).write_bytes(
            raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = psd.cifar10(tmp_path)
    assert ds.x_train.shape == (10, 3, 32, 32)


@pytest.mark.parametrize("target", ["data_batch_1", "test_batch"])
def test_cifar10_refuses_a_crafted_pickle(tmp_path: Path, target: str) -> None:
    directory = tmp_path / "cifar-10-batches-py"
    write_cifar(directory)
    marker = tmp_path / "pwned"
    batch = cifar_batch(2, seed=0)
    batch[b"data"] = RunsCommand(f"echo pwned > {marker}")
    with (directory / target).open("wb") as handle:
        pickle.dump(batch, handle, protocol=2)
    with pytest.raises(DataFormatError) as info:
        psd.cifar10(tmp_path)
    message = str(info.value)
    assert "refusing to load" in message
    assert str(directory / target) in message
    assert "system" in message
    assert "may be crafted to run code" in message
    assert not marker.exists()


def test_cifar10_refuses_builtins_eval(tmp_path: Path) -> None:
    directory = tmp_path / "cifar-10-batches-py"
    write_cifar(directory)
    marker = tmp_path / "pwned"
    # GLOBAL builtins.eval, then REDUCE: a pickle that would run eval(...) when loaded.
    code = f"open({str(marker)!r}, 'w').write('x')"
    payload = b"cbuiltins\neval\n(" + pickle.dumps(code, protocol=2)[2:-1] + b"tR."
    (directory / "test_batch").write_bytes(b"\x80\x02" + payload)
    with pytest.raises(DataFormatError, match=r"builtins\.eval"):
        psd.cifar10(tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b.pop(b"labels"), "b'labels'"),
        (lambda b: b.update({b"data": b[b"data"].astype(np.float32)}), "uint8"),
        (lambda b: b.update({b"data": b[b"data"][:, :100]}), r"\(N, 3072\)"),
        (lambda b: b.update({b"labels": [0]}), "list of 2 integers"),
        (lambda b: b.update({b"labels": [0, 10]}), "0..9"),
    ],
)
def test_cifar10_malformed_batch(
    tmp_path: Path, change: Callable[[dict], Any], message: str
) -> None:
    directory = tmp_path / "cifar-10-batches-py"
    write_cifar(directory)
    batch = cifar_batch(2, seed=0)
    change(batch)
    with (directory / "data_batch_3").open("wb") as handle:
        pickle.dump(batch, handle, protocol=2)
    with pytest.raises(DataFormatError, match=message) as info:
        psd.cifar10(tmp_path)
    assert str(directory / "data_batch_3") in str(info.value)


def test_cifar10_not_a_pickle_and_missing_files(tmp_path: Path) -> None:
    directory = tmp_path / "cifar-10-batches-py"
    write_cifar(directory)
    (directory / "data_batch_2").write_bytes(b"not a pickle at all")
    with pytest.raises(DataFormatError, match="not a readable CIFAR-10 batch"):
        psd.cifar10(tmp_path)
    (directory / "data_batch_2").unlink()
    with pytest.raises(MissingDataError) as info:
        psd.cifar10(tmp_path)
    for name in CIFAR_NAMES:
        assert name in str(info.value)
    assert str(directory) in str(info.value)
    assert f"\n  {tmp_path}\n" in str(info.value)


# --------------------------------------------------------------------------- UCI energy


@pytest.mark.parametrize("name", ["ENB2012_data.csv", "energy_efficiency.csv"])
@pytest.mark.parametrize("subdir", ["uci_energy", "energy_efficiency", ""])
def test_uci_energy_csv(tmp_path: Path, name: str, subdir: str) -> None:
    write_energy_csv((tmp_path / subdir if subdir else tmp_path) / name)
    rows = np.asarray(ENERGY_ROWS)
    ds = psd.uci_energy(tmp_path, dtype=torch.float64)
    assert ds.name == "uci_energy/heating"
    assert ds.task == "regression"
    np.testing.assert_allclose(ds.x_train.numpy(), rows[:, :8])
    np.testing.assert_allclose(ds.y_train.numpy(), rows[:, 8:9])
    assert ds.x_test.shape == (0, 8)
    assert ds.y_test.shape == (0, 1)
    cooling = psd.uci_energy(tmp_path, target="cooling")
    np.testing.assert_allclose(cooling.y_train.numpy(), rows[:, 9:10], rtol=1e-6)
    both = psd.load("uci_energy", data_dir=tmp_path, target="both", dtype=torch.float64)
    np.testing.assert_allclose(both.y_train.numpy(), rows[:, 8:10])
    assert both.y_test.shape == (0, 2)
    assert both.metadata["standardised"] is False


def test_uci_energy_xlsx_with_empty_trailing_rows(tmp_path: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl")
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.append([*ENERGY_HEADER[::-1], None])  # column order from the header, extra column
    for row in ENERGY_ROWS:
        sheet.append([*row[::-1], None])
    for _ in range(2):
        sheet.append([None] * 11)
    sheet.cell(row=7, column=3).number_format = "0.00"  # a formatted but empty trailing cell
    path = tmp_path / "uci_energy" / "ENB2012_data.xlsx"
    path.parent.mkdir()
    workbook.save(path)
    check = openpyxl.load_workbook(path, read_only=True)
    assert check.worksheets[0].max_row > len(ENERGY_ROWS) + 1  # the empty rows are in the file
    check.close()
    ds = psd.uci_energy(tmp_path, target="both", dtype=torch.float64)
    rows = np.asarray(ENERGY_ROWS)
    np.testing.assert_allclose(ds.x_train.numpy(), rows[:, :8])
    np.testing.assert_allclose(ds.y_train.numpy(), rows[:, 8:])
    assert ds.metadata["file"] == str(path)


def test_uci_energy_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "ENB2012_data.csv"
    write_energy_csv(path, [ENERGY_ROWS[0], [""] * 10, ENERGY_ROWS[1]])
    with pytest.raises(DataFormatError, match="row 3 is empty"):
        psd.uci_energy(tmp_path)
    write_energy_csv(path, [ENERGY_ROWS[0], [*ENERGY_ROWS[1][:4], "n/a", *ENERGY_ROWS[1][5:]]])
    with pytest.raises(DataFormatError, match="row 3, column X5 holds 'n/a'") as info:
        psd.uci_energy(tmp_path)
    assert str(path) in str(info.value)
    path.write_text("A,B,C\n1,2,3\n")
    with pytest.raises(DataFormatError, match=r"X1\.\.X8"):
        psd.uci_energy(tmp_path)
    (tmp_path / "energy").mkdir()
    (tmp_path / "energy" / "ENB2012_data.xlsx").write_bytes(b"not a zip file")
    with pytest.raises(DataFormatError, match="XLSX"):
        psd.uci_energy(tmp_path / "energy")


def test_uci_energy_missing_and_bad_target(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as info:
        psd.uci_energy(tmp_path)
    message = str(info.value)
    for name in ("ENB2012_data.xlsx", "ENB2012_data.csv", "energy_efficiency.csv"):
        assert name in message
    for directory in (tmp_path / "uci_energy", tmp_path / "energy_efficiency", tmp_path):
        assert str(directory) in message
    with pytest.raises(InvalidArgumentError, match="'heating', 'cooling', 'both'"):
        psd.uci_energy(tmp_path, target="Y1")


# --------------------------------------------------------------------------- torch files


def test_load_torch_file(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.arange(3.0), "meta": {"step": 2, "name": "x"}}, path)
    loaded = psd.load_torch_file(path)
    assert torch.equal(loaded["w"], torch.arange(3.0))
    assert loaded["meta"]["step"] == 2


def test_load_torch_file_refuses_custom_objects(tmp_path: Path) -> None:
    path = tmp_path / "crafted.pt"
    torch.save({"payload": CustomPayload()}, path)
    with pytest.raises(DataFormatError) as info:
        psd.load_torch_file(path)
    message = str(info.value)
    assert str(path) in message
    assert "weights_only=True" in message
    assert "CustomPayload" in message
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"garbage")
    with pytest.raises(DataFormatError, match=r"garbage\.pt"):
        psd.load_torch_file(garbage)
    with pytest.raises(MissingDataError, match=r"missing\.pt"):
        psd.load_torch_file(tmp_path / "missing.pt")


# --------------------------------------------------------------------------- registry


def test_registry_names_and_availability() -> None:
    assert set(psd.DATASETS) == {
        "teacher_student", "sinusoid_1d", "sinusoid_2d", "uniform_regression",
        "gaussian_classification", "digits", "mnist1d", "mnist", "fashion_mnist", "cifar10",
        "uci_energy",
    }  # fmt: skip
    file_sets = {"mnist", "fashion_mnist", "cifar10", "uci_energy"}
    for name, info in psd.DATASETS.items():
        assert info.name == name
        assert psd.dataset_info(name) is info
        assert info.always_available == (name not in file_sets)
        assert (info.files is None) == info.always_available
    assert "train-images-idx3-ubyte[.gz]" in (psd.dataset_info("mnist").files or "")
    assert "DATA_DIR/mnist" in (psd.dataset_info("mnist").files or "")
    assert "test_batch" in (psd.dataset_info("cifar10").files or "")
    assert "ENB2012_data.xlsx" in (psd.dataset_info("uci_energy").files or "")
    with pytest.raises(TypeError):
        psd.DATASETS["x"] = psd.DATASETS["mnist"]


def test_registry_unknown_name_lists_known_names() -> None:
    for call in (lambda: psd.load("imagenet"), lambda: psd.dataset_info("imagenet")):
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert "imagenet" in str(info.value)
        assert "teacher_student" in str(info.value)
        assert "uci_energy" in str(info.value)


def test_load_passes_arguments(tmp_path: Path) -> None:
    ds = psd.load("sinusoid_1d", data_dir=tmp_path, target="f1", n=5, noise=0.0)  # dir ignored
    assert ds.name == "sinusoid_1d/f1"
    assert ds.x_train.shape == (5, 1)
    assert torch.equal(ds.x_train, psd.sinusoid_1d(target="f1", n=5, noise=0.0).x_train)
    with pytest.raises(InvalidArgumentError, match="n_samples") as info:
        psd.load("uniform_regression", n=3)
    assert "unexpected" in str(info.value)
    with pytest.raises(InvalidArgumentError, match="variant"):
        psd.load("mnist", data_dir=tmp_path, colour=True)
