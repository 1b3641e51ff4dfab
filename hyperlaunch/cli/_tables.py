"""Output helpers shared by the table-printing commands (models, checkpoints, doctor):
rich tables for people, exactly one JSON document for programs."""

from __future__ import annotations

import json
import sys

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported by the commands that print tables, not at start-up
    from rich.console import Console

# A pipe has no width; rich would assume 80 columns and squash wide tables, so output that
# is captured or piped (`| less -S`, a log file) gets room for a whole row instead.
_PIPED_WIDTH = 200


def stdout_console() -> Console:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=_PIPED_WIDTH, no_color=True)
    return console


def print_json(document: object) -> None:
    """The one JSON document of a `--json` run, on stdout (warnings go to stderr)."""
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False) + "\n")


def warn(message: str) -> None:
    print(f"hyperlaunch: warning: {message}", file=sys.stderr)
