"""Every Slurm command the supervisor runs, in one module: the job's side of the
hyperlaunch <-> Slurm boundary (the launcher's side is hyperlaunch.slurm.runner, which the
supervisor cannot import: it runs on the batch host's python3, standard library only).

Each call answers plainly (a list, a string, a bool) and never raises on Slurm's refusal: the
supervisor decides what a missing answer means. scontrol writes resize scripts into its working
folder on a node-list update, so that one runs in a scratch folder."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from hyperlaunch.core.slurm_states import command_environment

DOWN_NODE_STATES = "down,drain,fail,no_respond"


def _run(args: list[str], cwd: str | None = None) -> tuple[int, str]:
    """(exit status, stdout and stderr together); 127 when the command is missing."""
    try:
        done = subprocess.run(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd, env=command_environment(args[0], os.environ), check=False,
        )
    except OSError as err:
        return 127, str(err)
    return done.returncode, done.stdout


def _fields(text: str) -> dict[str, str]:
    """`Key=Value` words of scontrol's `show` output (the first of each key)."""
    found: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in found:
            found[key] = value
    return found


def hostnames(nodelist: str) -> list[str]:
    """The node names of a Slurm hostlist (`node[1-3]`); none for an empty one or on error."""
    if not nodelist:
        return []
    status, out = _run(["scontrol", "show", "hostnames", nodelist])
    return out.split() if status == 0 else []


def node_address(node: str) -> tuple[str | None, str | None]:
    """(NodeAddr, Port) of a node as scontrol shows it; None for what it does not say."""
    status, out = _run(["scontrol", "show", "node", node])
    if status != 0:
        return None, None
    fields = _fields(out)
    return fields.get("NodeAddr") or None, fields.get("Port") or None


def slurmd_port() -> str | None:
    """SlurmdPort of the cluster's configuration, for nodes whose own record names none."""
    status, out = _run(["scontrol", "show", "config"])
    if status != 0:
        return None
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "SlurmdPort":
            return value.strip() or None
    return None


def excluded_nodes(job_id: str) -> list[str]:
    """The job's ExcNodeList, expanded."""
    status, out = _run(["scontrol", "show", "job", job_id])
    current = _fields(out).get("ExcNodeList", "") if status == 0 else ""
    return hostnames("" if current == "(null)" else current)


def partition_size(partition: str) -> int:
    """The nodes of a partition (sinfo's %D, summed over its lines); 0 when unknown."""
    status, out = _run(["sinfo", "-h", "-p", partition, "-o", "%D"])
    if status != 0:
        return 0
    return sum(int(word) for word in out.split() if word.isdigit())


def down_nodes(nodelist: str) -> list[str]:
    """The nodes of `nodelist` that Slurm marked down, drained, failed or not responding."""
    if not nodelist:
        return []
    status, out = _run(["sinfo", "-h", "-N", "-n", nodelist, "-t", DOWN_NODE_STATES, "-o", "%N"])
    return sorted(set(out.split())) if status == 0 else []


def requeue(job_id: str) -> bool:
    return _run(["scontrol", "requeue", job_id])[0] == 0


EXCLUDE_TRIES = 5
EXCLUDE_PAUSE_S = 0.5


def exclude_nodes(job_id: str, nodes: list[str]) -> bool:
    """Set the job's excluded nodes: a running job's cannot change, so this runs after the
    requeue, while Slurm completes the attempt. The requeue's SIGTERM reaches every process of
    the job, an scontrol running at that moment too (exit 143: the killed node was then given
    the next start again, 1 time in 3 in a trial), so it is tried again a few times."""
    for tried in range(1, EXCLUDE_TRIES + 1):
        if _run(["scontrol", "update", "JobId=" + job_id, "ExcNodeList=" + ",".join(nodes)])[0] == 0:
            return True
        if tried < EXCLUDE_TRIES:
            time.sleep(EXCLUDE_PAUSE_S)
    return False


def shrink_to(job_id: str, nodes: list[str]) -> bool:
    """Give the allocation's other nodes back: Slurm then never waits on a lost one."""
    with tempfile.TemporaryDirectory() as scratch:
        return _run(["scontrol", "update", "JobId=" + job_id, "NodeList=" + ",".join(nodes)], cwd=scratch)[0] == 0


def job_state(job_id: str) -> str:
    """Slurm's state of a job: what squeue names, ENDED once Slurm no longer knows it, UNKNOWN
    when squeue cannot tell. A job array's own id lists every task: the state is that of the
    one whose job id it is (%A), never another element's (none listed: it ended)."""
    status, out = _run(["squeue", "-h", "-j", job_id, "--states=all", "-o", "%A|%T"])
    if status != 0:
        return "ENDED" if "Invalid job id" in out else "UNKNOWN"
    rows = [line.strip().split("|", 1) for line in out.splitlines() if "|" in line]
    own = [state.strip() for listed, state in rows if listed == job_id and state.strip()]
    return own[0] if own else "ENDED"


KEEPERS_STEP = "hyperlaunch-keepers"
"""The name of the step that runs the keepers (start_step_on_each): no round's step."""


def job_steps(job_id: str) -> list[str]:
    """The job's rounds' steps (`12.0`, `12.1`): not the batch and extern ones, nor the keepers'."""
    status, out = _run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i %j"])
    if status != 0:
        return []
    steps = [line.split(None, 1) for line in out.splitlines() if line.strip()]
    return [step[0] for step in steps if not step[0].endswith((".batch", ".extern")) and step[1:] != [KEEPERS_STEP]]


def kill_step_in_background(step: str) -> subprocess.Popen[bytes] | None:
    """`scancel -s KILL step`, not waited for: scancel answers only once every node of the
    step did or timed out (MessageTimeout, 10 s by default), and a dead node never answers."""
    try:
        return subprocess.Popen(
            ["scancel", "-s", "KILL", step], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=command_environment("scancel", os.environ),
        )
    except OSError:
        return None


def start_step_on_each(nodes: list[str], command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    """A step of one task on each of `nodes` that lasts as long as the job (the keepers): beside
    the rounds' steps (--overlap, no memory of its own counted), and kept when one of its nodes
    fails (--no-kill: the others' tasks hold what the failed node's peers need). None where srun
    cannot start."""
    count = str(len(nodes))
    argv = [
        "srun", f"--job-name={KEEPERS_STEP}", "--overlap", "--mem=0", "--no-kill", "--kill-on-bad-exit=0", f"--nodes={count}", f"--ntasks={count}",
        "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", *command,
    ]
    try:
        return subprocess.Popen(argv, env=command_environment("srun", env), stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
