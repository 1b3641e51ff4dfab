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
    """Print the sbatch script for a job (nothing is submitted). Trainer arguments go after `--`.

    \b
    Examples:
      hyperlaunch render --nodes 2 --model qwen3_0_6b --instance-type p5.48xlarge
      hyperlaunch render -N 2 -m qwen3_0_6b -o job.sbatch -- --lr 3e-4   # then: sbatch job.sbatch
    """
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.runs.launch import launch

    if output is not None:
        _check_writable_place(output)
    plan = job.build()
    script = launch(plan.spec, env={}, dry_run=True).script
    if output is None:
        out.raw(script)
        show_settings(plan)  # after the script: a failure before it stays one line
        return
    from hyperlaunch.core.private_files import write_private

    try:
        write_private(output, script)  # it holds the --env values: private to the user
    except OSError as err:
        raise InvalidInput(f"--output {output}: cannot write the script there: {err.strerror or err}") from None
    show_settings(plan)
    out.note(f"wrote {output}")


def _check_writable_place(output: Path) -> None:
    """Said before anything is rendered: a folder, no folder, or a name the file system cannot hold."""
    from hyperlaunch.core.errors import InvalidInput

    try:
        reason = "it is a folder" if output.is_dir() else None if output.parent.is_dir() else f"no folder {output.parent}"
    except OSError as err:  # a name too long, a loop of links
        reason = err.strerror or str(err)
    if reason is not None:
        raise InvalidInput(f"--output {output}: cannot write the script there: {reason}")
