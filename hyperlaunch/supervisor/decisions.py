"""The supervisor's decisions, as pure functions: what to do when a round of trainers ends,
which spare takes a lost node's place, which nodes the requeued job stays away from. The
budget arithmetic and the vocabulary (causes, actions, verdicts) are the protocol's
(hyperlaunch.core.protocol, hyperlaunch.core.trainer_failures), which `status` reads too."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE, RestartCause
from hyperlaunch.core.trainer_failures import FailureKind


@dataclass(frozen=True)
class RoundEnd:
    """How a round of trainers ended, as the supervisor saw it."""

    status: int
    """srun's exit status (128 + the signal when it was killed)."""
    lost: tuple[str, ...] = ()
    """Nodes the probe found gone while the step still ran (the step was then ended)."""
    failure_kind: str = ""
    """The kind in the round's trainer failure record, '' when none was written."""
    failure_final: bool = False
    """The record's verdict is `final`: no attempt can fix it."""
    save_requested: bool = False
    """The save signal (Slurm's warning before the time limit) reached the supervisor."""
    requeue_requested: bool = False
    """Rank 0 saved after a stop signal (its request file)."""
    in_row: int = 0
    """Rounds restarted in a row inside this allocation without a new checkpoint."""
    restarts_in_allocation: int = 0
    """How many such rounds the job allows before going through the queue."""
    repeated: bool = False
    """The round's failure record is the round before's again: the same retried error at the
    same step (TrainerFailure.repeats)."""


@dataclass(frozen=True)
class Decision:
    """What comes after a round."""

    action: str
    """`exit` (the job ends with the step's status), `requeue` (within the budget), `lost`
    (a spare takes the lost nodes' place, else requeue away from them), `restart` (another
    round here) or `torn` (the checkpoint the round loaded is set aside, then another round
    here, none of the budget spent)."""
    cause: RestartCause
    fields: str = ""
    """More attempt-marker fields, `key=value ...`."""
    nodes: tuple[str, ...] = ()
    """`lost`: the nodes lost."""


def after_round(end: RoundEnd, down_nodes: Callable[[], Sequence[str]]) -> Decision:
    """The decision for a round that ended; `down_nodes` asks Slurm which of the job's nodes it
    marked down (asked only where it decides, and once)."""
    if end.status == 0:
        return Decision("exit", RestartCause.COMPLETED)
    answers: list[tuple[str, ...]] = []

    def down() -> tuple[str, ...]:
        if not answers:
            answers.append(tuple(down_nodes()))
        return answers[0]

    if not end.lost and end.failure_final and not down():
        # Input no attempt can fix (flags, data, model, checkpoint folder): the job ends now,
        # whatever the budget allows. Ahead of a stop signal, because a trainer that stopped
        # for the signal records nothing. Behind a down node, which may have caused it; the
        # next attempt meets the error again on healthy nodes.
        return Decision("exit", RestartCause.TRAINER_ERROR, f"kind={end.failure_kind}")
    if end.save_requested:
        return Decision("requeue", RestartCause.TIME_LIMIT)
    if end.requeue_requested or end.status == REQUEUE_EXIT_CODE:
        return Decision("requeue", RestartCause.REQUEUE_REQUESTED)
    # A node Slurm lists down, drained, failed or not responding is lost like one the probe
    # found: Slurm requeues the job itself only once it marks a node of the allocation DOWN,
    # never for a drained one, nor for one that answers again before SlurmdTimeout (a spare
    # that was dead when the job started, and revived: the job would end FAILED).
    lost = end.lost or down()
    if lost:
        return Decision("lost", RestartCause.NODE_FAILURE, "nodes=" + ",".join(lost), lost)
    if end.failure_kind == FailureKind.CHECKPOINT_TORN.value:
        # The checkpoint's fault, not the training's: set aside, the round starts again from the
        # one before, and no budget is spent (each torn checkpoint is set aside once).
        return Decision("torn", RestartCause.CHECKPOINT_TORN)
    if end.repeated:
        # The same error at the same step as the round before, on nodes that are up: the code or
        # the data, not the machine; every restart would meet it again and spend the budget.
        return Decision("exit", RestartCause.TRAINER_ERROR, f"kind={end.failure_kind} repeated=1")
    # A `retry` record (the node, a hang, an unexpected error) is a crash like any other: first
    # inside the allocation, then through the queue.
    cause = RestartCause.HANG if end.failure_kind == FailureKind.HANG.value else RestartCause.CRASH
    if end.in_row < end.restarts_in_allocation:
        return Decision("restart", cause, f"in_row={end.in_row + 1}")
    return Decision("requeue", cause)


