"""Job arrays: Slurm's grammar of their ids (`12_3`, `12_[4-7%2]`) and index lists, and each
task's own job id and state, from sacct and squeue."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hyperlaunch.slurm import runner


@dataclass(frozen=True)
class ArrayTask:
    """One task of a job array as Slurm knows it now."""

    index: int
    job_id: str | None
    """The task's own job id, once it has one (a task gets it when it starts); None before."""
    state: str


_ARRAY_ID = re.compile(r"(?P<array>[0-9]+)_(?:(?P<index>[0-9]+)|\[(?P<range>[0-9,%\-]+)\])")


def array_tasks(job_id: str, *, env: Mapping[str, str] | None = None) -> dict[int, ArrayTask]:
    """Every task of job array `job_id` Slurm still knows, by index: sacct for the ones that
    started (and the range not started yet), squeue over it for what is in the queue now."""
    tasks: dict[int, ArrayTask] = {}
    accounted = runner.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,JobIDRaw,State"], env=env, timeout=60, check=False)
    queued = runner.run(["squeue", "-h", "-r", "-j", job_id, "--states=all", "-o", "%i|%A|%T"], env=env, timeout=30, check=False)
    for source in (accounted.stdout, queued.stdout):
        for line in source.splitlines():
            parts = [part.strip() for part in line.split("|")]
            match = _ARRAY_ID.fullmatch(parts[0]) if len(parts) == 3 else None
            if match is None or match["array"] != job_id:
                continue
            state = parts[2].split()[0] if parts[2] else ""
            if match["index"] is not None:
                index = int(match["index"])
                earlier = tasks.get(index)
                # A task not started yet has the array's id in squeue; once started, its own.
                own = parts[1] if parts[1] != job_id or state not in ("PENDING", "") else None
                tasks[index] = ArrayTask(index, own or (earlier.job_id if earlier else None), state)
            else:
                for index in expand_indices(match["range"]):
                    tasks.setdefault(index, ArrayTask(index, None, state))
    return tasks


def array_task_of(job_id: str, *, env: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """The job array and index whose task runs or ran as job `job_id`, its own (raw) id: sacct
    lists JobID 6_1 with JobIDRaw 8 for task 1 of array 6 started as job 8. None when `job_id`
    is no array task's own id, or sacct cannot answer (no accounting)."""
    result = runner.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,JobIDRaw"], env=env, timeout=15, check=False)
    if result.returncode != 0:
        return None
    for line in result.stdout.splitlines():
        parts = [part.strip() for part in line.split("|")]
        match = _ARRAY_ID.fullmatch(parts[0]) if len(parts) >= 2 and parts[1] == job_id else None
        # The array's own id is also one of its tasks' raw ids: that job is the array itself.
        if match is not None and match["index"] is not None and match["array"] != job_id:
            return match["array"], int(match["index"])
    return None


def array_indices(name: str, job_id: str) -> list[int]:
    """The indices of job array `job_id` that squeue's name `name` stands for: `12_3`, or
    `12_[4-7,9%2]` for tasks not started yet; none for another job's name."""
    match = _ARRAY_ID.fullmatch(name)
    if match is None or match["array"] != job_id:
        return []
    return [int(match["index"])] if match["index"] is not None else expand_indices(match["range"])


def expand_indices(text: str) -> list[int]:
    """Slurm's array index list `0-3,7%2` as [0, 1, 2, 3, 7]."""
    indices: list[int] = []
    for part in text.split("%")[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            indices += range(int(first), int(last or first) + 1)
    return indices
