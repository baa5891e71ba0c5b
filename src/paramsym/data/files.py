"""Loaders for standard data files in a user-given directory (nothing is downloaded).

The data directory is the ``data_dir`` argument (the experiments' ``--data-dir``) or else the
environment variable ``PARAMSYM_DATA`` (:func:`data_directory`). Each loader looks for the
data set's usual file names in conventional subdirectories of it and then in the directory
itself; when the files are not there, :class:`~paramsym.errors.MissingDataError` lists the exact
file names expected and every directory searched.

* :func:`mnist`, :func:`fashion_mnist`: the IDX files of MNIST (LeCun et al. 1998) and
  Fashion-MNIST (Xiao et al. 2017), plain or gzip-compressed (:func:`read_idx`).
* :func:`cifar10`: the "python version" batches of CIFAR-10 (Krizhevsky 2009), read with a
  restricted unpickler that refuses anything but numpy arrays and plain containers.
* :func:`uci_energy`: UCI Energy Efficiency (Tsanas & Xifara 2012), XLSX or CSV.
* :func:`load_torch_file`: ``torch.load(path, weights_only=True)`` with clear errors.

Malformed or unsafe files raise :class:`~paramsym.errors.DataFormatError` naming the file.
"""

from __future__ import annotations

import csv
import gzip
import importlib
import math
import os
import pickle
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from paramsym.data.base import Dataset
from paramsym.data.synthetic import _check_choice, _resolve_dtype
from paramsym.errors import DataFormatError, MissingDataError

__all__ = [
    "DATA_ENV_VAR",
    "cifar10",
    "data_directory",
    "fashion_mnist",
    "find_data_files",
    "load_torch_file",
    "mnist",
    "read_idx",
    "uci_energy",
]

#: The environment variable read when no ``data_dir`` is given.
DATA_ENV_VAR = "PARAMSYM_DATA"

PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- finding files


def data_directory(data_dir: PathLike | None = None, dataset: str = "paramsym.data") -> Path:
    """The data directory: ``data_dir`` if given, else ``$PARAMSYM_DATA`` (an empty value counts
    as unset), as an absolute path with ``~`` expanded.

    Args:
        data_dir: the directory given by the caller (e.g. the ``--data-dir`` option).
        dataset: the data set being loaded, named in error messages.

    Raises:
        MissingDataError: neither is given (the message says to pass ``--data-dir`` or set
            ``PARAMSYM_DATA``), or the path does not exist or is not a directory.
    """
    if data_dir is not None:
        raw, origin = os.fspath(data_dir), "data_dir (--data-dir)"
    else:
        raw, origin = os.environ.get(DATA_ENV_VAR, ""), f"the environment variable {DATA_ENV_VAR}"
        if not raw:
            raise MissingDataError(
                f"{dataset}: no data directory given. Pass --data-dir DIR (data_dir=DIR in "
                f"Python) or set the environment variable {DATA_ENV_VAR}=DIR, where DIR is the "
                "directory that holds the data files; paramsym never downloads data"
            )
    path = Path(raw).expanduser().absolute()
    if not path.exists():
        raise MissingDataError(
            f"{dataset}: the data directory {path} (from {origin}) does not exist; create it "
            f"and put the data files there, or pass --data-dir / set {DATA_ENV_VAR} to the "
            "directory that holds them"
        )
    if not path.is_dir():
        raise MissingDataError(
            f"{dataset}: the data directory {path} (from {origin}) is not a directory; pass "
            f"--data-dir / set {DATA_ENV_VAR} to the directory that holds the data files"
        )
    return path


