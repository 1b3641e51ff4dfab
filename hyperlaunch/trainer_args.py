"""The few trainer flags the CLI has to understand inside a job's verbatim `trainer_args`
(everything after `--`), read the way the trainer's argparse reads them: `--flag value` and
`--flag=value` alike, the last occurrence winning."""

from __future__ import annotations

from collections.abc import Sequence

MODEL_NAME = "--model-name"
"""Names a model directory's checkpoints (hyperlaunch.checkpoints.checkpoint_name)."""
RESUME_OVERRIDES = {"--from-scratch": False, "--resume-from": True}
"""Flags that tell the trainer where to start, mapped to whether they take a value: `resume`
drops them, since the resumed job must follow the model's -latest pointer."""


def value_of(args: Sequence[str], flag: str) -> str | None:
    """The value the trainer will see for a flag that takes one, or None when absent."""
    found = None
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
    return found


def without(args: Sequence[str], flags: dict[str, bool]) -> tuple[str, ...]:
    """`args` with the given flags (and, for those that take one, their value) removed."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            skip = flags[name] and "=" not in arg
            continue
        kept.append(arg)
    return tuple(kept)
