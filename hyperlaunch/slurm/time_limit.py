"""Slurm's time-limit grammar (`--time`): the forms sbatch takes, the forms people type
(4h, 90m, 1d12h) turned into Slurm's, and a limit's length in seconds. Pure: no command runs."""

from __future__ import annotations

import re

from hyperlaunch.core.errors import InvalidInput

INT32_MAX = 2**31 - 1
"""The bound of every count: Slurm keeps node counts and time limits in 32 bits, and the
job's tools compare restart counts as Slurm's 32-bit numbers, which a longer number overflows."""
MAX_MINUTES = INT32_MAX
SIGNAL_MAX_SECONDS = 0xFFFF
"""Slurm stores a warning signal's time before the limit in 16 bits."""

# Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or no limit. ASCII digits only
# (Python's \d also takes other scripts' digits, which int() reads but Slurm does not), and
# fullmatch, since `$` would let a trailing newline through.
_SLURM_TIME = re.compile(r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}")
_UNLIMITED = ("UNLIMITED", "INFINITE")
# What people type (4h, 90m, 2d, 1d12h, 30s), each unit at most once and in this order, so a
# value has one reading; slurm_time turns it into Slurm's D-HH:MM:SS. Digits bounded: a longer
# number is past Slurm's limit anyway, and int() refuses very long ones.
_HUMAN_TIME = re.compile(r"(?:([0-9]{1,12})d)?(?:([0-9]{1,12})h)?(?:([0-9]{1,12})m)?(?:([0-9]{1,12})s)?", re.IGNORECASE)
_TIME_FORMS = "M, H:M:S, D-H, D-H:M:S, UNLIMITED, or 4h, 90m, 2d, 1d12h, 30s"


def slurm_time(value: str) -> str:
    """`4h`, `90m`, `1d12h` -> Slurm's `0-04:00:00`, `0-01:30:00`, `1-12:00:00`; any other value
    as it is (a Slurm form, or one check_time_limit refuses)."""
    match = _HUMAN_TIME.fullmatch(value)
    if not value or match is None:
        return value
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    days, rest = divmod(total, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def limit_seconds(value: str) -> int | None:
    """A Slurm time limit (one check_time_limit accepts) in seconds; None for no limit."""
    if value.upper() in _UNLIMITED:
        return None
    days, _, clock = value.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H[:M[:S]]
        parts += [0] * (3 - len(parts))
        return int(days) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    if len(parts) == 1:  # minutes
        return parts[0] * 60
    if len(parts) == 2:  # M:S
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def check_time_limit(time: str | None, shown: str) -> None:
    """InvalidInput unless `time` (None: no --time) is a limit Slurm takes; `shown` is the value
    as error messages quote it."""
    if time is None or time.upper() in _UNLIMITED:
        return
    if not _SLURM_TIME.fullmatch(time):
        raise InvalidInput(f"--time {shown} is not a Slurm time: use {_TIME_FORMS}")
    minutes = (limit_seconds(time) or 0) // 60
    if minutes > MAX_MINUTES:
        raise InvalidInput(f"--time {shown} is too long: Slurm takes at most {MAX_MINUTES} minutes, or UNLIMITED")
