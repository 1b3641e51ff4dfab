"""What Slurm's own programs write into a job's error log beside its tasks' output: srun
--label's task number before each task's line, and their lines about a task that ended. Read
by `status` on a login node and by the supervisor inside the job (standard library, Python 3.8)."""

from __future__ import annotations

import re

SLURM_TOOLS = ("srun:", "slurmstepd:", "sbatch:", "salloc:")
"""How the lines Slurm's own programs write into a job's error log begin."""

TASK_LABEL = re.compile(r"^\s*(\d+):(?: |$)")
"""srun --label's task number before a task's line: which task printed it, not part of the text
(an empty line keeps the label alone)."""

TASK_EXIT = re.compile(r"task \d+: Exited with exit code (\d+)")
"""srun's words for a task that exited with a code."""

TASK_ENDED = re.compile(r"^(?:srun|slurmstepd\S*): error: .*task \d+: (?:Exited with exit code \d+|Killed|Terminated)$")
"""A whole line of srun's or slurmstepd's that only says a task ended (its code, or killed)."""


def without_label(line: str) -> str:
    """`line` without srun's task number before it."""
    return TASK_LABEL.sub("", line, count=1)
