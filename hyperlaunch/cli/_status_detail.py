"""`status JOB` for a training job: what it runs and where, its checkpoint and last step, the
kept loss as a sparkline, where its experiment trackers keep the run, the restart budget, and
tables of its attempts, its restarts inside the allocation and its recent steps."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperlaunch.cli._output import elapsed as _elapsed
from hyperlaunch.cli._output import sacct_cell
from hyperlaunch.cli._status_cells import number, state_cell
from hyperlaunch.cli._waiting import waiting_lines

if TYPE_CHECKING:
    from hyperlaunch.job.spec import JobSpec
    from hyperlaunch.runs.curves import Point
    from hyperlaunch.runs.goodput import Ledger
    from hyperlaunch.runs.job_status import JobStatus
    from hyperlaunch.runs.jobs import JobRecord


_SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
_SPARK_CELLS = 40


def sparkline(values: Sequence[float], cells: int = _SPARK_CELLS) -> str:
    """`values` as a row of at most `cells` blocks, each the mean of its share of them, the
    lowest ▁ and the highest █. Eight characters need no library."""
    # Imported here: `hyperlaunch --help` imports this module through status's.
    from statistics import fmean

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


def kept_loss_and_goodput(
    status: JobStatus, statuses_of: Callable[[Sequence[JobRecord]], Sequence[JobStatus]]
) -> tuple[tuple[Point, ...], Ledger | None]:
    """The loss the training kept, across this job and the jobs it resumes (as `plot` draws it),
    and its goodput ledger, from one read of the lineage's metrics. No ledger before a step is
    logged, nor where the lineage's files or Slurm cannot be read."""
    from hyperlaunch.core.errors import HyperlaunchError
    from hyperlaunch.runs import curves, jobs
    from hyperlaunch.runs.goodput_sources import lineage_ledger

    lineage = curves.lineage(status.record, jobs.load)
    records = curves.read_records(lineage.metrics_paths)
    loss = curves.kept_curves(records, lineage.job_ids).loss

    def lineage_statuses(lineage_records: Sequence[JobRecord]) -> Sequence[JobStatus]:
        alone = [r.job_id for r in lineage_records] == [status.record.job_id]
        return [status] if alone else statuses_of(lineage_records)  # the job alone: asked of Slurm already

    try:
        ledger = lineage_ledger(status.record, lineage, records, lineage_statuses)
    except (HyperlaunchError, OSError):
        return loss, None
    return loss, ledger if ledger.seconds.get("productive") else None


def goodput_line(ledger: Ledger | None, job_id: str) -> str | None:
    """`  goodput:    91.2 % (lost 0.31 GPU-h: 3 restarts); where the rest went: ...`."""
    if ledger is None:
        return None
    return f"  goodput:    {ledger.summary().partition(': ')[2]}; where the rest went: hyperlaunch goodput {job_id}"


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


def detail(status: JobStatus, loss: Sequence[Point] = (), goodput: str | None = None) -> list[Any]:
    from rich.table import Table

    from hyperlaunch.job import trainer_args as targs

    spec, p = status.record.spec, status.progress
    element = status.record.element_of
    values = ", ".join(f"{key}={value}" for key, value in status.record.element_values)
    lines: list[Any] = [
        f"job {status.record.job_id}: {spec.what} on {spec.nodes_text}, {state_cell(status, limit=None)}",
        *([f"  element:    {element} of sweep {element.split('_')[0]}" + (f": {values}" if values else "")] if element else []),
        (f"  checkpoint: {p.checkpoint} (step {p.checkpoint_step})" if p.checkpoint and os.path.isabs(p.checkpoint)
         else f"  checkpoint: {p.checkpoint or '-'} in {spec.output.checkpoint_dir}")
        if spec.saves_checkpoints else f"  checkpoint: none kept ({targs.NO_CHECKPOINTS})",
        f"  last step:  {number(p.last_step, 'd')}  loss {number(p.last_loss, '.4f')}  tokens/s {number(p.tokens_per_s, '.0f')}",
        *filter(None, [_loss_line(loss), goodput]),
        f"  log:        {status.record.log_paths[0]}",
        *_tracker_lines(tracker_locations(spec), trained=p.last_step is not None, job_id=status.record.job_id),
    ]
    if spec.derived.code_dir is not None:
        from hyperlaunch.job.code_snapshot import describe_dir

        lines.append(f"  code:       {describe_dir(Path(spec.derived.code_dir))}")
        lines.append(f"  runs in:    {spec.work_dir}")
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
        memory = p.resumed_from_memory or (False,) * len(p.resumed_from_steps)
        resumes = [f"{step} (memory snapshot)" if restored else str(step) for step, restored in zip(p.resumed_from_steps, memory, strict=True)]
        lines.append(f"  trainer resumed from step(s): {', '.join(resumes)}")
    if p.export_error:
        lines.append(f"  export:     not written, the training is saved: {p.export_error}")
    for aside in status.set_aside:
        lines.append(f"  set aside:  {aside.path.name}: {aside.reason}")
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
            steps.add_row(str(item.step), number(item.loss, ".4f"), number(item.lr, ".3e"), number(item.tokens_per_s, ".0f"))
        lines.append(steps)
    return lines
