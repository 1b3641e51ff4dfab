"""The chaos benchmark's jobs: submitted, watched, resumed and asked about through the
hyperlaunch CLI, as a user would; their step records read as the trainer writes them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperlaunch.bench.chaos_faults import ChaosError, squeue
from hyperlaunch.core.metrics_records import METRICS_FILE, StepRecord, parse_metrics_line
from hyperlaunch.runs.restart_causes import Restart

MODEL = "qwen3_tiny"
TRAINER_ARGS = [
    "--warmup-steps", "3", "--lr", "3e-3", "--min-lr", "3e-4",
    # The hang watchdog's floor, 300 s by default, cut so that a hang costs tens of seconds.
    "--hang-timeout", "10", "--hang-floor", "20",
]
"""The fault tests' schedule (tests/support/fault_helpers.py), with the batch chosen apart."""


@dataclass
class Cli:
    """`python -m hyperlaunch ...` with the benchmark's environment."""

    env: dict[str, str]

    def __call__(self, *args: str, cwd: Path) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "hyperlaunch", *args], cwd=cwd, env=self.env, capture_output=True, text=True, check=False, timeout=300,
        )
        if done.returncode != 0:
            raise ChaosError(f"hyperlaunch {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return done.stdout

    def status(self, job: str, cwd: Path) -> dict[str, Any]:
        return dict(json.loads(self("status", job, "--json", cwd=cwd)))


class StepLog:
    """The step records of one run dir's metrics.jsonl, read as far as written (a line being
    written is read on the next call)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / METRICS_FILE
        self.steps: list[StepRecord] = []
        self._offset = 0

    def read(self) -> list[StepRecord]:
        try:
            with open(self.path, "rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:
            return self.steps
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(whole)
        for line in whole.decode(errors="replace").splitlines():
            record = parse_metrics_line(line)
            if isinstance(record, StepRecord):
                self.steps.append(record)
        return self.steps

    def last_step(self) -> int:
        steps = self.read()
        return steps[-1].step if steps else 0


@dataclass
class Lineage:
    """A training and the jobs that carried it: the submitted one and those resuming it."""

    cli: Cli
    workdir: Path
    jobs: list[str] = field(default_factory=list)
    submitted_at: float = 0.0
    run_dir: Path = Path()
    """Where the trainer writes its records, as submit names it."""

    @property
    def job(self) -> str:
        return self.jobs[-1]

    @property
    def ckpt_dir(self) -> Path:
        """Chosen here (the full disk's tmpfs is mounted there before the job starts)."""
        return self.workdir / "checkpoints"

    def submit(self, *, max_steps: int, every: int, batch: tuple[int, int], snapshots: int = 0) -> None:
        """`hyperlaunch submit`; `batch`: the trainer's sequence length and micro-batch;
        `snapshots`: its --memory-checkpoint-every (0: none)."""
        self.submitted_at = time.time()
        out = json.loads(self.cli(
            "submit", "--model", MODEL, "--nodes", "2", "--spare-nodes", "1", "--exclusive", "--max-steps", str(max_steps),
            "--checkpoint-dir", str(self.ckpt_dir), "--memory-checkpoint-every", str(snapshots), "--json", "--", *TRAINER_ARGS, "--checkpoint-every", str(every),
            "--seq-len", str(batch[0]), "--micro-batch-size", str(batch[1]), cwd=self.workdir,
        ))
        self.jobs.append(out["job_id"])
        self.run_dir = Path(out["run_dir"])

    def status(self, job: str | None = None) -> dict[str, Any]:
        return self.cli.status(job or self.job, self.workdir)

    def ended(self) -> dict[str, Any] | None:
        """The current job's status once it has left the queue, else None (squeue failing, as
        while slurmctld restarts, counts as still there)."""
        if squeue(self.job, "%T") != "":
            return None
        return self.status()

    def resume(self) -> str:
        """`hyperlaunch resume` the current job; the new job's id."""
        out = self.cli("resume", self.job, "--json", cwd=self.workdir)
        self.jobs.append(json.loads(out)["job_id"])
        return self.job

    def wait_end(self, timeout: float = 1800) -> tuple[dict[str, Any], float]:
        """The current job's final status and when it was seen to end."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            final = self.ended()
            if final is not None:
                return final, time.time()
            time.sleep(0.5)
        raise ChaosError(f"job {self.job} did not end within {timeout:.0f} s")


def restarts_of(status: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every restart and the final failure `status --json` lists for a job, each with a key
    that stays the same in a later status of that job."""
    job = str(status["job_id"])
    found = [(f"{job}/attempt/{i}", r) for i, r in enumerate(status.get("restarts") or [])]
    found += [(f"{job}/round/{i}", r) for i, r in enumerate(status.get("restarts_in_allocation") or [])]
    if status.get("failure"):
        found.append((f"{job}/failure", status["failure"]))
    return found


def cause_text(restart: dict[str, Any]) -> str:
    """A restart of `status --json` in status's words: `cause[ in allocation] (detail)`."""
    fields = {name: restart[name] for name in Restart.__dataclass_fields__ if name in restart}
    return Restart(**{**fields, "nodes": tuple(fields.get("nodes") or ())}).describe()
