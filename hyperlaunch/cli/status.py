"""`hyperlaunch status`: the user's jobs, what happened to them and how far training got."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hyperlaunch.cli._output import aligned, out, sacct_cell
from hyperlaunch.cli._output import elapsed as _elapsed
from hyperlaunch.cli._waiting import (
    held_cell,
    never_runs_cell,
    pending_cell,
    pending_line,
    pending_reason_cell,
    waiting_lines,
)

if TYPE_CHECKING:
    from hyperlaunch.job.spec import JobSpec
    from hyperlaunch.runs.curves import Point
    from hyperlaunch.runs.job_status import JobStatus
    from hyperlaunch.runs.jobs import JobRecord
    from hyperlaunch.runs.sweeps import ElementStatus, SweepStatus
    from hyperlaunch.runs.tool_jobs import ToolJob


_MAX_INTERVAL_S = 86400.0


def _warn_unreadable(paths: list[Path]) -> None:
    """One warning for every record the list skipped (each named once, even with --watch)."""
    if paths:
        shown = ", ".join(str(path) for path in paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
        out.warn(f"skipped {len(paths)} unreadable job record(s): {shown} ('hyperlaunch status JOB' says why)")


def _restarts_cell(status: JobStatus) -> str:
    # Restarts inside an allocation and through the queue alike: both restarted the trainers.
    # In the order `plot` marks them (one home for it).
    from hyperlaunch.runs.curves import ordered_restarts

    every = ordered_restarts(status)
    if not every:
        return "0"
    # How many and the last cause: every cause is in `status JOB`, and a job restarted a dozen
    # times would stretch the row past any terminal.
    return f"{len(every)}{': ' if len(every) == 1 else ', last: '}{every[-1].describe(limit=_CELL_DETAIL)}"


def _budget_cell(status: JobStatus) -> str:
    """What is left of --max-restarts, `left/allowed`; `-` where a failure no restart fixes
    ended the job (as `status JOB` says: the budget was never the question)."""
    budget = status.budget
    if budget is None or (status.failure is not None and status.failure.final):
        return "-"
    return f"{budget.left}/{budget.allowed}"


def _number(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


_CELL_DETAIL = 60
"""Characters of a failure's detail the list shows (a trainer's message can run to 500)."""


def _state_cell(status: JobStatus, limit: int | None = _CELL_DETAIL) -> str:
    if status.blocker is not None:
        return never_runs_cell(status.state, status.blocker)
    if status.failure is not None and status.state != "COMPLETED":
        return f"{status.state} ({status.failure.describe(limit=limit)})"
    return held_cell(status, limit) or status.state


_COLUMNS = ("JOB", "MODEL", "NODES", "STATE", "RESTARTS", "BUDGET", "NODELIST", "CKPT", "STEP", "LOSS", "TOK/S", "ELAPSED")


def _table(statuses: Sequence[JobStatus | SweepView]) -> str:
    """One line per job in plain aligned columns, as squeue prints them (rich's table took
    0.1 s of a 0.5 s `status` to import and lay out); a sweep is one line (`status JOB` opens it)."""
    rows: list[tuple[str, ...]] = [_COLUMNS]
    for s in statuses:
        if isinstance(s, SweepView):
            rows.append(s.row())
            continue
        p = s.progress
        rows.append((
            s.record.job_id,
            s.record.spec.job.model or s.record.spec.derived.checkpoint_name,
            str(s.record.spec.job.nodes),
            _state_cell(s),
            _restarts_cell(s),
            _budget_cell(s),
            s.nodes or "-",
            _number(p.checkpoint_step, "d"),
            _number(p.last_step, "d"),
            _number(p.last_loss, ".4f"),
            _number(p.tokens_per_s, ".0f"),
            _elapsed(s.elapsed_s),
        ))
    return "\n".join(aligned(rows))


@dataclass(frozen=True)
class SweepView:
    """A sweep as `status` shows it: one row in the list, its elements in `status JOB`."""

    now: SweepStatus

    @property
    def record(self) -> JobRecord:
        return self.now.record

    def row(self) -> tuple[str, ...]:
        spec, ran = self.record.spec, [m.status for m in self.now.members if m.status is not None]
        steps = [s.progress.last_step for s in ran if s.progress.last_step is not None]
        restarts = sum(len(s.restarts) + len(s.in_allocation) for s in ran)
        return (
            self.record.job_id, f"{spec.job.model or spec.derived.checkpoint_name} sweep x{len(self.now.members)}", str(spec.job.nodes),
            self.now.summary, str(restarts), "-", "-", "-",
            f"{min(steps)}-{max(steps)}" if steps else "-", "-", "-", _elapsed(max((s.elapsed_s for s in ran), default=0)),
        )

    def _element_state(self, m: ElementStatus) -> str:
        """An element's state cell: its job's, or, before it started, the sweep's reason."""
        if self.now.blocker is not None:
            return never_runs_cell(m.state, self.now.blocker)
        if m.status is not None:
            return _state_cell(m.status)
        if m.state == "CANCELLED":
            return "CANCELLED (before it started)"
        if m.state == "PENDING" and self.now.waits_for:
            return pending_cell(self.now.waits_for)
        if m.pending_reason:
            return pending_reason_cell(m.pending_reason, _CELL_DETAIL)
        return m.state

    def detail(self) -> list[str]:
        spec, sweep = self.record.spec, self.record.sweep
        assert sweep is not None
        lines = [
            f"sweep {self.record.job_id}: {len(self.now.members)} x {spec.what} on {spec.nodes_text} each, {self.now.summary}",
            f"  array:      --array={sweep.array}",
            f"  checkpoints: {spec.output.checkpoint_dir}",
        ]
        if self.record.resumed_from:
            lines.append(f"  resumes sweep {self.record.resumed_from}")
        if self.now.never_runs:
            lines.append(f"  never runs: {self.now.never_runs}")
        elif self.now.waiting:
            waited = ", ".join(f"job {d.job} ({'to complete' if d.kind == 'ok' else 'to end'}; {d.state})" for d in self.now.waits_for)
            lines.append(f"  waits for:  {waited}")
        if not self.now.waiting:
            lines += pending_line(sorted({m.pending_reason for m in self.now.members if m.pending_reason}))
        header = ("ELEMENT", "NAME", "STATE", "JOB", "STEP", "LOSS", "BEST VAL", "RESTARTS")
        rows = [header]
        for m in self.now.members:
            p = m.status.progress if m.status is not None else None
            rows.append((
                m.task, m.name, self._element_state(m),
                m.status.record.job_id if m.status is not None else "-",
                _number(p.last_step if p else None, "d"), _number(p.last_loss if p else None, ".4f"),
                _number(m.best_val_loss, ".4f"), str(len(m.status.restarts) + len(m.status.in_allocation)) if m.status else "0",
            ))
        lines += aligned(rows, indent="  ")
        lines.append(f"  one element: hyperlaunch status {self.record.job_id}_N, hyperlaunch logs {self.record.job_id}_N")
        return lines

    def to_json(self) -> dict[str, Any]:
        spec, sweep = self.record.spec, self.record.sweep
        assert sweep is not None
        return {
            "job_id": self.record.job_id,
            "sweep": True,
            "model": spec.job.model,
            "name": spec.derived.checkpoint_name,
            "state": self.now.state,
            "summary": self.now.summary,
            "array": sweep.array,
            "nodes": spec.job.nodes,
            "checkpoint_dir": spec.output.checkpoint_dir,
            "submitted_at": self.record.submitted_at,
            "resumed_from_job": self.record.resumed_from,
            "waits_for": [d.__dict__ for d in self.now.waits_for],
            "never_runs": self.now.never_runs,
            "elements": [m.to_json() for m in self.now.members],
        }


_SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
_SPARK_CELLS = 40


def sparkline(values: Sequence[float], cells: int = _SPARK_CELLS) -> str:
    """`values` as a row of at most `cells` blocks, each the mean of its share of them, the
    lowest ▁ and the highest █. Eight characters need no library."""
    count = min(cells, len(values))
    means = [fmean(values[i * len(values) // count : (i + 1) * len(values) // count]) for i in range(count)]
    low, span = min(means, default=0.0), max(means, default=0.0) - min(means, default=0.0)
    top = len(_SPARK_BLOCKS) - 1
    return "".join(_SPARK_BLOCKS[round((m - low) / span * top) if span else top // 2] for m in means)


def _loss_line(loss: Sequence[Point]) -> str | None:
    """The kept loss curve in one line (the finite values: a diverged step has no height)."""
    from hyperlaunch.runs.curves import finite

    shown = finite(loss)
    if not shown:
        return None
    first, last = shown[0], shown[-1]
    return f"  loss:       {sparkline([p.value for p in shown])} {first.value:.2f} → {last.value:.2f} (steps {first.step}-{last.step})"


def _kept_loss(record: JobRecord) -> tuple[Point, ...]:
    """The loss the training kept, across this job and the jobs it resumes (as `plot` draws it)."""
    from hyperlaunch.runs import curves, jobs

    lineage = curves.lineage(record, jobs.load)
    return curves.kept_curves(curves.read_records(lineage.metrics_paths), lineage.job_ids).loss


def tracker_locations(spec: JobSpec) -> dict[str, dict[str, str | None]]:
    """Where each of the job's experiment trackers keeps its run: what the job wrote once the
    run was open, else what the spec knows from submit (W&B: only the run id)."""
    from hyperlaunch.core import trackers

    written = trackers.read_locations(Path(spec.output.run_dir))
    found: dict[str, dict[str, str | None]] = {}
    for name in spec.output.tracker:
        if name == trackers.TENSORBOARD:
            folder = written.get(name) or spec.output.tensorboard_dir or str(Path(spec.output.run_dir) / "tensorboard")
            found[name] = {"where": folder, "command": f"tensorboard --logdir {shlex.quote(folder)}"}
        elif name == trackers.MLFLOW:
            found[name] = {"where": written.get(name) or _mlflow_run(spec), "run_id": spec.derived.mlflow_run_id}
        elif name == trackers.WANDB:
            found[name] = {"where": written.get(name), "run_id": spec.derived.tracker_run_id}
    return found


def _mlflow_run(spec: JobSpec) -> str:
    from hyperlaunch.core.trackers import mlflow_run_url

    uri = spec.output.mlflow_uri or "-"
    if spec.derived.mlflow_run_id and spec.derived.mlflow_experiment_id:
        return mlflow_run_url(uri, spec.derived.mlflow_experiment_id, spec.derived.mlflow_run_id)
    return f"{uri} run {spec.derived.mlflow_run_id}" if spec.derived.mlflow_run_id else uri


def _tracker_lines(locations: dict[str, dict[str, str | None]], *, trained: bool = False, job_id: str = "") -> list[str]:
    """A line per tracker; where the job has trained steps and a W&B run never said where it
    is, the run did not open (no API key on the nodes, say): the log says why."""
    from hyperlaunch.core.trackers import WANDB

    lines = []
    for name, run in locations.items():
        shown = run["where"] or f"run id {run.get('run_id') or '-'}"
        if trained and not run["where"] and name == WANDB:
            shown += f", not opened: the reason is in 'hyperlaunch logs {job_id}'"
        if run.get("command"):
            shown += f" ({run['command']})"
        lines.append(f"  {(name + ':').ljust(11)} {shown}")
    return lines


def _detail(status: JobStatus, loss: Sequence[Point] = ()) -> list[Any]:
    from rich.table import Table

    from hyperlaunch.job import trainer_args as targs

    spec, p = status.record.spec, status.progress
    element = status.record.element_of
    values = ", ".join(f"{key}={value}" for key, value in status.record.element_values)
    lines: list[Any] = [
        f"job {status.record.job_id}: {spec.what} on {spec.nodes_text}, {_state_cell(status, limit=None)}",
        *([f"  element:    {element} of sweep {element.split('_')[0]}" + (f": {values}" if values else "")] if element else []),
        f"  checkpoint: {p.checkpoint or '-'} in {spec.output.checkpoint_dir}"
        if spec.saves_checkpoints else f"  checkpoint: none kept ({targs.NO_CHECKPOINTS})",
        f"  last step:  {_number(p.last_step, 'd')}  loss {_number(p.last_loss, '.4f')}  tokens/s {_number(p.tokens_per_s, '.0f')}",
        *filter(None, [_loss_line(loss)]),
        f"  log:        {status.record.log_paths[0]}",
        *_tracker_lines(tracker_locations(spec), trained=p.last_step is not None, job_id=status.record.job_id),
    ]
    if spec.derived.code_dir is not None:
        from hyperlaunch.job.code_snapshot import describe_dir

        lines.append(f"  code:       {describe_dir(Path(spec.derived.code_dir))}")
    source = dict(status.record.decided).get("instance_type")
    lines.append(f"  instance:   {spec.cluster.instance_type}" + (f" ({source})" if source else ""))
    if status.budget is not None:
        b = status.budget
        failure = status.failure
        if failure is not None and failure.final:
            # A failure no restart fixes ended it: the budget it had left was never the question.
            lines.append(
                f"  restarts:   none: a {failure.label} ends the job whatever --max-restarts allows; {b.windows} attempt(s) ran"
            )
        else:
            lines.append(
                f"  restarts:   budget left {b.left} of {b.allowed} (--max-restarts); {b.windows} attempt(s) ran"
                + (f", the last {b.failures} without a new checkpoint" if b.failures else "")
            )
    if status.record.resumed_from:
        earlier = status.record.resumed_from
        lines.append(f"  resumes {'element' if '_' in earlier else 'job'} {earlier}")
    lines += waiting_lines(status)
    if p.resumed_from_steps:
        lines.append(f"  trainer resumed from step(s): {', '.join(map(str, p.resumed_from_steps))}")
    if p.export_error:
        lines.append(f"  export:     not written, the training is saved: {p.export_error}")
    from hyperlaunch.runs.attempts import restart_count

    attempts = Table(title="attempts", box=None, header_style="bold", title_justify="left")
    for column in ("#", "STATE", "NODES", "START", "END", "ELAPSED", "WHY IT ENDED"):
        attempts.add_column(column, overflow="fold")
    causes = {r.attempt: r.describe() for r in status.restarts}
    if status.failure is not None:
        causes[status.failure.attempt] = status.failure.describe()
    for index, attempt in enumerate(status.attempts):
        count = restart_count(status.attempts, index)  # as `logs --attempt N` names it
        attempts.add_row(
            str(count), attempt.state, sacct_cell(attempt.node_list), sacct_cell(attempt.start), sacct_cell(attempt.end),
            _elapsed(attempt.elapsed_s), causes.get(count, "-" if attempt.state != "COMPLETED" else "completed"),
        )
    lines.append(attempts)
    if status.in_allocation:
        inside = Table(title="restarts inside the allocation", box=None, header_style="bold", title_justify="left")
        for column in ("ATTEMPT", "ROUND", "WHY THE ROUND BEFORE ENDED"):
            inside.add_column(column, overflow="fold")
        for restart in status.in_allocation:
            inside.add_row(str(restart.attempt), str(restart.round), f"{restart.cause} ({restart.detail})" if restart.detail else restart.cause)
        lines.append(inside)
    if status.steps:
        steps = Table(title="recent steps", box=None, header_style="bold", title_justify="left")
        for column in ("STEP", "LOSS", "LR", "TOK/S"):
            steps.add_column(column)
        for item in status.steps[-10:]:
            steps.add_row(str(item.step), _number(item.loss, ".4f"), _number(item.lr, ".3e"), _number(item.tokens_per_s, ".0f"))
        lines.append(steps)
    return lines


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
            out.json({**first.to_json(), "trackers": tracker_locations(first.record.spec)})
        elif as_json:
            out.json({"jobs": [s.to_json() for s in statuses], "tool_jobs": [t.to_json() for t in tools]})
        elif first is None and not tools:
            out.text("no recorded jobs (submit one with 'hyperlaunch submit')")
        elif isinstance(first, SweepView) and job_id is not None:
            out.text("\n".join(first.detail()))
        elif job_id is not None:
            assert first is not None and not isinstance(first, SweepView)
            out.table(*_detail(first, _kept_loss(first.record)))
        else:
            from hyperlaunch.cli import _tool_jobs

            out.text("\n\n".join(([_table(statuses)] if statuses else []) + ([_tool_jobs.table(tools)] if tools else [])))
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
