"""sbatch of a script hyperlaunch rendered, through submitit's Slurm executor: its submission
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
    """sbatch a script we rendered, through submitit's Slurm executor (its submission files
    and job folders under `folder`, private to the user: the script holds `--env` values), with
    `env` as sbatch's environment: SLURM_CONF, and what the job inherits. `forward` names
    variables of `env` the job must receive (`--env NAME`, see export_flag). Returns the job id.
    A refusal raises SlurmError with sbatch's reason in one line, and a failed submission of
    any kind leaves no submission file behind."""
    return _rendered_script_executor()(folder, script, env, forward).submit_rendered()


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


def _rendered_script_executor() -> type:
    import submitit  # on the submit path only: rendering and reading need none of it
    from submitit.core.utils import JobPaths

    class RenderedScriptExecutor(submitit.SlurmExecutor):
        """submitit's SlurmExecutor with our script as the submission file. Its public submit()
        pickles a Python callable, and _submit_command runs sbatch in os.environ with its
        stderr echoed; submit_rendered does the same steps with sbatch run here, in `env`."""

        def __init__(self, folder: Path, script: str, env: Mapping[str, str], forward: Sequence[str]) -> None:
            super().__init__(folder=folder)
            self._script = script
            self._env = dict(env)
            self._forward = tuple(forward)

        @classmethod
        def affinity(cls) -> int:
            # submitit looks for srun on this process's PATH; runner.run() checks for sbatch on the
            # PATH of the environment sbatch will actually get.
            return 1

        def _make_submission_file_text(self, command: str, uid: str) -> str:
            return self._script

        def _make_submission_command(self, submission_file_path: Path) -> list[str]:
            command: list[str] = super()._make_submission_command(submission_file_path)
            return command[:1] + export_flag(self._forward, self._env) + command[1:]

        @staticmethod
        def _set_job_permissions(folder: Path) -> None:
            private_dir(folder)  # submitit's hook for a job's folder, a no-op in submitit itself

        def submit_rendered(self) -> str:
            uid = uuid.uuid4().hex
            folder = private_dir(JobPaths.get_first_id_independent_folder(self.folder))
            path = folder / f".submission_file_{uid}.sh"
            try:
                write_private(path, self._make_submission_file_text("", uid))
                result = runner.run(self._make_submission_command(path), env=self._env, timeout=60, check=False)
                if result.returncode != 0:
                    raise _refusal(result.stderr)
                job = self.job_class(folder=self.folder, job_id=_job_id_of(self, result.stdout), tasks=[0])
                self._set_job_permissions(job.paths.folder)
                job.paths.move_temporary_file(path, "submission_file")
            finally:
                # Whatever went wrong (a refusal, sbatch not executable, an interrupt), the
                # temporary copy of the script must not outlive this call.
                path.unlink(missing_ok=True)
            return str(job.job_id)

    return RenderedScriptExecutor


def _job_id_of(executor: object, sbatch_stdout: str) -> str:
    """The job id in sbatch's answer; a SlurmError when there is none (sbatch exited 0, so the
    job may exist: say where to look rather than let the user submit it twice)."""
    try:
        return str(executor._get_job_id_from_submission_command(sbatch_stdout))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - submitit raises its own FailedSubmissionError
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
