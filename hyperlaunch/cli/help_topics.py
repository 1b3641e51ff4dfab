"""`hyperlaunch help TOPIC`: what the top-level help points to rather than holds, so
`hyperlaunch --help` opens on the commands."""

from __future__ import annotations

import typer

from hyperlaunch.cli._errors import exit_code_table
from hyperlaunch.cli._help import HelpCommand
from hyperlaunch.cli._output import out

app = typer.Typer(
    name="help",
    help="Help topics: exit-codes (what each exit code means).",
    invoke_without_command=True,
    rich_markup_mode=None,
)


@app.callback()
def topics(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:  # asked for help: the list of topics, and success
        out.text(ctx.get_help())


@app.command("exit-codes", cls=HelpCommand)
def exit_codes() -> None:
    """What each exit code of hyperlaunch (and of its trainer) means.

    \b
    Examples:
      hyperlaunch help exit-codes
    """
    out.text(exit_code_table())
