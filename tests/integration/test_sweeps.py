"""Sweeps on the dev cluster, with the real CLI and trainer: a 2x2 grid as one Slurm job array,
at most --max-parallel elements at once, each a training of its own (its checkpoints and
pointer, its run folder, its options); a node killed under one element requeues that element
only, and it ends with the losses of an undisturbed run of it; `resume` after two elements were
cancelled submits exactly those two again."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hyperlaunch.core import checkpoints
from tests.support.devcluster_helpers import DevCluster, importable_tests_env, wait_until
from tests.support.fault_helpers import (
    FAULTY_CLI,
    FINAL_STATES,
    MODEL,
    TRAINER_ARGS,
    kill_node,
    read_metrics,
    revive,
    submit,
)

pytestmark = pytest.mark.integration

GRID = ("--grid", "lr=1e-3,3e-3", "--grid", "seed=1,2")
NAMES = [f"{MODEL}-lr{lr}-seed{seed}" for lr in ("1e-3", "3e-3") for seed in (1, 2)]


class Sweep:
    """One submitted sweep and where its elements' files are."""

    def __init__(self, cluster: DevCluster, workdir: Path, job_id: str) -> None:
        self.cluster, self.workdir, self.job_id = cluster, workdir, job_id

    def status(self, job_id: str | None = None) -> dict[str, Any]:
        result = self.cluster.hyperlaunch("status", job_id or self.job_id, "--json", cwd=self.workdir)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def element(self, index: int) -> dict[str, Any]:
        return self.status()["elements"][index]

    def metrics(self, name: str, kind: str) -> list[dict[str, Any]]:
        return read_metrics(self.workdir / "runs" / MODEL / name.removeprefix(f"{MODEL}-") / "metrics.jsonl", kind)

    def losses(self, name: str) -> dict[int, float]:
        return {int(r["step"]): float(r["loss"]) for r in self.metrics(name, "step")}

    def pointer_step(self, name: str) -> int | None:
        pointed = checkpoints.read_pointer(self.workdir / "checkpoints", name)
        return checkpoints.parse_step(pointed, name) if pointed else None

    def wait_final(self, job_id: str | None = None, timeout: float = 600) -> dict[str, Any]:
        def ended() -> bool:
            doc = self.status(job_id)
            return all(e["state"] in FINAL_STATES for e in doc["elements"])

        wait_until(ended, timeout, f"sweep {job_id or self.job_id} to end", interval=2)
        return self.status(job_id)


