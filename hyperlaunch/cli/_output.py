"""The one way commands print: text, tables and exactly one JSON document on stdout; notes,
warnings and hints on stderr, so `--json` output and pipes stay clean. Errors are not printed
here: commands raise typed errors and cli/_errors.py turns them into one line.

rich is imported only when a table is printed, so `--help` and plain commands start fast."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
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

    def raw(self, text: str) -> None:
        """Text exactly as given, as UTF-8 bytes: no newline translation, no locale encoding
        (what `render` prints is byte for byte what `submit` submits)."""
        sys.stdout.flush()
        binary = getattr(sys.stdout, "buffer", None)
        if binary is None:  # a text-only stream (a test's StringIO)
            sys.stdout.write(text)
        else:
            binary.write(text.encode("utf-8"))
            binary.flush()

    def json(self, document: Any) -> None:
        """The one JSON document of a `--json` run: call it once per result (a second document
        would break `| jq`); notes and warnings go to stderr meanwhile. JSON has no NaN or
        Infinity: a command says how it shows such a number; any left over becomes null."""
        sys.stdout.write(json.dumps(_finite(document), indent=2, allow_nan=False) + "\n")
        sys.stdout.flush()

    def table(self, *renderables: Any) -> None:
        """rich tables (or other renderables), sized to the terminal or wide when piped."""
        console = self.console()
        for renderable in renderables:
            console.print(renderable)

    def console(self) -> Console:
        """Text in tables is shown as it is: no markup (a path holding `[/bold]` would crash
        the table or lose its brackets), no `:emoji:` codes, no highlighting. Style comes from
        rich.text.Text and column styles."""
        from rich.console import Console

        plain = {"markup": False, "emoji": False, "highlight": False}
        console = Console(**plain)  # type: ignore[arg-type]
        if not console.is_terminal:
            console = Console(width=_PIPED_WIDTH, no_color=True, **plain)  # type: ignore[arg-type]
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


def aligned(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Rows in plain aligned columns two spaces apart, as squeue prints them (rich's table took
    0.1 s of a 0.5 s `status` to import and lay out)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def sacct_cell(text: str) -> str:
    """One of sacct's fields for a table: `-` for its words for nothing yet (a running attempt's
    end, a pending one's start and nodes)."""
    return "-" if text in ("", "Unknown", "None", "None assigned") else text


def elapsed(seconds: int) -> str:
    """A duration as squeue prints it: H:MM:SS."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


out = Output()
"""The process's output object; tests capture it through capsys like any stdout/stderr."""
