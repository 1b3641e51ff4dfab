"""The `hyperlaunch` command: wiring only. Each command group lives in its own module."""

from __future__ import annotations

import typer

from hyperlaunch.cli import checkpoints as checkpoints_command
from hyperlaunch.cli import dev_cluster
from hyperlaunch.cli import doctor as doctor_command
from hyperlaunch.cli import logs as logs_commands
from hyperlaunch.cli import models as models_command
from hyperlaunch.cli import render as render_command
from hyperlaunch.cli import status as status_command
from hyperlaunch.cli import submit as submit_commands
from hyperlaunch.cli._errors import EXIT_CODE_HELP, run_app

app = typer.Typer(
    name="hyperlaunch",
    help=(
        "Launch, watch and resume FSDP2 training of Hugging Face causal LMs on Slurm "
        "(AWS SageMaker HyperPod first).\n\n" + EXIT_CODE_HELP
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(dev_cluster.app, name="dev-cluster")
app.command(name="render")(render_command.render)
app.command(name="submit")(submit_commands.submit)
app.command(name="resume")(submit_commands.resume)
app.command(name="status")(status_command.status)
app.command(name="logs")(logs_commands.logs)
app.command(name="cancel")(logs_commands.cancel)
app.command(name="models")(models_command.models)
app.command(name="checkpoints")(checkpoints_command.checkpoints)
app.command(name="doctor")(doctor_command.doctor)


def main() -> None:
    run_app(app)
