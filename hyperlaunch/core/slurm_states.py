"""Slurm's words for where a job is in its life, as squeue and sacct print them, and the
environment its commands must run in for those words to come out as they are read here."""

from __future__ import annotations

from collections.abc import Mapping

ACTIVE_STATES: frozenset[str] = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUE_HOLD", "REQUEUE_FED"}
)
"""The states of a job that has not ended: queued, running, or on its way back to the queue."""
ENDED_STATES: frozenset[str] = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
)
"""The states a job's run ends in."""

_PENDING_REASONS: dict[str, str] = {
    "Resources": "waiting for enough idle nodes",
    "JobArrayTaskLimit": "a sweep's element waits for a slot: --max-parallel elements run at once",
    "Priority": "jobs ahead of it in the queue go first",
    "PartitionNodeLimit": "it asks more nodes than the partition has or allows: --nodes plus --spare-nodes",
    "ReqNodeNotAvail": "nodes it needs are down or drained, or all others are excluded: see sinfo -R",
    "BeginTime": "a requeued job waits out Slurm's credential hold before it may start",
    "Dependency": "it starts after other jobs: --after, resume --after-end",
    "DependencyNeverSatisfied": "a job it waits for ended in a way that never lets it start",
    "JobHeldUser": "held by its owner: scontrol release lets it start",
    "JobHeldAdmin": "held by an administrator",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
}
"""Squeue's REASON for a pending job, in words; the limits of an account or QOS (QOSMax...,
AssocGrp...) are left in Slurm's."""


def pending_text(reason: str) -> str:
    """`Reason (what it means)`, for the reasons Slurm gives a pending job most often."""
    meaning = _PENDING_REASONS.get(reason.split(",")[0].strip())
    return f"{reason} ({meaning})" if meaning else reason


LAUNCHERS: frozenset[str] = frozenset({"sbatch", "srun"})
"""Commands whose SBATCH_*/SRUN_* variables are the user's own defaults for their jobs
(account, partition): honoured. Their environment also becomes the job's."""


def command_environment(command: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment `command` runs in, from `environ` (the user's; inside a job, the one sbatch
    exported). What reads Slurm's answers must get them in the shape it asked for: a query or
    scancel runs without the variables named for it that the user's shell may set
    (SQUEUE_STATES=RUNNING hides a pending job from `squeue -j`, SCANCEL_STATE=PENDING makes
    `scancel J` leave a running one, SINFO_PARTITION hides nodes), and with Slurm's standard ISO
    times (SLURM_TIME_FORMAT=relative turns sacct's start times into `17:11:09`, which no node
    failure can be placed against). sbatch and srun keep the environment as it is. The launcher
    (hyperlaunch.slurm.runner) and the supervisor (hyperlaunch.supervisor.slurm_calls) both
    run their commands in it."""
    if command in LAUNCHERS:
        return dict(environ)
    prefix = command.upper() + "_"
    return {**{name: value for name, value in environ.items() if not name.startswith(prefix)}, "SLURM_TIME_FORMAT": "standard"}
