"""`hyperlaunch goodput` on a real training: a crashed rank, a hung rank and a killed node in one
job; every part of the ledger is there, the parts add up to the wall time, and the steps it
counts as recomputed are the steps the metrics hold twice. The supervisor's decision records
name each restart with the times of its phases, and `status --json` carries the ledger. A
`resume` of the training makes one ledger of both jobs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hyperlaunch.core.decision_records import read_decisions
from tests.support.devcluster_helpers import DevCluster, importable_tests_env
from tests.support.fault_helpers import FAULTY_CLI, Job, kill_a_node_of, revive, submit

pytestmark = pytest.mark.integration


def test_a_crash_a_hang_and_a_node_kill_are_each_a_row_and_the_parts_add_up(dev_cluster: DevCluster, tmp_path: Path) -> None:
    job = submit(
        dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3",
        "--env", "HYPERLAUNCH_TEST_CRASH_AT_STEP=8", "--env", "HYPERLAUNCH_TEST_HANG_AT_STEP=14",
        max_steps=40, checkpoint_every=5, extra=["--hang-timeout", "5", "--hang-floor", "8"],
    )
    job.wait_step(22)
    victim = kill_a_node_of(job)
    try:
        final = job.wait_final()
    finally:
        revive(dev_cluster, victim)
    assert final["state"] == "COMPLETED", final

    shown = dev_cluster.hyperlaunch("goodput", job.job_id, "--json", "-o", str(tmp_path / "goodput.png"), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    ledger = json.loads(shown.stdout)
    parts = ledger["parts"]
    assert abs(sum(p["seconds"] for p in parts.values()) - ledger["wall_s"]) < 1, parts
    # No `queue`: an idle dev cluster starts a job within the second sacct writes as its start.
    for part in ("productive", "recomputed", "checkpoint", "hang", "detection", "start-up", "requeue wait"):
        assert parts[part]["seconds"] > 0, (part, parts)
    assert 0 < ledger["goodput"] < 1 and ledger["device_unit"] == "node" and ledger["devices"] == 2

    causes = [r["cause"] for r in ledger["restarts"]]
    assert [c.split(" (")[0] for c in causes] == ["crash in allocation", "hang in allocation", "node failure"], causes
    steps = [r["step"] for r in job.metrics("step")]
    assert sum(r["steps_recomputed"] for r in ledger["restarts"]) == len(steps) - len(set(steps)) > 0
    hang = ledger["restarts"][1]
    assert hang["seconds"]["hang"] > 5, hang
    assert (tmp_path / "goodput.png").read_bytes().startswith(b"\x89PNG")

    status = dev_cluster.hyperlaunch("status", job.job_id, cwd=tmp_path)
    # The same ledger, asked again: within a point, as accounting may write the last attempt's
    # end between the two calls (until then the ledger ends at the job's last record).
    shown_line = re.search(r"\n  goodput:    ([0-9.]+) % \(lost ", status.stdout)
    assert status.returncode == 0 and shown_line is not None, status.stdout
    assert abs(float(shown_line.group(1)) - ledger["goodput"] * 100) < 1, (shown_line.group(0), ledger["goodput"])
    as_json = dev_cluster.hyperlaunch("status", job.job_id, "--json", cwd=tmp_path)
    assert as_json.returncode == 0 and abs(json.loads(as_json.stdout)["goodput"]["goodput"] - ledger["goodput"]) < 0.01

    decisions = read_decisions(job.run_dir, job.job_id)
    assert [(d.event, d.cause) for d in decisions] == [
        ("restart", "crash"), ("restart", "hang"), ("end", "node-failure"), ("end", "completed"),
    ], decisions
    crash, hang, lost, _ = decisions
    for decision in (crash, hang, lost):
        assert decision.failure_seen and decision.step_stopped and decision.failure_seen <= decision.step_stopped, decision
        assert decision.nodes_in and decision.exit != 0, decision
    assert crash.next_round_started and hang.next_round_started and lost.requeue_asked, decisions
    assert crash.error_line, "the crashed rank's error, read from the round's output"
    assert lost.nodes_out == (victim,) and lost.action == "requeue", lost

    # `resume` of the training, a few steps further: its ledger is the lineage's, both jobs.
    resumed = dev_cluster.hyperlaunch(
        "resume", job.job_id, "--max-steps", "44", "--json", cwd=tmp_path, extra_env=importable_tests_env(), module=FAULTY_CLI,
    )
    assert resumed.returncode == 0, resumed.stderr
    second = Job(dev_cluster, tmp_path, json.loads(resumed.stdout)["job_id"])
    assert second.wait_final()["state"] == "COMPLETED"
    shown = dev_cluster.hyperlaunch("goodput", second.job_id, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lineage = json.loads(shown.stdout)
    assert lineage["jobs"] == [job.job_id, second.job_id] and lineage["start"] == ledger["start"], lineage
    assert abs(sum(p["seconds"] for p in lineage["parts"].values()) - lineage["wall_s"]) < 1
    assert lineage["parts"]["between jobs"]["seconds"] > 0 and lineage["wall_s"] > ledger["wall_s"]
    assert [r["cause"].split(" ")[0] for r in lineage["restarts"]][:3] == ["crash", "hang", "node"]
    assert lineage["restarts"][-1]["cause"].startswith(f"resume of job {job.job_id}"), lineage["restarts"]
