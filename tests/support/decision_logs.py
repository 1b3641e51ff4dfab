"""A job's log as its supervisor's decision records would tell it: the end and restart markers
of the stdout log, with the error line and failed task's code of each round read from the error
log, written as decision records (hyperlaunch.core.decision_records) and taken out of the logs.
`status` must say the same from either: the records are what it reads first."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from hyperlaunch.core.decision_records import END, RESTART, DecisionRecord, append_decision, decisions_path
from hyperlaunch.core.error_lines import root_error_line, task_exit_code
from hyperlaunch.core.protocol import parse_attempt_marker
from hyperlaunch.runs.attempts import split_attempts, split_rounds
from hyperlaunch.runs.jobs import JobRecord

_STRUCTURED = ("event", "restart", "job", "exit", "cause", "action", "time", "round", "nodes", "spare")


def as_decision_record(marker: dict[str, str], err_lines: list[str]) -> DecisionRecord:
    """The record the supervisor writes for the decision a marker tells, with the error of the
    round's output (`err_lines`)."""
    round_ = int(marker["round"]) if marker.get("round", "").isdigit() else None
    restart = marker["event"] == "restart"
    return DecisionRecord(
        event=RESTART if restart else END, restart=int(marker["restart"]), cause=marker.get("cause", ""),
        action=marker.get("action", ""), time=marker.get("time", ""),
        exit=int(marker["exit"]) if marker.get("exit", "").isdigit() else 0,
        round=(round_ - 1 if round_ is not None else None) if restart else round_,
        next_round=round_ if restart else None,
        error_line=root_error_line(err_lines), task_exit=task_exit_code(err_lines) or "",
        nodes_out=tuple(filter(None, marker.get("nodes", "").split(","))),
        spare=tuple(filter(None, marker.get("spare", "").split(","))),
        fields={key: value for key, value in marker.items() if key not in _STRUCTURED},
    )


@contextlib.contextmanager
def told_by_decision_records(record: JobRecord) -> Iterator[None]:
    """While inside: the job's logs without their end and restart markers (and without the
    error lines the records carry), the records in its run dir in their place; after it, the
    logs as they were and no records."""
    out_path, err_path = record.log_paths
    out = out_path.read_text() if out_path.exists() else None
    err = err_path.read_text() if err_path.exists() else None
    run_dir = Path(record.spec.output.run_dir)
    made = not run_dir.exists()
    path = decisions_path(run_dir, record.job_id)
    by_attempt = split_attempts((err or "").splitlines())
    kept = []
    for line in (out or "").splitlines(keepends=True):
        marker = parse_attempt_marker(line)
        if marker is None or marker.get("event") not in ("end", "restart") or not marker.get("restart", "").isdigit():
            kept.append(line)
            continue
        attempt_lines = by_attempt.get(int(marker["restart"]), [])
        if marker["event"] == "restart" and marker.get("round", "").isdigit():
            attempt_lines = split_rounds(attempt_lines).get(int(marker["round"]) - 1, [])
        run_dir.mkdir(parents=True, exist_ok=True)
        append_decision(run_dir, record.job_id, as_decision_record(marker, attempt_lines))
    try:
        if out is not None:
            out_path.write_text("".join(kept))
        if err is not None:
            starts = [line for line in err.splitlines(keepends=True) if (parse_attempt_marker(line) or {}).get("event") == "start"]
            err_path.write_text("".join(starts))
        yield
    finally:
        if out is not None:
            out_path.write_text(out)
        if err is not None:
            err_path.write_text(err)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        if made:
            with contextlib.suppress(OSError):
                run_dir.rmdir()  # only where the records were all it held
