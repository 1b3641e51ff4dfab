"""Reading rank 0's metrics file (`<run_dir>/metrics.jsonl`, hyperlaunch.core.metrics_records):
the one reader `status`, `plot`, `goodput` and the trackers use."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hyperlaunch.core.metrics_records import METRICS_FILE


def last_logged_step(run_dir: Path, chunk: int = 1 << 16) -> int | None:
    """The step of metrics.jsonl's last step record (the lineage's last logged step), read
    from the end of the file; None when there is none. Parsed as plain JSON: the records'
    own reader (hyperlaunch.core.metrics_records) needs Python 3.10, this runs on 3.8."""
    try:
        with (Path(run_dir) / METRICS_FILE).open("rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            carry = b""
            while end > 0:
                begin = max(0, end - chunk)
                handle.seek(begin)
                lines = (handle.read(end - begin) + carry).split(b"\n")
                carry = lines.pop(0) if begin > 0 else b""  # maybe cut: the next block completes it
                for line in reversed(lines):
                    step = _step_of(line)
                    if step is not None:
                        return step
                end = begin
    except OSError:
        return None
    return None


def _step_of(line: bytes) -> int | None:
    try:
        data = json.loads(line)
    except ValueError:  # a line cut by a crash
        return None
    step = data.get("step") if isinstance(data, dict) and data.get("type") == "step" else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
