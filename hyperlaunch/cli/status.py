"""`hyperlaunch status`: the user's jobs, what happened to them and how far training got. The
command and its --watch loop; what it shows is laid out in hyperlaunch.cli._status_table (the
list), _status_detail (one job), _sweep_view (a sweep) and _tool_jobs (prepare-data, export)."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._output import out
from hyperlaunch.cli._status_detail import detail, goodput_line, kept_loss_and_goodput, tracker_locations
from hyperlaunch.cli._status_table import table
from hyperlaunch.cli._sweep_view import SweepView

if TYPE_CHECKING:
    from hyperlaunch.runs.job_status import JobStatus
    from hyperlaunch.runs.tool_jobs import ToolJob


_MAX_INTERVAL_S = 86400.0


def _warn_unreadable(paths: list[Path]) -> None:
    """One warning for every record the list skipped (each named once, even with --watch)."""
    if paths:
        shown = ", ".join(str(path) for path in paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
        out.warn(f"skipped {len(paths)} unreadable job record(s): {shown} ('hyperlaunch status JOB' says why)")


def status(
    job_id: Annotated[str | None, typer.Argument(help="One job: show its attempts and step history. A sweep: its elements; one element: 12_3, or the job id its task ran as.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many recent jobs to list (trainings, and prepare-data and export jobs, each).")] = 20,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Only jobs of this model.")] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON document. A loss or throughput that is not finite (a diverged "
            'run) is null there, with "last_loss_non_finite" / "tokens_per_s_non_finite" set '
            'to "nan", "inf" or "-inf".',
        ),
    ] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until interrupted (Ctrl-C).")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes with --watch.")] = 5.0,
) -> None:
    """Your recorded jobs: Slurm state, restarts and why (node failure, preemption, time limit,
    crash), the restart budget left (BUDGET: --max-restarts less the attempts in a row without
    a new checkpoint), nodes, latest checkpoint, last loss and throughput. Under them, your
    prepare-data and export jobs (--slurm): state, and for one that failed, its error.

    \b
    Examples:
      hyperlaunch status                # your recent jobs
      hyperlaunch status 42             # one job: attempts, restarts and why, recent steps
      hyperlaunch status --json         # for scripts
    """
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.runs import jobs, tool_jobs
    from hyperlaunch.runs.status_queries import collect
    from hyperlaunch.runs.sweeps import load_job, sweep_status

    if limit < 1:
        raise InvalidInput(f"--limit must be at least 1, got {limit}")
    if watch and not 0 < interval <= _MAX_INTERVAL_S:  # also refuses nan
        raise InvalidInput(f"--interval must be between 0 and {_MAX_INTERVAL_S} seconds, got {interval}")
    tool = tool_jobs.load(job_id) if job_id is not None else None
    if tool is not None:
        _show_tool_job(tool, as_json=as_json, watch=watch, interval=interval)
        return
    warned: set[Path] = set()

    def gather(unreadable_tools: list[Path]) -> list[JobStatus | SweepView]:
        if job_id is not None:
            records = [load_job(job_id, slurm_env)]
        else:
            found = jobs.recent_jobs(limit=limit, model=model)
            records = found.records
            unreadable = sorted(found.unreadable + unreadable_tools)
            _warn_unreadable([path for path in unreadable if path not in warned])
            warned.update(unreadable)
        if not records:
            return []
        env = slurm_env(records[0].slurm_conf)
        single = iter(collect([r for r in records if r.sweep is None], env=env))
        return [SweepView(sweep_status(r, env=env)) if r.sweep is not None else next(single) for r in records]

    # Imported here: `hyperlaunch --help` imports this module for its docstring.
    from concurrent.futures import ThreadPoolExecutor

    while True:
        from hyperlaunch.core.errors import SlurmError
        from hyperlaunch.runs.tool_status import collect_tools

        found_tools, unreadable_tools = tool_jobs.recent(limit, model=model) if job_id is None else ([], [])
        tools_env = slurm_env(found_tools[0].slurm_conf) if found_tools else None
        # The prepare-data and export jobs' Slurm calls run while the trainings' do.
        with ThreadPoolExecutor(max_workers=1) as pool:
            tools_now = pool.submit(collect_tools, found_tools, env=tools_env)
            statuses = gather(unreadable_tools)
            try:
                tools = tools_now.result()
            except SlurmError as err:  # the trainings are listed all the same
                out.warn(f"prepare-data and export jobs not listed: {err.one_line()}")
                tools = []
        first = statuses[0] if statuses else None
        if as_json and isinstance(first, SweepView) and job_id is not None:
            out.json(first.to_json())
        elif as_json and first is not None and job_id is not None:
            assert not isinstance(first, SweepView)
            ledger = kept_loss_and_goodput(first, functools.partial(collect, env=slurm_env(first.record.slurm_conf)))[1]
            goodput = ledger.to_json() if ledger is not None else None
            out.json({**first.to_json(), "trackers": tracker_locations(first.record.spec), "goodput": goodput})
        elif as_json:
            out.json({"jobs": [s.to_json() for s in statuses], "tool_jobs": [t.to_json() for t in tools]})
        elif first is None and not tools:
            out.text("no recorded jobs (submit one with 'hyperlaunch submit')")
        elif isinstance(first, SweepView) and job_id is not None:
            out.text("\n".join(first.detail()))
        elif job_id is not None:
            assert first is not None and not isinstance(first, SweepView)
            loss, ledger = kept_loss_and_goodput(first, functools.partial(collect, env=slurm_env(first.record.slurm_conf)))
            out.table(*detail(first, loss, goodput_line(ledger, first.record.job_id)))
        else:
            from hyperlaunch.cli import _tool_jobs

            out.text("\n\n".join(([table(statuses)] if statuses else []) + ([_tool_jobs.table(tools)] if tools else [])))
        if not _waited(watch, interval, as_json):
            return


def _waited(watch: bool, interval: float, as_json: bool) -> bool:
    """With --watch: the pause before the next refresh, the screen cleared; False to stop."""
    if not watch:
        return False
    try:
        time.sleep(interval)
    except KeyboardInterrupt:
        return False
    if not as_json and sys.stdout.isatty():
        out.text("\033[2J\033[H", end="")  # clear the screen, cursor home
    return True


def _show_tool_job(tool: ToolJob, *, as_json: bool, watch: bool, interval: float) -> None:
    """`status JOB` for a prepare-data or export job."""
    from hyperlaunch.cli import _tool_jobs
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.runs.tool_status import collect_tools

    while True:
        now = collect_tools([tool], env=slurm_env(tool.slurm_conf))[0]
        if as_json:
            out.json(now.to_json())
        else:
            out.table(*_tool_jobs.detail(now))
        if not _waited(watch, interval, as_json):
            return
