""""Did you mean": the closest of the valid names to a mistyped one, in one place for every
one-line refusal of a name (model presets, instance types, profiles)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable


def closest(name: str, choices: Iterable[str], fold: Callable[[str], str] = str, cutoff: float = 0.6) -> str | None:
    """The choice `name` most likely meant, compared as `fold` spells both; None when none is
    close (difflib's similarity below `cutoff`; 0.9 is about one wrong character in ten)."""
    by_folded = {fold(choice): choice for choice in choices}
    close = difflib.get_close_matches(fold(name), list(by_folded), n=1, cutoff=cutoff)
    return by_folded[close[0]] if close else None


def did_you_mean(name: str, choices: Iterable[str], fold: Callable[[str], str] = str, show: Callable[[str], str] = str) -> str:
    """` (did you mean X?)` for a refused name, "" when no choice is close (X as `show` writes it)."""
    found = closest(name, choices, fold)
    return f" (did you mean {show(found)}?)" if found is not None else ""
