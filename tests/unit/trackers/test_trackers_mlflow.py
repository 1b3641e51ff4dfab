"""MLflow across attempts, against a real `mlflow server` (loopback, sqlite): the parent run the
submit created holds each step once with the kept values; each process is a child run under it,
tagged with its job, attempt and first step, and the crashed attempt's child says from which
step its values were redone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperlaunch.core import trackers as names
from hyperlaunch.core.trackers import Ending
from tests.support.mlflow_server import mlflow_server
from tests.support.tracker_attempts import FIRST, SECOND, attempt, job_env, loss

pytest.importorskip("mlflow")
from mlflow import MlflowClient  # noqa: E402


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


@pytest.mark.slow
def test_the_parent_keeps_each_step_once_and_the_children_say_what_was_redone(tmp_path: Path, mlflow_uri: str) -> None:
    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("demo-job")
    parent = client.create_run(experiment, run_name="demo", tags={"hyperlaunch.run_id": "lineage1"}).info.run_id
    # A child an earlier crash left RUNNING (killed before it could close), that logged to step 6.
    orphan = client.create_run(experiment, tags={"mlflow.parentRunId": parent, "hyperlaunch.last_step": "6"}).info.run_id
    env = job_env(tmp_path, "mlflow", MLFLOW_TRACKING_URI=mlflow_uri, MLFLOW_RUN_ID=parent)

    attempt(env, FIRST)
    kept = client.get_metric_history(parent, "train/loss")
    assert [m.step for m in kept] == [1, 2, 3, 4]  # committed at 4; 5..8 not (yet) the training's
    attempt(env, SECOND, restart=1, cause="crash")

    kept = sorted(client.get_metric_history(parent, "train/loss"), key=lambda m: m.step)
    assert [m.step for m in kept] == list(range(1, 11))
    assert [m.value for m in kept] == pytest.approx([loss(step) for step in range(1, 11)])
    assert [m.step for m in client.get_metric_history(parent, "train/tokens_per_s")] == list(range(1, 11))
    finished = client.get_run(parent)
    assert finished.info.status == "FINISHED"
    assert finished.data.tags["hyperlaunch.kept_through_step"] == "10"

    children = client.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
    by_first = {run.data.tags.get("hyperlaunch.first_step"): run for run in children}
    first, second = by_first["1"], by_first["5"]
    assert [m.step for m in client.get_metric_history(first.info.run_id, "train/loss")] == list(range(1, 9))
    assert first.data.tags["hyperlaunch.discarded_from_step"] == "5" and first.info.status == "KILLED"
    assert first.data.tags["hyperlaunch.job_id"] == "4242" and first.data.tags["hyperlaunch.attempt"] == "0"
    assert second.data.tags["hyperlaunch.attempt"] == "1" and second.data.tags["hyperlaunch.restart_cause"] == "crash"
    assert second.info.status == "FINISHED" and "hyperlaunch.discarded_from_step" not in second.data.tags
    assert [m.step for m in client.get_metric_history(second.info.run_id, "train/loss")] == list(range(5, 11))
    assert second.info.run_name == "job 4242 attempt 1 round 0 from step 5"
    orphaned = client.get_run(orphan)
    assert orphaned.info.status == "KILLED" and orphaned.data.tags["hyperlaunch.discarded_from_step"] == "1"

    locations = json.loads((tmp_path / "run" / names.LOCATIONS_FILE).read_text())
    assert locations == {"mlflow": f"{mlflow_uri}/#/experiments/{experiment}/runs/{parent}"}


def test_params_go_to_the_parent_once_and_a_dead_server_switches_mlflow_off(tmp_path: Path, mlflow_uri: str) -> None:
    from hyperlaunch import trackers

    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("params-job")
    parent = client.create_run(experiment).info.run_id
    client.log_param(parent, "lr", "0.1")
    env = {names.TRACKERS_ENV: "mlflow", names.MLFLOW_URI_ENV: mlflow_uri, names.MLFLOW_RUN_ID_ENV: parent}
    tracked = trackers.for_environ(tmp_path, env)
    assert tracked is not None
    tracked.params({"lr": 0.2, "model": "qwen3_tiny"})
    tracked.record({"type": "step", "step": 1, "loss": 3.0})
    tracked.params({"model": "other", "nodes": 2})
    tracked.committed(1)
    assert client.get_run(parent).data.params == {"lr": "0.1", "model": "qwen3_tiny", "nodes": "2"}

    mlflow_runs = tracked.live[0]
    mlflow_runs.parent_id = "0" * 32  # as if the server lost the run: the next commit fails
    tracked.record({"type": "step", "step": 2, "loss": 2.0})
    tracked.committed(2)
    assert tracked.live == []
    tracked.record({"type": "step", "step": 3, "loss": 1.0})  # training goes on, nothing sent
    tracked.close(Ending.FINISHED)


def test_a_sweeps_element_runs_under_its_own_name(tmp_path: Path, mlflow_uri: str) -> None:
    """Every element's run was `qwen3_tiny-<id>` in one experiment: they read apart only by id."""
    from hyperlaunch.job.defaults import job_spec
    from hyperlaunch.job.sweep import Element, element_spec
    from hyperlaunch.runs import tracker_runs

    base = job_spec(model="qwen3_tiny", checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"),
                   run_dir=str(tmp_path / "run"), tracker=("mlflow",), mlflow_uri=mlflow_uri)
    with tracker_runs.chosen(element_spec(base, Element(0, (("lr", "1e-3"), ("seed", "2"))))) as spec:
        run = MlflowClient(mlflow_uri).get_run(spec.derived.mlflow_run_id)
    assert run.info.run_name == f"qwen3_tiny-lr1e-3-seed2-{spec.derived.tracker_run_id}"
    assert run.data.tags["hyperlaunch.trains"] == "qwen3_tiny"


_REQUEUED = """
from hyperlaunch import runtime
for step in range(1, 5):
    runtime.log(step, loss=1.0 / step)
runtime.checkpoint_path(4).mkdir(parents=True)
runtime.commit_checkpoint(4)
runtime.requeue()
"""


@pytest.mark.slow
def test_an_attempt_stopped_for_a_requeue_ends_its_child_finished_and_the_parent_goes_on(tmp_path: Path, mlflow_uri: str) -> None:
    """A time limit's save and requeue is no failure: its child run was KILLED, the state the
    docs keep for a crash's (a trial). The training, the parent, goes on in the next attempt."""
    import subprocess
    import sys

    from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE

    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("requeued-job")
    parent = client.create_run(experiment, run_name="demo").info.run_id
    env = job_env(tmp_path, "mlflow", MLFLOW_TRACKING_URI=mlflow_uri, MLFLOW_RUN_ID=parent)
    result = subprocess.run([sys.executable, "-c", _REQUEUED], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == REQUEUE_EXIT_CODE, result.stderr
    (child,) = client.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
    assert child.info.status == "FINISHED"
    assert client.get_run(parent).info.status == "RUNNING"
    assert [m.step for m in client.get_metric_history(parent, "train/loss")] == [1, 2, 3, 4]
