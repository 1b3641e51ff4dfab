"""A node HyperPod replaced keeps its Slurm name but gets a new instance id: submit records the
nodes' ids, and `resume --exclude-failed` keeps Slurm off the failed nodes except those whose
id has changed since. The record also keeps where the instance type came from, for `status`.
Slurm is faked in hyperlaunch.slurm (runner.run, submission.submit_script, nodes.partition_nodes); the
ids come from a resource_config.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperlaunch.core.checkpoints import METADATA_FILE, checkpoint_path
from hyperlaunch.runs import jobs
from hyperlaunch.slurm import runner as slurm_runner
from hyperlaunch.slurm import submission as slurm_submission
from tests.support.cli_runner import run_cli
from tests.support.hyperpod_cluster import CONTROLLER, WORKERS, fake_partition, resource_config, write_resource_config

NODES = ["ip-10-1-10-10", "ip-10-1-38-128", "ip-10-1-38-130"]
SACCT = "41|NODE_FAIL|ip-10-1-38-[128,130]|2026-01-01T00:00:00|2026-01-01T00:10:00|0:0|600|60\n"
EVENTS = (
    "ip-10-1-38-128|2026-01-01T00:09:00|Unknown|DOWN|Not responding\n"
    "ip-10-1-38-130|2026-01-01T00:09:30|Unknown|DOWN|Not responding\n"
)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HyperPod login node: resource config, Slurm without GRES whose job 41 lost both workers."""
    monkeypatch.chdir(tmp_path)
    fake_partition(monkeypatch, NODES)

    def run(args: Sequence[str], **_: object) -> slurm_runner.Result:
        out = {"scontrol": "GresTypes = (null)\n", "sacct": SACCT, "sacctmgr": EVENTS}.get(args[0], "")
        return slurm_runner.Result(tuple(args), 0, out, "")

    monkeypatch.setattr(slurm_runner, "run", run)
    monkeypatch.setattr(slurm_submission, "submit_script", lambda script, folder, *, env, forward=(): "41")
    return write_resource_config(tmp_path / "resource_config.json", monkeypatch, resource_config())


def _submit_with_a_checkpoint(monkeypatch: pytest.MonkeyPatch) -> jobs.JobRecord:
    submitted = run_cli(["submit", "-m", "qwen3_0_6b", "-N", "2", "--max-steps", "10"], monkeypatch)
    assert submitted.exit_code == 0, submitted.output
    record = jobs.load("41")
    path = checkpoint_path(Path(record.spec.output.checkpoint_dir), record.spec.derived.checkpoint_name, 5)
    path.mkdir(parents=True)
    (path / METADATA_FILE).write_bytes(b"")
    return record


def test_submit_records_the_instance_ids_and_where_the_type_came_from(cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _submit_with_a_checkpoint(monkeypatch)
    assert dict(record.node_instances) == {
        "ip-10-1-10-10": "i-0c0ffee0000000001", "ip-10-1-38-128": "i-0aaa0000000000001", "ip-10-1-38-130": "i-0bbb0000000000001",
    }
    source = dict(record.decided)["instance_type"]
    assert record.spec.cluster.instance_type == "p5.48xlarge" and source.startswith("resource_config.json, worker-group-1: 2 of")
    raw = json.loads((jobs.jobs_dir() / "41" / jobs.RECORD_FILE).read_text())
    assert raw["node_instances"]["ip-10-1-38-128"] == "i-0aaa0000000000001" and raw["decided"]["instance_type"] == source
    detail = run_cli(["status", "41"], monkeypatch)
    assert detail.exit_code == 0, detail.output
    assert f"instance: p5.48xlarge ({source})" in " ".join(detail.stdout.split())


def test_resume_keeps_a_replaced_node_and_excludes_the_other(cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _submit_with_a_checkpoint(monkeypatch)
    replaced = dict(WORKERS[2])
    replaced["10.1.38.130"] = "i-0new0000000000001"
    write_resource_config(cluster, monkeypatch, resource_config([CONTROLLER, (WORKERS[0], WORKERS[1], replaced)]))
    resumed = run_cli(["resume", "41", "--exclude-failed", "--dry-run"], monkeypatch)
    assert resumed.exit_code == 0, resumed.output
    assert "#SBATCH --exclude=ip-10-1-38-128\n" in resumed.stdout
    assert "hyperlaunch: node ip-10-1-38-130 was replaced by HyperPod (i-0bbb0000000000001 -> i-0new0000000000001); not excluded" in resumed.stderr
    assert "excluding nodes that failed job 41: ip-10-1-38-128\n" in resumed.stderr


def test_resume_excludes_every_failed_node_when_the_ids_cannot_be_read(cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _submit_with_a_checkpoint(monkeypatch)
    cluster.unlink()
    cluster.mkdir()  # root reads any file: a folder stands for one this user cannot read
    resumed = run_cli(["resume", "41", "--exclude-failed", "--dry-run"], monkeypatch)
    assert resumed.exit_code == 0, resumed.output
    assert "#SBATCH --exclude=ip-10-1-38-128,ip-10-1-38-130\n" in resumed.stdout
    assert "cannot tell whether HyperPod replaced ip-10-1-38-128, ip-10-1-38-130" in resumed.stderr


def test_no_ids_are_recorded_off_hyperpod_and_a_hyperpod_node_that_hides_them_says_so(
    cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGEMAKER_RESOURCE_CONFIG_PATH", str(tmp_path / "none.json"))
    plain = run_cli(["submit", "-m", "qwen3_tiny", "--max-steps", "2"], monkeypatch)
    assert plain.exit_code == 0, plain.output
    assert jobs.load("41").node_instances == () and "instance ids" not in plain.stderr
    cluster.unlink()
    cluster.mkdir()
    monkeypatch.setenv("SAGEMAKER_RESOURCE_CONFIG_PATH", str(cluster))
    hidden = run_cli(["submit", "-m", "qwen3_tiny", "--max-steps", "2"], monkeypatch)
    assert hidden.exit_code == 0, hidden.output
    assert "HyperPod instance ids not recorded" in hidden.stderr and "is a folder" in hidden.stderr


def test_records_without_the_new_fields_load_and_bad_ones_are_named(cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _submit_with_a_checkpoint(monkeypatch)
    data = record.to_json()
    assert jobs.JobRecord.from_json(json.loads(json.dumps(data))) == record
    del data["decided"], data["node_instances"]
    old = jobs.JobRecord.from_json(data)
    assert (old.decided, old.node_instances) == ((), ())
    with pytest.raises(ValueError, match="node_instances must be an object of text"):
        jobs.JobRecord.from_json({**data, "node_instances": ["ip-1"]})
