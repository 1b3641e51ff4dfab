"""The checks every user-given text of a job goes through, and the one way their errors quote
a value: shared by JobSpec and the container settings, which must say the same things."""

from __future__ import annotations

import re

from hyperlaunch.core.errors import InvalidInput

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def fail(message: str) -> None:
    raise InvalidInput(message)


def shown(value: object, limit: int = 80) -> str:
    """A value for an error message: repr, cut so that a hostile value keeps it one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'"


def check_text(name: str, value: str | None, *, allow_newlines: bool = False) -> None:
    """Values may hold quotes, spaces and `$(...)` (rendering quotes them); what no quoting can
    carry is NUL anywhere, or a newline in a value that ends up on an #SBATCH line."""
    if value is None:
        return
    if value == "":
        fail(f"{name} must not be empty")
    if "\x00" in value:
        fail(f"{name} must not contain NUL: {shown(value)}")
    if not allow_newlines and _CONTROL.search(value):
        fail(f"{name} must not contain control characters (newlines, tabs): {shown(value)}")
