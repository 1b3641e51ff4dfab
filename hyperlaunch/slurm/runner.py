"""The one runner every Slurm command goes through (sbatch, squeue, sacct, sacctmgr, scancel,
scontrol, sinfo, srun): the other modules of hyperlaunch.slurm call runner.run, never subprocess,
so a unit test swaps in a fake by patching this one function and integration tests exercise the
real binaries."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.core.slurm_states import command_environment

DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Result:
    """What a Slurm command printed and returned."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def one_line_error(self) -> str:
        text = (self.stderr or self.stdout).strip()
        return " ".join(text.split()) or f"exit code {self.returncode}"


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    check: bool = True,
    stdin: str | None = None,
) -> Result:
    """Run one Slurm command. With check=True a non-zero exit raises SlurmError carrying
    Slurm's own message, so the user sees why Slurm refused."""
    if shutil.which(args[0], path=(env or os.environ).get("PATH")) is None:
        raise SlurmError(f"{args[0]} not found on PATH", hint="is this a Slurm login node? try 'hyperlaunch doctor'")
    conf = (env if env is not None else os.environ).get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        # Slurm's commands would retry for a minute before saying so.
        raise SlurmError(f"SLURM_CONF={conf} is no file", hint="name your cluster's slurm.conf, or unset SLURM_CONF for the default one")
    try:
        proc = subprocess.run(
            list(args),
            env=command_environment(args[0], env if env is not None else os.environ),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise SlurmError(f"{' '.join(args[:2])} did not answer within {timeout:.0f} s") from err
    except OSError as err:  # found on PATH but not runnable: a broken wrapper, no permission
        raise SlurmError(f"{args[0]} could not be run: {err.strerror or err}") from None
    result = Result(tuple(args), proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise SlurmError(f"{args[0]} failed: {result.one_line_error()}")
    return result