def find_data_files(
    dataset: str,
    data_dir: PathLike | None,
    files: Sequence[Sequence[str]],
    subdirs: Sequence[str],
) -> list[Path]:
    """Locate the files of a data set, all in one directory.

    Args:
        dataset: the data set's name, for messages.
        data_dir: the data directory, resolved by :func:`data_directory`.
        files: for every file needed, its accepted names in order of preference, e.g.
            ``[("train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"), ...]``.
        subdirs: the directories to search, relative to the data directory, in order; ``""``
            is the data directory itself.

    Returns:
        One path per entry of ``files``, from the first directory that holds all of them.

    Raises:
        MissingDataError: no searched directory holds all the files; the message lists the
            exact file names expected and every directory searched (absolute paths).
    """
    root = data_directory(data_dir, dataset)
    directories = [root / sub if sub else root for sub in subdirs]
    partial: list[tuple[Path, list[str]]] = []
    for directory in directories:
        if not directory.is_dir():
            continue
        found: list[Path] = []
        missing: list[str] = []
        for names in files:
            hit = next((directory / n for n in names if (directory / n).is_file()), None)
            if hit is None:
                missing.append(" or ".join(names))
            else:
                found.append(hit)
        if not missing:
            return found
        if found:
            partial.append((directory, missing))
    expected = "; ".join(" or ".join(names) for names in files)
    searched = "\n".join(
        f"  {d}" + ("" if d.is_dir() else " (does not exist)") for d in directories
    )
    wanted = "all in one directory" if len(files) > 1 else "one file named"
    lines = [
        f"{dataset}: data files not found. Expected, {wanted}: {expected}.",
        f"Searched, in this order:\n{searched}",
    ]
    lines += [f"{d} has some of the files but lacks: {'; '.join(m)}." for d, m in partial]
    lines.append(
        "Put the files in one of these directories (paramsym never downloads data), or pass "
        f"--data-dir / set {DATA_ENV_VAR} to the directory that holds them."
    )
    raise MissingDataError("\n".join(lines))


# --------------------------------------------------------------------------- IDX (MNIST)

_IDX_TYPES: dict[int, str] = {
    0x08: ">u1",  # unsigned byte
    0x09: ">i1",  # signed byte
    0x0B: ">i2",  # short
    0x0C: ">i4",  # int
    0x0D: ">f4",  # float
    0x0E: ">f8",  # double
}