@dataclass(frozen=True)
class Replacement:
    nodes: tuple[str, ...]
    """The next round's nodes: the survivors, each lost one replaced by a spare in its place."""
    replaced_by: tuple[str, ...]
    """The spares that came in."""
    spares_left: tuple[str, ...]


def replace_lost(round_nodes: Sequence[str], lost: Sequence[str], spares: Sequence[str]) -> Replacement:
    """Each lost node of the round replaced by the next spare, in its place (ranks keep their
    order); a lost node with no spare left is dropped, so the round comes up short."""
    left = list(spares)
    nodes, replaced = [], []
    for node in round_nodes:
        if node not in lost:
            nodes.append(node)
        elif left:
            replaced.append(left[0])
            nodes.append(left.pop(0))
    return Replacement(tuple(nodes), tuple(replaced), tuple(left))


@dataclass(frozen=True)
class Exclusions:
    nodes: tuple[str, ...]
    """The job's excluded nodes from now on."""
    dropped: tuple[str, ...]
    """Earlier exclusions let go, so that the partition keeps room for the job."""
    room: int


def exclusions(current: Sequence[str], lost: Sequence[str], user_excluded: Sequence[str], partition_nodes: int, job_nodes: int) -> Exclusions:
    """The job's excluded nodes after adding `lost` to `current`, bounded so that the partition
    keeps `job_nodes` (training nodes and spares) for the job: the oldest exclusions go first,
    the user's own (--exclude) never."""
    listed = list(dict.fromkeys([*current, *lost]))
    room = max(partition_nodes - job_nodes, 0)
    kept = [node for node in listed if node in user_excluded]
    dropped = []
    for node in reversed(listed):
        if node in user_excluded:
            continue
        if len(kept) < room:
            kept.append(node)
        else:
            dropped.append(node)
    return Exclusions(tuple(kept), tuple(dropped), room)


PORT_FIRST = 20000
PORT_COUNT = 10000
"""Rendezvous ports: 20000-29999, below Linux's ephemeral range (32768 and up), where no
outgoing connection takes one by chance."""
ROUNDS_PER_JOB = 16
PORT_TRIES = 64


def job_port(job_id: str, round_: int) -> int:
    """A round's own rendezvous port, derived from the job id: jobs sharing a host (the dev
    cluster, single-node jobs packed on one node) mostly keep apart, and each round of trainers
    in an allocation gets a port of its own (the last round's store may still hold its port)."""
    job = int(job_id) if job_id.isdigit() else 0
    return PORT_FIRST + (job * ROUNDS_PER_JOB + round_ % ROUNDS_PER_JOB) % PORT_COUNT


def rendezvous_port(job_id: str, round_: int, in_use: Callable[[int], bool]) -> int:
    """The port a round rendezvouses on: its job's port, or where that one is in use on the
    head node (another job whose id differs by a multiple of 625, any other service) the next
    free one after it. The job's port when none of PORT_TRIES is free: torchrun then says why."""
    first = job_port(job_id, round_)
    for step in range(PORT_TRIES):
        port = PORT_FIRST + (first - PORT_FIRST + step) % PORT_COUNT
        if not in_use(port):
            return port
    return first


def slurm_job(environ: Mapping[str, str], *, sweep_element: bool) -> str:
    """How the supervisor's Slurm commands name its job: `12_3` for a sweep's element (a job
    array's task), else SLURM_JOB_ID. The task that starts last runs under the array's own job
    id, and `scontrol requeue 12` or `update JobId=12` would act on every task of the array,
    the other elements' running trainings too. Only a sweep's element reads SLURM_ARRAY_*: a
    job submitted from inside another array's task inherits that task's."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
    if sweep_element and array.isdigit() and task.isdigit():
        return f"{array}_{task}"
    return environ.get("SLURM_JOB_ID", "")
