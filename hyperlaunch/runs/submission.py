"""Submit a rendered script and record the job: the job's supervisor goes into the run folder,
the script to Slurm through hyperlaunch.slurm.submission (submitit underneath), then the record is
written. No record without a job, and nothing left behind by a refused one."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.errors import ConfigError, InvalidInput
from hyperlaunch.job import code_snapshot
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.job.sweep import Sweep
from hyperlaunch.runs import jobs
from hyperlaunch.script import supervisor_bundle
from hyperlaunch.slurm import submission as slurm_submission


def submit(
    spec: JobSpec,
    script: str,
    *,
    env: Mapping[str, str] | None = None,
    resumed_from: str | None = None,
    decided: tuple[tuple[str, str], ...] = (),
    node_instances: tuple[tuple[str, str], ...] = (),
    sweep: Sweep | None = None,
    files: Sequence[tuple[str, str]] = (),
) -> jobs.JobRecord:
    """sbatch the script with `env` (default: this process's environment), then record the
    job, with where its decided settings came from, on HyperPod its nodes' instance ids and,
    for a sweep, its elements (see JobRecord). `files` (path, text), which the script reads
    (a sweep's elements), are written first. Slurm's refusal becomes a SlurmError carrying its
    message, and no record is written."""
    environ = dict(env if env is not None else os.environ)
    forward = forwarded_names(spec, environ)
    submitit_dir = jobs.jobs_dir() / ".submitit"
    bundle_dir = Path(supervisor_bundle.bundle_path(spec.output.run_dir)).parent
    with _removed_unless_submitted(Path(spec.output.log_dir), submitit_dir, bundle_dir):
        try:
            Path(spec.output.log_dir).mkdir(parents=True, exist_ok=True)  # Slurm does not create it
        except OSError as err:
            raise InvalidInput(f"log_dir {spec.output.log_dir}: cannot create it: {err.strerror or err}") from None
        with _supervisor_written(spec), _code_written(spec), _files_written(files):
            job_id = slurm_submission.submit_script(script, submitit_dir, env=environ, forward=forward)
    record = jobs.JobRecord(
        job_id=job_id,
        spec=spec,
        submitted_at=time.time(),
        slurm_conf=environ.get("SLURM_CONF"),
        resumed_from=resumed_from,
        decided=decided,
        node_instances=node_instances,
        sweep=sweep,
    )
    try:
        jobs.save(record, script)
    except OSError as err:
        # Slurm has the job: say so, or the user would submit it again.
        raise ConfigError(
            f"job {job_id} was submitted, but its record could not be written under {jobs.jobs_dir()}: {err.strerror or err}",
            hint=f"it runs; 'scancel {job_id}' to stop it",
        ) from None
    return record


@contextlib.contextmanager
def _supervisor_written(spec: JobSpec) -> Iterator[None]:
    """The job's supervisor written where its script runs it from (the run folder, which every
    node sees), before Slurm may start the job; removed again when this call wrote it and the
    submission fails."""
    try:
        path, created = supervisor_bundle.write_bundle(spec.output.run_dir)
    except OSError as err:
        raise InvalidInput(
            f"run_dir {spec.output.run_dir}: cannot write the job's supervisor there: {err.strerror or err}",
            hint="--run-dir must be writable, on storage the compute nodes see",
        ) from None
    try:
        yield
    except BaseException:
        if created:
            path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _files_written(files: Sequence[tuple[str, str]]) -> Iterator[None]:
    """Files the script reads, written whole before Slurm may start the job (one already
    there is named by the hash of the same text, and kept); removed again when this call
    wrote them and the submission fails."""
    created: list[Path] = []
    try:
        for name, text in files:
            path = Path(name)
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(path, text.encode("utf-8"), mode=0o644)
                created.append(path)
    except OSError as err:
        for path in created:
            path.unlink(missing_ok=True)
        raise InvalidInput(f"cannot write {name}: {err.strerror or err}", hint="--run-dir must be writable, on storage the compute nodes see") from None
    try:
        yield
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _code_written(spec: JobSpec) -> Iterator[None]:
    """A script job's code snapshot written where its script runs it from, before Slurm may
    start the job: taken again now, it must be the one the script names (the code did not
    change since the job was planned); one that exists already (`resume`, or the same code
    submitted before) is used as it is. Removed again when this call wrote it and the
    submission fails."""
    if spec.derived.code_dir is None or spec.derived.code_root is None:
        yield
        return
    planned = Path(spec.derived.code_dir)
    created = False
    if code_snapshot.read_info(planned) is None:
        snapshot = code_snapshot.take_for(spec, Path(spec.derived.code_root))
        if snapshot.name != planned.name:
            raise InvalidInput(
                f"code snapshot {planned} is not there, and {spec.derived.code_root} no longer holds that code (it is {snapshot.name} now)",
                hint="submit again; `hyperlaunch resume --refresh-code` resumes with the code as it is now",
            )
        _, created = code_snapshot.write(snapshot, planned.parent)  # InvalidInput when it cannot
    try:
        yield
    except BaseException:
        if created:
            shutil.rmtree(planned, ignore_errors=True)
        raise


@contextlib.contextmanager
def _removed_unless_submitted(*folders: Path) -> Iterator[None]:
    """Folders (and missing parents) that did not exist before are removed again, where still
    empty, when the submission fails: a refused job leaves nothing behind."""
    created: list[Path] = []
    for folder in folders:
        path = folder
        while not os.path.lexists(path) and path != path.parent:
            created.append(path)
            path = path.parent
    try:
        yield
    except BaseException:
        for path in sorted(set(created), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                path.rmdir()  # only when empty
        raise


def forwarded_names(spec: JobSpec, environ: Mapping[str, str]) -> list[str]:
    """The `--env NAME` variables, each of which must be set where sbatch runs: the job gets its
    value from there (sbatch --export), and a name that is not set would reach no node."""
    names = [name for name, value in spec.job.env if value is None]
    missing = [name for name in names if name not in environ]
    if missing:
        raise InvalidInput(
            f"--env {missing[0]} forwards {missing[0]} from this environment, where it is not set",
            hint=f"export {missing[0]} before submitting, or pass --env {missing[0]}=VALUE",
        )
    return names
