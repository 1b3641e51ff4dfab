"""`hyperlaunch dev-cluster ...`: a real multi-node Slurm cluster on one machine."""

from __future__ import annotations

import typer

app = typer.Typer(help="A real multi-node Slurm cluster on this machine, for trying hyperlaunch and for its tests.", no_args_is_help=True)
