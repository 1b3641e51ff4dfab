"""Breaking a job on the dev cluster from outside, for the chaos benchmark: where the job's
batch host, trainers and spare are now; each fault's injection; bringing a killed node back.
Nodes die as `hyperlaunch dev-cluster kill-node` kills them and slurmctld starts again as `up`
starts it (both through hyperlaunch.devcluster); ranks are signalled by their pid."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from io import FileIO
from pathlib import Path

from hyperlaunch.bench.chaos_plan import Fault, Kind
from hyperlaunch.core import checkpoints
from hyperlaunch.core.disk_space import slack
from hyperlaunch.core.errors import HyperlaunchError
from hyperlaunch.devcluster import cluster as devcluster
from hyperlaunch.devcluster import procs, services, state
from hyperlaunch.slurm import hostlist
from hyperlaunch.slurm import nodes as slurm_nodes

FREE_AFTER_S = 5.0
"""How long the full disk stays full."""
_WAIT_S = 120.0
_FILLER = "chaos-filler"


class ChaosError(Exception):
    """The benchmark cannot go on (a job that does not come back, a cluster that does not answer)."""


def wait_for(what: str, check: Callable[[], object], timeout: float = _WAIT_S, pause: float = 0.2) -> object:
    """check()'s first true answer, polled every `pause` seconds; ChaosError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise ChaosError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(pause)