def _read_maybe_gzip(path: Path, where: str) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError as error:
        raise MissingDataError(f"{where}: file {path} does not exist") from error
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as error:
        raise DataFormatError(
            f"{where}: {path} starts like a gzip file but cannot be decompressed ({error}); "
            "the file is damaged or truncated, get a fresh copy"
        ) from error


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (the format of MNIST and Fashion-MNIST), plain or gzip-compressed.

    Format (LeCun et al., http://yann.lecun.com/exdb/mnist/): two zero bytes, a type code
    (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64), the number of
    dimensions, each dimension as a big-endian uint32, then the data, big-endian, row-major.
    Gzip compression is recognised by the magic bytes 1f 8b, not the file name.

    Returns:
        An array of shape ``dims`` in native byte order (a writable copy).

    Raises:
        MissingDataError: the file does not exist.
        DataFormatError: bad magic number or type code, truncated header or data, or trailing
            bytes after the data; the message names the file.
    """
    file = Path(path)
    where = "read_idx"
    data = _read_maybe_gzip(file, where)
    if len(data) < 4:
        raise DataFormatError(
            f"{where}: {file} is too short ({len(data)} bytes) to be an IDX file; get a fresh copy"
        )
    if data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise DataFormatError(
            f"{where}: {file} is not an IDX file: its magic number is {data[:4].hex(' ')}, "
            "expected 00 00 <type code 08, 09, 0b, 0c, 0d or 0e> <number of dimensions>; "
            "check the file name and get a fresh copy"
        )
    ndim = data[3]
    if ndim == 0:
        raise DataFormatError(f"{where}: {file} declares 0 dimensions; an IDX array needs >= 1")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataFormatError(
            f"{where}: {file} is truncated: the header declares {ndim} dimensions but the file "
            f"has only {len(data)} bytes; get a fresh copy"
        )
    dims = [int(v) for v in np.frombuffer(data, dtype=">u4", count=ndim, offset=4)]
    dtype = np.dtype(_IDX_TYPES[data[2]])
    expected = math.prod(dims) * dtype.itemsize
    actual = len(data) - header
    if actual != expected:
        problem = "is truncated" if actual < expected else "has trailing bytes"
        raise DataFormatError(
            f"{where}: {file} {problem}: dimensions {dims} of {dtype.name} need {expected} data "
            f"bytes, the file has {actual}; get a fresh copy"
        )
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="))


_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_MNIST_SUBDIRS: dict[str, tuple[str, ...]] = {
    "mnist": ("mnist", "MNIST/raw", ""),
    "fashion_mnist": ("fashion_mnist", "fashion-mnist", "FashionMNIST/raw", ""),
}


def _check_images(images: np.ndarray, path: Path, where: str) -> None:
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise DataFormatError(
            f"{where}: {path} holds a {images.dtype} array of shape {images.shape}; "
            "expected uint8 images of shape (n, 28, 28)"
        )


def _check_labels(labels: np.ndarray, n: int, num_classes: int, path: Path, where: str) -> None:
    if labels.dtype != np.uint8 or labels.ndim != 1 or labels.shape[0] != n:
        raise DataFormatError(
            f"{where}: {path} holds a {labels.dtype} array of shape {labels.shape}; expected "
            f"{n} uint8 labels (one per image)"
        )
    if n and int(labels.max()) >= num_classes:
        raise DataFormatError(
            f"{where}: {path} has label {int(labels.max())}, expected labels 0..{num_classes - 1}"
        )


def mnist(
    data_dir: PathLike | None = None, variant: str = "mnist", dtype: torch.dtype | None = None
) -> Dataset:
    """MNIST (LeCun et al. 1998) or Fashion-MNIST (Xiao et al. 2017) from the IDX files.

    Files: ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
    ``t10k-labels-idx1-ubyte``, each plain or with ``.gz``, all in one directory. Searched, in
    this order, for ``variant="mnist"``: ``DATA_DIR/mnist``, ``DATA_DIR/MNIST/raw``
    (torchvision's layout), ``DATA_DIR``; for ``"fashion_mnist"``: ``DATA_DIR/fashion_mnist``,
    ``DATA_DIR/fashion-mnist``, ``DATA_DIR/FashionMNIST/raw``, ``DATA_DIR``. The file names of
    the two variants are the same, so keep them in their own subdirectories: files directly in
    ``DATA_DIR`` are taken for whichever variant is asked.

    Returns:
        A classification :class:`Dataset` named ``variant``: ``x`` of shape ``(n, 784)`` (the
        28×28 images flattened row by row) in ``dtype`` with pixels scaled to [0, 1] (divided
        by 255), ``y`` of shape ``(n,)`` int64, 10 classes; 60 000 train and 10 000 test images
        for the official files. ``metadata["files"]`` lists the files read.
    """
    variant = _check_choice(variant, "variant", "mnist", tuple(_MNIST_SUBDIRS))
    where = variant
    out_dtype = _resolve_dtype(dtype, where)
    paths = find_data_files(
        where, data_dir, [(name, name + ".gz") for name in _MNIST_FILES], _MNIST_SUBDIRS[variant]
    )
    train_images, train_labels, test_images, test_labels = (read_idx(p) for p in paths)
    _check_images(train_images, paths[0], where)
    _check_labels(train_labels, train_images.shape[0], 10, paths[1], where)
    _check_images(test_images, paths[2], where)
    _check_labels(test_labels, test_images.shape[0], 10, paths[3], where)

    def images(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array.reshape(array.shape[0], 784)).to(out_dtype) / 255.0

    metadata = {
        "variant": variant,
        "files": [str(p) for p in paths],
        "image_shape": [28, 28],
        "pixel_scale": "divided by 255",
    }
    return Dataset(
        variant,
        images(train_images),
        torch.from_numpy(train_labels).to(torch.int64),
        images(test_images),
        torch.from_numpy(test_labels).to(torch.int64),
        "classification",
        10,
        metadata,
    )


def fashion_mnist(data_dir: PathLike | None = None, dtype: torch.dtype | None = None) -> Dataset:
    """Fashion-MNIST (Xiao et al. 2017): :func:`mnist` with ``variant="fashion_mnist"``."""
    return mnist(data_dir, variant="fashion_mnist", dtype=dtype)


# --------------------------------------------------------------------------- CIFAR-10

_CIFAR_SUBDIRS = ("cifar-10-batches-py", "")
_CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_TEST = "test_batch"


def _numpy_multiarray() -> Any:
    """numpy's real ``multiarray`` module (``numpy._core`` from numpy 2 on, ``numpy.core``
    before), imported without touching the deprecated ``numpy.core`` shim on numpy 2."""
    major = int(np.__version__.split(".")[0])
    return importlib.import_module(
        "numpy._core.multiarray" if major >= 2 else "numpy.core.multiarray"
    )


def _latin1_encode(text: object, encoding: object = "latin1") -> bytes:
    # Python 3 pickles bytes at protocol < 3 as _codecs.encode(<latin-1 text>, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(
            f"_codecs.encode called with ({type(text).__name__}, {encoding!r}); only the "
            "latin-1 encoding of a string (how Python 3 pickles bytes) is allowed"
        )
    return text.encode("latin-1")


def _empty_bytes(*args: object) -> bytes:
    # Python 3 pickles b"" at protocol < 3 as bytes().
    if args:
        raise pickle.UnpicklingError("bytes(...) with arguments is not allowed")
    return b""


def _cifar_globals() -> dict[tuple[str, str], Any]:
    multiarray = _numpy_multiarray()
    return {
        ("numpy.core.multiarray", "_reconstruct"): multiarray._reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): multiarray._reconstruct,
        ("numpy.core.multiarray", "scalar"): multiarray.scalar,
        ("numpy._core.multiarray", "scalar"): multiarray.scalar,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
        ("__builtin__", "bytes"): _empty_bytes,
        ("builtins", "bytes"): _empty_bytes,
    }


class _RestrictedUnpickler(pickle.Unpickler):
    """Admits only numpy array reconstruction (and bytes as Python 3 writes them at protocol 2);
    any other global refuses the file before anything is called."""

    def __init__(self, file: IO[bytes], path: Path, dataset: str) -> None:
        super().__init__(file, encoding="bytes")
        self._path = path
        self._dataset = dataset
        self._allowed = _cifar_globals()

    def find_class(self, module: str, name: str) -> Any:
        allowed = self._allowed.get((module, name))
        if allowed is None:
            raise DataFormatError(
                f"{self._dataset}: refusing to load {self._path}: the file references "
                f"{module}.{name}, which the CIFAR-10 format never uses; it may be crafted to "
                "run code. Use the official 'CIFAR-10 python version' files"
            )
        return allowed


def _load_cifar_batch(path: Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with path.open("rb") as handle:
            batch = _RestrictedUnpickler(handle, path, dataset).load()
    except DataFormatError:
        raise
    except Exception as error:  # malformed pickles raise many exception types
        raise DataFormatError(
            f"{dataset}: {path} is not a readable CIFAR-10 batch ({type(error).__name__}: "
            f"{error}); get a fresh copy of the 'CIFAR-10 python version'"
        ) from error
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        found = sorted(map(repr, batch)) if isinstance(batch, dict) else type(batch).__name__
        raise DataFormatError(
            f"{dataset}: {path} is not a CIFAR-10 batch: expected a dict with the keys "
            f"b'data' and b'labels', found {found}"
        )
    data, labels = batch[b"data"], batch[b"labels"]
    if not (
        isinstance(data, np.ndarray)
        and data.dtype == np.uint8
        and data.ndim == 2
        and data.shape[1] == 3072
    ):
        description = (
            f"a {data.dtype} array of shape {data.shape}"
            if isinstance(data, np.ndarray)
            else type(data).__name__
        )
        raise DataFormatError(
            f"{dataset}: {path}: b'data' is {description}, expected a uint8 array of shape "
            "(N, 3072)"
        )
    if (
        not isinstance(labels, list)
        or len(labels) != data.shape[0]
        or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= v < 10
            for v in labels
        )
    ):
        raise DataFormatError(
            f"{dataset}: {path}: b'labels' must be a list of {data.shape[0]} integers in 0..9 "
            "(one per row of b'data')"
        )
    return data, np.asarray(labels, dtype=np.int64)


def cifar10(data_dir: PathLike | None = None, dtype: torch.dtype | None = None) -> Dataset:
    """CIFAR-10 (Krizhevsky 2009) from the "python version" batches.

    Files: ``data_batch_1`` … ``data_batch_5`` and ``test_batch``, all in
    ``DATA_DIR/cifar-10-batches-py`` (the extracted ``cifar-10-python.tar.gz``) or in
    ``DATA_DIR`` itself. They are Python 2 pickles of ``{b"data": uint8 (N, 3072),
    b"labels": [int, ...], ...}``; they are read with a restricted unpickler that admits only
    numpy array reconstruction, so a crafted file is refused (:class:`DataFormatError`) without
    running any of its code.

    Returns:
        A classification :class:`Dataset` named ``"cifar10"``: ``x`` of shape
        ``(n, 3, 32, 32)`` (channels R, G, B) in ``dtype`` with values in [0, 1] (divided by
        255), ``y`` of shape ``(n,)`` int64, 10 classes; 50 000 train and 10 000 test images for
        the official files.
    """
    where = "cifar10"
    out_dtype = _resolve_dtype(dtype, where)
    names = (*_CIFAR_TRAIN, _CIFAR_TEST)
    paths = find_data_files(where, data_dir, [(n,) for n in names], _CIFAR_SUBDIRS)
    batches = [_load_cifar_batch(p, where) for p in paths]
    train_data = np.concatenate([b[0] for b in batches[:-1]])
    train_labels = np.concatenate([b[1] for b in batches[:-1]])
    test_data, test_labels = batches[-1]

    def images(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array.reshape(-1, 3, 32, 32)).to(out_dtype) / 255.0

    metadata = {
        "files": [str(p) for p in paths],
        "image_shape": [3, 32, 32],
        "pixel_scale": "divided by 255",
    }
    return Dataset(
        "cifar10",
        images(train_data),
        torch.from_numpy(train_labels),
        images(test_data),
        torch.from_numpy(test_labels),
        "classification",
        10,
        metadata,
    )


# --------------------------------------------------------------------------- UCI energy

_ENERGY_FILES = ("ENB2012_data.xlsx", "ENB2012_data.csv", "energy_efficiency.csv")
_ENERGY_SUBDIRS = ("uci_energy", "energy_efficiency", "")
_ENERGY_FEATURES = tuple(f"X{i}" for i in range(1, 9))
_ENERGY_TARGETS: dict[str, tuple[str, ...]] = {
    "heating": ("Y1",),
    "cooling": ("Y2",),
    "both": ("Y1", "Y2"),
}


def _is_empty(cell: object) -> bool:
    return cell is None or (isinstance(cell, str) and not cell.strip())


def _read_rows(path: Path, where: str) -> list[tuple[object, ...]]:
    if path.suffix.lower() == ".xlsx":
        try:
            openpyxl = importlib.import_module("openpyxl")
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                f"{where}: reading {path} needs the optional package 'openpyxl'; install it "
                "with `pip install openpyxl` or use the CSV file ENB2012_data.csv"
            ) from error
        try:
            workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
            try:
                sheet = workbook.worksheets[0]
                return [tuple(row) for row in sheet.iter_rows(values_only=True)]
            finally:
                workbook.close()
        except Exception as error:  # openpyxl raises zipfile, XML and its own errors
            raise DataFormatError(
                f"{where}: {path} is not a readable XLSX workbook ({type(error).__name__}: "
                f"{error}); get a fresh copy of ENB2012_data.xlsx"
            ) from error
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            return [tuple(row) for row in csv.reader(handle)]
    except (UnicodeDecodeError, csv.Error) as error:
        raise DataFormatError(
            f"{where}: {path} is not a readable comma-separated text file ({error})"
        ) from error


def uci_energy(
    data_dir: PathLike | None = None, target: str = "heating", dtype: torch.dtype | None = None
) -> Dataset:
    """UCI Energy Efficiency (Tsanas & Xifara 2012): 768 simulated buildings, 8 features
    X1..X8 (relative compactness, surface area, wall area, roof area, overall height,
    orientation, glazing area, glazing-area distribution) and two targets, Y1 heating load and
    Y2 cooling load.

    File, first found: ``ENB2012_data.xlsx`` (first sheet; read with openpyxl),
    ``ENB2012_data.csv`` or ``energy_efficiency.csv`` (comma separated); searched in
    ``DATA_DIR/uci_energy``, ``DATA_DIR/energy_efficiency``, ``DATA_DIR``. The first row is the
    header and must name the columns X1..X8, Y1, Y2 (any order; other columns are ignored).
    Fully empty rows at the end (the original XLSX has some) are skipped; an empty row or cell
    anywhere else is an error.

    The values are returned as they are in the file: **no standardisation** (do it on the
    training part of your own split) and **no train/test split**: every row is in the training
    part and the test tensors have 0 rows.

    Args:
        target: ``"heating"`` (Y1, ``y`` of shape ``(n, 1)``), ``"cooling"`` (Y2, ``(n, 1)``) or
            ``"both"`` (``(n, 2)``, columns Y1, Y2).

    Returns:
        A regression :class:`Dataset` named ``"uci_energy/<target>"``: ``x_train`` of shape
        ``(n, 8)``, ``y_train`` of shape ``(n, 1)`` or ``(n, 2)``, empty ``x_test`` ``(0, 8)``
        and ``y_test``.
    """
    target = _check_choice(target, "target", "uci_energy", tuple(_ENERGY_TARGETS))
    where = "uci_energy"
    out_dtype = _resolve_dtype(dtype, where)
    (path,) = find_data_files(where, data_dir, [_ENERGY_FILES], _ENERGY_SUBDIRS)
    rows = _read_rows(path, where)
    while rows and all(_is_empty(cell) for cell in rows[-1]):
        rows.pop()
    if not rows:
        raise DataFormatError(f"{where}: {path} is empty; expected a header row X1..X8, Y1, Y2")
    header = [str(cell).strip() if not _is_empty(cell) else "" for cell in rows[0]]
    wanted = (*_ENERGY_FEATURES, "Y1", "Y2")
    missing = [name for name in wanted if name not in header]
    duplicated = sorted({name for name in wanted if header.count(name) > 1})
    if missing or duplicated:
        raise DataFormatError(
            f"{where}: {path}: the header row must name the columns X1..X8, Y1, Y2 once each; "
            f"missing {missing}, duplicated {duplicated}, found {[h for h in header if h]}"
        )
    columns = {name: header.index(name) for name in wanted}
    values = np.empty((len(rows) - 1, len(wanted)), dtype=np.float64)
    for r, row in enumerate(rows[1:]):
        line = r + 2  # 1-based, counting the header
        if all(_is_empty(cell) for cell in row):
            raise DataFormatError(
                f"{where}: {path}: row {line} is empty but rows with data follow; remove it"
            )
        for c, name in enumerate(wanted):
            index = columns[name]
            cell = row[index] if index < len(row) else None
            try:
                if _is_empty(cell) or isinstance(cell, bool):
                    raise ValueError("empty")
                number = float(cell)  # type: ignore[arg-type]
            except (TypeError, ValueError) as error:
                raise DataFormatError(
                    f"{where}: {path}: row {line}, column {name} holds {cell!r}, expected a number"
                ) from error
            if not math.isfinite(number):
                raise DataFormatError(
                    f"{where}: {path}: row {line}, column {name} holds {cell!r}, expected a "
                    "finite number"
                )
            values[r, c] = number
    targets = _ENERGY_TARGETS[target]
    target_columns = [wanted.index(t) for t in targets]
    x = torch.from_numpy(values[:, :8].copy()).to(out_dtype)
    y = torch.from_numpy(values[:, target_columns].copy()).to(out_dtype)
    metadata = {
        "file": str(path),
        "target": target,
        "features": list(_ENERGY_FEATURES),
        "targets": list(targets),
        "n": int(values.shape[0]),
        "standardised": False,
        "split": "none: all rows are in the training part, the test part is empty",
        "source": "Tsanas & Xifara 2012, UCI Energy Efficiency",
    }
    return Dataset(
        f"uci_energy/{target}",
        x,
        y,
        x.new_zeros((0, 8)),
        y.new_zeros((0, len(targets))),
        "regression",
        None,
        metadata,
    )


# --------------------------------------------------------------------------- torch files


def _torch_reason(error: BaseException) -> str:
    text = str(error)
    match = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", text, flags=re.DOTALL)
    reason = match.group(1) if match else text.splitlines()[0] if text else ""
    reason = reason.split(" Please use")[0].strip()
    return f"{type(error).__name__}: {reason}" if reason else type(error).__name__


def load_torch_file(path: PathLike) -> Any:
    """``torch.load(path, weights_only=True)``: tensors, numbers, strings and plain containers
    only, never arbitrary objects (paramsym never loads with ``weights_only=False``, which can
    run code from the file).

    Raises:
        MissingDataError: the file does not exist.
        DataFormatError: the file is not a torch file or holds other objects (e.g. instances
            of custom classes); the message names the file.
    """
    file = Path(path)
    if not file.is_file():
        raise MissingDataError(
            f"load_torch_file: {file.absolute()} does not exist or is not a file"
        )
    try:
        return torch.load(file, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise DataFormatError(
            f"load_torch_file: refusing or unable to load {file.absolute()} with "
            f"weights_only=True ({_torch_reason(error)}). paramsym loads only tensors and plain "
            "containers; save the file with plain data (e.g. a state dict), not custom objects"
        ) from error
