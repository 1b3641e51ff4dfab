"""Slurm's job dependencies as hyperlaunch's --after takes them: `JOB`, `JOB:ok`, `JOB:any` (an
array task's id too), and sbatch's --dependency value for a set of them. Pure: no command runs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from hyperlaunch.core.errors import InvalidInput

AFTER_FORM = re.compile(r"(?P<job>[0-9]{1,10}(?:_[0-9]{1,10})?)(?::(?P<kind>ok|any))?")
"""One --after entry: a job id (an array task's too) and how it must end (ok: completed)."""
JOB_ID = re.compile(r"[0-9]{1,10}(_[0-9]{1,10})?")
"""A Slurm job id, an array task's (`12_3`) included."""


def after_error(entry: str, shown: str) -> str | None:
    """What is wrong with one --after entry (`shown` as the message quotes it); None: nothing."""
    if AFTER_FORM.fullmatch(entry):
        return None
    return f"--after {shown}: expected a Slurm job id, JOB:ok or JOB:any (e.g. 42, 42:ok, 42_3:any)"


def parse_after(entries: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(job id, `ok`|`any`) of --after entries, each once; InvalidInput naming a malformed one."""
    for entry in entries:
        problem = after_error(entry, repr(entry[:80]))
        if problem is not None:
            raise InvalidInput(problem)
    return waited_for(entries)


def waited_for(entries: Iterable[str], *, after_any: str | None = None) -> tuple[tuple[str, str], ...]:
    """(job id, `ok`|`any`) of valid --after entries (ok unless said), then `after_any` (a job
    waited for however it ends), each once."""
    found = [(m.group("job"), m.group("kind") or "ok") for m in map(AFTER_FORM.fullmatch, entries) if m]
    if after_any is not None:
        found.append((after_any, "any"))
    return tuple(dict.fromkeys(found))


def dependency_value(waits: Sequence[tuple[str, str]]) -> str | None:
    """sbatch's --dependency for `waits`: afterok:1:2,afterany:3 (every one must be met)."""
    kinds = {kind: [job for job, k in waits if k == kind] for kind in ("ok", "any")}
    value = ",".join(f"after{kind}:{':'.join(jobs)}" for kind, jobs in kinds.items() if jobs)
    return value or None
