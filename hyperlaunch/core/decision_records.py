"""Decision records: one JSON line the supervisor appends to `<run_dir>/decisions-<job id>.jsonl`
each time it decides: an attempt's end (the job completes, is requeued or ends) and each round of
trainers it starts again inside the allocation. What `status` reads for why each attempt and
round ended, and the goodput ledger for when: the times that split a recovery into its phases
(the failure seen, the step stopped, the requeue asked, the next round started).

The attempt markers in the log (hyperlaunch.core.protocol) say the same for `logs` and for jobs
whose supervisor wrote no records (older ones); an attempt whose batch host died writes neither,
and Slurm's accounting tells its end.

Torch-free; Python 3.8 at run time: the supervisor writes these on the batch host."""

from __future__ import annotations

import calendar
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperlaunch.core.protocol import json_object, read_regular_file

DECISIONS_PREFIX = "decisions-"
DECISIONS_SUFFIX = ".jsonl"
END = "end"
"""An attempt ended: the job completed, went back to the queue, or ended there."""
RESTART = "restart"
"""A round of trainers ended and the next starts inside the same allocation."""
_LIMIT = 16 * 1024 * 1024
"""Past this the file is no job's: read no further (each record is under a kilobyte)."""
_LINE_LIMIT = 300
"""The longest error line a record keeps."""


@dataclass(frozen=True)
class DecisionRecord:
    """One decision of the supervisor, and what it was made on."""

    event: str
    """END or RESTART."""
    restart: int
    """The attempt (SLURM_RESTART_COUNT) the decision ended or restarted in."""
    cause: str
    """Why: a RestartCause value."""
    action: str
    """What followed: an AttemptAction value."""
    time: str
    """When it was written, UTC, as the markers write it (`2026-11-28T05:40:01Z`)."""
    exit: int = 0
    """The training step's exit status (srun's: 128 + a signal where one ended it)."""
    round: int | None = None
    """The round of trainers that ended (0 and on); None where the attempt ran none (refused at
    its start: the restart budget, the checkpoint lock)."""
    next_round: int | None = None
    """RESTART: the round that starts."""
    task_exit: str = ""
    """The first failed task's own exit code (the worker's, as torchrun reports it), or the
    signal that ended it (`SIGKILL`); '' where no task failed or its output said nothing."""
    error_line: str = ""
    """The line of the round's output that names the root error (core.error_lines)."""
    nodes_in: tuple[str, ...] = ()
    """The nodes the round trained on."""
    nodes_out: tuple[str, ...] = ()
    """The nodes it lost (the probe found them gone, or Slurm lists them down)."""
    spare: tuple[str, ...] = ()
    """The spares that took the lost nodes' place in the next round."""
    fields: Mapping[str, str] = field(default_factory=dict)
    """The decision's other words, as its marker carries them: `failures` (the budget used),
    `holder` (the checkpoint lock's), `kind` and `repeated` (a trainer error), `checkpoint` (a
    torn one set aside), `in_row`."""
    failure_seen: float | None = None
    """Unix time the supervisor saw the round fail: a task's failure record or srun's line for a
    failed task while the step still ran, else the step's end."""
    step_stopped: float | None = None
    """When the round's step had ended (srun returned)."""
    requeue_asked: float | None = None
    """When the supervisor asked Slurm to requeue the job (END with action requeue)."""
    next_round_started: float | None = None
    """RESTART: when the supervisor started the next round (its srun follows at once)."""

    def as_marker(self) -> dict[str, str]:
        """The record as an attempt marker's fields read (parse_attempt_marker): what `status`
        read from the log before records, so both are read alike."""
        marker = {"event": self.event, "restart": str(self.restart), "exit": str(self.exit), "cause": self.cause}
        marker.update(self.fields)
        if self.event == RESTART and self.next_round is not None:
            marker["round"] = str(self.next_round)
        elif self.round is not None:
            marker["round"] = str(self.round)
        if self.nodes_out:
            marker["nodes"] = ",".join(self.nodes_out)
        if self.spare:
            marker["spare"] = ",".join(self.spare)
        marker["action"] = self.action
        marker["time"] = self.time
        return marker

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "event": self.event, "restart": self.restart, "cause": self.cause, "action": self.action, "time": self.time,
            "exit": self.exit, "round": self.round, "next_round": self.next_round, "task_exit": self.task_exit,
            "error_line": self.error_line[:_LINE_LIMIT], "nodes_in": list(self.nodes_in), "nodes_out": list(self.nodes_out),
            "spare": list(self.spare), "fields": dict(self.fields), "failure_seen": self.failure_seen,
            "step_stopped": self.step_stopped, "requeue_asked": self.requeue_asked, "next_round_started": self.next_round_started,
        }
        return {key: value for key, value in data.items() if value not in (None, "", [], {})}


