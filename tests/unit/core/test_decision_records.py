"""The supervisor's decision records (hyperlaunch.core.decision_records): one JSON line per
decision, written in one append and read back whatever else the file holds."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.core.decision_records import (
    END,
    RESTART,
    DecisionRecord,
    append_decision,
    decisions_path,
    ends_by_attempt,
    read_decisions,
    written_at,
)
from hyperlaunch.core.protocol import format_attempt_marker, parse_attempt_marker

_LOST = DecisionRecord(
    event=RESTART, restart=0, cause="node-failure", action="restart-in-allocation", time="2026-11-28T05:40:01Z", exit=1,
    round=0, next_round=1, nodes_in=("node1", "node2"), nodes_out=("node2",), spare=("node3",),
    failure_seen=1795844400.25, step_stopped=1795844400.75, next_round_started=1795844401.0,
)
_CRASH = DecisionRecord(
    event=END, restart=0, cause="crash", action="requeue", time="2026-11-28T05:41:00Z", exit=1, round=1,
    task_exit="3", error_line="[rank0]: ValueError: bad batch", nodes_in=("node1", "node3"), fields={"failures": "1"},
    failure_seen=1795844459.5, step_stopped=1795844460.0, requeue_asked=1795844460.1,
)


def test_records_read_back_as_written_in_order(tmp_path: Path) -> None:
    for record in (_LOST, _CRASH):
        append_decision(tmp_path, "12", record)
    assert read_decisions(tmp_path, "12") == [_LOST, _CRASH]
    assert read_decisions(tmp_path, "13") == [], "another job's, none"
    assert ends_by_attempt(read_decisions(tmp_path, "12")) == {0: _CRASH}
    assert written_at(_LOST) == 1795844401.0
    assert decisions_path(tmp_path, "12").read_text().count("\n") == 2, "one line each"


def test_a_record_reads_as_the_marker_of_the_same_decision() -> None:
    marker = format_attempt_marker("restart", 0, "12", "round=1 cause=node-failure exit=1 nodes=node2 spare=node3 action=restart-in-allocation", _LOST.time)
    assert _LOST.as_marker() == {k: v for k, v in (parse_attempt_marker(marker) or {}).items() if k != "job"}
    end = format_attempt_marker("end", 0, "12", "exit=1 cause=crash failures=1 round=1 action=requeue", _CRASH.time)
    assert _CRASH.as_marker() == {k: v for k, v in (parse_attempt_marker(end) or {}).items() if k != "job"}


def test_lines_that_are_no_record_are_skipped(tmp_path: Path) -> None:
    append_decision(tmp_path, "12", _LOST)
    with decisions_path(tmp_path, "12").open("a") as handle:
        handle.write('{"event": "end", "restart": 1, "cause": "crash"\n')  # cut by a full disk
        handle.write('[1, 2]\n{"event": "other", "restart": 0, "cause": "c", "action": "a", "time": "t"}\n')
        handle.write('{"event": "end", "restart": -1, "cause": "c", "action": "a", "time": "t"}\nnot json\n')
        handle.write('{"event": "end", "restart": 2, "cause": "crash", "action": "exit", "time": "t", "exit": "x", "nodes_in": "node1", "failure_seen": true}\n')
    found = read_decisions(tmp_path, "12")
    assert found[0] == _LOST and len(found) == 2
    assert (found[1].restart, found[1].exit, found[1].nodes_in, found[1].failure_seen) == (2, 0, (), None), "odd fields: their defaults"
    decisions_path(tmp_path, "13").mkdir()
    assert read_decisions(tmp_path, "13") == [], "a folder in its place is no record"
