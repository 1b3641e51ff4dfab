"""Drive a real dev cluster from tests: the CLI in a subprocess, Slurm commands with its SLURM_CONF."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def importable_tests_env() -> dict[str, str]:
    """PYTHONPATH with the repository root first, so `tests.integration...` modules import in
    any working directory - the test's, a job's on a dev-cluster node."""
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(REPO_ROOT) + (os.pathsep + rest if rest else "")}


def hyperlaunch(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperlaunch", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


@dataclass
class DevCluster:
    """A running dev cluster and the environment that points Slurm commands at it."""

    root: Path
    base_port: int
    nodes: int
    """Nodes of the default partition `dev`."""
    gpu_nodes: int = 0
    """Nodes of partition `gpu` (fake GPU GRES)."""

    @property
    def env(self) -> dict[str, str]:
        """This process's environment (as the test has set it) pointed at the cluster."""
        return dict(os.environ, SLURM_CONF=str(self.root / "etc" / "slurm.conf"))

    def up(self) -> subprocess.CompletedProcess[str]:
        result = hyperlaunch(
            "dev-cluster", "up", "--nodes", str(self.nodes), "--gpu-nodes", str(self.gpu_nodes),
            "--dir", str(self.root), "--base-port", str(self.base_port),
        )
        return result

    def down(self) -> subprocess.CompletedProcess[str]:
        return hyperlaunch("dev-cluster", "down", "--dir", str(self.root))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A `hyperlaunch dev-cluster ...` command aimed at this cluster's directory."""
        return hyperlaunch(*args, "--dir", str(self.root), env=self.env)

    def hyperlaunch(
        self, *args: str, cwd: Path | None = None, extra_env: dict[str, str] | None = None, module: str = "hyperlaunch"
    ) -> subprocess.CompletedProcess[str]:
        """Any hyperlaunch command, with SLURM_CONF pointing at this cluster (`module`: the CLI's
        entry module, tests.support.faulty_cli for jobs that inject faults)."""
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True, text=True, env={**self.env, **(extra_env or {})}, cwd=cwd, timeout=600, check=False,
        )

    def run(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=60, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{args} failed: {result.stderr}")
        return result.stdout

    def sbatch(self, script: Path) -> str:
        return self.run("sbatch", "--parsable", str(script)).strip().split(";")[0]

    def job_field(self, job_id: str, fmt: str) -> str:
        """A squeue field of a pending/running job, '' once it left the queue."""
        return self.run("squeue", "-h", "-j", job_id, "-o", fmt, check=False).strip()

    def sacct_attempts(self, job_id: str) -> list[tuple[str, str]]:
        """(state, nodelist) of every attempt of a job, oldest first (sacct -D)."""
        out = self.run("sacct", "-n", "-P", "-D", "-X", "-j", job_id, "-o", "State,NodeList")
        return [tuple(line.split("|", 1)) for line in out.splitlines() if line]  # type: ignore[misc]

    def node_states(self) -> dict[str, str]:
        """State of each node of the default partition `dev` (where the tests' jobs run)."""
        out = self.run("sinfo", "-h", "-N", "-p", "dev", "-o", "%N %T")
        return dict(line.split() for line in out.splitlines() if line.strip())


def session_cluster_root(basetemp: Path) -> Path:
    """The shared cluster's directory: beside the xdist workers' own temp dirs (they live in
    <session basetemp>/popen-gwN), or in the basetemp of a run without workers."""
    session = basetemp.parent if basetemp.name.startswith("popen-gw") else basetemp
    return session / "devcluster"


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
