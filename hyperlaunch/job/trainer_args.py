"""The few trainer flags the CLI has to understand inside a job's verbatim `trainer_args`
(everything after `--`), read the way the trainer's argparse reads them: `--flag value` and
`--flag=value` alike, the last occurrence winning."""

from __future__ import annotations

from collections.abc import Sequence

MODEL_NAME = "--model-name"
"""Names a model directory's checkpoints (hyperlaunch.core.checkpoints.checkpoint_name)."""
TOKENIZER = "--tokenizer"
"""A tokenizer directory (or `offline`, or a hub name): a container job mounts the directory."""
SPEC_OWNED = ("--model", "--checkpoint-dir", "--run-dir", "--max-steps", "--data", "--memory-checkpoint-every")
"""Trainer flags that hyperlaunch writes from the job's own settings (render.trainer_argv):
given again after `--` they would silently win over what `status`, `checkpoints` and `resume`
look at, so they are refused there, pointing at hyperlaunch's flag of the same name."""
NO_CHECKPOINTS = "--no-checkpoints"
"""The bundled trainer saves no checkpoint and exports nothing: a run with it has nothing of its
own to resume or export, and needs no room and no checkpoint cadence."""
NO_EXPORT = "--no-export"
"""The bundled trainer writes no `<model>-final` export when it reaches --max-steps."""
HELP_FLAGS = ("-h", "--help")
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


def count_of(args: Sequence[str], flag: str) -> int | None:
    """A flag's value as a count (digits only), or None when absent or not one: the trainer's
    parser refuses it before anything is submitted."""
    value = value_of(args, flag)
    return int(value) if value is not None and value.isdigit() else None


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


def owned_flags_given(args: Sequence[str]) -> list[str]:
    """The SPEC_OWNED flags among `args`, as typed (`--data` or `--data=x`)."""
    return [arg for arg in args if arg.split("=", 1)[0] in SPEC_OWNED]
