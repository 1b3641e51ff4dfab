"""`hyperlaunch doctor`: can this cluster run hyperlaunch jobs? One row per check."""

from __future__ import annotations

from typing import Annotated

import typer

from hyperlaunch.cli._output import out
from hyperlaunch.errors import ChecksFailed

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    checkpoint_dir: Annotated[
        str | None,
        typer.Option(
            "--checkpoint-dir",
            metavar="DIR",
            help="Checkpoint folder whose filesystem is checked [default: as submit resolves it, else ./checkpoints].",
        ),
    ] = None,
    profile: Annotated[str | None, typer.Option("--profile", metavar="NAME", help="Profile from hyperlaunch.toml ([profile.NAME]).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
) -> None:
    """Check the cluster before submitting: sbatch and slurmctld, sacct, accounting, the Pyxis
    plugin, enroot, whether the checkpoint folder is on a filesystem all nodes share, EFA
    devices, HyperPod, GPUs per node. Each check passes, warns or fails, with a hint.

    Run it on the login node you submit from. Exit code 0 when no check fails (warnings
    allowed), 8 when at least one fails; other codes as in `hyperlaunch --help`.

    Examples:

    \b
      hyperlaunch doctor
      hyperlaunch doctor --checkpoint-dir /fsx/checkpoints
      hyperlaunch doctor --json | jq '.checks[] | select(.status != "pass")'
    """
    from hyperlaunch.config import resolve_checkpoint_dir
    from hyperlaunch.doctor import run_checks, system_probes
    from hyperlaunch.cli._cluster import slurm_env

    root = resolve_checkpoint_dir(checkpoint_dir, profile=profile)
    results = run_checks(system_probes(slurm_env()), checkpoint_dir=root)
    failed = [result.name for result in results if result.status == "fail"]
    if as_json:
        out.json(
            {
                "ok": not failed,
                "checkpoint_dir": str(root),
                "checks": [
                    {"name": r.name, "status": r.status, "detail": r.detail, "hint": r.hint} for r in results
                ],
            }
        )
    else:
        from rich.table import Table
        from rich.text import Text

        table = Table(title="hyperlaunch doctor", title_justify="left")
        for header in ("check", "status", "detail", "hint"):
            table.add_column(header)
        for r in results:
            table.add_row(r.name, Text(r.status, style=_STYLE[r.status]), r.detail, r.hint)
        out.table(table)
    if failed:
        raise ChecksFailed(f"{len(failed)} of {len(results)} checks failed: {', '.join(failed)}")
