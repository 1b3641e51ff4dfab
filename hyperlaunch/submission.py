"""Submit a rendered script through submitit, keeping its job tracking, and record the job.

submitit builds its own sbatch text around a pickled callable; hyperlaunch hands it the
script rendered from the JobSpec instead (the override below), so submitit does the sbatch
call, parses the job id and tracks the job, while the script stays ours."""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Mapping
from pathlib import Path

from hyperlaunch import jobs
from hyperlaunch.errors import SlurmError
from hyperlaunch.spec import JobSpec


def _executor_class() -> type:
    import submitit  # imported on the submit path only: it is not needed to render or read

    class RenderedScriptExecutor(submitit.SlurmExecutor):  # type: ignore[misc]
        """A SlurmExecutor whose submission file is a script we rendered."""

        def __init__(self, folder: Path, script: str) -> None:
            super().__init__(folder=folder)
            self._script = script

        def _make_submission_file_text(self, command: str, uid: str) -> str:
            return self._script

    return RenderedScriptExecutor


def _refusal(sbatch_stderr: str) -> SlurmError:
    """sbatch's own reason, in one line: its fatal line if any, else its last error lines."""
    lines = [line.strip() for line in sbatch_stderr.splitlines() if line.strip()]
    fatal = [line for line in lines if "fatal" in line]
    reason = fatal[-1] if fatal else " ".join(lines[-2:]) or "sbatch failed"
    if "configuration source" in reason:
        return SlurmError(
            f"no Slurm cluster configured: {reason}",
            hint="set SLURM_CONF, or start a local one with 'hyperlaunch dev-cluster up'",
        )
    return SlurmError(f"sbatch refused the job: {reason}")


def submit(
    spec: JobSpec,
    script: str,
    *,
    env: Mapping[str, str] | None = None,
    resumed_from: str | None = None,
) -> jobs.JobRecord:
    """sbatch the script, then record the job. Slurm's refusal becomes a SlurmError carrying
    its message, and no record is written."""
    import submitit

    environ = env if env is not None else os.environ
    Path(spec.log_dir).mkdir(parents=True, exist_ok=True)
    folder = jobs.jobs_dir() / ".submitit"
    folder.mkdir(parents=True, exist_ok=True)
    executor = _executor_class()(folder, script)
    previous = dict(os.environ)
    os.environ.update(environ)  # submitit runs sbatch with this process's environment
    try:
        # submitit echoes sbatch's stderr as it runs; the user gets it once, in our one line.
        with contextlib.redirect_stderr(io.StringIO()):
            job = executor._submit_command("hyperlaunch")
    except submitit.core.utils.FailedJobError as err:
        raise _refusal(str(err)) from None
    except FileNotFoundError as err:
        raise SlurmError("sbatch not found on PATH", hint="is this a Slurm login node? try 'hyperlaunch doctor'") from err
    finally:
        os.environ.clear()
        os.environ.update(previous)
    record = jobs.JobRecord(
        job_id=str(job.job_id),
        spec=spec,
        submitted_at=time.time(),
        slurm_conf=environ.get("SLURM_CONF"),
        resumed_from=resumed_from,
    )
    jobs.save(record, script)
    return record