def squeue(job: str, fields: str) -> str | None:
    """squeue's line for the job ('' once it left the queue); None when squeue fails, as it
    does while slurmctld restarts."""
    done = subprocess.run(["squeue", "-h", "-j", job, "-o", fields], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return "" if "Invalid job id" in done.stderr else None
    return done.stdout.strip()


@dataclass(frozen=True)
class Placement:
    """Where a running job is now."""

    batch_host: str
    nodes: tuple[str, ...]
    ranks: dict[int, tuple[str, int]] = field(default_factory=dict)
    """Each trainer rank's node and pid (the newest round's, stopped ones left out)."""

    @property
    def spares(self) -> list[str]:
        """The job's nodes that run no trainer."""
        busy = {node for node, _ in self.ranks.values()}
        return [node for node in self.nodes if node not in busy]


def _running(pid: int) -> bool:
    """Not stopped (a hang's rank) and not a zombie."""
    return procs.state_of(pid) not in (None, "T", "t", "Z", "X")


def placement(root: Path, job: str) -> Placement | None:
    """The job's batch host, nodes and trainers while it runs with every rank up, else None."""
    line = squeue(job, "%T|%B|%N")
    if not line or not line.startswith("RUNNING|"):
        return None
    _, batch_host, nodelist = line.split("|", 2)
    nodes = tuple(hostlist.expand(nodelist))
    newest: dict[int, tuple[tuple[int, int], str, int]] = {}
    for node in nodes:
        for pid in procs.node_process_ids(root, node):
            env = procs.environ(pid)
            if env.get("SLURM_JOB_ID") != job or "RANK" not in env or "TORCHELASTIC_RUN_ID" not in env or not _running(pid):
                continue
            rank, age = int(env["RANK"]), (int(env.get("SLURM_RESTART_COUNT", "0")), int(env.get("HYPERLAUNCH_ROUND", "0")))
            if rank not in newest or age > newest[rank][0]:
                newest[rank] = (age, node, pid)
    ranks = {rank: (node, pid) for rank, (_, node, pid) in newest.items()}
    return Placement(batch_host, nodes, ranks) if len(ranks) >= 2 else None


def released(job: str, node: str) -> bool:
    """Whether the job no longer holds `node`: it runs without it, or has left the queue."""
    line = squeue(job, "%T|%N")
    if line == "":
        return True
    if not line or not line.startswith("RUNNING|"):
        return False  # squeue failing, or the job requeued and not yet running
    return node not in hostlist.expand(line.split("|", 1)[1])


@dataclass(frozen=True)
class Injected:
    """A fault as it was injected."""

    at: float
    """When (epoch seconds, as the step records' time)."""
    target: str
    """The node, rank or file it hit."""
    killed: tuple[str, ...] = ()
    """Nodes to revive once the job has recovered."""
    note: str = ""


@dataclass(frozen=True)
class Where:
    """What an injection needs to know of the job."""

    root: Path
    """The dev cluster's folder."""
    job: str
    ckpt_dir: Path
    model: str
    every: int
    last_step: Callable[[], int]
    """The step of the newest step record."""


def inject(fault: Fault, where: Where) -> Injected:
    if fault.kind == Kind.CONTROLLER_RESTART:
        return restart_controller(where.root)
    if fault.kind == Kind.DISK_FULL:
        return fill_during_save(where)
    now = wait_for(f"job {where.job} running with its trainers", lambda: placement(where.root, where.job))
    assert isinstance(now, Placement)
    if fault.kind in (Kind.NODE_KILL, Kind.BATCH_HOST_KILL, Kind.SPARE_KILL):
        return _kill_node_of(fault.kind, now, where.root)
    node, pid = now.ranks[fault.rank]
    target = f"rank {fault.rank} on {node}"
    if fault.kind == Kind.HANG:
        os.kill(pid, signal.SIGSTOP)
        return Injected(time.time(), target)
    if fault.kind == Kind.CRASH:
        os.kill(pid, signal.SIGKILL)
        return Injected(time.time(), target)
    shard = tear_latest(where.ckpt_dir, where.model)
    os.kill(pid, signal.SIGKILL)
    return Injected(time.time(), f"{shard.parent.name}/{shard.name}, then {target}")


def _kill_node_of(kind: Kind, now: Placement, root: Path) -> Injected:
    if kind == Kind.SPARE_KILL:
        victims = now.spares
    elif kind == Kind.BATCH_HOST_KILL:
        victims = [now.batch_host]
    else:
        victims = [node for _, (node, _) in sorted(now.ranks.items()) if node != now.batch_host]
    if not victims:
        return Injected(time.time(), "", note=f"nothing to kill: the job holds no {'idle spare' if kind == Kind.SPARE_KILL else 'such node'}")
    at = time.time()
    devcluster.kill_node(root=root, node=victims[0])
    return Injected(at, victims[0], killed=(victims[0],))


def tear_latest(ckpt_dir: Path, model: str) -> Path:
    """Cut the first shard of the checkpoint `<model>-latest` names to half its size."""
    name = checkpoints.read_pointer(ckpt_dir, model)
    if name is None:
        raise ChaosError(f"no checkpoint of {model} to tear in {ckpt_dir}")
    shard = sorted((ckpt_dir / name).glob("*.distcp"))[0]
    os.truncate(shard, shard.stat().st_size // 2)
    return shard


def restart_controller(root: Path) -> Injected:
    """SIGKILL the cluster's slurmctld, then start it as `dev-cluster up` does (recorded in the
    cluster's record, so `down` stops the new one)."""
    current = state.load(root / "cluster.json")
    if current is None or "slurmctld" not in current.daemons:
        raise ChaosError(f"no dev cluster recorded in {root}")
    old = current.daemons["slurmctld"]
    at = time.time()
    procs.signal_record(old, signal.SIGKILL)
    wait_for("slurmctld to die", lambda: not procs.is_alive(old), timeout=30, pause=0.05)
    started = services.start_slurmctld(current.layout)
    current = state.load(root / "cluster.json") or current
    current.daemons["slurmctld"] = started
    state.save(current, current.layout.state_file)
    return Injected(at, "slurmctld", note=f"down {time.time() - at:.1f} s")


def _write(out: FileIO, size: int | None) -> None:
    """Zeros into the open file `out`: `size` bytes, or until its filesystem is full (None)."""
    block = bytes(1 << 16)
    written = 0
    try:
        while size is None or written < size:
            written += out.write(block if size is None else block[: min(len(block), size - written)])
        return
    except OSError:
        pass
    for _ in range(len(block)):  # the last partial block's room too
        try:
            out.write(b"\0")
        except OSError:
            return


def fill_during_save(where: Where) -> Injected:
    """Fill the checkpoint folder's filesystem while the next save writes, then free it
    FREE_AFTER_S later. The disk is first filled to leave the room the trainer checks for
    before a save (the last checkpoint's size and a margin), so that the save starts; the rest
    is filled as soon as the save's folder appears, which leaves its shards no room."""
    save = (where.last_step() // where.every + 1) * where.every
    wait_for(f"step {save - 2}", lambda: where.last_step() >= save - 2, timeout=300)
    latest = checkpoints.pointed_checkpoint(where.ckpt_dir, where.model)
    needed = checkpoints.dir_size(latest) if latest else 0
    folder = checkpoints.checkpoint_path(where.ckpt_dir, where.model, save)
    filler = where.ckpt_dir / _FILLER
    with open(filler, "wb", buffering=0) as out:
        _write(out, max(shutil.disk_usage(where.ckpt_dir).free - needed - slack(needed) - (256 << 10), 0))
        wait_for(f"the save of {folder.name}", folder.exists, timeout=300, pause=0.001)
        _write(out, None)
        at = time.time()
    written = (folder / checkpoints.METADATA_FILE).exists()
    time.sleep(FREE_AFTER_S)
    filler.unlink()
    note = "the save had written its shards before the disk was full" if written else ""
    return Injected(at, f"the save of {folder.name}", note=note)


def revive(root: Path, node: str) -> None:
    """Start a killed node's slurmd again; resume it where Slurm drained it; wait until it
    takes work."""
    devcluster.revive_node(root=root, node=node, progress=lambda _: None, wait=False)

    def ready() -> bool:
        try:
            states = {n.name: n.state.lower() for n in slurm_nodes.node_states()}
        except HyperlaunchError:
            return False  # slurmctld restarting
        now = states.get(node, "")
        if "drain" in now and not now.endswith("*"):
            slurm_nodes.resume([node])
        return not now.endswith("*") and any(word in now for word in ("idle", "mix", "alloc")) and "drain" not in now

    wait_for(f"{node} back in service", ready, timeout=90, pause=0.5)
