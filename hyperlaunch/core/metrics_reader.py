"""Reading rank 0's metrics file (`<run_dir>/metrics.jsonl`, hyperlaunch.core.metrics_records):
the one reader `status`, `plot`, `goodput` and the trackers use. A file is parsed once for as
long as it stays as it is: a run folder is shared by a job and those that resume it, and `status`
of many jobs, or `status J` (its loss line and its goodput line), reads it for each."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from hyperlaunch.core.metrics_records import METRICS_FILE, EventRecord, MetricsRecord, StepRecord, parse_metrics_line
from hyperlaunch.core.protocol import json_object, read_regular_file


def read_metrics(path: Path) -> tuple[MetricsRecord, ...]:
    """Every record of a metrics file in file order; a line that is none (cut by a crash
    mid-write) is skipped, and no file, or something else in its place, has none."""
    try:
        info = Path(path).stat()
    except (OSError, ValueError):
        return ()
    return _parsed(str(path), info.st_mtime_ns, info.st_size)


def steps_and_events(path: Path) -> tuple[tuple[StepRecord, ...], tuple[EventRecord, ...]]:
    """The file's step records and its event records, each in file order."""
    records = read_metrics(path)
    return (
        tuple(item for item in records if isinstance(item, StepRecord)),
        tuple(item for item in records if isinstance(item, EventRecord)),
    )


@functools.lru_cache(maxsize=8)
def _parsed(path: str, mtime_ns: int, size: int) -> tuple[MetricsRecord, ...]:
    raw = read_regular_file(Path(path))
    if not raw:
        return ()
    found = (parse_metrics_line(line) for line in raw.decode("utf-8", errors="replace").splitlines())
    return tuple(item for item in found if item is not None)


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
    data = json_object(line)  # None for a line cut by a crash
    step = data.get("step") if data is not None and data.get("type") == "step" else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
