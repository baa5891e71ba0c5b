"""Character-level text corpora: the Python standard library's own source, or any UTF-8 file.

Language-model experiments (merging two transformers trained from different seeds, issue 30)
need real text that no one here wrote and that is on every machine. The Python standard library's
source files are: :func:`stdlib_text` reads a fixed list of the top-level ``.py`` files of the
running interpreter's ``Lib/`` directory (``sysconfig.get_paths()["stdlib"]``), about 3 MB.
:func:`text_file` reads any UTF-8 text file instead, e.g. TinyShakespeare's ``input.txt`` from a
user's ``--data-dir``. Nothing is downloaded.

**The file list** (:data:`STDLIB_TRAIN_FILES`, :data:`STDLIB_VALIDATION_FILES`,
:data:`STDLIB_TEST_FILES`) holds only files that exist at the top level of ``Lib/`` in every
CPython from 3.10 to 3.13 (checked against 3.10.13, 3.11.7, 3.12.1 and 3.13.0). Left out on
purpose: modules removed by PEP 594 or in 3.12 (``cgi``, ``nntplib``, ``asyncore``, ...), modules
that became packages (``zipfile`` in 3.12, ``pathlib`` in 3.13), ``datetime.py`` (a stub over
``_pydatetime.py`` from 3.12), ``turtle.py`` (shipped with tkinter by some distributions),
generated and platform files (``_sysconfigdata_*``), and ``shlex.py`` (a table of 62 accented
letters). The files' *contents* differ between Python versions (``typing.py`` grows from 93 kB in
3.10 to 133 kB in 3.13), so the corpus, and losses measured on it, belong to one Python minor
version: :attr:`CharCorpus.metadata` records the version and a SHA-256 of each split.

**The split is by file**: validation is ``argparse.py`` and ``textwrap.py``, test is
``difflib.py``, ``calendar.py`` and ``cmd.py`` (about 4 % of the characters each), training is
the rest. A split inside each file would put a module's own identifiers, docstrings and idioms
on both sides and measure partly memorised text; whole held-out modules measure how well the
model reads Python it has not seen, and the split does not move when a file grows between
Python versions. Files are concatenated in the listed order, each ending in one newline.

:func:`text_file` splits one text **by position**: the first 90 % of the characters for training,
the next 5 % for validation, the last 5 % for test (nanoGPT's TinyShakespeare split keeps the
first 90 % for training too).

**Vocabulary**: the distinct characters of the *training* split plus the fallback character
:data:`UNKNOWN_CHAR` (U+FFFD, the Unicode replacement character), sorted by code point; a
character's token id is its position. Characters of the validation and test splits (or any text
given to :meth:`CharCorpus.encode`) that are not in the training vocabulary become the fallback's
id, counted in ``metadata["unknown_characters"]``; :meth:`CharCorpus.decode` turns that id back
into U+FFFD. Line endings are read as ``"\\n"`` (``"\\r\\n"`` and ``"\\r"`` are converted, as
Python's text mode does) and a leading byte-order mark is dropped.

>>> corpus = char_corpus("abcab\\n" * 20, "abcz\\n" * 4, "cab\\n" * 4)
>>> corpus.vocabulary
('\\n', 'a', 'b', 'c', '�')
>>> corpus.decode(corpus.encode("zab"))
'�ab'
>>> inputs, targets = corpus.blocks("train", 3, 8, torch.Generator().manual_seed(0))
>>> tuple(inputs.shape), bool((inputs[:, 1:] == targets[:, :-1]).all())
((3, 8), True)
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from paramsym.data.synthetic import _check_int
from paramsym.errors import DataFormatError, InvalidArgumentError, MissingDataError

__all__ = [
    "STDLIB_TEST_FILES",
    "STDLIB_TRAIN_FILES",
    "STDLIB_VALIDATION_FILES",
    "TEXT_FILE_FRACTIONS",
    "UNKNOWN_CHAR",
    "CharCorpus",
    "Split",
    "char_corpus",
    "contiguous_blocks",
    "random_blocks",
    "stdlib_directory",
    "stdlib_text",
    "text_file",
]

Split = Literal["train", "validation", "test"]
SPLITS: tuple[Split, ...] = ("train", "validation", "test")

#: The fallback character: characters outside the training vocabulary are encoded as its id.
UNKNOWN_CHAR = "\ufffd"

#: Training files of :func:`stdlib_text`, in concatenation order (top-level ``Lib/*.py``).
STDLIB_TRAIN_FILES: tuple[str, ...] = (
    "_pydecimal.py", "inspect.py", "pydoc.py", "tarfile.py", "doctest.py", "pickletools.py",
    "_pyio.py", "typing.py", "subprocess.py", "mailbox.py", "locale.py", "ipaddress.py",
    "pickle.py", "pdb.py", "optparse.py", "ast.py", "dataclasses.py", "threading.py",
    "shutil.py", "imaplib.py", "configparser.py", "ssl.py", "smtplib.py", "statistics.py",
    "platform.py", "enum.py", "os.py", "functools.py", "socket.py", "codecs.py", "ftplib.py",
    "bdb.py", "random.py", "_collections_abc.py", "ntpath.py", "pstats.py", "trace.py",
    "tempfile.py", "plistlib.py", "fractions.py", "zipimport.py", "uuid.py", "socketserver.py",
    "traceback.py", "contextlib.py", "_strptime.py", "pprint.py", "modulefinder.py",
    "webbrowser.py", "profile.py", "heapq.py", "mimetypes.py", "site.py", "gzip.py",
    "weakref.py", "gettext.py", "base64.py", "compileall.py", "dis.py", "warnings.py",
    "tokenize.py", "selectors.py", "pkgutil.py", "tracemalloc.py", "wave.py", "posixpath.py",
    "csv.py", "fileinput.py", "poplib.py", "timeit.py",
)  # fmt: skip
#: Validation files of :func:`stdlib_text` (about 119 kB).
STDLIB_VALIDATION_FILES: tuple[str, ...] = ("argparse.py", "textwrap.py")
#: Test files of :func:`stdlib_text` (about 123 kB).
STDLIB_TEST_FILES: tuple[str, ...] = ("difflib.py", "calendar.py", "cmd.py")

#: Fractions (train, validation, test) of :func:`text_file`'s split by position.
TEXT_FILE_FRACTIONS: tuple[float, float, float] = (0.9, 0.05, 0.05)


# --------------------------------------------------------------------------- the corpus


@dataclass(eq=False)
class CharCorpus:
    """A character-level corpus: a vocabulary and three splits of token ids.

    Build one with :func:`stdlib_text`, :func:`text_file` or :func:`char_corpus`.

    Attributes:
        name: ``"stdlib"``, ``"text_file/<file name>"`` or the name given to
            :func:`char_corpus`.
        vocabulary: the characters, sorted by code point; token id ``i`` is ``vocabulary[i]``.
            Always holds :data:`UNKNOWN_CHAR`.
        train, validation, test: the splits as int64 tensors of shape ``(n_split,)``.
        metadata: plain data: sources, characters per split, unknown characters per split,
            SHA-256 of each split's text, Python version (stdlib corpus).
    """

    name: str
    vocabulary: tuple[str, ...]
    train: Tensor
    validation: Tensor
    test: Tensor
    metadata: dict[str, Any] = field(default_factory=dict)
    _codes: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._codes = np.array([ord(c) for c in self.vocabulary], dtype=np.int64)
        if (
            UNKNOWN_CHAR not in self.vocabulary
            or any(len(c) != 1 for c in self.vocabulary)
            or not bool(np.all(np.diff(self._codes) > 0))
        ):
            raise InvalidArgumentError(
                "CharCorpus: vocabulary must be distinct single characters sorted by code point "
                f"and hold the fallback {UNKNOWN_CHAR!r}; build corpora with char_corpus()"
            )

    @property
    def vocab_size(self) -> int:
        """Number of token ids (the models' ``vocab_size``)."""
        return len(self.vocabulary)

    @property
    def unknown_id(self) -> int:
        """The token id of :data:`UNKNOWN_CHAR`, given to characters outside the vocabulary."""
        return self.vocabulary.index(UNKNOWN_CHAR)

    def split(self, name: Split) -> Tensor:
        """The token ids of split ``name`` (``"train"``, ``"validation"`` or ``"test"``)."""
        if name not in SPLITS:
            raise InvalidArgumentError(
                f"CharCorpus.split: unknown split {name!r}; the splits are {', '.join(SPLITS)}"
            )
        tensor: Tensor = getattr(self, name)
        return tensor

    def encode(self, text: str) -> Tensor:
        """Token ids of ``text``, shape ``(len(text),)`` int64; characters outside the
        vocabulary become :attr:`unknown_id`."""
        return torch.from_numpy(_encode(text, self._codes, self.unknown_id)[0])

    def decode(self, ids: Tensor | np.ndarray | list[int]) -> str:
        """The text of a 1-D sequence of token ids (the inverse of :meth:`encode` on text whose
        characters are all in the vocabulary).

        Raises:
            InvalidArgumentError: ``ids`` is not one-dimensional or holds an id outside
                ``[0, vocab_size)``.
        """
        array = np.asarray(ids.detach().cpu() if isinstance(ids, Tensor) else ids)
        if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
            raise InvalidArgumentError(
                f"CharCorpus.decode: ids must be a 1-D sequence of integers, got shape "
                f"{array.shape} and dtype {array.dtype}"
            )
        if array.size and (array.min() < 0 or array.max() >= self.vocab_size):
            raise InvalidArgumentError(
                f"CharCorpus.decode: ids must lie in [0, {self.vocab_size}), got values from "
                f"{array.min()} to {array.max()}"
            )
        return "".join(self.vocabulary[i] for i in array.tolist())

    def blocks(
        self, split: Split, batch_size: int, block_size: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        """A random batch of ``(inputs, targets)`` from split ``split``; see
        :func:`random_blocks`."""
        return random_blocks(self.split(split), batch_size, block_size, generator)


def random_blocks(
    tokens: Tensor, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``batch_size`` windows of ``block_size + 1`` consecutive tokens at uniformly random
    starts, split into inputs and next-token targets.

    The starts are ``torch.randint(0, n - block_size, (batch_size,), generator=generator)``, so
    the same generator state gives the same batch, and every window lies inside ``tokens``.

    Args:
        tokens: token ids, shape ``(n,)`` with ``n >= block_size + 1``.
        batch_size, block_size: the batch's shape.
        generator: a CPU ``torch.Generator``; it is advanced by one draw.

    Returns:
        ``(inputs, targets)``, both ``(batch_size, block_size)`` int64 on ``tokens``' device,
        with ``targets[b, t] == inputs[b, t + 1]`` for ``t < block_size - 1``.

    Raises:
        InvalidArgumentError: sizes below 1, or ``tokens`` shorter than ``block_size + 1``.
    """
    where = "random_blocks"
    batch_size = _check_int(batch_size, "batch_size", where, 1)
    block_size = _check_int(block_size, "block_size", where, 1)
    n = _check_tokens(tokens, block_size, where)
    starts = torch.randint(0, n - block_size, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(block_size + 1)
    windows = tokens[index.to(tokens.device)]
    return windows[:, :-1], windows[:, 1:]


def contiguous_blocks(tokens: Tensor, block_size: int) -> tuple[Tensor, Tensor]:
    """Every non-overlapping window of ``block_size + 1`` tokens, in order (for evaluation).

    Window ``i`` starts at ``i · block_size``, so consecutive windows share one token (the last
    target of one block is the first input of the next) and every token after the first is a
    target exactly once, except for the ``(n - 1) mod block_size`` tokens at the end, which
    are dropped.

    Returns:
        ``(inputs, targets)``, both ``((n - 1) // block_size, block_size)`` int64.

    Raises:
        InvalidArgumentError: ``block_size`` below 1, or ``tokens`` shorter than
            ``block_size + 1``.
    """
    where = "contiguous_blocks"
    block_size = _check_int(block_size, "block_size", where, 1)
    n = _check_tokens(tokens, block_size, where)
    count = (n - 1) // block_size
    inputs = tokens[: count * block_size].reshape(count, block_size)
    targets = tokens[1 : count * block_size + 1].reshape(count, block_size)
    return inputs, targets


def _check_tokens(tokens: object, block_size: int, where: str) -> int:
    if not isinstance(tokens, Tensor) or tokens.ndim != 1 or tokens.dtype != torch.int64:
        raise InvalidArgumentError(
            f"{where}: tokens must be a 1-D int64 tensor (a CharCorpus split), got "
            f"{getattr(tokens, 'shape', type(tokens).__name__)} "
            f"{getattr(tokens, 'dtype', '')}".rstrip()
        )
    n = int(tokens.numel())
    if n < block_size + 1:
        raise InvalidArgumentError(
            f"{where}: {n} tokens cannot hold a block of {block_size} inputs and its shifted "
            f"targets ({block_size + 1} tokens); use a smaller block_size or a longer text"
        )
    return n


# --------------------------------------------------------------------------- building corpora


def _codes_of(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)


def _encode(text: str, vocabulary_codes: np.ndarray, unknown_id: int) -> tuple[np.ndarray, int]:
    """Token ids of ``text`` and the number of characters mapped to ``unknown_id``."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"CharCorpus.encode: text must be a str, got {type(text)}")
    codes = _codes_of(text)
    index = np.searchsorted(vocabulary_codes, codes)
    index = np.minimum(index, len(vocabulary_codes) - 1)
    known = vocabulary_codes[index] == codes
    ids = np.where(known, index, unknown_id).astype(np.int64)
    return ids, int(codes.size - np.count_nonzero(known))


def _normalise(text: str) -> str:
    text = text.removeprefix("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def char_corpus(
    train: str,
    validation: str,
    test: str,
    name: str = "text",
    metadata: dict[str, Any] | None = None,
) -> CharCorpus:
    """A :class:`CharCorpus` from the texts of its three splits.

    The vocabulary is the distinct characters of ``train`` plus :data:`UNKNOWN_CHAR`, sorted
    by code point; characters of ``validation`` and ``test`` outside it are encoded as the
    fallback (counted in ``metadata["unknown_characters"]``). The texts are used as given (no
    line-ending conversion).

    Raises:
        InvalidArgumentError: a split is not a string or has fewer than 2 characters (no
            next-character target).
    """
    texts = {"train": train, "validation": validation, "test": test}
    for split, text in texts.items():
        if not isinstance(text, str) or len(text) < 2:
            raise InvalidArgumentError(
                f"char_corpus: the {split} text must be a str of at least 2 characters, got "
                f"{type(text).__name__} of length {len(text) if isinstance(text, str) else '-'}"
            )
    train_codes = np.unique(np.append(_codes_of(train), ord(UNKNOWN_CHAR)))
    vocabulary = tuple(chr(c) for c in train_codes.tolist())
    unknown_id = vocabulary.index(UNKNOWN_CHAR)
    tensors: dict[str, Tensor] = {}
    unknown: dict[str, int] = {}
    for split, text in texts.items():
        ids, missing = _encode(text, train_codes, unknown_id)
        tensors[split] = torch.from_numpy(ids)
        unknown[split] = missing
    info = {
        **(metadata or {}),
        "characters": {split: len(text) for split, text in texts.items()},
        "unknown_characters": unknown,
        "sha256": {
            split: hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            for split, text in texts.items()
        },
        "vocab_size": len(vocabulary),
        "unknown_char": UNKNOWN_CHAR,
    }
    return CharCorpus(
        name, vocabulary, tensors["train"], tensors["validation"], tensors["test"], info
    )


def _read_utf8(path: Path, where: str, hint: str) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError as error:
        raise MissingDataError(f"{where}: file {path} does not exist; {hint}") from error
    except IsADirectoryError as error:
        raise DataFormatError(f"{where}: {path} is a directory, not a text file; {hint}") from error
    except OSError as error:
        raise DataFormatError(f"{where}: cannot read {path} ({error}); {hint}") from error
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataFormatError(
            f"{where}: {path} is not UTF-8 text (byte {error.start}, line {line}: {error.reason}); "
            "convert it to UTF-8, e.g. `iconv -f latin1 -t utf-8 FILE > FILE.utf8`"
        ) from error
    return _normalise(text)


def stdlib_directory() -> Path:
    """The running interpreter's standard-library directory, ``sysconfig.get_paths()["stdlib"]``
    (e.g. ``/usr/lib/python3.11``)."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_text(stdlib_dir: str | os.PathLike[str] | None = None) -> CharCorpus:
    """The character corpus of the Python standard library's source (see the module docstring).

    Reads :data:`STDLIB_TRAIN_FILES`, :data:`STDLIB_VALIDATION_FILES` and
    :data:`STDLIB_TEST_FILES` from ``stdlib_dir`` (default :func:`stdlib_directory`), each as
    UTF-8 with line endings converted to ``"\\n"`` and ending in one newline, and concatenates
    each split's files in the listed order. About 3.0 million training characters and 0.12
    million each for validation and test on CPython 3.11 (about 100 distinct characters).

    Returns:
        A :class:`CharCorpus` named ``"stdlib"``; ``metadata`` records the directory, the
        Python version, the files of each split and the characters per split.

    Raises:
        MissingDataError: a listed file is missing (the message names it, the directory, and
            what to do: install the interpreter's full standard library, or use
            :func:`text_file`).
        DataFormatError: a listed file is not UTF-8.
    """
    where = "stdlib_text"
    directory = stdlib_directory() if stdlib_dir is None else Path(stdlib_dir)
    files = {
        "train": STDLIB_TRAIN_FILES,
        "validation": STDLIB_VALIDATION_FILES,
        "test": STDLIB_TEST_FILES,
    }
    missing = [f for names in files.values() for f in names if not (directory / f).is_file()]
    if missing:
        raise MissingDataError(
            f"{where}: the standard-library source file(s) {', '.join(missing)} are not in "
            f"{directory} (the directory of sysconfig.get_paths()['stdlib'] for Python "
            f"{sys.version.split()[0]}). This interpreter's standard library is incomplete or "
            "ships compiled files only: install the full standard library (e.g. the "
            "distribution's libpython3.X-stdlib / python3-libs package), run with a CPython "
            "3.10-3.13 that has its Lib/*.py sources, or use text_file(PATH) with any UTF-8 "
            "text file instead"
        )
    texts: dict[str, str] = {}
    for split, names in files.items():
        parts = []
        for file in names:
            text = _read_utf8(directory / file, where, "use text_file(PATH) with another text")
            parts.append(text if text.endswith("\n") else text + "\n")
        texts[split] = "".join(parts)
    metadata = {
        "source": "Python standard library source (top-level Lib/*.py), split by file",
        "directory": str(directory),
        "python_version": sys.version.split()[0],
        "files": {split: list(names) for split, names in files.items()},
    }
    return char_corpus(texts["train"], texts["validation"], texts["test"], "stdlib", metadata)


def text_file(
    path: str | os.PathLike[str],
    data_dir: str | os.PathLike[str] | None = None,
    min_chars: int = 1000,
) -> CharCorpus:
    """The character corpus of one UTF-8 text file, split by position.

    The first 90 % of the characters are the training split, the next 5 % validation, the
    last 5 % test (:data:`TEXT_FILE_FRACTIONS`); the split points are ``int(0.9 · n)`` and
    ``int(0.95 · n)``. Line endings are converted to ``"\\n"`` and a byte-order mark is dropped.

    Args:
        path: the file, e.g. TinyShakespeare's ``input.txt``.
        data_dir: when given, a relative ``path`` is read from this directory (the experiments'
            ``--data-dir``); ``~`` is expanded in both.
        min_chars: the fewest characters accepted (after line-ending conversion), so that each
            5 % split has text to score.

    Returns:
        A :class:`CharCorpus` named ``"text_file/<file name>"``.

    Raises:
        MissingDataError: the file does not exist.
        DataFormatError: the path is a directory or unreadable, the file is not UTF-8 (the
            message gives the byte offset and line), or it holds fewer than ``min_chars``
            characters.
    """
    where = "text_file"
    min_chars = _check_int(min_chars, "min_chars", where, 40)
    file = Path(path).expanduser()
    if data_dir is not None and not file.is_absolute():
        file = Path(data_dir).expanduser() / file
    file = file.absolute()
    hint = "pass the path of a UTF-8 text file (e.g. TinyShakespeare's input.txt)"
    text = _read_utf8(file, where, hint)
    if len(text) < min_chars:
        raise DataFormatError(
            f"{where}: {file} holds {len(text)} characters, fewer than min_chars={min_chars}; "
            "a character language model needs a longer text (TinyShakespeare has about 1.1 "
            "million characters)"
        )
    n = len(text)
    first, second = int(TEXT_FILE_FRACTIONS[0] * n), int(sum(TEXT_FILE_FRACTIONS[:2]) * n)
    metadata = {
        "source": f"text file {file}, split by position",
        "path": str(file),
        "fractions": list(TEXT_FILE_FRACTIONS),
    }
    return char_corpus(
        text[:first], text[first:second], text[second:], f"text_file/{file.name}", metadata
    )
