"""Submit a rendered script and record the job: the script goes to Slurm through
hyperlaunch.slurm (submitit underneath), then the record is written. No record without a job."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from hyperlaunch import jobs, slurm
from hyperlaunch.errors import ConfigError, InvalidInput
from hyperlaunch.spec import JobSpec


def submit(
    spec: JobSpec,
    script: str,
    *,
    env: Mapping[str, str] | None = None,
    resumed_from: str | None = None,
) -> jobs.JobRecord:
    """sbatch the script with `env` (default: this process's environment), then record the
    job. Slurm's refusal becomes a SlurmError carrying its message, and no record is written."""
    environ = dict(env if env is not None else os.environ)
    try:
        Path(spec.log_dir).mkdir(parents=True, exist_ok=True)  # Slurm does not create it
    except OSError as err:
        raise InvalidInput(f"log_dir {spec.log_dir}: cannot create it: {err.strerror or err}") from None
    job_id = slurm.submit_script(script, jobs.jobs_dir() / ".submitit", env=environ)
    record = jobs.JobRecord(
        job_id=job_id,
        spec=spec,
        submitted_at=time.time(),
        slurm_conf=environ.get("SLURM_CONF"),
        resumed_from=resumed_from,
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
