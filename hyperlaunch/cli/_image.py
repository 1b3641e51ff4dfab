"""What `plot` and `goodput` share to draw a picture: the format an `-o` file names, a
matplotlib figure on the Agg canvas (the plot extra), the file written whole or not at all,
and the title naming a lineage of jobs."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PLOT_EXTRA_HINT = 'pip install "hyperlaunch[plot]"'
IMAGE_FORMATS = ("png", "svg", "pdf")


def image_format(output: Path | None) -> str | None:
    """The format `-o FILE` names (its suffix), None without -o; InvalidInput for another suffix."""
    from hyperlaunch.core.errors import InvalidInput

    if output is None:
        return None
    chosen = output.suffix.lower().lstrip(".")
    if chosen not in IMAGE_FORMATS:
        raise InvalidInput(f"-o {output}: name an image file ending in {', '.join('.' + f for f in IMAGE_FORMATS)}")
    return chosen


def missing(library: str) -> Exception:
    from hyperlaunch.core.errors import InvalidInput

    return InvalidInput(f"plotting needs {library}, which is not installed", hint=PLOT_EXTRA_HINT)


def new_figure(size: tuple[float, float], title: str) -> Any:
    """A matplotlib Figure on the Agg canvas, whatever backend the user's matplotlibrc names."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise missing("matplotlib") from None
    figure = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title)
    return figure


def save(figure: Any, path: Path, chosen_format: str) -> None:
    """The figure into `path`, whole or not at all (rendered in memory, then written beside it
    and renamed over it)."""
    from hyperlaunch.core.atomic_file import write_atomically
    from hyperlaunch.core.errors import InvalidInput

    buffer = io.BytesIO()
    figure.savefig(buffer, format=chosen_format, dpi=100)
    try:
        write_atomically(path, buffer.getvalue())
    except OSError as err:
        raise InvalidInput(f"cannot write {path}: {err.strerror or err}") from None


def lineage_title(job_ids: Sequence[str]) -> str:
    """`job 13`, or `jobs 12 -> 13` for a job that resumes another."""
    return f"job {job_ids[0]}" if len(job_ids) == 1 else "jobs " + " -> ".join(job_ids)
