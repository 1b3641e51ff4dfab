"""`hyperlaunch plot`: a training's loss and throughput against step and wall time, with its
restarts marked, in the terminal (plotext) or as an image (matplotlib). Both libraries are
the optional `plot` extra and are imported only by the output that needs them."""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hyperlaunch.cli._image import image_format, lineage_title, missing, new_figure, save
from hyperlaunch.cli._output import out

if TYPE_CHECKING:
    from hyperlaunch.runs.curves import Curves, Marker, Point

_PIPED_SIZE = (120, 40)
"""A pipe has no size: the chart's columns and rows there."""
_MARKER_STYLE = {"restart": ("tab:red", "--"), "restart in allocation": ("tab:orange", ":"), "resume": ("tab:green", "-")}


def plot(
    job_id: Annotated[str, typer.Argument(help="The job id, or a sweep's element (42_3, or the job id its task ran as); the jobs it resumes are drawn with it.")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the chart to this image (.png, or .svg/.pdf) instead of drawing it in the terminal."),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the curves and markers as one JSON document (a loss that is not finite is null)."),
    ] = False,
) -> None:
    """Draw a training's loss (and validation loss) and tokens/s against step and against wall
    time, with a line where each restart or resume took over and why (the causes `status`
    shows). The curve is the one training kept: a step an attempt logged and the next one
    logged again after restoring its checkpoint shows the later value; the jobs this one
    resumes are part of it.

    Examples:

    \b
      hyperlaunch plot 42
      hyperlaunch plot 42 -o loss.png
      hyperlaunch plot 43_2                 # element 2 of sweep 43
      hyperlaunch plot 42 --json | jq '.markers[] | "\\(.step) \\(.cause)"'
    """
    chosen = image_format(output)
    found, metrics = _curves(job_id)
    if output is not None and chosen is not None:
        _write_image(found, output, chosen, lineage_title(found.job_ids))
    if as_json:
        out.json({"job_id": job_id, "metrics": [str(p) for p in metrics], **({"output": str(output)} if output else {}), **found.to_json()})
    elif output is not None:
        out.text(f"wrote {output}")
    else:
        out.text(_terminal_chart(found, lineage_title(found.job_ids)))


def _curves(job_id: str) -> tuple[Curves, tuple[Path, ...]]:
    """The job's kept curves with its lineage's markers, and the metrics files they came from."""
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.core.errors import InvalidInput, JobNotFound
    from hyperlaunch.runs import curves, jobs
    from hyperlaunch.runs.status_queries import collect
    from hyperlaunch.runs.sweeps import load_job

    record = load_job(job_id, slurm_env)  # 12_3: a sweep's element, as `status` and `logs` take it
    if record.sweep is not None:
        raise InvalidInput(f"job {job_id} is a sweep: each element has its own curves; name one, e.g. hyperlaunch plot {job_id}_{record.sweep.runs[0]}")
    # A resumed sweep's element resumes an element (`12_3`): read as the job its task became.
    lineage = curves.lineage(record, lambda earlier: load_job(earlier, slurm_env) if "_" in earlier else jobs.load(earlier))
    records = curves.read_records(lineage.metrics_paths)
    found = curves.kept_curves(records, lineage.job_ids)
    if not found.loss:
        shown = ", ".join(str(p) for p in lineage.metrics_paths)
        raise JobNotFound(f"job {job_id} has logged no steps yet (metrics: {shown})")
    statuses = collect(list(lineage.records), env=slurm_env(record.slurm_conf))
    return curves.training_curves(records, statuses, lost=lineage.lost), lineage.metrics_paths


def _marker_lines(markers: Sequence[Marker]) -> list[str]:
    """One line a marker, for the terminal, where a chart has no room for the causes."""
    lines = []
    for index, m in enumerate(markers, 1):
        where = f"step {m.step}" if m.step is not None else "not logged yet"
        lines.append(f"  [{index}] {m.kind} at {where} (job {m.job_id}, attempt {m.attempt}, round {m.round}): {m.cause}")
    return lines


# -- image --------------------------------------------------------------------------------


def _write_image(found: Curves, path: Path, chosen_format: str, title: str) -> None:
    """The 2x2 chart into `path`, whole or not at all."""
    figure = new_figure((14, 9), title)
    (loss_step, tps_step), (loss_time, tps_time) = figure.subplots(2, 2)
    for axes, by_time in ((loss_step, False), (loss_time, True)):
        _image_series(axes, found.loss, "loss", found.markers, by_time=by_time)
        _image_series(axes, found.val_loss, "validation loss", found.markers, by_time=by_time, style="o-")
        axes.set_ylabel("loss")
    for axes, by_time in ((tps_step, False), (tps_time, True)):
        _image_series(axes, found.tokens_per_s, "tokens/s", found.markers, by_time=by_time, color="tab:purple")
        axes.set_ylabel("tokens/s")
    for axes in (loss_step, tps_step):
        axes.set_xlabel("step")
        _image_markers(axes, found.markers, by_time=False, labelled=axes is loss_step)
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    for axes in (loss_time, tps_time):
        axes.set_xlabel("wall time")
        _image_markers(axes, found.markers, by_time=True, labelled=axes is loss_time)
        # Short labels at any span, the date once at the axis end: the default writes
        # `20:00.400000` under every tick of a run shorter than a second.
        locator = AutoDateLocator()
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    for axes in (loss_step, tps_step, loss_time, tps_time):
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(loc="upper right", fontsize=8)
    save(figure, path, chosen_format)


