"""The batch script of `hyperlaunch export --slurm` (templates/export.sh.j2): one task on one
node running the exporter, values shell-quoted. Pure: text in, text out."""

from __future__ import annotations

from collections.abc import Sequence

from hyperlaunch import __version__
from hyperlaunch.script import jinja_env
from hyperlaunch.script.render import dependency_flags


def render_export(
    *, command: Sequence[str], checkpoint: str, job_name: str, log: str,
    partition: str | None = None, time: str | None = None, account: str | None = None, dependency: str | None = None,
) -> str:
    sbatch: list[tuple[str, str | None]] = [
        ("--job-name", job_name), ("--nodes", "1"), ("--ntasks", "1"), ("--output", log), ("--open-mode", "append"),
    ]
    for name, value in (("--partition", partition), ("--time", time), ("--account", account)):
        if value is not None:
            sbatch.append((name, value))
    sbatch += dependency_flags(dependency)
    template = jinja_env.environment().get_template("export.sh.j2")
    return template.render(version=__version__, checkpoint=checkpoint, sbatch=sbatch, command=list(command))
