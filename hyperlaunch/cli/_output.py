"""The one way commands print: text, tables and exactly one JSON document on stdout; notes,
warnings and hints on stderr, so `--json` output and pipes stay clean. Errors are not printed
here: commands raise typed errors and cli/_errors.py turns them into one line.

rich is imported only when a table is printed, so `--help` and plain commands start fast."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

# A pipe has no width; rich would assume 80 columns and squash wide tables, so output that
# is captured or piped (`| less -S`, a log file) gets room for a whole row instead.
_PIPED_WIDTH = 220


class Output:
    """Where a command's output goes. One instance per process (`out`)."""

    # -- stdout: the command's result ------------------------------------------------------

    def text(self, line: str = "", *, end: str = "\n") -> None:
        """A line of the result (or raw text with end="")."""
        sys.stdout.write(line + end)
        sys.stdout.flush()

    def json(self, document: Any) -> None:
        """The one JSON document of a `--json` run: call it once per result (a second document
        would break `| jq`); notes and warnings go to stderr meanwhile."""
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        sys.stdout.flush()

    def table(self, *renderables: Any) -> None:
        """rich tables (or other renderables), sized to the terminal or wide when piped."""
        console = self.console()
        for renderable in renderables:
            console.print(renderable)

    def console(self) -> Console:
        from rich.console import Console

        console = Console()
        if not console.is_terminal:
            console = Console(width=_PIPED_WIDTH, no_color=True)
        return console

    # -- stderr: about the result ------------------------------------------------------------

    def note(self, message: str, *, source: str = "hyperlaunch") -> None:
        """Progress or context the user may want, never part of the result."""
        print(f"{source}: {message}", file=sys.stderr, flush=True)

    def note_block(self, title: str, lines: list[str]) -> None:
        """A note with indented lines under it (a list of settings, say)."""
        print("\n".join([f"hyperlaunch: {title}", *(f"  {line}" for line in lines)]), file=sys.stderr, flush=True)

    def warn(self, message: str) -> None:
        print(f"hyperlaunch: warning: {message}", file=sys.stderr, flush=True)


out = Output()
"""The process's output object; tests capture it through capsys like any stdout/stderr."""
