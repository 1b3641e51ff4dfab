"""The `hyperlaunch` command: wiring only. Each command group lives in its own module.

Commands are named here and imported when used: `hyperlaunch render ...` imports and builds
only `render` (Typer turns each command's signature into Click parameters up front, and the
job-flag commands have 27 of them), `hyperlaunch --version` none, while `hyperlaunch --help`
and shell completion (hyperlaunch.cli.completion) build them all."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Annotated, Any

import typer

from hyperlaunch import __version__
from hyperlaunch.cli._errors import EXIT_CODES_POINTER, CommandGroup, run_app

# name -> (module, attribute), in the order --help lists them.
_GROUPS = {
    "dev-cluster": ("hyperlaunch.cli.dev_cluster", "app"),
    "help": ("hyperlaunch.cli.help_topics", "app"),
}
_COMMANDS = {
    "render": ("hyperlaunch.cli.render", "render"),
    "submit": ("hyperlaunch.cli.submit", "submit"),
    "resume": ("hyperlaunch.cli.submit", "resume"),
    "sweep": ("hyperlaunch.cli.sweep", "sweep"),
    "status": ("hyperlaunch.cli.status", "status"),
    "logs": ("hyperlaunch.cli.logs", "logs"),
    "plot": ("hyperlaunch.cli.plot", "plot"),
    "goodput": ("hyperlaunch.cli.goodput", "goodput"),
    "cancel": ("hyperlaunch.cli.logs", "cancel"),
    "models": ("hyperlaunch.cli.models", "models"),
    "checkpoints": ("hyperlaunch.cli.checkpoints", "checkpoints"),
    "export": ("hyperlaunch.cli.export", "export"),
    "prepare-data": ("hyperlaunch.cli.prepare_data", "prepare_data"),
    "doctor": ("hyperlaunch.cli.doctor", "doctor"),
    "ecr-login": ("hyperlaunch.cli.ecr_login", "ecr_login"),
    "completion": ("hyperlaunch.cli.completion", "completion"),
}
_VERSION_FLAGS = ("--version", "-V")
PROG_NAME = "hyperlaunch"
COMPLETE_VAR = "_HYPERLAUNCH_COMPLETE"
"""Set by the shell completion script when it asks what may follow the words typed."""


def _load(target: tuple[str, str]) -> Any:
    """The object target names: a Typer app for a group, a command's function otherwise."""
    module, attribute = target
    return getattr(importlib.import_module(module), attribute)


def _print_version(wanted: bool) -> None:
    if wanted:
        print(f"hyperlaunch {__version__}")
        raise typer.Exit()


def _top_level_options(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", is_eager=True, callback=_print_version, help="Print hyperlaunch's version and exit."),
    ] = False,
) -> None:
    pass


def build_app(only: str | None = None, *, lazy: bool = False) -> typer.Typer:
    """The CLI with every command, or with just the command `only` (same behaviour for it;
    a name that is no command builds none). `lazy`: every command listed with its short help
    but none built (`hyperlaunch --help`, a mistyped command), see _ListedCommands."""
    app = typer.Typer(
        name="hyperlaunch",
        help=(
            "Launch, watch and resume FSDP2 training of Hugging Face causal LMs on Slurm "
            "(AWS SageMaker HyperPod first).\n\n" + EXIT_CODES_POINTER
        ),
        cls=_ListedCommands if lazy else CommandGroup,
        no_args_is_help=True,
        # Completion is a command of its own (`hyperlaunch completion SHELL`), and main()
        # answers the shell's requests with every command built, which this app may not have.
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    # A callback keeps this a command group even when it holds a single command; without it
    # Typer would run that command as the whole CLI and read its name as an argument.
    app.callback()(_top_level_options)
    if lazy:
        return app
    for name, target in _GROUPS.items():
        if only in (None, name):
            app.add_typer(_load(target), name=name, cls=CommandGroup)
    for name, target in _COMMANDS.items():
        if only in (None, name):
            app.command(name=name, cls=_help_command())(_command(target))
    return app


def _help_command() -> type:
    from hyperlaunch.cli._help import HelpCommand  # with the first command: `--version` loads none

    return HelpCommand


def _command(target: tuple[str, str]) -> Any:
    """The command's function, with the job flags added where it takes them."""
    command = _load(target)
    from hyperlaunch.cli._job_flags import job_command, needs_job_flags

    return job_command(command) if needs_job_flags(command) else command


class _ListedCommands(CommandGroup):
    """The top-level group as `--help` and a mistyped command see it: every command by name, in
    --help's order, with the short help of its docstring; none is built (Typer turns each
    command's signature into Click parameters, 45 of them for the job commands), since none
    runs. main() builds the one a command line names."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*_COMMANDS, *_GROUPS]

    def get_command(self, ctx: Any, name: str) -> Any:
        from typer.core import TyperCommand, TyperGroup  # Click's classes as Typer builds on them

        if name in _COMMANDS:
            return TyperCommand(name, help=inspect.getdoc(_load(_COMMANDS[name])))
        if name in _GROUPS:
            return TyperGroup(name=name, help=_load(_GROUPS[name]).info.help)
        return None


def __getattr__(name: str) -> object:
    if name == "app":  # the whole CLI, for typer.testing.CliRunner
        return build_app()
    raise AttributeError(name)


def main() -> None:
    request = os.environ.get(COMPLETE_VAR)
    if request:  # the shell asks what may follow the words typed: every command is built
        from hyperlaunch.cli.completion import answer

        sys.exit(answer(build_app(), request))
    first = sys.argv[1] if len(sys.argv) > 1 else None
    if first in _COMMANDS or first in _GROUPS or first in _VERSION_FLAGS:
        run_app(build_app(only=first))
    else:  # --help, or a mistyped command whose error names the closest ones
        run_app(build_app(lazy=True))
