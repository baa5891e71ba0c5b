"""Synthetic data sets of the papers, generated from a seed.

Every generator returns a :class:`~paramsym.data.Dataset` whose floating tensors have the
requested ``dtype`` (default: ``torch.get_default_dtype()``). The values are computed in float64
and cast at the end, so the same seed gives the same data up to rounding in every dtype. All
randomness comes from a local ``torch.Generator`` seeded with ``seed``; the global random state
of torch, numpy and Python is never used or changed.

* :func:`teacher_student`: Gaussian inputs with a log-spaced spectrum, labelled by a random MLP
  teacher (seed 002 §4).
* :func:`sinusoid_1d`, :func:`sinusoid_2d`: the sums of sinusoids f1, f2, f3 and g1, g2, g3
  (seed 004 §E1).
* :func:`uniform_regression`: U[0, 1] inputs and targets (dissertation ch. 4).
* :func:`gaussian_classification`: a balanced Gaussian mixture, one class per component.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from paramsym.data.base import Dataset
from paramsym.errors import InvalidArgumentError

__all__ = [
    "SINUSOID_1D_TARGETS",
    "SINUSOID_2D_TARGETS",
    "gaussian_classification",
    "haar_orthogonal",
    "sinusoid_1d",
    "sinusoid_2d",
    "teacher_model",
    "teacher_student",
    "uniform_regression",
]

_SAMPLINGS = ("grid", "uniform")
# Above this many teacher parameters the weights are not copied into the metadata (plain lists
# of floats cost ~30 bytes per entry); :func:`teacher_model` then regenerates them from the seed.
_MAX_STORED_TEACHER_PARAMETERS = 200_000


# --------------------------------------------------------------------------- argument checks


def _resolve_dtype(dtype: torch.dtype | None, where: str) -> torch.dtype:
    resolved = torch.get_default_dtype() if dtype is None else dtype
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise InvalidArgumentError(
            f"{where}: dtype must be a floating torch.dtype such as torch.float32 or "
            f"torch.float64, got {dtype!r}"
        )
    return resolved


def _check_int(value: object, name: str, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidArgumentError(
            f"{where}: {name} must be an integer >= {minimum}, got {value!r}"
        )
    return int(value)


def _check_nonnegative(value: object, name: str, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(float(value))
        or value < 0
    ):
        raise InvalidArgumentError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_choice(value: object, name: str, where: str, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgumentError(
            f"{where}: unknown {name} {value!r}; allowed values: {', '.join(map(repr, allowed))}"
        )
    return value


def _generator(seed: object, where: str) -> torch.Generator:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InvalidArgumentError(f"{where}: seed must be an integer, got {seed!r}")
    return torch.Generator().manual_seed(int(seed))


# --------------------------------------------------------------------------- teacher-student


def haar_orthogonal(
    n: int, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> Tensor:
    """A Haar-random orthogonal ``(n, n)`` matrix.

    QR decomposition of an ``(n, n)`` standard Gaussian matrix, with the columns of Q multiplied
    by the signs of diag(R) (Mezzadri 2007, "How to generate random matrices from the classical
    compact groups", §5). Without the correction the distribution depends on the sign convention
    of the QR routine and is not Haar.

    >>> Q = haar_orthogonal(4, torch.Generator().manual_seed(0))
    >>> bool(torch.allclose(Q.T @ Q, torch.eye(4, dtype=torch.float64)))
    True
    """
    n = _check_int(n, "n", "haar_orthogonal", 1)
    gaussian = torch.randn(n, n, generator=generator, dtype=torch.float64)
    Q, R = torch.linalg.qr(gaussian)
    signs = torch.sign(torch.diagonal(R))
    signs[signs == 0] = 1.0  # measure zero; keeps Q orthogonal if it ever happens
    return (Q * signs).to(dtype)


def _draw_teacher(
    widths: list[int], activation: str, bias: bool, generator: torch.Generator
) -> nn.Sequential:
    """The teacher MLP with N(0, 1/fan_in) weights and zero biases, drawn from ``generator``."""
    from paramsym.nn import mlp

    # seed= makes mlp fork the global RNG for its default initialisation (which is overwritten)
    teacher = mlp(widths, activation, bias=bias, seed=0, dtype=torch.float64)
    with torch.no_grad():
        for module in teacher:
            if isinstance(module, nn.Linear):
                fan_in = module.in_features
                weight = torch.randn(
                    module.weight.shape, generator=generator, dtype=torch.float64
                ) / math.sqrt(fan_in)
                module.weight.copy_(weight)
                if module.bias is not None:
                    module.bias.zero_()
    return teacher.requires_grad_(False)


def _check_widths(widths: Sequence[int], where: str) -> list[int]:
    try:
        values = list(widths)
    except TypeError:
        values = []
    if len(values) < 2 or any(
        isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1 for w in values
    ):
        raise InvalidArgumentError(
            f"{where}: widths must be at least two positive integers (n_in, ..., n_out), "
            f"got {widths!r}"
        )
    return [int(w) for w in values]


def _check_eig_range(eig_range: Sequence[float], where: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in eig_range)
    except (TypeError, ValueError):
        low, high = math.nan, math.nan
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        raise InvalidArgumentError(
            f"{where}: eig_range must be two finite numbers (smallest, largest) with "
            f"0 < smallest <= largest, got {eig_range!r}"
        )
    return low, high


def teacher_student(
    widths: Sequence[int] = (100, 70, 40),
    activation: str = "tanh",
    n_train: int = 5000,
    n_test: int = 5000,
    eig_range: tuple[float, float] = (1e-5, 1.0),
    bias: bool = False,
    noise: float = 0.0,
    seed: int = 0,
    dtype: torch.dtype | None = None,
) -> Dataset:
    """The teacher-student regression task of seed 002 §4.

    Inputs are x ~ N(0, C) in ``d = widths[0]`` dimensions, with C = Q diag(λ) Qᵀ, Q a
    Haar-random orthogonal matrix (:func:`haar_orthogonal`) and λ a log grid
    ``np.logspace(log10(eig_range[1]), log10(eig_range[0]), d)``, largest first: an
    ill-conditioned input distribution. Targets are y = teacher(x), the teacher an MLP
    ``paramsym.nn.mlp(widths, activation, bias=bias)`` whose weights are N(0, 1/fan_in) and
    biases zero. With ``noise > 0``, ``noise · N(0, 1)`` is added to the *training* targets only;
    the test targets stay the clean teacher outputs (the test set measures the error against
    the teacher).

    Random draws, all from one generator seeded with ``seed`` and in this order: Q, the teacher
    weights (layer by layer), the training inputs, the test inputs, the target noise.

    Args:
        widths: ``(d, hidden..., out)`` of the teacher; seed 002 uses ``(100, 70, 40)``.
        activation: a registry name of :func:`paramsym.nn.get_activation`.
        n_train, n_test: numbers of samples (``n_test`` may be 0).
        eig_range: ``(smallest, largest)`` eigenvalue of C.
        bias: whether the teacher has (zero) biases.
        noise: standard deviation of the training-target noise.
        seed: the seed of all random draws.
        dtype: of the returned tensors.

    Returns:
        A regression :class:`Dataset` named ``"teacher_student"`` with ``x`` of shape ``(n, d)``
        and ``y`` of shape ``(n, widths[-1])``. ``metadata`` holds ``widths``, ``activation``,
        ``bias``, ``eig_range``, ``eigenvalues`` (the λ, a list), ``noise``, ``seed`` and, when
        the teacher has at most 200 000 parameters, ``"teacher"``: its state dict as nested lists
        (use :func:`teacher_model` to rebuild the module).
    """
    where = "teacher_student"
    widths_ = _check_widths(widths, where)
    if not isinstance(activation, str):
        raise InvalidArgumentError(
            f"{where}: activation must be a registry name such as 'tanh' or 'relu' (the name "
            f"is stored in the metadata), got {activation!r}"
        )
    n_train = _check_int(n_train, "n_train", where, 1)
    n_test = _check_int(n_test, "n_test", where, 0)
    low, high = _check_eig_range(eig_range, where)
    noise = _check_nonnegative(noise, "noise", where)
    out_dtype = _resolve_dtype(dtype, where)
    generator = _generator(seed, where)

    d = widths_[0]
    eigenvalues = np.logspace(math.log10(high), math.log10(low), d)
    rotation = haar_orthogonal(d, generator)
    teacher = _draw_teacher(widths_, activation, bias, generator)
    # x = z diag(sqrt λ) Qᵀ with z ~ N(0, I) has covariance Q diag(λ) Qᵀ
    factor = torch.as_tensor(np.sqrt(eigenvalues), dtype=torch.float64)[:, None] * rotation.T
    x_train = torch.randn(n_train, d, generator=generator, dtype=torch.float64) @ factor
    x_test = torch.randn(n_test, d, generator=generator, dtype=torch.float64) @ factor
    y_train = teacher(x_train)
    y_test = teacher(x_test)
    y_train = y_train + noise * torch.randn(y_train.shape, generator=generator, dtype=torch.float64)

    metadata: dict[str, Any] = {
        "widths": widths_,
        "activation": activation,
        "bias": bool(bias),
        "eig_range": [low, high],
        "eigenvalues": eigenvalues.tolist(),
        "noise": noise,
        "seed": int(seed),
        "n_train": n_train,
        "n_test": n_test,
        "source": "seed 002 §4",
    }
    if sum(p.numel() for p in teacher.parameters()) <= _MAX_STORED_TEACHER_PARAMETERS:
        metadata["teacher"] = {k: v.tolist() for k, v in teacher.state_dict().items()}
    return Dataset(
        "teacher_student",
        x_train.to(out_dtype),
        y_train.to(out_dtype),
        x_test.to(out_dtype),
        y_test.to(out_dtype),
        "regression",
        None,
        metadata,
    )


def teacher_model(dataset: Dataset, dtype: torch.dtype = torch.float64) -> nn.Sequential:
    """The teacher MLP of a :func:`teacher_student` data set, as an ``nn.Sequential``.

    Built from ``dataset.metadata["teacher"]`` when the weights are stored there, else
    regenerated from the seed by replaying the generator (the same draws, so the same weights).
    ``teacher(x_train)`` (in float64) reproduces the clean training targets.

    Raises:
        InvalidArgumentError: the metadata is not that of :func:`teacher_student`.
    """
    meta = dataset.metadata
    required = ("widths", "activation", "bias", "seed")
    if dataset.name != "teacher_student" or any(key not in meta for key in required):
        raise InvalidArgumentError(
            f"teacher_model: dataset {dataset.name!r} was not made by teacher_student (its "
            f"metadata needs the keys {', '.join(required)}); pass the Dataset teacher_student "
            "returned"
        )
    widths = [int(w) for w in meta["widths"]]
    generator = _generator(meta["seed"], "teacher_model")
    if "teacher" in meta:
        from paramsym.nn import mlp

        teacher = mlp(widths, meta["activation"], bias=meta["bias"], seed=0, dtype=torch.float64)
        state = {k: torch.tensor(v, dtype=torch.float64) for k, v in meta["teacher"].items()}
        teacher.load_state_dict(state)
        teacher.requires_grad_(False)
    else:
        haar_orthogonal(widths[0], generator)  # replay: Q is drawn before the teacher
        teacher = _draw_teacher(widths, meta["activation"], meta["bias"], generator)
    return teacher.to(dtype)


# --------------------------------------------------------------------------- sinusoids


def _f1(x: Tensor) -> Tensor:
    return 1.5 + torch.sin(2 * math.pi * x)


def _f2(x: Tensor) -> Tensor:
    return _f1(x) + 0.5 * torch.sin(4 * math.pi * x)


def _f3(x: Tensor) -> Tensor:
    return _f2(x) + 0.4 * torch.sin(16 * math.pi * x)


def _g1(x: Tensor) -> Tensor:
    return 1.5 + torch.sin(2 * math.pi * x[..., 0]) + torch.sin(2 * math.pi * x[..., 1])


def _g2(x: Tensor) -> Tensor:
    return _g1(x) + 0.5 * torch.sin(4 * math.pi * x[..., 0])


def _g3(x: Tensor) -> Tensor:
    return _g2(x) + 0.4 * torch.sin(4 * math.pi * x[..., 1])


#: The 1-D targets of seed 004 §E1 on [0, 1]: f1 = 1.5 + sin(2πx), f2 = f1 + 0.5 sin(4πx),
#: f3 = f2 + 0.4 sin(16πx). Each maps a tensor of points to a tensor of the same shape.
SINUSOID_1D_TARGETS: dict[str, Callable[[Tensor], Tensor]] = {"f1": _f1, "f2": _f2, "f3": _f3}

#: The 2-D targets of seed 004 §E1 on [0, 1]²: g1 = 1.5 + sin(2πx) + sin(2πy),
#: g2 = g1 + 0.5 sin(4πx), g3 = g2 + 0.4 sin(4πy). Each maps ``(..., 2)`` points to ``(...)``.
SINUSOID_2D_TARGETS: dict[str, Callable[[Tensor], Tensor]] = {"g1": _g1, "g2": _g2, "g3": _g3}


def _noisy_sinusoid(
    name: str,
    target: str,
    f: Callable[[Tensor], Tensor],
    x_clean: Tensor,
    x_test: Tensor,
    noise: float,
    sampling: str,
    seed: int,
    generator: torch.Generator,
    out_dtype: torch.dtype,
    metadata: dict[str, Any],
) -> Dataset:
    """The noisy training set and clean test set shared by :func:`sinusoid_1d` and
    :func:`sinusoid_2d`: x = x₀ + noise·ε₁, y = f(x₀) + noise·ε₂, drawn in that order."""
    x_noise = torch.randn(x_clean.shape, generator=generator, dtype=torch.float64)
    y_noise = torch.randn(x_clean.shape[0], 1, generator=generator, dtype=torch.float64)
    x_train = x_clean + noise * x_noise
    y_train = f(x_clean) + noise * y_noise
    metadata = {
        "target": target,
        **metadata,
        "noise": noise,
        "noise_on": ["inputs", "outputs"],
        "sampling": sampling,
        "seed": int(seed),
        "source": "seed 004 §E1",
    }
    x_train, y_train, x_test, y_test = (
        t.to(out_dtype) for t in (x_train, y_train, x_test, f(x_test))
    )
    return Dataset(
        f"{name}/{target}", x_train, y_train, x_test, y_test, "regression", None, metadata
    )


def sinusoid_1d(
    target: str = "f2",
    n: int = 100,
    noise: float = 0.01,
    sampling: str = "grid",
    n_test: int = 400,
    seed: int = 0,
    dtype: torch.dtype | None = None,
) -> Dataset:
    """1-D regression of a sum of sinusoids on [0, 1] (seed 004 §E1).

    Targets (:data:`SINUSOID_1D_TARGETS`): f1(x) = 1.5 + sin(2πx), f2 = f1 + 0.5 sin(4πx),
    f3 = f2 + 0.4 sin(16πx).

    Training set: ``n`` points, equally spaced on [0, 1] (``sampling="grid"``, both ends
    included) or i.i.d. U[0, 1] (``"uniform"``). As in the paper, Gaussian noise of standard
    deviation ``noise`` is then added to *both* the inputs and the outputs: x = x₀ + noise·ε₁,
    y = f(x₀) + noise·ε₂ (so the noisy inputs may leave [0, 1]). Test set: ``n_test`` equally
    spaced clean points, y = f(x). Random draws, in this order: the uniform inputs (if any), ε₁,
    ε₂; with ``noise=0`` the training set is exactly the clean function.

    Returns:
        A regression :class:`Dataset` named ``"sinusoid_1d/<target>"``, ``x`` of shape ``(n, 1)``
        and ``y`` of shape ``(n, 1)``.
    """
    where = "sinusoid_1d"
    target = _check_choice(target, "target", where, tuple(SINUSOID_1D_TARGETS))
    n = _check_int(n, "n", where, 1)
    n_test = _check_int(n_test, "n_test", where, 0)
    noise = _check_nonnegative(noise, "noise", where)
    sampling = _check_choice(sampling, "sampling", where, _SAMPLINGS)
    out_dtype = _resolve_dtype(dtype, where)
    generator = _generator(seed, where)
    f = SINUSOID_1D_TARGETS[target]

    if sampling == "grid":
        x_clean = torch.linspace(0.0, 1.0, n, dtype=torch.float64)[:, None]
    else:
        x_clean = torch.rand(n, 1, generator=generator, dtype=torch.float64)
    x_test = torch.linspace(0.0, 1.0, n_test, dtype=torch.float64)[:, None]
    metadata = {"n": n, "n_test": n_test, "domain": [0.0, 1.0]}
    return _noisy_sinusoid(
        "sinusoid_1d",
        target,
        f,
        x_clean,
        x_test,
        noise,
        sampling,
        seed,
        generator,
        out_dtype,
        metadata,
    )


def _grid_2d(points_per_side: int) -> Tensor:
    axis = torch.linspace(0.0, 1.0, points_per_side, dtype=torch.float64)
    first, second = torch.meshgrid(axis, axis, indexing="ij")
    return torch.stack([first.reshape(-1), second.reshape(-1)], dim=1)


def sinusoid_2d(
    target: str = "g2",
    grid: int = 20,
    noise: float = 0.0,
    sampling: str = "grid",
    n_test_grid: int = 50,
    seed: int = 0,
    dtype: torch.dtype | None = None,
) -> Dataset:
    """2-D regression of a sum of sinusoids on [0, 1]² (seed 004 §E1).

    Targets (:data:`SINUSOID_2D_TARGETS`), with a point written (x, y):
    g1 = 1.5 + sin(2πx) + sin(2πy), g2 = g1 + 0.5 sin(4πx), g3 = g2 + 0.4 sin(4πy).

    Training set: the ``grid × grid`` grid of equally spaced points on [0, 1]² (row-major:
    the first coordinate varies slowest; ``sampling="grid"``) or ``grid²`` i.i.d. U([0, 1]²)
    points (``"uniform"``). Gaussian noise of standard deviation ``noise`` is added to the
    inputs and the outputs as in :func:`sinusoid_1d`; the default is 0 because the paper does
    not state a noise level for the 2-D task. Test set: the clean ``n_test_grid × n_test_grid``
    grid.

    Returns:
        A regression :class:`Dataset` named ``"sinusoid_2d/<target>"``, ``x`` of shape
        ``(grid², 2)`` and ``y`` of shape ``(grid², 1)``.
    """
    where = "sinusoid_2d"
    target = _check_choice(target, "target", where, tuple(SINUSOID_2D_TARGETS))
    grid = _check_int(grid, "grid", where, 1)
    n_test_grid = _check_int(n_test_grid, "n_test_grid", where, 0)
    noise = _check_nonnegative(noise, "noise", where)
    sampling = _check_choice(sampling, "sampling", where, _SAMPLINGS)
    out_dtype = _resolve_dtype(dtype, where)
    generator = _generator(seed, where)
    g = SINUSOID_2D_TARGETS[target]

    n = grid * grid
    if sampling == "grid":
        x_clean = _grid_2d(grid)
    else:
        x_clean = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    metadata = {"grid": grid, "n_test_grid": n_test_grid, "domain": [[0.0, 1.0], [0.0, 1.0]]}
    return _noisy_sinusoid(
        "sinusoid_2d",
        target,
        lambda x: g(x)[:, None],
        x_clean,
        _grid_2d(n_test_grid),
        noise,
        sampling,
        seed,
        generator,
        out_dtype,
        metadata,
    )


# --------------------------------------------------------------------------- simple sets


def uniform_regression(
    n_samples: int = 4,
    in_features: int = 5,
    out_features: int = 8,
    n_test: int = 0,
    seed: int = 0,
    dtype: torch.dtype | None = None,
) -> Dataset:
    """Random regression data with every entry of X and Y i.i.d. U[0, 1] (dissertation ch. 4).

    The targets are independent of the inputs: the task is to fit (interpolate) the given
    points, as in the dissertation's small-network experiments. Draws, in this order: X_train,
    Y_train, X_test, Y_test.

    Returns:
        A regression :class:`Dataset` named ``"uniform_regression"``: ``x`` of shape
        ``(n, in_features)``, ``y`` of shape ``(n, out_features)``; the test part has
        ``n_test`` rows (default 0: empty tensors).

    >>> ds = uniform_regression(n_samples=4, in_features=5, out_features=8)
    >>> tuple(ds.x_train.shape), tuple(ds.y_train.shape), tuple(ds.x_test.shape)
    ((4, 5), (4, 8), (0, 5))
    """
    where = "uniform_regression"
    n_samples = _check_int(n_samples, "n_samples", where, 1)
    in_features = _check_int(in_features, "in_features", where, 1)
    out_features = _check_int(out_features, "out_features", where, 1)
    n_test = _check_int(n_test, "n_test", where, 0)
    out_dtype = _resolve_dtype(dtype, where)
    generator = _generator(seed, where)

    def draw(rows: int, cols: int) -> Tensor:
        return torch.rand(rows, cols, generator=generator, dtype=torch.float64).to(out_dtype)

    x_train = draw(n_samples, in_features)
    y_train = draw(n_samples, out_features)
    x_test = draw(n_test, in_features)
    y_test = draw(n_test, out_features)
    metadata = {
        "n_samples": n_samples,
        "in_features": in_features,
        "out_features": out_features,
        "n_test": n_test,
        "seed": int(seed),
        "source": "dissertation ch. 4",
    }
    return Dataset(
        "uniform_regression", x_train, y_train, x_test, y_test, "regression", None, metadata
    )


def gaussian_classification(
    n_train: int = 1000,
    n_test: int = 1000,
    n_features: int = 10,
    num_classes: int = 3,
    separation: float = 3.0,
    seed: int = 0,
    dtype: torch.dtype | None = None,
) -> Dataset:
    """A balanced Gaussian-mixture classification task (a small, always-available stand-in).

    Class c has mean μ_c = separation · z_c / sqrt(n_features), z_c ~ N(0, I) drawn once from
    the seed, and identity covariance: x | c ~ N(μ_c, I). The means have norm ≈ ``separation``
    and two of them are ≈ ``separation · √2`` apart, whatever ``n_features``; larger
    ``separation`` makes the task easier (0: labels independent of x). Labels are balanced:
    ``i mod num_classes`` for sample ``i``, then shuffled, so every class has ``n //
    num_classes`` or one more samples. Draws, in this order: the means, the train noise and
    shuffle, the test noise and shuffle.

    Returns:
        A classification :class:`Dataset` named ``"gaussian_classification"``: ``x`` of shape
        ``(n, n_features)`` in ``dtype``, ``y`` of shape ``(n,)`` int64 in
        ``[0, num_classes)``; ``metadata["means"]`` holds the μ_c as a list of lists.
    """
    where = "gaussian_classification"
    n_train = _check_int(n_train, "n_train", where, 1)
    n_test = _check_int(n_test, "n_test", where, 0)
    n_features = _check_int(n_features, "n_features", where, 1)
    num_classes = _check_int(num_classes, "num_classes", where, 2)
    separation = _check_nonnegative(separation, "separation", where)
    out_dtype = _resolve_dtype(dtype, where)
    generator = _generator(seed, where)

    means = (
        separation
        * torch.randn(num_classes, n_features, generator=generator, dtype=torch.float64)
        / math.sqrt(n_features)
    )

    def draw(n: int) -> tuple[Tensor, Tensor]:
        x = torch.randn(n, n_features, generator=generator, dtype=torch.float64)
        labels = torch.arange(n, dtype=torch.int64) % num_classes
        labels = labels[torch.randperm(n, generator=generator)]
        return (x + means[labels]).to(out_dtype), labels

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    metadata = {
        "n_train": n_train,
        "n_test": n_test,
        "n_features": n_features,
        "num_classes": num_classes,
        "separation": separation,
        "means": means.tolist(),
        "seed": int(seed),
    }
    return Dataset(
        "gaussian_classification",
        x_train,
        y_train,
        x_test,
        y_test,
        "classification",
        num_classes,
        metadata,
    )
