"""Peak resident memory of a piece of work, on Linux, without torch or JAX.

``reset()`` clears the kernel's high-water mark (writing 5 to ``/proc/self/clear_refs``);
``peak_since(baseline)`` is ``VmHWM`` minus the resident size at the reset. Both benchmark
environments (paramsym's and the neural-tangents peer's) import this file, so their memory
figures are taken the same way: the work's own peak above what the process already held.
"""

from __future__ import annotations

from pathlib import Path

_STATUS = Path("/proc/self/status")


def _field_mib(name: str) -> float:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024.0  # kB
    raise RuntimeError(f"{name} missing from /proc/self/status")


def reset() -> float:
    """Reset the high-water mark; return the current resident size in MiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _field_mib("VmRSS")


def peak_since(baseline_mib: float) -> float:
    """Peak resident size since :func:`reset` above ``baseline_mib``, in MiB."""
    return max(0.0, _field_mib("VmHWM") - baseline_mib)
