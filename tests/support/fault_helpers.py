"""Drive hyperlaunch jobs on the dev cluster through faults: submit with the CLI, watch the
trainer's metrics and checkpoints, break things at chosen steps, read the outcome."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core import checkpoints
from tests.support.devcluster_helpers import DevCluster, importable_tests_env, wait_until

FAULTY_CLI = "tests.support.faulty_cli"
MODEL = "qwen3_tiny"
# Fast and deterministic: every scenario uses the same spec, so its per-step losses can be
# compared with one uninterrupted run.
TRAINER_ARGS = ["--seq-len", "32", "--micro-batch-size", "2", "--warmup-steps", "3", "--lr", "3e-3", "--min-lr", "3e-4"]
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def read_metrics(path: Path, kind: str) -> list[dict[str, Any]]:
    """A metrics.jsonl's records of one type ('step', 'event'), as far as a live run wrote them."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass  # the line being written right now
    return [r for r in rows if r.get("type") == kind]


@dataclass
class Job:
    """One submitted job and where its files are."""

    cluster: DevCluster
    workdir: Path
    job_id: str

    @property
    def run_dir(self) -> Path:
        return self.workdir / "runs" / MODEL

    @property
    def ckpt_dir(self) -> Path:
        return self.workdir / "checkpoints"

    def status(self) -> dict[str, Any]:
        result = self.cluster.hyperlaunch("status", self.job_id, "--json", cwd=self.workdir)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def metrics(self, kind: str) -> list[dict[str, Any]]:
        return read_metrics(self.run_dir / "metrics.jsonl", kind)

    def last_step(self) -> int:
        steps = self.metrics("step")
        return int(steps[-1]["step"]) if steps else 0

    def losses(self) -> dict[int, float]:
        """The loss of each step as finally trained (a repeated step keeps its last value)."""
        return {int(r["step"]): float(r["loss"]) for r in self.metrics("step")}

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.metrics("event") if e.get("event") == name]

    def pointer_step(self) -> int | None:
        name = checkpoints.read_pointer(self.ckpt_dir, MODEL)
        return checkpoints.parse_step(name, MODEL) if name else None

    def running_nodes(self) -> list[str]:
        """The nodes of the current attempt once it is RUNNING, else []: state and nodes in one
        squeue answer (asked apart, a requeue in between gave the last attempt's nodes, which
        another test's job may hold by then)."""
        state, _, nodes = self.cluster.job_field(self.job_id, "%T|%N").partition("|")
        if state != "RUNNING" or not nodes:
            return []
        return self.cluster.run("scontrol", "show", "hostnames", nodes).split()

    def wait_step(self, step: int, timeout: float = 240) -> None:
        wait_until(lambda: self.last_step() >= step, timeout, f"job {self.job_id} to reach step {step}", interval=0.2)

    def wait_final(self, timeout: float = 400) -> dict[str, Any]:
        wait_until(lambda: self.status()["state"] in FINAL_STATES, timeout, f"job {self.job_id} to end", interval=2)
        return self.status()


def submit(
    cluster: DevCluster,
    workdir: Path,
    *flags: str,
    max_steps: int,
    checkpoint_every: int,
    extra: list[str] | None = None,
    submit_env: dict[str, str] | None = None,
) -> Job:
    """`hyperlaunch submit` of the scenarios' spec, its trainer run through the tests' fault
    entry module (HYPERLAUNCH_TEST_* in `--env` flags or submit_env, which sbatch exports)."""
    workdir.mkdir(parents=True, exist_ok=True)
    result = cluster.hyperlaunch(
        "submit", "--model", MODEL, "--nodes", "2", "--exclusive", "--max-steps", str(max_steps), "--json", *flags,
        "--", *TRAINER_ARGS, "--checkpoint-every", str(checkpoint_every), *(extra or []),
        cwd=workdir, extra_env={**importable_tests_env(), **(submit_env or {})}, module=FAULTY_CLI,
    )
    assert result.returncode == 0, result.stderr
    return Job(cluster, workdir, json.loads(result.stdout)["job_id"])


def nodes_with_a_spare(job: Job) -> list[str]:
    """The nodes of a running job with one spare: the trainers run on the first two, the third waits."""
    nodes: list[str] = []
    wait_until(lambda: bool(nodes.extend(job.running_nodes()) or nodes), 60, "the job to run")
    assert len(nodes) == 3, nodes
    return nodes


def kill_a_node_of(job: Job) -> str:
    """Kill the second node of the job's running attempt (the first hosts the batch script),
    once Slurm has that node running this job alone: the tests that run at once share the
    cluster, and a node another test's job holds must never be the one killed."""
    nodes: list[str] = []

    def only_this_job() -> bool:
        nodes[:] = job.running_nodes()
        held = job.cluster.run("squeue", "-h", "-w", nodes[-1], "-o", "%A", check=False).split() if nodes else []
        return bool(nodes) and set(held) == {job.job_id}

    wait_until(only_this_job, 60, "the job to run")
    victim = nodes[-1]
    kill_node(job.cluster, victim)
    return victim


def kill_node(cluster: DevCluster, node: str) -> None:
    """`dev-cluster kill-node`, the node drained first. The tests that run at once share the
    cluster, and until Slurm finds a node dead it gives it to the next job that fits: another
    test's job then lost a node, or a spare, that its test never touched. Drained, the node
    ends its own job's step as before; `revive` returns it to service."""
    cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=killed-by-a-test")
    result = cluster.cli("dev-cluster", "kill-node", node)
    assert result.returncode == 0, result.stderr


def revive(cluster: DevCluster, node: str) -> None:
    """Start a killed node's slurmd again and return it to service (kill_node drained it)."""
    result = cluster.cli("dev-cluster", "revive-node", node, "--no-wait")
    assert result.returncode == 0, result.stderr
    cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)  # refused where not drained
    wait_until(lambda: cluster.node_states().get(node) in ("idle", "mixed", "allocated"), 60, f"{node} back in service")


def assert_losses_match(job: Job, reference: dict[int, float]) -> None:
    losses = job.losses()
    assert sorted(losses) == sorted(reference), (sorted(set(reference) ^ set(losses)))
    for step, loss in reference.items():
        assert abs(losses[step] - loss) <= 1e-6 * max(1.0, abs(loss)), (step, losses[step], loss)


def wait_attempts(job: Job, count: int, timeout: float = 200) -> None:
    """Until the job has started its count-th attempt (restart count count-1)."""
    wait_until(lambda: len(job.status()["attempts"]) >= count and job.status()["state"] == "RUNNING", timeout, f"attempt {count} of job {job.job_id}", interval=1)

