"""`hyperlaunch render ...`: print the sbatch script a submit with the same flags would use.
Submits nothing and writes nothing unless --output is given."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hyperlaunch.cli._job_flags import JobFlags, show_settings, with_job_flags
from hyperlaunch.cli._output import out


@with_job_flags
def render(
    job: JobFlags,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the script to this file instead of stdout.")
    ] = None,
) -> None:
    """Print the sbatch script for a job (nothing is submitted). Trainer arguments go after `--`."""
    from hyperlaunch.launch import launch

    plan = job.build()
    script = launch(plan.spec, env={}, dry_run=True, on_checked=lambda: show_settings(plan)).script
    if output is None:
        out.text(script, end="")
    else:
        from hyperlaunch.private_files import write_private

        write_private(output, script)  # it holds the --env values: private to the user
        out.note(f"wrote {output}")
