"""One table from typed errors to one-line messages and exit codes. The traceback is shown
only when HYPERLAUNCH_DEBUG is set."""

from __future__ import annotations

import difflib
import os
import sys
import traceback
from typing import Any

import typer
from typer.core import TyperGroup

from hyperlaunch.core.errors import EXIT_CODES, HyperlaunchError, InvalidInput

EXIT_CODES_POINTER = "Exit codes: `hyperlaunch help exit-codes` says what each one means."
"""The top-level help's one line about exit codes; the table itself is a help topic."""


def exit_code_table() -> str:
    """Every exit code and its meaning, one a line, for `hyperlaunch help exit-codes`."""
    return "\n".join(f"{code:>3}  {text}" for code, text in EXIT_CODES.items())


class CommandGroup(TyperGroup):
    """A command group whose unknown command is an InvalidInput: one line naming the closest
    commands, exit 2 (Click prints usage and three lines; Typer before 0.20 suggests none)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and name[0].isalnum() and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            raise unknown_command(name, self.list_commands(ctx), _command_path(ctx))
        return super().resolve_command(ctx, args)


def _command_path(ctx: Any) -> str:
    """`hyperlaunch dev-cluster`, however the program was started (`python -m`, a test)."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["hyperlaunch", *reversed(names)])


def unknown_command(name: str, commands: list[str], command_path: str) -> InvalidInput:
    shown = name if len(name) <= 40 else name[:37] + "..."
    close = difflib.get_close_matches(name, commands, n=3, cutoff=0.6)
    if close:
        return InvalidInput(f"no command {shown!r}; did you mean {' or '.join(repr(c) for c in close)}?")
    return InvalidInput(f"no command {shown!r}", hint=f"'{command_path} --help' lists the commands")


def _debug() -> bool:
    return os.environ.get("HYPERLAUNCH_DEBUG", "") not in ("", "0")


def run_app(app: typer.Typer) -> None:
    try:
        app(standalone_mode=False)
    except HyperlaunchError as err:
        if _debug():
            traceback.print_exc()
        print(f"hyperlaunch: error: {err.one_line()}", file=sys.stderr)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        print("hyperlaunch: interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as err:  # noqa: BLE001 - the last resort keeps the one-line promise
        if isinstance(err, typer.Exit):
            sys.exit(err.exit_code)
        if isinstance(err, _usage_error_class()):
            err.show()  # type: ignore[attr-defined]
            sys.exit(err.exit_code)  # type: ignore[attr-defined]
        if isinstance(err, typer.Abort):
            print("hyperlaunch: aborted", file=sys.stderr)
            sys.exit(130)
        if _debug():
            traceback.print_exc()
        print(
            f"hyperlaunch: internal error: {type(err).__name__}: {err} "
            "(set HYPERLAUNCH_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        sys.exit(1)


def _usage_error_class() -> type[Exception]:
    """The base of the usage errors Typer raises (unknown command or option, bad value): its
    own copy of Click's ClickException since Typer 0.26, Click's before."""
    try:
        from typer._click.exceptions import ClickException

        return ClickException
    except ImportError:
        from click import ClickException as ClicksOwn

        return ClicksOwn
