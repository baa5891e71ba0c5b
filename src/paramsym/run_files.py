"""What :mod:`paramsym.report` (a run's files) and :mod:`paramsym.report_html` (the index page)
both need: atomic writes, the latest complete run of each experiment in a runs directory, and
how a measured value is shown in a table.

Every file is written atomically: a temporary file in the same directory, then a rename, so a
reader sees either the old file or the whole new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def completed_runs(runs_root: Path) -> list[Path]:
    """The latest complete run directory (one with metrics.json) of every experiment."""
    latest: list[Path] = []
    if not runs_root.is_dir():
        return latest
    for experiment_dir in sorted(p for p in runs_root.iterdir() if p.is_dir()):
        runs = sorted(p for p in experiment_dir.iterdir() if (p / "metrics.json").exists())
        if runs:
            latest.append(runs[-1])
    return latest


def format_value(value: Any) -> str:
    """A metric or measured value as a table cell: floats to 4 significant digits, lists
    shortened to their first 8 entries."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        shown = ", ".join(format_value(v) for v in value[:8])
        return f"[{shown}{', …' if len(value) > 8 else ''}]"
    return str(value)
