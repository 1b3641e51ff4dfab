"""MLflow: the training is the parent run (MLFLOW_RUN_ID, created at submit); each process is a
child run nested under it.

MLflow never deletes a logged value, so the lineage rule is kept by when values reach the
parent: a child gets its process's values live (asynchronously, so no step waits on the
server), the parent only the kept ones: the step values up to S when the checkpoint of step S
commits (what a later attempt resumes from, so nobody logs those steps again), the rest at the
close of a finished training. The parent's history holds each step once, with the values of
the attempt that kept it. A child's stale tail stays in the child, which a later process tags
`hyperlaunch.discarded_from_step` (and sets KILLED when it was left RUNNING by a crash)."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from hyperlaunch.core import trackers as names
from hyperlaunch.core.trackers import Ending
from hyperlaunch.trackers.lineage import Start, now_ms

PARENT_TAG = "mlflow.parentRunId"
LAST_STEP_TAG = "hyperlaunch.last_step"
"""On a child: the last step it logged (kept current with each batch)."""
DISCARDED_TAG = "hyperlaunch.discarded_from_step"
"""On a child: its values from this step on were redone by a later process."""
KEPT_THROUGH_TAG = "hyperlaunch.kept_through_step"
"""On the parent: the steps up to this one are in its history (never logged there twice)."""
MAX_PARAM_LENGTH = 6000
"""MLflow's limit on a param's value (longer ones are refused)."""
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
"""MLflow's own settings, where the user set none: its defaults (7 retries, 120 s) let an
unreachable server hold a checkpoint commit for minutes; with these it fails in about a minute
and the tracker is switched off."""


class MlflowRuns:
    name = names.MLFLOW

    def __init__(self, tracking_uri: str | None, parent_id: str) -> None:
        self.tracking_uri = tracking_uri
        self.parent_id = parent_id
        self.child_id = ""
        self.kept_through = 0
        self._pending: dict[int, tuple[int, dict[str, float]]] = {}
        """Step -> (time in ms, values): what this process logged and the parent does not hold yet."""
        self._client: Any = None
        self._sender: _Sender | None = None

    def open(self, start: Start, params: Mapping[str, Any]) -> str:
        for name, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
        import mlflow
        from mlflow import MlflowClient

        if not self.parent_id:
            raise RuntimeError(f"{names.MLFLOW_RUN_ID_ENV} is not set: the job names no parent run")
        uri = self.tracking_uri or mlflow.get_tracking_uri()
        client = self._client = MlflowClient(tracking_uri=uri)
        parent = client.get_run(self.parent_id)
        experiment = parent.info.experiment_id
        self.kept_through = _int(parent.data.tags.get(KEPT_THROUGH_TAG)) or 0
        if parent.info.status != "RUNNING":  # a finished training taken further by `resume`
            client.update_run(self.parent_id, status="RUNNING")
        self._settle_children(experiment, start.first_step)
        tags = {
            PARENT_TAG: self.parent_id,
            "hyperlaunch.run_id": start.run_id,
            "hyperlaunch.job_id": start.job_id,
            "hyperlaunch.attempt": str(start.attempt),
            "hyperlaunch.round": str(start.round),
            "hyperlaunch.first_step": str(start.first_step),
        }
        if start.cause:
            tags["hyperlaunch.restart_cause"] = start.cause
        job = f"job {start.job_id} " if start.job_id else ""
        name = f"{job}attempt {start.attempt} round {start.round} from step {start.first_step}"
        self.child_id = client.create_run(experiment, run_name=name, tags=tags).info.run_id
        self._sender = _Sender(client, self.child_id)
        if params:
            self.params(params)
        return names.mlflow_run_url(uri, experiment, self.parent_id)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        assert self._sender is not None
        at = now_ms()
        self._sender.send(step, [Metric(key, value, at, step) for key, value in values.items()])
        kept = self._pending.setdefault(step, (at, {}))
        kept[1].update(values)

    def event(self, step: int, event: str, text: str) -> None:
        """A child's tags say why it started (cause, attempt, round, first step); other events
        stay in metrics.jsonl: MLflow has no per-step text outside artifacts."""

    def params(self, values: Mapping[str, Any]) -> None:
        """On the parent, once: MLflow refuses to change a param, so only new names are logged."""
        from mlflow.entities import Param

        logged = self._client.get_run(self.parent_id).data.params
        new = [Param(str(key), str(value)[:MAX_PARAM_LENGTH]) for key, value in values.items() if str(key) not in logged]
        if new:
            self._client.log_batch(self.parent_id, params=new)

    def committed(self, step: int) -> None:
        """Synchronously: the next attempt starts after `step`, so these values are logged nowhere else."""
        self._keep(lambda logged: logged <= step, through=step)

    def close(self, ending: Ending) -> None:
        """This process's child run ends FINISHED, also when it stopped to be requeued after a
        save, KILLED on an error; the parent only when the training finished."""
        finished = ending is Ending.FINISHED
        if finished:
            self._keep(lambda logged: True, through=max(self._pending, default=self.kept_through))
        if self._sender is not None:
            self._sender.close()
        self._client.set_terminated(self.child_id, status="KILLED" if ending is Ending.FAILED else "FINISHED")
        if finished:
            self._client.set_terminated(self.parent_id, status="FINISHED")

    def _keep(self, chosen: Callable[[int], bool], through: int) -> None:
        from mlflow.entities import Metric, RunTag

        steps = sorted(step for step in self._pending if chosen(step))
        metrics = [
            Metric(key, value, self._pending[step][0], step)
            for step in steps
            if step > self.kept_through
            for key, value in self._pending[step][1].items()
        ]
        through = max(through, self.kept_through)
        self._client.log_batch(self.parent_id, metrics=metrics, tags=[RunTag(KEPT_THROUGH_TAG, str(through))])
        for step in steps:
            del self._pending[step]
        self.kept_through = through

    def _settle_children(self, experiment: str, first_step: int) -> None:
        """Earlier children: those a crash left RUNNING are KILLED; those that logged steps
        >= first_step are tagged with where their values stopped counting."""
        client = self._client
        children = client.search_runs(
            [experiment], filter_string=f"tags.`{PARENT_TAG}` = '{self.parent_id}'", max_results=1000
        )
        for child in children:
            run_id, tags = child.info.run_id, child.data.tags
            if child.info.status == "RUNNING":
                client.set_terminated(run_id, status="KILLED")
            last = _int(tags.get(LAST_STEP_TAG))
            if last is not None and last >= first_step:
                earlier = _int(tags.get(DISCARDED_TAG))
                client.set_tag(run_id, DISCARDED_TAG, str(first_step if earlier is None else min(earlier, first_step)))


class _Sender:
    """The child's values, sent by a daemon thread in batches (MlflowClient.log_batch, with the
    child's last-step tag). Not MLflow's own asynchronous logging (log_batch(synchronous=False)):
    its thread pool takes no more work once Python starts to exit, so a script's run, closed at
    exit (atexit), lost the values still queued; this thread runs on through atexit. An error
    stops it and is raised by the next send or close (and the tracker is switched off)."""

    MAX_METRICS = 1000
    """MLflow's limit on metrics in one log_batch."""
    CLOSE_TIMEOUT_S = 60.0

    def __init__(self, client: Any, run_id: str) -> None:
        self._client = client
        self._run_id = run_id
        self._queue: queue.Queue[tuple[int, list[Any]] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="hyperlaunch-mlflow", daemon=True)
        self._thread.start()

    def send(self, step: int, metrics: list[Any]) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put((step, metrics))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(self.CLOSE_TIMEOUT_S)
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        from mlflow.entities import RunTag

        done = False
        while not done:
            item = self._queue.get()
            if item is None:
                return
            last_step, metrics = item
            while len(metrics) < self.MAX_METRICS // 2:  # whatever else waits, in one request
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    done = True
                    break
                last_step, metrics = more[0], metrics + more[1]
            try:
                self._client.log_batch(self._run_id, metrics=metrics, tags=[RunTag(LAST_STEP_TAG, str(last_step))])
            except Exception as error:  # noqa: BLE001 - handed to the main thread
                self._error = error
                return


def _int(value: object) -> int | None:
    text = str(value) if value is not None else ""
    return int(text) if text.isdigit() else None
