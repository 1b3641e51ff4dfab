"""CPU ranks give freed tensor memory back to the system at once (glibc's mmap threshold is
fixed), so a rank's resident memory follows what it really holds."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROGRAM = """
import sys, torch
from hyperlaunch.train.host_memory import return_freed_memory
if sys.argv[1] == "fixed":
    assert return_freed_memory()
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) // 1024
first = torch.ones(1 << 21)
del first  # a freed 8 MiB block: glibc raises its threshold to it
blocks = [torch.ones(1 << 21) for _ in range(50)]  # 400 MiB
keep = [torch.ones(16) for _ in range(100)]  # small blocks after them hold the heap's top
before = rss()
del blocks
print(before - rss())
"""


def _returned_mib(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROGRAM, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.slow
def test_freed_tensors_leave_the_resident_set() -> None:
    assert _returned_mib("fixed") >= 350
    assert _returned_mib("default") < 100  # what the setting changes
