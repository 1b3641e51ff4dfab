"""`hyperlaunch goodput`: where a training's wall time and device-hours went, part by part, and
what each restart cost (hyperlaunch.runs.goodput); as a table, JSON, or a picture (the plot
extra's matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._image import image_format, lineage_title, new_figure, save
from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from hyperlaunch.runs.goodput import Ledger

_COLOURS = {
    "productive": "tab:green", "recomputed": "tab:red", "checkpoint": "tab:blue", "validation": "tab:cyan",
    "export": "tab:olive", "hang": "tab:purple", "detection": "tab:orange", "start-up": "gold",
    "requeue wait": "tab:brown", "queue": "tab:gray", "between jobs": "lightgray", "unaccounted": "black",
}


def goodput(
    job_id: Annotated[str, typer.Argument(help="The job id, or a sweep's element (42_3); the jobs it resumes are counted with it.")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Also draw the timeline and the lost time by cause into this image (.png, .svg or .pdf)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ledger as one JSON document.")] = False,
) -> None:
    """Goodput: the share of a training's wall time that trained steps it kept, and where the
    rest went, in seconds and GPU-hours (the job's GPUs; node-hours on CPU nodes): steps
    recomputed after a rollback, start-up, checkpoint saves, validation, export, hangs,
    detection, the queue and requeue waits. The parts add up to the wall time, from the first
    submission to the end (or now); each restart is a row with what it cost.

    Examples:

    \b
      hyperlaunch goodput 42
      hyperlaunch goodput 42 -o goodput.png
      hyperlaunch goodput 42 --json | jq '.parts.recomputed'
    """
    chosen = image_format(output)
    ledger = _ledger(job_id)
    if output is not None and chosen is not None:
        _write_image(ledger, output, chosen)
    if as_json:
        out.json({"job_id": job_id, **({"output": str(output)} if output else {}), **ledger.to_json()})
        return
    out.table(*_tables(ledger))
    if output is not None:
        out.text(f"wrote {output}")


def _ledger(job_id: str) -> Ledger:
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.runs import jobs
    from hyperlaunch.runs.goodput_sources import ledger_of
    from hyperlaunch.runs.status_queries import collect
    from hyperlaunch.runs.sweeps import load_job

    record = load_job(job_id, slurm_env)
    if record.sweep is not None:
        raise InvalidInput(f"job {job_id} is a sweep: each element has its own ledger; name one, e.g. hyperlaunch goodput {job_id}_{record.sweep.runs[0]}")
    return ledger_of(
        record,
        lambda earlier: load_job(earlier, slurm_env) if "_" in earlier else jobs.load(earlier),
        lambda records: collect(list(records), env=slurm_env(record.slurm_conf)),
    )


def _duration(seconds: float) -> str:
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _tables(ledger: Ledger) -> list[object]:
    from rich.table import Table

    from hyperlaunch.runs.restart_causes import cut

    unit = f"{ledger.device_unit}-h"
    title = f"{lineage_title(ledger.job_ids)}: {ledger.summary()}; wall {_duration(ledger.wall_s)} on {ledger.devices} {ledger.device_unit}{'' if ledger.devices == 1 else 's'}"
    parts = Table(box=None, header_style="bold")
    for header in ("part", "time", unit, "share"):
        parts.add_column(header, justify="left" if header == "part" else "right")
    for part, seconds in ledger.seconds.items():
        if seconds > 0 or part == "productive":
            share = seconds / ledger.wall_s if ledger.wall_s else 0.0
            parts.add_row(part, _duration(seconds), f"{ledger.device_hours(seconds):.3f}", f"{share * 100:.1f} %")
    tables: list[object] = [title, parts]
    if ledger.restarts:
        restarts = Table(title="restarts", title_justify="left", box=None, header_style="bold")
        for header in ("job", "attempt", "round", "cause", "lost", unit, "steps recomputed", "where the time went"):
            restarts.add_column(header)
        for r in ledger.restarts:
            where = ", ".join(f"{part} {s:.1f} s" for part, s in sorted(r.seconds.items(), key=lambda item: -item[1]))
            restarts.add_row(
                r.job_id, str(r.attempt), str(r.round), cut(r.cause, 90), f"{r.lost_s:.1f} s", f"{ledger.device_hours(r.lost_s):.3f}",
                str(r.steps_recomputed), where,
            )
        tables.append(restarts)
    return tables


def _write_image(ledger: Ledger, path: Path, chosen_format: str) -> None:
    """A timeline with each part coloured and the restarts marked, above a bar of the
    device-hours of each part; written whole or not at all."""
    figure = new_figure((14, 6), f"{lineage_title(ledger.job_ids)}: {ledger.summary()}")
    timeline, causes = figure.subplots(2, 1, height_ratios=(1, 2))
    for span in ledger.timeline:
        timeline.barh(0, span.end - span.start, left=span.start - ledger.start, color=_COLOURS[span.part], height=0.8)
    for r in ledger.restarts:
        timeline.axvline(r.at - ledger.start, color="black", linestyle=":", linewidth=1)
    timeline.set_yticks([])
    timeline.set_xlabel("seconds since the first submission")
    timeline.set_xlim(0, max(ledger.wall_s, 1.0))
    shown = [(part, seconds) for part, seconds in ledger.seconds.items() if seconds > 0]
    causes.barh([part for part, _ in shown], [ledger.device_hours(s) for _, s in shown], color=[_COLOURS[p] for p, _ in shown])
    causes.invert_yaxis()
    causes.set_xlabel(f"{ledger.device_unit}-hours")
    save(figure, path, chosen_format)
