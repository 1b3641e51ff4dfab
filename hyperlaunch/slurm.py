"""The only module that runs Slurm commands (sbatch, squeue, sacct, sacctmgr, scancel,
scontrol, sinfo). Everything else calls these functions, so unit tests can swap in a fake
runner and integration tests exercise the real binaries."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hyperlaunch.errors import SlurmError

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
    if shutil.which(args[0], path=(env or {}).get("PATH")) is None and shutil.which(args[0]) is None:
        raise SlurmError(f"{args[0]} not found on PATH", hint="is this a Slurm login node? try 'hyperlaunch doctor'")
    try:
        proc = subprocess.run(
            list(args),
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise SlurmError(f"{' '.join(args[:2])} did not answer within {timeout:.0f} s") from err
    result = Result(tuple(args), proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise SlurmError(f"{args[0]} failed: {result.one_line_error()}")
    return result


@dataclass(frozen=True)
class NodeInfo:
    """One node as sinfo reports it."""

    name: str
    state: str
    reason: str


def node_states(*, env: Mapping[str, str] | None = None) -> list[NodeInfo]:
    """Every node with its state (idle, alloc, down*, drain, ...) and reason."""
    out = run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], env=env, timeout=15).stdout
    nodes: dict[str, NodeInfo] = {}
    for line in out.splitlines():
        name, state, reason = (line.split("|", 2) + ["", ""])[:3]
        if name:
            nodes[name] = NodeInfo(name=name, state=state.strip(), reason=reason.strip())
    return [nodes[name] for name in sorted(nodes, key=_natural_key)]


def controller_responds(*, env: Mapping[str, str] | None = None) -> bool:
    """True when slurmctld answers `scontrol ping`."""
    result = run(["scontrol", "ping"], env=env, timeout=10, check=False)
    return result.returncode == 0 and "UP" in result.stdout


def ensure_accounting_cluster(name: str, *, env: Mapping[str, str] | None = None) -> None:
    """Register the cluster with slurmdbd (sacct needs it); a no-op when it exists."""
    result = run(["sacctmgr", "-i", "add", "cluster", name], env=env, timeout=30, check=False)
    text = (result.stdout + result.stderr).lower()
    if result.returncode != 0 and "already exists" not in text and "nothing new added" not in text:
        raise SlurmError(f"sacctmgr could not register cluster {name}: {result.one_line_error()}")


def _natural_key(name: str) -> tuple[str, int]:
    stem = name.rstrip("0123456789")
    digits = name[len(stem):]
    return (stem, int(digits) if digits else -1)
