"""What every benchmark prints: the machine it ran on and each figure as median [min - max]."""

from __future__ import annotations

import os
import platform
import statistics
import sys
from collections.abc import Sequence
from datetime import date


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return pages * size / 2**30


def machine() -> str:
    """One line: date, host, CPU, cores, memory, Python and torch (when importable)."""
    memory = _memory_gib()
    parts = [
        date.today().isoformat(),
        platform.node(),
        f"{_cpu_model()}, {os.cpu_count()} cores",
        f"{memory:.0f} GiB" if memory else "memory unknown",
        f"Python {platform.python_version()}",
    ]
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        parts.append(f"torch {torch.__version__}")
        if torch.cuda.is_available():
            parts.append(f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}")
    return "machine: " + "; ".join(parts)


def spread(values: Sequence[float], fmt: str = ".3f") -> str:
    """'median [min - max]' of the values."""
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}} - {max(values):{fmt}}]"


def header(title: str, detail: str) -> None:
    print(f"== {title}\n{machine()}\n{detail}", flush=True)