def start_sweep(cluster: DevCluster, workdir: Path, *flags: str, nodes: int, max_steps: int, checkpoint_every: int) -> Sweep:
    """`hyperlaunch sweep` of the 2x2 grid, two elements at a time, its trainers through the
    tests' fault entry module (HYPERLAUNCH_TEST_* in --env flags)."""
    workdir.mkdir(parents=True, exist_ok=True)
    result = cluster.hyperlaunch(
        "sweep", "--model", MODEL, "--nodes", str(nodes), "--exclusive", "--max-steps", str(max_steps), *GRID, "--max-parallel", "2",
        "--json", *flags, "--", *TRAINER_ARGS, "--checkpoint-every", str(checkpoint_every),
        cwd=workdir, extra_env=importable_tests_env(), module=FAULTY_CLI,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["array"] == "0-3%2" and [e["name"] for e in doc["elements"]] == NAMES
    return Sweep(cluster, workdir, doc["job_id"])


def most_at_once(elements: list[dict[str, Any]]) -> int:
    """The most attempts of the elements that ran at the same time, from their start and end as
    `status` has them (sacct's own times for a requeued task whose allocation shrank first run
    on past the requeue)."""
    moments = []
    for element in elements:
        for attempt in element["attempts"]:
            if attempt["start"] not in ("", "Unknown", "None"):
                moments += [(datetime.fromisoformat(attempt["start"]), 1), (datetime.fromisoformat(attempt["end"]), -1)]
    running = most = 0
    for _, change in sorted(moments):  # an end sorts before a start at the same second
        running += change
        most = max(most, running)
    return most


STEPS = 40
EVERY = 10


# Solo: it kills a node and counts each element's attempts. Beside other tests that kill nodes,
# Slurm once placed an element on a node another test had just killed, before it was marked down,
# and then held that element as never runnable: one more attempt than this test is about.
@pytest.mark.solo
def test_a_sweep_runs_each_element_as_its_own_training_and_a_lost_node_requeues_one(dev_cluster: DevCluster, tmp_path: Path) -> None:
    slow = ("--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3")
    sweep = start_sweep(dev_cluster, tmp_path / "sweep", *slow, nodes=2, max_steps=STEPS, checkpoint_every=EVERY)
    # The undisturbed run of element 0 (lr 1e-3, seed 1), as a job of its own, meanwhile.
    reference = submit(dev_cluster, tmp_path / "reference", max_steps=STEPS, checkpoint_every=EVERY, extra=["--lr", "1e-3", "--seed", "1"])
    victim_name = NAMES[0]
    wait_until(lambda: sweep.pointer_step(victim_name) == EVERY, 300, f"{victim_name}'s step-10 checkpoint", interval=0.1)
    element = sweep.element(0)
    assert element["state"] == "RUNNING", element
    nodes = dev_cluster.run("scontrol", "show", "hostnames", dev_cluster.job_field(element["job_id"], "%N")).split()
    victim = nodes[-1]  # not the batch host: the element's supervisor sees it go
    kill_node(dev_cluster, victim)
    try:
        # Back as soon as the element has left it: the cluster is shared with other tests' jobs.
        wait_until(lambda: bool(sweep.element(0)["restarts"]), 180, "element 0 to be requeued", interval=1)
    finally:
        revive(dev_cluster, victim)
    final = sweep.wait_final()
    assert final["state"] == "COMPLETED", json.dumps(final, indent=1)[:4000]
    elements = final["elements"]
    assert most_at_once(elements) <= 2
    assert [e["name"] for e in elements] == NAMES and all(e["state"] == "COMPLETED" for e in elements)
    # The lost node requeued element 0 only; it went on from its own checkpoint.
    assert [(r["cause"], r["nodes"]) for r in elements[0]["restarts"]] == [("node failure", [victim])]
    assert [len(e["attempts"]) for e in elements] == [2, 1, 1, 1]
    assert all(e["restarts"] == [] and e["restarts_in_allocation"] == [] for e in elements[1:])
    resumed = [e["step"] for e in sweep.metrics(victim_name, "event") if e.get("event") == "resumed"]
    assert resumed and resumed[0] >= EVERY
    assert reference.wait_final()["state"] == "COMPLETED"
    reference_losses = reference.losses()
    assert sorted(reference_losses) == list(range(1, STEPS + 1))
    losses = sweep.losses(victim_name)
    assert sorted(losses) == sorted(reference_losses)
    for step, loss in reference_losses.items():
        assert abs(losses[step] - loss) <= 1e-6 * max(1.0, abs(loss)), (step, losses[step], loss)
    # Each element its own training: its pointer and final checkpoint, its options.
    for index, name in enumerate(NAMES):
        assert sweep.pointer_step(name) == STEPS, name
        started = [e for e in sweep.metrics(name, "event") if e.get("event") == "started"]
        assert started and started[0]["message"].startswith(f"training {name} from step 0"), started[:1]
        peak = max(r["lr"] for r in sweep.metrics(name, "step"))
        assert abs(peak - float(elements[index]["values"]["lr"])) < 1e-9, (name, peak)
    first_losses = {name: sweep.losses(name)[1] for name in NAMES}
    assert first_losses[NAMES[0]] != first_losses[NAMES[1]], "seeds 1 and 2 start from other weights"
    logs = [dev_cluster.hyperlaunch("logs", f"{sweep.job_id}_{i}", cwd=sweep.workdir).stdout for i in range(4)]
    assert "===== attempt 1 on " in logs[0] and all("===== attempt 1 " not in log for log in logs[1:])
    shown = dev_cluster.hyperlaunch("status", sweep.job_id, cwd=sweep.workdir).stdout
    assert f"sweep {sweep.job_id}: 4 x" in shown and "COMPLETED" in shown.splitlines()[0]


def test_resume_after_two_elements_were_cancelled_submits_exactly_those_two(dev_cluster: DevCluster, tmp_path: Path) -> None:
    slow = ("--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.2")
    sweep = start_sweep(dev_cluster, tmp_path, *slow, nodes=1, max_steps=20, checkpoint_every=5)
    wait_until(lambda: (sweep.pointer_step(NAMES[1]) or 0) >= 5, 300, f"{NAMES[1]}'s first checkpoint", interval=0.2)
    # Element 3 waits for a slot (--max-parallel 2); element 1 trains.
    for task in (f"{sweep.job_id}_3", f"{sweep.job_id}_1"):
        cancelled = dev_cluster.hyperlaunch("cancel", task, cwd=tmp_path)
        assert cancelled.returncode == 0 and f"cancelled element {task}" in cancelled.stdout, cancelled.stderr
    first = sweep.wait_final()
    assert [e["state"] for e in first["elements"]] == ["COMPLETED", "CANCELLED", "COMPLETED", "CANCELLED"]
    resumed = dev_cluster.hyperlaunch("resume", sweep.job_id, "--json", cwd=tmp_path, extra_env=importable_tests_env())
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert doc["array"] == "1,3%2" and [e["name"] for e in doc["elements"]] == [NAMES[1], NAMES[3]]
    again = sweep.wait_final(doc["job_id"])
    assert [(e["task"], e["state"]) for e in again["elements"]] == [(f"{doc['job_id']}_1", "COMPLETED"), (f"{doc['job_id']}_3", "COMPLETED")]
    assert again["resumed_from_job"] == sweep.job_id
    # An element's own job id (sacct: JobID S_2, JobIDRaw J) names the element.
    own = first["elements"][0]["job_id"]  # started first: split off the array under a new id
    assert own != sweep.job_id and sweep.status(own)["job_id"] == own and sweep.status(own)["name"] == NAMES[0]
    # Element 1 went on from its own checkpoint, element 3 started; 0 and 2 never ran again.
    runs = {name: [e["event"] for e in sweep.metrics(name, "event") if e.get("event") in ("started", "resumed")] for name in NAMES}
    assert [runs[name] for name in NAMES] == [["started"], ["started", "resumed"], ["started"], ["started"]], runs
    assert [e["step"] for e in sweep.metrics(NAMES[1], "event") if e.get("event") == "resumed"][0] >= 5
    assert all(sweep.pointer_step(name) == 20 for name in NAMES)
    # Pruning the sweep keeps each element's newest checkpoint, by its own name.
    pruned = dev_cluster.hyperlaunch("checkpoints", sweep.job_id, "--prune", "1", "--yes", "--json", cwd=tmp_path)
    assert pruned.returncode == 0, pruned.stderr
    assert [m["kept"] for m in json.loads(pruned.stdout)["models"]] == [[f"{name}-20steps"] for name in NAMES]
    nothing = dev_cluster.hyperlaunch("resume", doc["job_id"], cwd=tmp_path)
    assert nothing.returncode == 2 and "every element of sweep" in nothing.stderr and "nothing to resume" in nothing.stderr
    one = dev_cluster.hyperlaunch("resume", f"{doc['job_id']}_3", cwd=tmp_path)
    assert one.returncode == 2 and f"element {doc['job_id']}_3 completed; nothing to resume" in one.stderr, one.stderr
    further = dev_cluster.hyperlaunch("resume", f"{doc['job_id']}_3", "--max-steps", "25", "--dry-run", "--json", cwd=tmp_path)
    assert further.returncode == 0 and json.loads(further.stdout)["array"] == "3%2", further.stderr


def test_a_requeue_asked_by_the_element_holding_the_arrays_own_job_id_requeues_that_element_only(dev_cluster: DevCluster, tmp_path: Path) -> None:
    # The last task of an array to start runs under the array's own job id; `scontrol requeue`
    # of that id requeues every task of the array, the others' running trainings too.
    workdir = tmp_path / "sweep"
    workdir.mkdir()
    result = dev_cluster.hyperlaunch(
        "sweep", "--model", MODEL, "--nodes", "1", "--max-steps", "20", "--grid", "lr=1e-3,3e-3", "--max-parallel", "2",
        "--restarts-in-allocation", "0", "--json",
        "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3", "--env", "HYPERLAUNCH_TEST_CRASH_AT_STEP=6", "--env", "HYPERLAUNCH_TEST_CRASH_RANK=0",
        "--env", "HYPERLAUNCH_TEST_CRASH_TASK=1", "--", *TRAINER_ARGS, "--checkpoint-every", "5",
        cwd=workdir, extra_env=importable_tests_env(), module=FAULTY_CLI,
    )
    assert result.returncode == 0, result.stderr
    sweep = Sweep(dev_cluster, workdir, json.loads(result.stdout)["job_id"])
    names = [f"{MODEL}-lr{lr}" for lr in ("1e-3", "3e-3")]
    final = sweep.wait_final()
    jobs = {e["task"]: e["job_id"] for e in final["elements"]}
    assert jobs[f"{sweep.job_id}_1"] == sweep.job_id, jobs  # element 1 started last: it holds the array's id
    assert [e["state"] for e in final["elements"]] == ["COMPLETED", "COMPLETED"], final["elements"]
    assert [[a["restart"] for a in e["attempts"]] for e in final["elements"]] == [[0], [0, 1]], final["elements"]
    runs = {name: [e["event"] for e in sweep.metrics(name, "event") if e.get("event") in ("started", "resumed")] for name in names}
    assert runs == {names[0]: ["started"], names[1]: ["started", "resumed"]}, runs