def decisions_path(run_dir: Path, job_id: str) -> Path:
    return Path(run_dir) / f"{DECISIONS_PREFIX}{job_id}{DECISIONS_SUFFIX}"


def append_decision(run_dir: Path, job_id: str, record: DecisionRecord) -> None:
    """Add the record as one line, in one write (O_APPEND: a reader never sees half of it)."""
    line = (json.dumps(record.to_json(), sort_keys=True) + "\n").encode("utf-8", "replace")
    fd = os.open(str(decisions_path(run_dir, job_id)), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_decisions(run_dir: Path, job_id: str) -> list[DecisionRecord]:
    """The job's records in the order written; a line that is none (cut by a full disk, another
    program's) is skipped. None at all where the supervisor wrote none."""
    raw = read_regular_file(decisions_path(run_dir, job_id), limit=_LIMIT)
    if not raw:
        return []
    found = []
    for line in raw[:_LIMIT].decode("utf-8", errors="replace").splitlines():
        record = parse_decision(line)
        if record is not None:
            found.append(record)
    return found


def parse_decision(line: str) -> DecisionRecord | None:
    data = json_object(line)
    if data is None:
        return None
    words = {key: data.get(key) for key in ("event", "cause", "action", "time")}
    if not all(isinstance(value, str) and value for value in words.values()) or words["event"] not in (END, RESTART):
        return None
    restart = _count(data.get("restart"))
    if restart is None:
        return None
    fields = data.get("fields")
    return DecisionRecord(
        event=str(words["event"]), restart=restart, cause=str(words["cause"]), action=str(words["action"]),
        time=str(words["time"]),
        exit=_count(data.get("exit")) or 0,
        round=_count(data.get("round")),
        next_round=_count(data.get("next_round")),
        task_exit=_text(data.get("task_exit")),
        error_line=_text(data.get("error_line"))[:_LINE_LIMIT],
        nodes_in=_names(data.get("nodes_in")), nodes_out=_names(data.get("nodes_out")), spare=_names(data.get("spare")),
        fields={str(k): str(v) for k, v in fields.items() if isinstance(v, str)} if isinstance(fields, dict) else {},
        failure_seen=_seconds(data.get("failure_seen")), step_stopped=_seconds(data.get("step_stopped")),
        requeue_asked=_seconds(data.get("requeue_asked")), next_round_started=_seconds(data.get("next_round_started")),
    )


def ends_by_attempt(records: Sequence[DecisionRecord]) -> dict[int, DecisionRecord]:
    """Each attempt's END record; the last one wins (a requeue Slurm refused is followed by the
    end that ended the job)."""
    return {record.restart: record for record in records if record.event == END}


def written_at(record: DecisionRecord) -> float | None:
    """The record's `time` as Unix time; None where it is unreadable."""
    try:
        return float(calendar.timegm(time.strptime(record.time, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _count(value: Any) -> int | None:
    """A whole number from 0 on, None for anything else (a bool, a string, a negative)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**10 else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _names(value: Any) -> tuple[str, ...]:
    return tuple(item for item in value if isinstance(item, str) and item) if isinstance(value, list) else ()


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
