"""One table from typed errors to one-line messages and exit codes. The traceback is shown
only when HYPERLAUNCH_DEBUG is set."""

from __future__ import annotations

import os
import sys
import traceback

import typer

from hyperlaunch.core.errors import EXIT_CODES, HyperlaunchError

EXIT_CODE_HELP = "Exit codes: " + "; ".join(f"{code} {text}" for code, text in EXIT_CODES.items()) + "."


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
