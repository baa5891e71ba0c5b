"""Real data sets that are always available offline.

* :func:`digits`: the 8×8 handwritten digits bundled with scikit-learn (UCI "Optical
  Recognition of Handwritten Digits" test set, 1797 images); no download.
* :func:`mnist1d`: MNIST-1D (Greydanus 2020), generated locally with the ``mnist1d``
  package's procedure; never downloaded.

The optional packages (``scikit-learn``, ``mnist1d``) are imported when a loader is called;
a missing one raises ``ModuleNotFoundError`` saying what to install.
"""

from __future__ import annotations

import importlib
import random
from types import ModuleType

import numpy as np
import torch

from paramsym.data.base import Dataset
from paramsym.data.synthetic import _check_int, _resolve_dtype
from paramsym.errors import DataFormatError, InvalidArgumentError

__all__ = ["digits", "mnist1d"]


def _require(module: str, package: str, dataset: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"{dataset}: needs the optional package {package!r} (import {module!r} failed); "
            f"install it with `pip install {package}`"
        ) from error


def _check_fraction(value: object, name: str, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not 0.0 < float(value) < 1.0
    ):
        raise InvalidArgumentError(
            f"{where}: {name} must be a number strictly between 0 and 1, got {value!r}"
        )
    return float(value)


def digits(test_fraction: float = 0.25, seed: int = 0, dtype: torch.dtype | None = None) -> Dataset:
    """scikit-learn's 8×8 digits (``sklearn.datasets.load_digits``, bundled, no download).

    1797 grey-scale 8×8 images of the digits 0–9 (pixel values 0..16), scaled to [0, 1] by
    dividing by 16 and flattened row by row. Split into train and test with
    ``sklearn.model_selection.train_test_split(test_size=test_fraction, random_state=seed,
    stratify=labels)``, so both parts have the classes in the same proportions.

    Returns:
        A classification :class:`Dataset` named ``"digits"``: ``x`` of shape ``(n, 64)`` in
        ``dtype``, ``y`` of shape ``(n,)`` int64, 10 classes.
    """
    where = "digits"
    test_fraction = _check_fraction(test_fraction, "test_fraction", where)
    seed = _check_int(seed, "seed", where, 0)
    out_dtype = _resolve_dtype(dtype, where)
    datasets = _require("sklearn.datasets", "scikit-learn", where)
    model_selection = _require("sklearn.model_selection", "scikit-learn", where)

    bunch = datasets.load_digits()
    x = np.asarray(bunch.data, dtype=np.float64) / 16.0
    y = np.asarray(bunch.target, dtype=np.int64)
    x_train, x_test, y_train, y_test = model_selection.train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    metadata = {
        "test_fraction": test_fraction,
        "seed": seed,
        "image_shape": [8, 8],
        "pixel_scale": "divided by 16 (raw values 0..16)",
        "source": "sklearn.datasets.load_digits (UCI optical recognition of handwritten digits)",
    }
    return Dataset(
        "digits",
        torch.as_tensor(x_train).to(out_dtype),
        torch.as_tensor(y_train, dtype=torch.int64),
        torch.as_tensor(x_test).to(out_dtype),
        torch.as_tensor(y_test, dtype=torch.int64),
        "classification",
        10,
        metadata,
    )


def mnist1d(
    num_samples: int = 5000,
    train_split: float = 0.8,
    seed: int = 42,
    dtype: torch.dtype | None = None,
) -> Dataset:
    """MNIST-1D (Greydanus 2020), generated locally by ``mnist1d.data.make_dataset``.

    Uses the package's default arguments (``mnist1d.data.get_dataset_args()``) with
    ``num_samples``, ``train_split`` and ``seed`` overridden; the defaults reproduce the
    published data set's generation procedure. Nothing is downloaded (``get_dataset``, which
    fetches a pickle from the web, is never called). ``make_dataset`` seeds and draws from the
    global ``random`` and ``numpy.random`` states; both are saved before and restored after, so
    the caller's random streams are unchanged.

    ``make_dataset`` makes ``num_samples // 10`` samples per class (so ``10 · (num_samples //
    10)`` in all), shuffles them, standardises all signals together, and puts the first
    ``int(n · train_split)`` in the training part.

    Returns:
        A classification :class:`Dataset` named ``"mnist1d"``: ``x`` of shape ``(n, 40)`` in
        ``dtype``, ``y`` of shape ``(n,)`` int64, 10 classes.
    """
    where = "mnist1d"
    num_samples = _check_int(num_samples, "num_samples", where, 10)
    train_split = _check_fraction(train_split, "train_split", where)
    seed = _check_int(seed, "seed", where, 0)
    out_dtype = _resolve_dtype(dtype, where)
    data_module = _require("mnist1d.data", "mnist1d", where)

    args = data_module.get_dataset_args()
    args.num_samples = num_samples
    args.train_split = train_split
    args.seed = seed
    numpy_state = np.random.get_state()  # noqa: NPY002 (save the state make_dataset reseeds)
    python_state = random.getstate()
    try:
        raw = data_module.make_dataset(args)
    finally:
        np.random.set_state(numpy_state)  # noqa: NPY002 (restore the caller's state)
        random.setstate(python_state)

    arrays = {}
    for key in ("x", "y", "x_test", "y_test"):
        if key not in raw:
            raise DataFormatError(
                f"{where}: mnist1d.data.make_dataset returned no {key!r} entry (keys: "
                f"{sorted(raw)}); this version of the mnist1d package is not supported"
            )
        arrays[key] = np.asarray(raw[key])
    metadata = {
        "num_samples": num_samples,
        "train_split": train_split,
        "seed": seed,
        "args": {key: value for key, value in vars(args).items() if key != "url"},
        "source": "mnist1d.data.make_dataset (Greydanus 2020), generated locally",
    }
    return Dataset(
        "mnist1d",
        torch.as_tensor(arrays["x"]).to(out_dtype),
        torch.as_tensor(arrays["y"]).to(torch.int64),
        torch.as_tensor(arrays["x_test"]).to(out_dtype),
        torch.as_tensor(arrays["y_test"]).to(torch.int64),
        "classification",
        10,
        metadata,
    )
