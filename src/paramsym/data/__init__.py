"""Data sets for the experiments: synthetic generators, bundled sets and file loaders.

Every data set is a :class:`Dataset` (train and test tensors, task, classes, metadata) and can
be loaded by name::

    ds = paramsym.data.load("teacher_student", seed=1)
    ds = paramsym.data.load("mnist", data_dir="~/data")     # or set PARAMSYM_DATA

Synthetic (:mod:`~paramsym.data.synthetic`) and bundled (:mod:`~paramsym.data.bundled`) sets
are always available. File data sets (:mod:`~paramsym.data.files`) are read from a data
directory (``data_dir`` / ``--data-dir`` or ``$PARAMSYM_DATA``) and never downloaded; a missing
file raises :class:`~paramsym.errors.MissingDataError` listing the files expected and the
directories searched. :data:`DATASETS` / :func:`dataset_info` say which files each needs.

Character-level text corpora for language models (:mod:`~paramsym.data.text`) are
:class:`CharCorpus` objects (not :class:`Dataset`) and are not in :data:`DATASETS`:
:func:`stdlib_text` (the Python standard library's own source, always available) and
:func:`text_file` (any UTF-8 file, e.g. TinyShakespeare's ``input.txt``).

>>> ds = load("uniform_regression", n_samples=4, in_features=5, out_features=8)
>>> ds.task, tuple(ds.x_train.shape), tuple(ds.y_train.shape)
('regression', (4, 5), (4, 8))
>>> dataset_info("mnist").always_available
False
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from paramsym.data.base import Dataset, Task
from paramsym.data.bundled import digits, mnist1d
from paramsym.data.files import (
    DATA_ENV_VAR,
    cifar10,
    data_directory,
    fashion_mnist,
    find_data_files,
    load_torch_file,
    mnist,
    read_idx,
    uci_energy,
)
from paramsym.data.synthetic import (
    SINUSOID_1D_TARGETS,
    SINUSOID_2D_TARGETS,
    gaussian_classification,
    haar_orthogonal,
    sinusoid_1d,
    sinusoid_2d,
    teacher_model,
    teacher_student,
    uniform_regression,
)
from paramsym.data.text import (
    STDLIB_TEST_FILES,
    STDLIB_TRAIN_FILES,
    STDLIB_VALIDATION_FILES,
    UNKNOWN_CHAR,
    CharCorpus,
    char_corpus,
    contiguous_blocks,
    random_blocks,
    stdlib_text,
    text_file,
)
from paramsym.errors import InvalidArgumentError

__all__ = [
    "DATASETS",
    "DATA_ENV_VAR",
    "SINUSOID_1D_TARGETS",
    "SINUSOID_2D_TARGETS",
    "STDLIB_TEST_FILES",
    "STDLIB_TRAIN_FILES",
    "STDLIB_VALIDATION_FILES",
    "UNKNOWN_CHAR",
    "CharCorpus",
    "Dataset",
    "DatasetInfo",
    "Task",
    "char_corpus",
    "cifar10",
    "contiguous_blocks",
    "data_directory",
    "dataset_info",
    "digits",
    "fashion_mnist",
    "find_data_files",
    "gaussian_classification",
    "haar_orthogonal",
    "load",
    "load_torch_file",
    "mnist",
    "mnist1d",
    "random_blocks",
    "read_idx",
    "sinusoid_1d",
    "sinusoid_2d",
    "stdlib_text",
    "teacher_model",
    "teacher_student",
    "text_file",
    "uci_energy",
    "uniform_regression",
]


@dataclass(frozen=True)
class DatasetInfo:
    """A registry entry.

    Attributes:
        name: the name :func:`load` takes.
        loader: the function that makes or reads the data set.
        always_available: ``True`` for synthetic and bundled sets (no files needed).
        files: for file data sets, a one-line description of the files needed and where they
            are looked for; ``None`` otherwise.
        description: one line on what the data set is and where it comes from.
    """

    name: str
    loader: Callable[..., Dataset]
    always_available: bool
    files: str | None
    description: str


def _entries() -> dict[str, DatasetInfo]:
    idx = "train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz]"
    idx += ", t10k-labels-idx1-ubyte[.gz]"
    rows: list[tuple[str, Callable[..., Dataset], str | None, str]] = [
        ("teacher_student", teacher_student, None, "random-MLP teacher, log-spectrum Gaussian "
         "inputs (seed 002 §4)"),
        ("sinusoid_1d", sinusoid_1d, None, "f1/f2/f3 sums of sinusoids on [0, 1] "
         "(seed 004 §E1)"),
        ("sinusoid_2d", sinusoid_2d, None, "g1/g2/g3 sums of sinusoids on [0, 1]² "
         "(seed 004 §E1)"),
        ("uniform_regression", uniform_regression, None, "U[0, 1] inputs and targets "
         "(dissertation ch. 4)"),
        ("gaussian_classification", gaussian_classification, None, "balanced Gaussian mixture, "
         "one class per component"),
        ("digits", digits, None, "scikit-learn's bundled 8×8 digits, stratified split"),
        ("mnist1d", mnist1d, None, "MNIST-1D (Greydanus 2020), generated locally"),
        ("mnist", mnist, f"{idx} in DATA_DIR/mnist, DATA_DIR/MNIST/raw or DATA_DIR",
         "MNIST (LeCun et al. 1998) from the IDX files"),
        ("fashion_mnist", fashion_mnist, f"{idx} in DATA_DIR/fashion_mnist, "
         "DATA_DIR/fashion-mnist, DATA_DIR/FashionMNIST/raw or DATA_DIR",
         "Fashion-MNIST (Xiao et al. 2017) from the IDX files"),
        ("cifar10", cifar10, "data_batch_1 … data_batch_5, test_batch (the CIFAR-10 python "
         "version) in DATA_DIR/cifar-10-batches-py or DATA_DIR",
         "CIFAR-10 (Krizhevsky 2009), read with a restricted unpickler"),
        ("uci_energy", uci_energy, "ENB2012_data.xlsx, ENB2012_data.csv or "
         "energy_efficiency.csv in DATA_DIR/uci_energy, DATA_DIR/energy_efficiency or DATA_DIR",
         "UCI Energy Efficiency (Tsanas & Xifara 2012), 768 rows, no split"),
    ]  # fmt: skip
    return {
        name: DatasetInfo(name, loader, files is None, files, description)
        for name, loader, files, description in rows
    }


#: The registry, name → :class:`DatasetInfo` (read-only).
DATASETS: Mapping[str, DatasetInfo] = MappingProxyType(_entries())


def dataset_info(name: str) -> DatasetInfo:
    """The registry entry of ``name``.

    Raises:
        InvalidArgumentError: unknown name; the message lists the known names.
    """
    if not isinstance(name, str) or name not in DATASETS:
        raise InvalidArgumentError(
            f"paramsym.data: unknown data set {name!r}; known data sets: {', '.join(DATASETS)}"
        )
    return DATASETS[name]


def load(name: str, data_dir: Any = None, **kwargs: Any) -> Dataset:
    """Load the data set ``name`` with the loader's keyword arguments.

    ``data_dir`` (a path, or ``None`` for ``$PARAMSYM_DATA``) is passed to file data sets and
    ignored by always-available ones, so experiments can pass their ``--data-dir`` to every
    data set.

    Raises:
        InvalidArgumentError: unknown name (the message lists the known names) or an argument
            the loader does not take (the message lists the ones it does).
        MissingDataError, DataFormatError: from file loaders.
    """
    info = dataset_info(name)
    if not info.always_available:
        kwargs = {"data_dir": data_dir, **kwargs}
    signature = inspect.signature(info.loader)
    try:
        signature.bind(**kwargs)
    except TypeError as error:
        accepted = ", ".join(signature.parameters)
        raise InvalidArgumentError(
            f"paramsym.data.load({name!r}): {error}; {name} takes the keyword arguments {accepted}"
        ) from error
    return info.loader(**kwargs)
