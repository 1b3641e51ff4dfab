"""TensorBoard: one log folder for the whole lineage, one event file per process.

Each process's file starts with a restart marker at its first step k (SessionLog START, step
k), as torch's SummaryWriter(purge_step=k) writes: TensorBoard's reader (EventAccumulator,
EventMultiplexer, with their default purge_orphaned_data=True) reads a folder's files in name
order and drops every earlier event with step >= k on meeting it. So a reader sees each step
once, with the values of the attempt that kept it. Written with the tensorboard package's own
writer and protos (no torch: a script's environment may not have it)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from hyperlaunch.core import trackers as names
from hyperlaunch.core.trackers import Ending
from hyperlaunch.trackers.lineage import Start

_EVENT_FILE_PREFIX = "events.out.tfevents."
FLUSH_SECS = 30
"""The writer's background flush interval (torch's default is 120 s); a commit and close flush too."""


class _Library(NamedTuple):
    event_pb2: Any
    summary_pb2: Any
    text_pb: Any
    EventFileWriter: Any  # noqa: N815 - the class's own name


class TensorBoardRun:
    name = names.TENSORBOARD

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self._writer: Any = None
        self._params_at = 0
        self._tb: Any = None

    def _library(self) -> Any:
        """tensorboard's writer and protos, imported once the run opens (and only then)."""
        from tensorboard.compat.proto import event_pb2, summary_pb2  # type: ignore[import-untyped]
        from tensorboard.plugins.text.summary_v2 import text_pb  # type: ignore[import-untyped]
        from tensorboard.summary.writer.event_file_writer import EventFileWriter  # type: ignore[import-untyped]

        return _Library(event_pb2, summary_pb2, text_pb, EventFileWriter)

    def open(self, start: Start, params: Mapping[str, Any]) -> str:
        tb = self._tb = self._library()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _after_the_newest_file(self.log_dir)
        self._writer = tb.EventFileWriter(str(self.log_dir), flush_secs=FLUSH_SECS)
        marker = tb.event_pb2.SessionLog(status=tb.event_pb2.SessionLog.START)
        self._writer.add_event(tb.event_pb2.Event(wall_time=time.time(), step=start.first_step, session_log=marker))
        self._params_at = start.first_step
        if params:
            self.params(params)
        return str(self.log_dir)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        summary_pb2 = self._tb.summary_pb2
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()])
        self._add(step, summary)

    def event(self, step: int, event: str, text: str) -> None:
        self._add(step, self._tb.text_pb(f"events/{event}", text))

    def params(self, values: Mapping[str, Any]) -> None:
        """As a text table at the process's first step: each attempt shows what it ran with."""
        rows = "\n".join(f"| {key} | {value} |" for key, value in sorted(values.items()))
        self._add(self._params_at, self._tb.text_pb("params", f"| name | value |\n|---|---|\n{rows}"))

    def committed(self, step: int) -> None:
        self._writer.flush()

    def close(self, ending: Ending) -> None:
        self._writer.close()

    def _add(self, step: int, summary: Any) -> None:
        self._writer.add_event(self._tb.event_pb2.Event(wall_time=time.time(), step=step, summary=summary))


def _after_the_newest_file(log_dir: Path, longest_s: float = 2.0) -> None:
    """Wait, a second at most, until this process's file sorts after every file already there:
    the reader takes files in name order, and names start with the second they were made in
    (then host and pid, which need not sort by time). Bounded: another node's clock may be ahead."""
    newest = max((_file_second(name) for name in os.listdir(log_dir)), default=0)
    deadline = time.monotonic() + longest_s
    while int(time.time()) <= newest and time.monotonic() < deadline:
        time.sleep(0.05)


def _file_second(name: str) -> int:
    if not name.startswith(_EVENT_FILE_PREFIX):
        return 0
    second = name[len(_EVENT_FILE_PREFIX) :].split(".", 1)[0]
    return int(second) if second.isdigit() else 0
