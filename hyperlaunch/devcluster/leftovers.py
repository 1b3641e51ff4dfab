"""What an earlier run of a cluster left in its folder that a fresh `up` clears, saying so in
one line each: after an end without `down` (killed daemons, a reboot), its leftover processes,
pid files and sockets, and the jobs Slurm's saved state still has running though nothing runs
them. Slurm's saved state itself stays (pending jobs, job ids), as do the accounting database
and everything outside the folder (hyperlaunch's job records)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hyperlaunch.devcluster import procs
from hyperlaunch.devcluster.layout import ClusterLayout
from hyperlaunch.slurm import queue as slurm_queue
from hyperlaunch.slurm.queue import HoldingJob

Progress = Callable[[str], None]


def clear_unclean_end(layout: ClusterLayout, progress: Progress) -> None:
    """Kill what is left of an earlier run (daemons, slurmstepd, job tasks: whatever carries the
    folder's marker) and remove its record and its runtime files (pid files, sockets and their
    locks: MariaDB refuses a socket lock naming a live pid, which a reused pid can be). Call it
    only when no daemon of the record is alive."""
    recorded = layout.state_file.exists()
    killed = procs.kill_pids(procs.cluster_process_ids(layout.root))
    stale = sorted(p for p in layout.run_dir.glob("*") if not p.is_dir()) if layout.run_dir.is_dir() else []
    if not (recorded or killed or stale):
        return
    for path in stale:
        path.unlink(missing_ok=True)
    layout.state_file.unlink(missing_ok=True)
    cleared = [_count(len(killed), "leftover process", "es")] * bool(killed)
    cleared += [_count(len(stale), "stale pid or socket file", "s")] * bool(stale)
    progress(f"the last run here ended without 'down': cleared {' and '.join(cleared) or 'its record'}")


@dataclass(frozen=True)
class LostJobs:
    """Jobs Slurm's saved state has holding nodes when no slurmd has started yet: their
    processes died with the last run."""

    requeue: list[str]
    """Those that may be requeued: back in the queue now, as Slurm itself would do a minute
    later, once it finds their nodes empty."""
    cancel: list[str]
    """Those submitted with --no-requeue: ended."""


def lost_jobs(holding: Sequence[HoldingJob]) -> LostJobs:
    return LostJobs(
        requeue=[job.job_id for job in holding if job.requeue],
        cancel=[job.job_id for job in holding if not job.requeue],
    )


def lost_jobs_line(lost: LostJobs) -> str | None:
    """What `up` did with them, in one line; None when there were none."""
    done = []
    if lost.requeue:
        done.append(f"requeued {', '.join(lost.requeue)}")
    if lost.cancel:
        done.append(f"cancelled {', '.join(lost.cancel)} (--no-requeue)")
    return f"jobs running when the last run ended, their processes gone: {'; '.join(done)}" if done else None


def end_lost_jobs(env: dict[str, str], progress: Progress) -> None:
    """Requeue or cancel the jobs the saved state has running. Call it after slurmctld starts
    and before any slurmd does: then none of them can be running for real."""
    lost = lost_jobs(slurm_queue.jobs_holding_nodes(env=env))
    for job_id in lost.requeue:
        slurm_queue.requeue(job_id, env=env)
    for job_id in lost.cancel:
        slurm_queue.cancel(job_id, env=env)
    line = lost_jobs_line(lost)
    if line:
        progress(line)


def _count(n: int, noun: str, plural: str) -> str:
    return f"{n} {noun}{plural if n != 1 else ''}"
