"""Experiment trackers end to end on the dev cluster: one qwen3_tiny training with TensorBoard,
a real MLflow server on loopback and W&B offline, a node killed between two checkpoints, then
`resume`: each tracker shows one run, each step once with the values of the attempt that kept
it, read back with the trackers' own readers; `plot` draws it with the restarts `status` names."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.devcluster_helpers import DevCluster, importable_tests_env
from tests.support.fault_helpers import FAULTY_CLI, Job, kill_a_node_of, revive, submit, wait_attempts
from tests.support.mlflow_server import mlflow_server

pytestmark = pytest.mark.integration

STEPS = 30
EVERY = 10
MORE = 40
WANDB_ENV = {"WANDB_MODE": "offline", "WANDB_PROJECT": "hyperlaunch-tests", "WANDB_SILENT": "true"}


@pytest.fixture(scope="module")
def tracked(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The training: submit, a node lost at step 13 (the checkpoint of step 10 kept), finished,
    then resumed to step MORE. Yields the jobs, the MLflow URI and the job records' specs."""
    workdir = tmp_path_factory.mktemp("tracked")
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        job = submit(
            dev_cluster, workdir, "--env", "HYPERLAUNCH_TEST_STEP_SECONDS=0.3",
            "--tracker", "tensorboard", "--tracker", "mlflow", "--mlflow-uri", uri, "--tracker", "wandb",
            max_steps=STEPS, checkpoint_every=EVERY, submit_env=WANDB_ENV,
        )
        job.wait_step(EVERY + 3)
        victim = kill_a_node_of(job)
        try:
            wait_attempts(job, 2)
        finally:
            revive(dev_cluster, victim)
        final = job.wait_final()
        assert final["state"] == "COMPLETED", final
        resumed = dev_cluster.hyperlaunch(
            "resume", job.job_id, "--max-steps", str(MORE), "--json", cwd=workdir,
            extra_env={**importable_tests_env(), **WANDB_ENV}, module=FAULTY_CLI,
        )
        assert resumed.returncode == 0, resumed.stderr
        second = Job(dev_cluster, workdir, json.loads(resumed.stdout)["job_id"])
        assert second.wait_final()["state"] == "COMPLETED"
        # Each test has a home of its own: what needs the job records is read here.
        png = workdir / "loss.png"
        plotted = dev_cluster.hyperlaunch("plot", second.job_id, "-o", str(png), cwd=workdir)
        assert plotted.returncode == 0, plotted.stderr
        drawn = dev_cluster.hyperlaunch("plot", second.job_id, "--json", cwd=workdir)
        assert drawn.returncode == 0, drawn.stderr
        shown = dev_cluster.hyperlaunch("status", second.job_id, cwd=workdir)
        assert shown.returncode == 0, shown.stderr
        yield {
            "job": job, "second": second, "uri": uri, "final": final, "status": job.status(), "second_status": second.status(),
            "png": png, "drawn": json.loads(drawn.stdout), "shown": shown.stdout,
        }


def _kept(job: Job) -> dict[int, float]:
    """Each step's loss as finally trained (a repeated step keeps its last value)."""
    return job.losses()


def test_tensorboard_holds_each_step_once_with_the_kept_values(tracked: dict[str, Any]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job: Job = tracked["job"]
    kept = _kept(job)
    assert sorted(kept) == list(range(1, MORE + 1))
    events = EventAccumulator(str(job.run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    scalars = events.Scalars("train/loss")
    assert [s.step for s in scalars] == list(range(1, MORE + 1)), "each step once, the failed attempt's tail purged"
    for s in scalars:
        assert s.value == pytest.approx(kept[s.step], rel=1e-5), s.step
    relogged = [r["step"] for r in job.metrics("step")]
    assert len(relogged) > MORE, "the lost attempt logged steps that were trained again"


def test_mlflow_has_one_run_with_the_kept_curve_and_each_attempt_under_it(tracked: dict[str, Any]) -> None:
    from mlflow.tracking import MlflowClient

    job: Job = tracked["job"]
    client = MlflowClient(tracking_uri=tracked["uri"])
    parent_id = tracked["status"]["trackers"]["mlflow"]["run_id"]
    assert tracked["second_status"]["trackers"]["mlflow"]["run_id"] == parent_id, "resume logs into the same run"
    history = client.get_metric_history(parent_id, "train/loss")
    kept = _kept(job)
    assert sorted(m.step for m in history) == list(range(1, MORE + 1))
    for m in history:
        assert m.value == pytest.approx(kept[m.step], rel=1e-5), m.step
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    children = client.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
    assert len(children) >= 3, "the lost attempt, its restart, and the resume"
    discarded = [c for c in children if c.data.tags.get("hyperlaunch.discarded_from_step")]
    assert [c.data.tags["hyperlaunch.discarded_from_step"] for c in discarded] == [str(EVERY + 1)]


def _offline_run_id(folder: Path) -> str:
    """The run id in an offline run's transaction log, as W&B's own reader gives it."""
    result = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--summary", "--json", str(folder)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return str(json.loads(result.stdout)["run_id"])


def test_wandb_keeps_one_run_id_across_attempts_and_resume(tracked: dict[str, Any]) -> None:
    job: Job = tracked["job"]
    run_id = tracked["status"]["trackers"]["wandb"]["run_id"]
    folders = sorted((job.run_dir / "wandb").glob("offline-run-*"))
    assert len(folders) >= 3, "the lost attempt, its restart, and the resume"
    assert all(folder.name.endswith(f"-{run_id}") for folder in folders), folders
    # The killed attempt's log may hold no record at all: W&B's service writes it in batches and
    # died with the node before its first (fresh-ci saw a 7-byte log, its header alone). Every log
    # that holds a run names the one run.
    logged = [_offline_run_id(folder) for folder in folders]
    assert set(logged) - {""} == {run_id} and logged[1:].count("") == 0, logged


def test_plot_draws_the_training_with_the_restarts_status_names(tracked: dict[str, Any]) -> None:
    second: Job = tracked["second"]
    data = tracked["png"].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 600 and height >= 400
    causes = [r["cause"] for r in tracked["status"]["restarts"]]
    assert causes == ["node failure"]
    markers = tracked["drawn"]["markers"]
    marked = [m for m in markers if m["kind"] == "restart"]
    assert len(marked) == 1 and marked[0]["cause"].startswith("node failure") and marked[0]["step"] == EVERY + 1
    assert [m["job_id"] for m in markers if m["kind"] == "resume"] == [second.job_id]


def test_status_shows_the_loss_and_where_each_run_is(tracked: dict[str, Any]) -> None:
    shown: str = tracked["shown"]
    job: Job = tracked["job"]
    assert "loss:" in shown and any(ch in shown for ch in "▁▂▃▄▅▆▇█")
    assert f"tensorboard --logdir {job.run_dir / 'tensorboard'}" in shown
    assert f"{tracked['uri']}/#/experiments/" in shown
    assert str(job.run_dir / "wandb" / "offline-run-") in shown