def _image_series(
    axes: Any, series: Sequence[Point], label: str, markers: Sequence[Marker], *, by_time: bool, style: str = "-", color: str | None = None
) -> None:
    """One curve; against wall time, broken where the training started again (no line across
    the time it waited)."""
    from hyperlaunch.runs.curves import breaks, finite

    points = [p for p in finite(series) if p.time > 0 or not by_time]  # a diverged step has no height
    if not points:
        return
    xs: list[Any] = [datetime.fromtimestamp(p.time) for p in points] if by_time else [p.step for p in points]
    ys = [p.value for p in points]
    for index in reversed(breaks(points, markers) if by_time else []):
        xs.insert(index, xs[index])
        ys.insert(index, math.nan)  # matplotlib draws no line through a NaN
    axes.plot(xs, ys, style, label=label, color=color, markersize=3, linewidth=1)


def _image_markers(axes: Any, markers: Sequence[Marker], *, by_time: bool, labelled: bool) -> None:
    """A vertical line per marker; on the loss panels, its cause written along it."""
    for m in markers:
        x: Any = (datetime.fromtimestamp(m.time) if m.time is not None else None) if by_time else m.step
        if x is None:
            continue
        color, line = _MARKER_STYLE.get(m.kind, ("gray", "--"))
        axes.axvline(x, color=color, linestyle=line, linewidth=1)
        if labelled:
            axes.annotate(
                f"{m.kind}: {m.cause}", (x, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                color=color, va="top", ha="right", annotation_clip=False,
            )


# -- terminal -----------------------------------------------------------------------------


def _terminal_chart(found: Curves, title: str) -> str:
    """The 2x2 chart as text, in colour on a terminal, plain in a pipe; the markers numbered
    under it (a terminal's vertical lines have no room for words)."""
    try:
        import plotext  # type: ignore[import-untyped]
    except ImportError:
        raise missing("plotext") from None
    tty = sys.stdout.isatty()
    width, height = shutil.get_terminal_size(_PIPED_SIZE) if tty else _PIPED_SIZE
    notes = _marker_lines(found.markers)
    figure = plotext.figure
    figure.clear()
    figure.theme("simple" if tty else "colorless")
    plotext.terminal.limit(width=tty, height=tty)  # a pipe is as large as _PIPED_SIZE says
    figure.subplots(2, 2)
    figure.plot_size(width, max(height - len(notes) - 4, 20))
    start = min((p.time for p in found.loss if p.time > 0), default=0.0)
    unit, seconds = _time_unit(max((p.time for p in found.loss), default=start) - start)
    panels = (
        (1, 1, "loss (. validation) by step", (found.loss, found.val_loss), None),
        (1, 2, "tokens/s by step", (found.tokens_per_s,), None),
        (2, 1, f"loss by {unit} since the first step", (found.loss, found.val_loss), start),
        (2, 2, f"tokens/s by {unit} since the first step", (found.tokens_per_s,), start),
    )
    for row, col, name, series, since in panels:
        sub = figure.subplot(row, col)
        sub.title(name)
        for index, points in enumerate(series):
            _terminal_series(sub, points, found.markers, since, width, seconds, validation=index == 1)
        for m in found.markers:
            x = m.step if since is None else (None if m.time is None else (m.time - since) / seconds)
            if x is not None:
                sub.line(x, orientation="v")
    chart = figure.build().string()
    text = chart if tty else plotext.uncolorize(chart)
    legend = [title, *(["restarts (the vertical lines):", *notes] if notes else [])]
    return "\n".join([text.rstrip("\n"), *legend])


def _time_unit(span_s: float) -> tuple[str, float]:
    """The unit a time axis reads best in for a run of `span_s` seconds, and its length in seconds."""
    if span_s < 180:
        return "seconds", 1.0
    if span_s < 3 * 3600:
        return "minutes", 60.0
    return "hours", 3600.0


def _terminal_series(
    sub: Any, series: Sequence[Point], markers: Sequence[Marker], since: float | None, width: int, seconds: float, *, validation: bool
) -> None:
    """One curve: the points a terminal can show (finite ones, timed ones for a time axis, a
    few per column at most, so a 100,000-step run draws as fast as a short one); validation
    loss as dots, the rest as lines, broken on a time axis where the training started again."""
    from hyperlaunch.runs.curves import breaks, finite

    shown = [p for p in finite(series) if since is None or p.time > 0]
    stride = max(len(shown) // max(width * 2, 1), 1)
    kept = shown[::stride] + ([shown[-1]] if shown and (len(shown) - 1) % stride else [])
    if not kept:
        return
    xs = [float(p.step) if since is None else (p.time - since) / seconds for p in kept]
    signal = sub.signal(xs, [p.value for p in kept], marker="dot" if validation else None)
    if not validation:
        signal.lines()
        for index in breaks(kept, markers) if since is not None else []:
            signal.line(index, False)
    sub.draw(signal)
