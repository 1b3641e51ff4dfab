"""The chaos benchmark's faults and the seeded plan of them: which kind, in which order, at
which step, on which rank. Pure: no cluster, no clock (hyperlaunch.bench.chaos runs the plan)."""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass


class Kind(str, enum.Enum):
    """A fault the benchmark injects from outside the job while it trains."""

    NODE_KILL = "node-kill"
    BATCH_HOST_KILL = "batch-host-kill"
    SPARE_KILL = "spare-kill"
    HANG = "hang"
    CRASH = "crash"
    CONTROLLER_RESTART = "controller-restart"
    TORN_CHECKPOINT = "torn-checkpoint"
    DISK_FULL = "disk-full"

    @property
    def words(self) -> str:
        return _WORDS[self]


_WORDS = {
    Kind.NODE_KILL: "a training node's slurmd and processes killed (not the batch host)",
    Kind.BATCH_HOST_KILL: "the batch host killed (the supervisor's node, rank 0's too)",
    Kind.SPARE_KILL: "the idle spare's node killed",
    Kind.HANG: "a trainer rank stopped (SIGSTOP) and left stopped",
    Kind.CRASH: "a trainer rank killed (SIGKILL)",
    Kind.CONTROLLER_RESTART: "slurmctld killed (SIGKILL) and started again",
    Kind.TORN_CHECKPOINT: "a shard of the checkpoint -latest names cut to half, then a rank killed",
    Kind.DISK_FULL: "the checkpoint folder's filesystem filled while a save runs, freed 5 s later",
}

ALL_KINDS = tuple(Kind)
_SPARE_BACK = (Kind.BATCH_HOST_KILL, Kind.DISK_FULL)
"""Faults after which the job starts again from the queue with a spare: Slurm requeues a job
whose batch host died, and the benchmark resumes a job a full disk ended."""
_MAX_DRAWS = 1000
MARGIN_STEPS = 10
"""A fault lands at least this many steps away from a checkpoint: a fault at a save is the
full disk's alone."""


@dataclass(frozen=True, kw_only=True)
class Fault:
    """One fault of the plan."""

    index: int
    """Its place in the plan, from 0."""
    kind: Kind
    target_step: int
    """Injected once the job has trained past this step (a full disk: at the next save after it)."""
    rank: int
    """The trainer rank a hang, crash or torn checkpoint's crash hits."""


def spare_left(kinds: Sequence[Kind]) -> bool:
    """Whether every idle-spare kill in `kinds`, in that order, finds the job holding a spare.
    A node kill takes the spare (it replaces the dead node), or, with none left, has the job
    requeued, which brings one; a batch host's death (a requeue) and a full disk (a resume)
    bring one too."""
    spare = True
    for kind in kinds:
        if kind == Kind.SPARE_KILL and not spare:
            return False
        if kind == Kind.NODE_KILL:
            spare = not spare
        elif kind == Kind.SPARE_KILL:
            spare = False
        elif kind in _SPARE_BACK:
            spare = True
    return True


def _kinds(count: int, kinds: Sequence[Kind], rng: random.Random) -> list[Kind]:
    """`count` kinds: `kinds` in a shuffled order, again and again, cut at `count`; drawn again
    until every idle-spare kill finds a spare (at most _MAX_DRAWS times, then the last draw)."""
    drawn: list[Kind] = []
    for _ in range(_MAX_DRAWS):
        drawn = []
        while len(drawn) < count:
            block = list(kinds)
            rng.shuffle(block)
            drawn += block
        drawn = drawn[:count]
        if spare_left(drawn):
            break
    return drawn


def plan(count: int, seed: int, every: int, kinds: Sequence[Kind] = ALL_KINDS) -> list[Fault]:
    """The faults of a run with a checkpoint every `every` steps: fault i lands in checkpoint
    interval i + 1 (steps (i+1)*every to (i+2)*every, MARGIN_STEPS away from either end), so a
    checkpoint completes between two faults and the first has one to go back to."""
    if count < 0 or every <= 2 * MARGIN_STEPS or not kinds:
        raise ValueError(f"need faults >= 0, a checkpoint interval > {2 * MARGIN_STEPS} steps and a kind; got {count}, {every}, {list(kinds)}")
    rng = random.Random(seed)
    order = _kinds(count, kinds, rng)
    faults = []
    for index, kind in enumerate(order):
        start = (index + 1) * every
        faults.append(Fault(
            index=index, kind=kind, target_step=rng.randint(start + MARGIN_STEPS, start + every - MARGIN_STEPS), rank=rng.randrange(2),
        ))
    return faults


def total_steps(count: int, every: int) -> int:
    """The run's --max-steps: a clean interval before the first fault's and one after the last's."""
    return (count + 2) * every
