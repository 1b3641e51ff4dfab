"""A step on the idle spares that only waits, so that each spare has a step of the job while it
waits, as the training nodes have theirs.

Why: when the batch host dies, its successor marks it down and Slurm ends the job to requeue
it. A node with a step of the job answers Slurm's terminate request at once; a node with none
(an idle spare) answers inside the reply of the request sent to every node together, which
returns only when the dead batch host's connection gives up (MessageTimeout, 10 s by default,
and a second). The job stays COMPLETING all that while, and the requeued job's hold
(cred_expire) starts after it. Measured on the dev cluster: a plain job marked down ran again
9.0 s later with a waiting step on its idle node, 16.9 s without.

The step is ended before a spare is given back or takes a lost node's place (hold() with the
new spares), and at the attempt's end. It asks for no CPU of its own (--overlap), and where
a spare trains after all it has already gone."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

RELEASE_WAIT_S = 1.0
"""How long srun gets to end the waiting step (it passes TERM on to the tasks, which end at once
on live nodes) before it is killed and the step cancelled through Slurm: a dead spare's part
never answers, and the supervisor's watch of the training waits meanwhile."""


class SpareHold:
    """The waiting step on `nodes`, started by `start` (hyperlaunch.supervisor.slurm_calls.hold_nodes);
    `cancel` ends it through Slurm, not waited for, where srun did not end it."""

    def __init__(self, start: Callable[[list[str]], subprocess.Popen[bytes] | None], cancel: Callable[[], None]) -> None:
        self.start = start
        self.cancel = cancel
        self.nodes: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None

    def hold(self, nodes: Sequence[str]) -> None:
        """A waiting step on exactly `nodes`: the running one where it already holds them and
        still runs, else that one ended and a new one started (none for no nodes)."""
        wanted = list(nodes)
        if wanted == self.nodes and self.process is not None and self.process.poll() is None:
            return
        self.release()
        if wanted:
            self.process = self.start(wanted)
            self.nodes = wanted if self.process is not None else []

    def release(self) -> None:
        """End the waiting step: TERM to srun, which ends its tasks; where it has not ended after
        RELEASE_WAIT_S, srun is killed and the step cancelled (else its live part would go on
        holding a spare's memory and GPUs from the round it joins)."""
        process, self.process, self.nodes = self.process, None, []
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(RELEASE_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            self.cancel()
