"""Steps that wait for each other on the dev cluster: `submit --after J:ok` behind a training
that fails is cancelled by Slurm and `status` says which job failed it, never left pending;
`export --slurm --after J`, queued while J trains, exports the checkpoint J leaves; and
`prepare-data --slurm` on two nodes, then a training queued behind it on the folder it writes
(or, when the preparation fails, never run, with the reason in `status`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.devcluster_helpers import DevCluster, wait_until
from tests.support.fault_helpers import MODEL, Job, submit

pytestmark = pytest.mark.integration


def test_a_job_after_a_failed_one_never_runs_and_status_names_why(dev_cluster: DevCluster, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("this is not json\n")
    first = submit(dev_cluster, tmp_path, "--data", str(bad), max_steps=10, checkpoint_every=5)
    second = dev_cluster.hyperlaunch(
        "submit", "--model", MODEL, "--nodes", "1", "--max-steps", "5", "--after", f"{first.job_id}:ok", "--json",
        "--checkpoint-dir", str(tmp_path / "second"), cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    waiting = Job(dev_cluster, tmp_path, json.loads(second.stdout)["job_id"])
    assert first.wait_final()["state"] == "FAILED"
    wait_until(lambda: waiting.status()["state"] not in ("PENDING", "UNKNOWN"), 120, "Slurm to cancel the job behind the failed one")
    doc = waiting.status()
    assert doc["state"] == "CANCELLED" and doc["attempts"] in ([], [a for a in doc["attempts"] if not a["start"] or a["start"] == "None"])
    assert doc["never_runs"] == f"job {first.job_id} ended FAILED; this one waited for it to complete (--after {first.job_id}:ok)"
    assert doc["waits_for"] == [{"job": first.job_id, "kind": "ok", "state": "FAILED"}]
    shown = dev_cluster.hyperlaunch("status", waiting.job_id, cwd=tmp_path)
    assert f"never runs: job {first.job_id} ended FAILED" in shown.stdout, shown.stdout


def test_a_job_behind_one_slurm_does_not_know_is_refused_before_sbatch(dev_cluster: DevCluster, tmp_path: Path) -> None:
    """Real Slurm drops a dependency on a job it does not know (one it has forgotten, MinJobAge
    after it ended, or a mistyped id) and starts the job at once: refused here, nothing queued."""
    result = dev_cluster.hyperlaunch("submit", "--model", MODEL, "--nodes", "1", "--after", "999999:ok", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "hyperlaunch: error: --after 999999: Slurm knows no job 999999 (neither the queue nor its accounting, sacct, lists it)"
        " (check the id with 'hyperlaunch status' or sacct)"
    ]
    assert not (tmp_path / "logs").exists()


def test_an_export_queued_behind_its_training_exports_what_the_training_left(dev_cluster: DevCluster, tmp_path: Path) -> None:
    training = submit(dev_cluster, tmp_path, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.2", max_steps=20, checkpoint_every=10)
    queued = dev_cluster.hyperlaunch("export", training.job_id, "--slurm", "--after", training.job_id, "--json", cwd=tmp_path)
    assert queued.returncode == 0, queued.stderr
    export_job = json.loads(queued.stdout)["job_id"]
    listed = dev_cluster.run("squeue", "-h", "-j", export_job, "-o", "%T %r", check=False)
    assert listed.strip() in ("", "PENDING Dependency"), listed  # waits while the training runs (or already ran)
    assert training.wait_final()["state"] == "COMPLETED"
    exported = training.ckpt_dir / f"{MODEL}-20steps-hf"
    wait_until(lambda: (exported / "hyperlaunch-export.json").exists(), 180, "the export job")
    assert json.loads((exported / "hyperlaunch-export.json").read_text())["step"] == 20


def _corpus(folder: Path, lines: str | None = None) -> Path:
    folder.mkdir(parents=True)
    for part in range(3):
        rows = lines or "".join(json.dumps({"text": f"document {part}-{i}: " + "tokens for the cluster to cut " * (i % 7 + 1)}) + "\n" for i in range(3000))
        (folder / f"part{part}.jsonl").write_text(rows)
    return folder


def _prepare_then_train(cluster: DevCluster, tmp_path: Path, raw: Path) -> tuple[str, Job]:
    """`prepare-data --slurm --nodes 2`, and a training queued behind it on its folder."""
    prepared = cluster.hyperlaunch(
        "prepare-data", str(raw), "--model", MODEL, "--output", str(tmp_path / "data"), "--slurm", "--nodes", "2", "--json", cwd=tmp_path,
    )
    assert prepared.returncode == 0, prepared.stderr
    prepare_job = json.loads(prepared.stdout)["job_id"]
    train = cluster.hyperlaunch(
        "submit", "--model", MODEL, "--nodes", "1", "--max-steps", "5", "--after", f"{prepare_job}:ok", "--data", str(tmp_path / "data"),
        "--json", cwd=tmp_path,
    )
    assert train.returncode == 0, train.stderr
    return prepare_job, Job(cluster, tmp_path, json.loads(train.stdout)["job_id"])


def test_data_prepared_on_two_nodes_is_what_the_training_behind_it_reads(dev_cluster: DevCluster, tmp_path: Path) -> None:
    prepare_job, training = _prepare_then_train(dev_cluster, tmp_path, _corpus(tmp_path / "raw"))
    assert training.wait_final()["state"] == "COMPLETED"
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["documents"] == 9000 and len(manifest["shards"]) >= 2
    started = training.events("started")[0]["data"]
    assert (Path(started["folder"]).resolve(), started["prepared"], started["tokens"]) == ((tmp_path / "data").resolve(), False, manifest["tokens"])
    log = (tmp_path / "logs" / f"prepare-data-data_{prepare_job}.out").read_text()
    assert "node 1 of 2: " in log and "node 2 of 2: " in log and f"prepared {manifest['tokens']:,} tokens" in log, log
    assert dev_cluster.sacct_attempts(prepare_job)[-1][0] == "COMPLETED"


def test_a_failed_preparation_leaves_the_training_behind_it_never_to_run(dev_cluster: DevCluster, tmp_path: Path) -> None:
    prepare_job, training = _prepare_then_train(dev_cluster, tmp_path, _corpus(tmp_path / "raw", lines="not json\n"))
    wait_until(lambda: training.status()["state"] not in ("PENDING", "UNKNOWN"), 180, "Slurm to cancel the training behind the failed preparation")
    doc = training.status()
    assert doc["state"] == "CANCELLED" and doc["waits_for"] == [{"job": prepare_job, "kind": "ok", "state": "FAILED"}]
    assert doc["never_runs"] == f"job {prepare_job} ended FAILED; this one waited for it to complete (--after {prepare_job}:ok)"
    assert doc["restart_budget_left"] == doc["max_restarts"]
    listed = dev_cluster.hyperlaunch("status", cwd=tmp_path).stdout
    assert f"CANCELLED (never runs: job {prepare_job} FAILED)" in listed, listed
    log = (tmp_path / "logs" / f"prepare-data-data_{prepare_job}.out").read_text()
    assert "jsonl:1: not valid JSON" in log and not (tmp_path / "data" / "manifest.json").exists()
    # The preparation is recorded too: status lists it, and shows its error.
    tools = listed.split("prepare-data and export jobs\n", 1)[1].splitlines()
    assert [prepare_job, "prepare-data", "FAILED"] in [line.split()[:3] for line in tools], listed
    shown = json.loads(dev_cluster.hyperlaunch("status", prepare_job, "--json", cwd=tmp_path).stdout)
    assert (shown["kind"], shown["state"]) == ("prepare-data", "FAILED") and shown["error"].endswith("jsonl:1: not valid JSON"), shown
    assert "jsonl:1: not valid JSON" in dev_cluster.hyperlaunch("logs", prepare_job, cwd=tmp_path).stdout
