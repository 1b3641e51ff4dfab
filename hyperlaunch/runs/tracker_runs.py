"""A training's tracker runs, chosen once at submit and kept in the job record, so that every
attempt, round and `resume` of it logs into the same run: the run id (W&B's id, the MLflow
run's `hyperlaunch.run_id` tag) and, for MLflow, the run itself, created on the tracking server
now (its ids are the server's to give). A job resumed from its record keeps the ids it has.

The only module of the launcher that talks to an MLflow server."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import Any

from hyperlaunch.core import trackers
from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.job.spec import JobSpec

_MLFLOW_QUICK = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}
"""At submit, a server that does not answer is an error in seconds, not after MLflow's
default retries (minutes)."""


def new_run_id() -> str:
    """A run id W&B accepts as its own (lower-case letters and digits), unique enough to never
    meet another training's."""
    return secrets.token_hex(6)


@contextlib.contextmanager
def chosen(spec: JobSpec) -> Iterator[JobSpec]:
    """`spec` with its tracker runs chosen (unchanged without trackers, or when a record had
    them). An MLflow run created here is deleted again when the submission fails."""
    if not spec.output.tracker or spec.derived.tracker_run_id is not None:
        yield spec
        return
    run_id = new_run_id()
    if trackers.MLFLOW not in spec.output.tracker:
        yield spec.replace(tracker_run_id=run_id)
        return
    assert spec.output.mlflow_uri is not None  # JobSpec refuses --tracker mlflow without it
    # The run's name is the training's (a sweep's element: `qwen3_tiny-lr1e-3-seed2`), so that
    # the elements of a sweep, one experiment, read apart in MLflow's list.
    experiment = spec.job.job_name or "hyperlaunch"
    name = f"{spec.derived.checkpoint_name or experiment}-{run_id}"
    experiment_id, mlflow_run = _create_mlflow_run(spec.output.mlflow_uri, experiment, spec.what, run_id, name)
    try:
        yield spec.replace(tracker_run_id=run_id, mlflow_run_id=mlflow_run, mlflow_experiment_id=experiment_id)
    except BaseException:
        with contextlib.suppress(Exception), _quick_mlflow():
            _client(spec.output.mlflow_uri).delete_run(mlflow_run)
        raise


def _create_mlflow_run(uri: str, experiment: str, what: str, run_id: str, name: str) -> tuple[str, str]:
    """(experiment id, run id) of a new run `name` in `experiment` (created if needed) on `uri`."""
    with _quick_mlflow():
        client_class = _client_class()
        try:  # the client opens its store at once: a URI MLflow refuses fails here already
            client = client_class(tracking_uri=uri)
            found = client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
            run = client.create_run(experiment_id, run_name=name, tags={"hyperlaunch.run_id": run_id, "hyperlaunch.trains": what})
        except Exception as error:  # MlflowException, a refused connection, a database's: any of them ends the same way
            raise _not_created(uri, error) from None
    return str(experiment_id), str(run.info.run_id)


def _not_created(uri: str, error: Exception) -> InvalidInput:
    """MLflow's refusal as one line: the URI, the first sentence MLflow said, and what to do
    about that kind of URI (a server that does not answer, a file store MLflow no longer opens
    unasked, a URI it does not take)."""
    said = str(error).strip().splitlines()[0].split(". ")[0] if str(error).strip() else type(error).__name__
    if uri.lower().startswith(("http://", "https://")):
        return InvalidInput(
            f"--tracker mlflow: the tracking server {uri} did not create the run: {said[:300]}",
            hint=f"check --mlflow-uri (or MLFLOW_TRACKING_URI) and that the server answers from here: curl {uri}/health",
        )
    server = "--mlflow-uri http://HOST:5000 names a tracking server (`mlflow server`), which the job's nodes reach"
    if trackers.MLFLOW_ALLOW_FILE_STORE_ENV in str(error):
        allow = trackers.MLFLOW_ALLOW_FILE_STORE_ENV
        server += f"; to use a file store all the same, set {allow}=true here and pass --env {allow} for the job"
    return InvalidInput(f"--tracker mlflow: MLflow did not create the run at {uri}: {said[:300]}", hint=server)


def _client(uri: str) -> Any:
    """An MlflowClient of `uri`: it opens the store there, and raises when MLflow refuses it."""
    return _client_class()(tracking_uri=uri)


def _client_class() -> Any:  # mlflow is an optional dependency
    """MlflowClient, or InvalidInput saying how to install it where the user submits."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise InvalidInput(
            f"--tracker mlflow needs the mlflow client where you submit, to create the training's run: pip install {trackers.PACKAGES[trackers.MLFLOW]}",
            hint='or pip install "hyperlaunch[trackers]"',
        ) from None
    return MlflowClient


@contextlib.contextmanager
def _quick_mlflow() -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in _MLFLOW_QUICK}
    os.environ.update(_MLFLOW_QUICK)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
