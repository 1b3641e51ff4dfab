"""Quoting for the two parsers a rendered script meets: bash, and sbatch's own reader of
`#SBATCH` lines. Every value the templates interpolate goes through one of these."""

from __future__ import annotations

import re
import shlex

_SBATCH_SAFE = re.compile(r"^[A-Za-z0-9_.,:=%@+/^-]+$")
_SBATCH_SPECIAL = re.compile(r"""([\\"'#])""")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shell_quote(value: object) -> str:
    """One bash word that expands to exactly `value` (shlex.quote: bare when only safe
    characters, else single quotes, inside which nothing is expanded). Ints and other scalars
    are quoted by their str()."""
    text = str(value)
    quoted = shlex.quote(text)
    # shlex leaves ',' bare, and a bare comma in an array literal reads like a mistake to
    # shellcheck (SC2054); such a word has no `'`, so plain single quotes are exact.
    return f"'{text}'" if quoted == text and "," in text else quoted


def comment_text(value: object) -> str:
    """Text for a `# ...` comment line: control characters become spaces, so nothing can end
    the comment and start a command."""
    return _CONTROL.sub(" ", str(value))


def sbatch_quote(value: object) -> str:
    """One argument for an `#SBATCH` line. sbatch reads these lines itself, not through a shell:
    whitespace splits, `#` starts a comment, a backslash escapes the next character, and
    (Slurm >= 19) single or double quotes group. Older Slurm knows only double quotes, so values
    are wrapped in double quotes with `\\ " ' #` backslash-escaped, which both read the same way.
    A line cannot carry a newline at all; JobSpec validation refuses those earlier."""
    text = str(value)
    if _CONTROL.search(text):
        raise ValueError(f"an #SBATCH value cannot contain control characters: {text!r}")
    if _SBATCH_SAFE.match(text):
        return text
    return '"' + _SBATCH_SPECIAL.sub(r"\\\1", text) + '"'
