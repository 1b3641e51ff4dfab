"""`hyperlaunch logs` and `hyperlaunch cancel`."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from hyperlaunch.cli._output import out


def _attempt_header(marker: dict[str, str]) -> str:
    """The line before an attempt's output, numbered by restart count as `status JOB`'s `#`
    column and `logs --attempt` are (0: the first run)."""
    restart = int(marker.get("restart", "0") or 0)
    where = marker.get("nodes", "")
    return f"===== attempt {restart} on {where} at {marker.get('time', '?')} ====="


def _attempt_footer(marker: dict[str, str], job_id: str) -> str | None:
    """For an attempt that failed: how it ended, and where its error output is (stdout holds
    the steps; the trainer's errors and tracebacks go to the .err file)."""
    from hyperlaunch.core.protocol import cause_text
    from hyperlaunch.core.trainer_failures import SCRIPT_FAILURE_KINDS

    exit_code, restart = marker.get("exit", "0"), marker.get("restart", "0")
    if exit_code == "0" or not restart.isdigit():
        return None
    kind = marker.get("kind", "")
    if kind in SCRIPT_FAILURE_KINDS:  # a user's script's own error, not the bundled trainer's
        cause = f"script error, {kind}"
    else:
        cause = cause_text(marker.get("cause", "")) + (f", {kind}" if kind else "")
    return f"===== attempt {restart} ended: {cause} (exit {exit_code}); its errors: hyperlaunch logs {job_id} --err --attempt {restart} ====="


class Attempts:
    """A training's log as it is read, in one piece or in chunks as it grows (`-f`): a header
    before each attempt (`annotated`) and, after one that failed, a line saying how and where its
    errors are (`footers`: the .out file's); with `attempt`, only that attempt's lines. It
    remembers which attempt the last chunk ended in."""

    def __init__(self, attempt: int | None = None, job_id: str = "JOB", *, annotated: bool = True, footers: bool = True) -> None:
        self.attempt, self.job_id, self.annotated, self.footers = attempt, job_id, annotated, footers
        self.current: int | None = None
        self.seen: list[int] = []

    def feed(self, lines: list[str]) -> list[str]:
        from hyperlaunch.core.protocol import parse_attempt_marker

        shown: list[str] = []
        for line in lines:
            marker = parse_attempt_marker(line)
            if marker and marker.get("event") == "start":
                self.current = int(marker.get("restart", "0") or 0)
                if self.current not in self.seen:
                    self.seen.append(self.current)
                if self.attempt is None or self.current == self.attempt:
                    shown.append(_attempt_header(marker) if self.annotated else line)
                continue
            if self.attempt is None or self.current == self.attempt:
                shown.append(line)
                ended = marker is not None and marker.get("event") == "end" and self.annotated and self.footers
                footer = _attempt_footer(marker, self.job_id) if marker is not None and ended else None
                if footer:
                    shown.append(footer)
        return shown


def annotate(lines: list[str], attempt: int | None = None, job_id: str = "JOB") -> list[str]:
    """The log with a header before each attempt, and after one that failed a line saying how;
    with `attempt`, only that attempt's lines."""
    return Attempts(attempt, job_id).feed(lines)


def logs(
    job_id: Annotated[
        str | None,
        typer.Argument(help="The job id; a sweep's element: 12_3, or the job id its task ran as [default: the newest recorded training].", show_default=False),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing as the log grows, until the job ends.")] = False,
    attempt: Annotated[int | None, typer.Option("--attempt", "-a", min=0, help="Only this attempt, by restart count as `status JOB` numbers it (0 = first run); with --err too.")] = None,
    err: Annotated[bool, typer.Option("--err", help="Show the .err file instead of .out.")] = False,
) -> None:
    """Print a job's log, every attempt of it, each under a header naming the attempt. A
    prepare-data or export job (--slurm) has one log, its output and errors together.

    \b
    Examples:
      hyperlaunch logs                  # the newest training's
      hyperlaunch logs 42 -f            # follow it while it runs
      hyperlaunch logs 42 --attempt 2   # the third attempt only (restart count 2)
    """
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.core.errors import InvalidInput, JobNotFound
    from hyperlaunch.core.protocol import read_regular_file
    from hyperlaunch.runs import tool_jobs
    from hyperlaunch.runs.sweeps import load_job
    from hyperlaunch.slurm import queue as slurm_queue

    if job_id is None:
        from hyperlaunch.runs.launch import newest_record

        job_id = newest_record(None).job_id
        out.note(f"no job named: the newest recorded training, job {job_id}")
    tool = tool_jobs.load(job_id)
    if tool is not None:
        if err or attempt is not None:
            raise InvalidInput(f"--err and --attempt are for trainings: {tool.kind} job {job_id} has one log, its output and errors together")
        path, slurm_conf = Path(tool.log), tool.slurm_conf
    else:
        record = load_job(job_id, slurm_env)
        if record.sweep is not None:
            raise InvalidInput(f"job {job_id} is a sweep: each element has its own log; name one, e.g. hyperlaunch logs {job_id}_{record.sweep.runs[0]}")
        out_path, err_path = record.log_paths
        path, slurm_conf = (err_path if err else out_path), record.slurm_conf
    # Read only as a regular file: a folder or a FIFO under the log's name is no log.
    content = read_regular_file(path)
    if content is None and not follow:
        if os.path.lexists(path):
            raise JobNotFound(f"job {job_id}'s log {path} is not a readable file")
        raise JobNotFound(f"job {job_id} has no log yet at {path}", hint="it may still be pending; try -f")

    # The .err file carries the markers too: the same headers, but no footer pointing at itself;
    # a tool's log has none.
    attempts = Attempts(attempt, job_id, footers=not err)

    def shown(lines: list[str]) -> list[str]:
        return lines if tool is not None else attempts.feed(lines)

    def refuse_missing_attempt() -> None:
        if attempt is None or attempt in attempts.seen:
            return
        known = ", ".join(map(str, attempts.seen))
        raise InvalidInput(
            f"job {job_id} has no attempt {attempt}: " + (f"its log has attempt(s) {known}" if known else "its log names no attempt yet")
            + f" (numbered by restart count, as `hyperlaunch status {job_id}` does)"
        )

    data = content or b""
    # Followed, only whole lines are read: a line still being written (a marker cut in two, a
    # UTF-8 character split) waits for its end; a progress bar's `\r` ends one too.
    position = _whole_lines_end(data) if follow else len(data)
    for line in shown(_lines(data[:position])):
        out.text(line)
    if not follow:
        refuse_missing_attempt()
        return
    env = slurm_env(slurm_conf)
    try:
        while True:
            data = read_regular_file(path) or b""
            end = _whole_lines_end(data)
            if end > position:
                chunk, position = data[position:end], end
                for line in shown(_lines(chunk)):
                    out.text(line)
                sys.stdout.flush()
            elif not slurm_queue.queue_state(job_id, env=env):
                data = read_regular_file(path) or b""  # what it wrote before it ended, this last time
                for line in shown(_lines(data[position:])):  # the rest, a last line without its newline too
                    out.text(line)
                refuse_missing_attempt()
                return
            time.sleep(1)
    except KeyboardInterrupt:
        return


def _whole_lines_end(data: bytes) -> int:
    """Where the last whole line of `data` ends: after its last `\n` or `\r`."""
    return max(data.rfind(b"\n"), data.rfind(b"\r")) + 1


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines()


def cancel(job_id: Annotated[str, typer.Argument(help="The job id, or a sweep's element (JOB_N, or the job id its task ran as).")]) -> None:
    """Cancel a job (scancel): a sweep's every element, or one (42_3). Its checkpoints stay:
    'hyperlaunch resume JOB' continues it (a sweep: the elements that did not complete). A job
    that already ended is said to have, and left as it is.

    \b
    Examples:
      hyperlaunch cancel 42
      hyperlaunch cancel 42_3          # element 3 of sweep 42
    """
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.runs import tool_jobs
    from hyperlaunch.runs.sweeps import split_task

    tool = tool_jobs.load(job_id)
    if tool is not None:
        if _cancelled(job_id, f"{tool.kind} job {job_id}", slurm_env(tool.slurm_conf)):
            out.text(f"cancelled {tool.kind} job {job_id}: {tool.what}")
        return
    record, index = split_task(job_id, slurm_env)
    task = f"{record.job_id}_{index}" if index is not None else job_id  # 12_3 also when named by its own job id
    what = f"element {task} of sweep {record.job_id}" if index is not None else f"{'sweep' if record.sweep else 'job'} {job_id}"
    if _cancelled(task, what, slurm_env(record.slurm_conf)):
        out.text(f"cancelled {what}; resume it with: hyperlaunch resume {task}")


def _cancelled(job_id: str, what: str, env: dict[str, str]) -> bool:
    """scancel the job while Slurm has it queued or running (a sweep: any element of it); else
    say that it already ended (scancel says nothing then, and exits 0)."""
    from hyperlaunch.core.slurm_states import ACTIVE_STATES
    from hyperlaunch.slurm import queue as slurm_queue

    listed = slurm_queue.queue_listing(job_id, env=env)
    if not any(state in ACTIVE_STATES for state in listed):
        out.text(f"{what} already ended{f' ({listed[0]})' if listed else ''}: nothing to cancel")
        return False
    slurm_queue.cancel(job_id, env=env)
    return True
