"""What the records of a job's attempts say: sacct's rows (with the runs only the log's
attempt markers know), the log split at those markers, the nodes that went down during an
attempt (slurmdbd's node events). Read by
hyperlaunch.runs.restart_causes and runs.job_status, which sums them up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hyperlaunch.core.protocol import AttemptAction, RestartCause, parse_attempt_marker, read_regular_file
from hyperlaunch.core.slurm_states import ENDED_STATES
from hyperlaunch.slurm import hostlist
from hyperlaunch.slurm.accounting import Attempt, NodeEvent

# How long after an attempt ends its node's DOWN event may still be recorded.
_EVENT_SLACK = timedelta(seconds=120)
# How far the batch host's clock (the log's markers) may be from the controller's (sacct's).
_CLOCK_SLACK = timedelta(seconds=5)
# A start marker this long before the job first started is an earlier job's with its id (a
# cluster whose job ids began again); the run's own is written after it started.
_EARLIER_JOB = timedelta(minutes=1)


def failed_nodes(
    attempt: Attempt, events: Sequence[NodeEvent], next_start: str | None = None
) -> list[str]:
    """Nodes of the attempt that went down between its start and shortly after its end, but
    not once the next attempt has started (a node both attempts ran on that fails then is the
    next attempt's failure)."""
    start, end = parse_time(attempt.start), parse_time(attempt.end)
    if start is None:
        return []
    end = (end or start) + _EVENT_SLACK
    following = parse_time(next_start) if next_start else None
    if following is not None and following > start:
        end = min(end, following)
    nodes = set(hostlist.expand(attempt.node_list))
    hits = []
    for event in events:
        when = parse_time(event.start)
        if event.node in nodes and when is not None and start <= when <= end and event.node not in hits:
            hits.append(event.node)
    return sorted(hits)


def parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def read_lines(path: Path) -> list[str]:
    raw = read_regular_file(path)  # a folder or FIFO in its place is no file
    return raw.decode("utf-8", errors="replace").splitlines() if raw else []


def markers_by_restart(lines: Iterable[str], event: str) -> dict[int, dict[str, str]]:
    """The supervisor's `event` markers (start, end) by attempt (restart count); the last one wins."""
    found: dict[int, dict[str, str]] = {}
    for line in lines:
        marker = parse_attempt_marker(line)
        if marker and marker.get("event") == event and marker.get("restart", "").isdigit():
            found[int(marker["restart"])] = marker
    return found


def with_logged_attempts(
    attempts: Sequence[Attempt], starts: Mapping[int, Mapping[str, str]], ends: Mapping[int, Mapping[str, str]]
) -> list[Attempt]:
    """sacct's attempts, each with the restart count it ran under, and with those only the
    log's start markers know. A job requeued after giving nodes back (a lost node left at once)
    keeps one accounting record for the run it was resized in and every later run: that record
    is split at the later runs' markers."""
    runs, hidden = _numbered(attempts, starts)
    if not runs or not hidden:
        return runs
    numbered = list(runs)
    count = restart_count(runs, len(runs) - 1)
    piece = runs.pop()
    piece = replace(piece, node_list=starts.get(count, {}).get("nodes") or piece.node_list)
    for restart in hidden:
        piece_start = parse_time(piece.start)
        began = marker_time(starts[restart].get("time", ""))
        if began is None or piece_start is None or began < piece_start:
            return numbered  # markers of an earlier job with this id, or unreadable
        ended = marker_time(ends.get(count, {}).get("time", ""))
        if ended is None or not piece_start <= ended <= began:
            ended = began
        runs.append(replace(piece, state="REQUEUED", end=_sacct_time(ended), exit_code="0:0", elapsed_s=_seconds(piece_start, ended)))
        piece = replace(
            piece,
            start=_sacct_time(began),
            node_list=starts[restart].get("nodes") or piece.node_list,
            elapsed_s=max(piece.elapsed_s - _seconds(piece_start, began), 0),
            restart=restart,
        )
        count = restart
    return [*runs, piece]


_REQUEUED_ACTIONS = (AttemptAction.REQUEUE.value, AttemptAction.SLURM_REQUEUE.value)
"""Attempt-end marker actions after which the job went back to the queue."""


def as_the_markers_end_them(attempts: Sequence[Attempt], ends: Mapping[int, Mapping[str, str]]) -> list[Attempt]:
    """The attempts of a job that has ended (no longer in the queue), each ended as its
    supervisor's end marker says where sacct's record of it says otherwise. This Slurm leaves
    the records of a job that gave nodes back and was requeued out of step with its runs: one
    record closes with the job's final state but covers the run that was requeued, another
    stays PENDING with no end after the job ended. A run the supervisor requeued ended
    REQUEUED at its marker; the one it ended the job with ended in the job's final state (the
    newest record that has one; FAILED, or COMPLETED for a completed run, where none has)."""
    final = next((a.state for a in reversed(attempts) if a.state in ENDED_STATES), "")
    settled = []
    for index, attempt in enumerate(attempts):
        marker = ends.get(restart_count(attempts, index))
        ended, start = marker_time((marker or {}).get("time", "")), parse_time(attempt.start)
        if marker is None or ended is None or start is None or ended < start - _CLOCK_SLACK:
            settled.append(attempt)
            continue
        if marker.get("action") in _REQUEUED_ACTIONS:
            state = "REQUEUED"
        else:
            state = final or ("COMPLETED" if marker.get("cause") == RestartCause.COMPLETED.value else "FAILED")
        if state == attempt.state and attempt.end not in ("", "Unknown", "None"):
            settled.append(attempt)
            continue
        settled.append(replace(attempt, state=state, end=_sacct_time(ended), elapsed_s=max(_seconds(start, ended), 0)))
    return settled


def running_past_its_record(attempt: Attempt, now: datetime) -> Attempt:
    """The run in progress of a job squeue says runs, where its record closed before the run
    began. The dev cluster's Slurm leaves the record of a job requeued after giving a node back
    as the requeue left it (REQUEUED, ended at the requeue, 0 s) until the next run ends; the
    log's start marker split that run off it (with_logged_attempts): it runs, from its start."""
    start, end = parse_time(attempt.start), parse_time(attempt.end)
    if start is None or end is None or end >= start:
        return attempt
    return replace(attempt, state="RUNNING", end="Unknown", elapsed_s=max(_seconds(start, now), 0))


def _numbered(attempts: Sequence[Attempt], starts: Mapping[int, Mapping[str, str]]) -> tuple[list[Attempt], list[int]]:
    """sacct's attempts with their restart counts, and the logged counts no attempt took.
    Each run that started takes the next start marker the log holds, not its position: Slurm's
    count can skip a number (a requeue counted twice, the supervisor's and Slurm's own for a
    lost node), and `logs --attempt N` names runs by that count. A record's start is not compared:
    a resized run's record starts when it was resized. A marker written well before the job
    first started is an earlier job's with this id. A run not started, or one that ended before
    the next marker was written (it wrote none), is one more than the run before."""
    first = parse_time(attempts[0].start) if attempts else None
    logged = [count for count in sorted(starts) if not _written_before(starts[count], first, _EARLIER_JOB)]
    numbered: list[Attempt] = []
    previous = -1
    for attempt in attempts:
        count = previous + 1
        # A marker written after this run ended is a later run's: this one wrote none (it died
        # before its supervisor got that far).
        if logged and parse_time(attempt.start) is not None and not _written_after(starts[logged[0]], parse_time(attempt.end)):
            count = max(logged.pop(0), count)
            attempt = _as_it_ran(attempt, starts.get(count, {}))
        numbered.append(replace(attempt, restart=count))
        previous = count
    return numbered, logged


def _as_it_ran(attempt: Attempt, marker: Mapping[str, str]) -> Attempt:
    """The run as its start marker tells it. A run that gave nodes back is recorded from then,
    on the nodes left (the node list of a later run it goes on for is that one's): it started
    at its marker's time, on its marker's nodes. A run still going (no end yet) keeps sacct's
    nodes: where it is now."""
    began, start = marker_time(marker.get("time", "")), parse_time(attempt.start)
    if began is not None and start is not None and began < start - _CLOCK_SLACK:
        attempt = replace(attempt, start=_sacct_time(began), elapsed_s=attempt.elapsed_s + _seconds(began, start))
    if marker.get("nodes") and parse_time(attempt.end) is not None:
        attempt = replace(attempt, node_list=marker["nodes"])
    return attempt


def _written_before(marker: Mapping[str, str], when: datetime | None, slack: timedelta) -> bool:
    written = marker_time(marker.get("time", ""))
    return written is not None and when is not None and written < when - slack


def _written_after(marker: Mapping[str, str], when: datetime | None) -> bool:
    written = marker_time(marker.get("time", ""))
    return written is not None and when is not None and written > when + _CLOCK_SLACK


def restart_count(attempts: Sequence[Attempt], index: int) -> int:
    """attempts[index]'s restart count: the one its log tells, else its position."""
    restart = attempts[index].restart
    return restart if restart is not None else index


def started(attempt: Attempt) -> bool:
    """Whether Slurm started the attempt: it has a start time and nodes. A job cancelled in the
    queue has neither, but one cancelled as it was submitted (its --after had already failed)
    has its submit time as start and end in sacct, and still no nodes ("None assigned")."""
    return attempt.start not in ("", "Unknown", "None") and attempt.node_list not in ("", "None assigned")


def _seconds(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds())


def _sacct_time(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


def marker_time(text: str) -> datetime | None:
    """A marker's UTC time (`date -u`) as sacct writes times: local, without a zone."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).astimezone().replace(tzinfo=None)
    except ValueError:
        return None


def split_attempts(lines: Sequence[str]) -> dict[int, list[str]]:
    """Log lines by attempt (restart count), cut at the supervisor's attempt-start markers."""
    return _split_at_markers(lines, "start", "restart")


def split_rounds(lines: Sequence[str]) -> dict[int, list[str]]:
    """An attempt's log lines by round, cut at the supervisor's restart markers (round=N starts N)."""
    return _split_at_markers(lines, "restart", "round")


def _split_at_markers(lines: Sequence[str], event: str, number: str) -> dict[int, list[str]]:
    """Lines by the `number` field of the `event` markers that cut them (0 before the first)."""
    parts: dict[int, list[str]] = {}
    current = 0
    for line in lines:
        marker = parse_attempt_marker(line)
        if marker and marker.get("event") == event and marker.get(number, "").isdigit():
            current = int(marker[number])
            continue
        parts.setdefault(current, []).append(line)
    return parts
