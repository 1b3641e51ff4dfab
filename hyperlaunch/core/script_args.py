"""Placeholders in a script job's arguments (everything after `--`), filled by the supervisor at
the start of every round, so that a script written for its own flags follows the training
without reading any variable:

    hyperlaunch submit --script train.py -- --output_dir {checkpoint_dir} '{resume?--resume_from {resume}}'

- `{checkpoint_dir}`, `{run_dir}`, `{name}`: the job's checkpoint folder, run folder and run name;
- `{nodes}`: the nodes the round trains on (the spares left out), for a framework that must be
  told (Lightning's `Trainer(num_nodes=...)`);
- `{resume}`: the checkpoint `<name>-latest` names when the round starts ('' on a first start);
- an argument that is all `{resume?WORDS}`: WORDS (split on spaces, their own placeholders
  filled) where there is a checkpoint to resume from, nothing at all on a first start.

`{{checkpoint_dir}}` stands for the text `{checkpoint_dir}`. Other braces (JSON, `${VAR}`) are
left alone; a `{word}` that names no placeholder is refused at submit (a typo would otherwise
reach the script as written).

Standard library only, Python 3.8+: the supervisor fills them on the batch host."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence

PLACEHOLDERS = ("checkpoint_dir", "run_dir", "name", "nodes", "resume")
RESUME = "resume"
_WORD = re.compile(r"(?<![${])\{([a-z_]+)\}(?!\})")
_ESCAPED = re.compile(r"\{\{([a-z_]+)\}\}")
_CONDITIONAL = re.compile(r"\{resume\?(.*)\}", re.DOTALL)


def unknown_placeholder(args: Sequence[str]) -> str | None:
    """A one-line refusal for the first `{word}` among `args` that names no placeholder; None
    where every one does."""
    for arg in args:
        conditional = _CONDITIONAL.fullmatch(arg)
        for word in _WORD.findall(conditional.group(1) if conditional else arg):
            if word not in PLACEHOLDERS:
                close = difflib.get_close_matches(word, PLACEHOLDERS, n=1)
                hint = f" (did you mean {{{close[0]}}}?)" if close else ""
                valid = ", ".join(f"{{{name}}}" for name in PLACEHOLDERS)
                return f"script argument {arg!r}: {{{word}}} is no placeholder{hint}; valid: {valid}, and {{resume?WORDS}} (docs/your-script.md)"
    return None


def fill(args: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """`args` with their placeholders filled from `values` (PLACEHOLDERS -> text; '' for
    `resume` on a first start)."""
    filled: list[str] = []
    for arg in args:
        conditional = _CONDITIONAL.fullmatch(arg)
        if conditional is None:
            filled.append(_fill_one(arg, values))
        elif values.get(RESUME):
            filled += [_fill_one(word, values) for word in conditional.group(1).split()]
    return filled


def _fill_one(arg: str, values: Mapping[str, str]) -> str:
    if "{" not in arg:
        return arg
    parts = _ESCAPED.split(arg)  # even indexes: text to fill; odd: an escaped name, kept in braces
    return "".join(
        "{" + part + "}" if index % 2 else _WORD.sub(lambda m: values.get(m.group(1), m.group(0)), part)
        for index, part in enumerate(parts)
    )
