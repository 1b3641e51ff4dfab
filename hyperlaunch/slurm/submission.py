"""sbatch of a script hyperlaunch rendered, in submitit's layout of a job's files: its submission
files and job folders, private to the user, the variables the job must receive (--export), and
sbatch's refusal in one line."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.core.private_files import private_dir, write_private
from hyperlaunch.slurm import runner


def submit_script(script: str, folder: Path, *, env: Mapping[str, str], forward: Sequence[str] = ()) -> str:
    """sbatch a script we rendered, laid out as submitit lays out a job (its submission files
    and job folders under `folder`, private to the user: the script holds `--env` values), with
    `env` as sbatch's environment: SLURM_CONF, and what the job inherits. `forward` names
    variables of `env` the job must receive (`--env NAME`, see export_flag). Returns the job id.
    A refusal raises SlurmError with sbatch's reason in one line, and a failed submission of
    any kind leaves no submission file behind.

    These are the steps of submitit's own submission (which pickles a Python callable instead,
    and runs sbatch in os.environ with its stderr echoed), in its public layout (JobPaths)."""
    from submitit.core.utils import JobPaths  # on the submit path only: rendering and reading need none of it

    staging = private_dir(JobPaths.get_first_id_independent_folder(folder))
    path = staging / f".submission_file_{uuid.uuid4().hex}.sh"
    try:
        write_private(path, script)
        command = ["sbatch", *export_flag(forward, env), str(path)]
        result = runner.run(command, env=env, timeout=60, check=False)
        if result.returncode != 0:
            raise _refusal(result.stderr)
        job_id = _job_id_of(result.stdout)
        paths = JobPaths(folder, job_id=job_id)
        private_dir(paths.folder)
        paths.move_temporary_file(path, "submission_file")
    finally:
        # Whatever went wrong (a refusal, sbatch not executable, an interrupt), the
        # temporary copy of the script must not outlive this call.
        path.unlink(missing_ok=True)
    return job_id


def export_flag(forward: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """sbatch's --export naming `forward` on top of what the job gets anyway: sbatch exports
    its whole environment (ALL) unless SBATCH_EXPORT says otherwise, and a command-line
    --export would replace SBATCH_EXPORT, so its list is kept. Names only: sbatch reads each
    value from `env`, so no value is written on a command line or in a file."""
    if not forward:
        return []
    base = env.get("SBATCH_EXPORT", "").strip() or "ALL"
    kept = [] if base.upper() in ("NONE", "NIL") else [item for item in base.split(",") if item]
    names = [name for name in forward if name not in kept]
    return ["--export=" + ",".join(kept + names)]


def _job_id_of(sbatch_stdout: str) -> str:
    """The job id in sbatch's answer; a SlurmError when there is none (sbatch exited 0, so the
    job may exist: say where to look rather than let the user submit it twice)."""
    from submitit import SlurmExecutor
    from submitit.core.utils import FailedSubmissionError

    try:
        # Private, but submitit has no public parser of sbatch's answer: the one its submit() uses.
        return str(SlurmExecutor._get_job_id_from_submission_command(sbatch_stdout))
    except FailedSubmissionError:
        answer = " ".join(sbatch_stdout.split())[:200] or "nothing"
        raise SlurmError(
            f"sbatch exited 0 but answered with no job id ({answer!r})", hint="check squeue: the job may have been queued"
        ) from None


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
