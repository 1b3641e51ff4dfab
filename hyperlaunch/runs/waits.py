"""The jobs a new one waits for (--after), checked before sbatch. Slurm keeps an ended job for
MinJobAge (300 s by default), then forgets it and drops any dependency on it: a job queued with
`--after 40:ok` ten minutes after job 40 failed would start at once, on whatever 40 left behind.

A job Slurm still knows is left to Slurm: it cancels one whose afterok can no longer be met
(--kill-on-invalid-dep), and `status` names why. A job it has forgotten is looked up in Slurm's
accounting (sacct): refused when this one waits for it to complete and it ended otherwise, or
when neither the queue nor accounting knows it (a mistyped id). One that completed, or any ended
job waited for with `:any`, lets this one start at once, as Slurm will; so does any forgotten
job on a cluster without accounting, where nothing can tell how it ended.

A resumed job keeps its first submission's dependencies: they are checked the same way, but one
that nothing knows any more (accounting purged since) is let through, as it was met or dropped
when that job was queued. Where accounting still lists a job as queued or running that squeue
does not show (another user's, hidden by PrivateData; slurmctld restarted without its state),
Slurm decides."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.slurm_states import ACTIVE_STATES
from hyperlaunch.slurm import accounting as slurm_accounting
from hyperlaunch.slurm import queue as slurm_queue


def refuse_unmet(waits: Sequence[tuple[str, str]], *, env: Mapping[str, str] | None, resumed: bool = False) -> None:
    """InvalidInput for the first (job, `ok`|`any`) of `waits` that Slurm has forgotten and that
    can never be met, or that nothing knows (unless `resumed`: a resumed job's)."""
    forgotten = [(job, kind) for job, kind in waits if not slurm_queue.job_state(job, env=env)]
    if not forgotten:
        return
    ended = slurm_accounting.accounting_states([job for job, _ in forgotten], env=env)
    if ended is None:
        return  # no accounting to say how they ended: Slurm drops them, as it always has
    for job, kind in forgotten:
        state = ended.get(job)
        if state is None and resumed:
            continue
        if state is None:
            raise InvalidInput(
                f"--after {job}: Slurm knows no job {job} (neither the queue nor its accounting, sacct, lists it)",
                hint="check the id with 'hyperlaunch status' or sacct",
            )
        if kind == "ok" and state != "COMPLETED" and state not in ACTIVE_STATES:
            raise InvalidInput(
                f"--after {job}:ok can never be met: job {job} ended {state}, and Slurm, which has forgotten it, would start this job at once",
                hint=f"pass --after {job}:any to start regardless",
            )
