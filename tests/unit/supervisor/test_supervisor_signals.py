"""The supervisor's process handling against real processes (the harness's stub srun runs the
real step script and a stub torchrun): scancel's TERM ends the attempt with nothing left
running and the lock given back; the save signal reaches the step (tests/unit/script/test_render.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hyperlaunch.core.protocol import checkpoint_lock_path, parse_attempt_marker
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.script.render import render_sbatch
from tests.support.sbatch_harness import JOB_ID, install_supervisor, make_stubs


def _running_with(word: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if word.encode() in argv:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_scancels_term_ends_the_step_and_gives_the_lock_back(tmp_path: Path) -> None:
    stuck = f"{40 + time.time_ns() % 10**6 / 10**7:.7f}"  # the stub trainer's sleep: no other process has it
    spec = job_spec(model="qwen3_tiny", torchrun="torchrun", checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "l"), run_dir=str(tmp_path / "run"))
    script = render_sbatch(spec)
    install_supervisor(script)
    (tmp_path / "job.sbatch").write_text(script)
    env = {
        "PATH": f"{make_stubs(tmp_path)}:/usr/bin:/bin", "HOME": str(tmp_path), "HL_TEST_DIR": str(tmp_path),
        "SLURM_JOB_ID": JOB_ID, "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[1-2]", "HL_TEST_STEP_STUCK": stuck,
    }
    proc = subprocess.Popen(["bash", str(tmp_path / "job.sbatch")], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = checkpoint_lock_path(Path(spec.output.checkpoint_dir), spec.derived.checkpoint_name)
    deadline = time.time() + 20
    while not (_running_with(stuck) and lock.exists()) and time.time() < deadline:
        time.sleep(0.05)
    assert _running_with(stuck) and lock.exists(), "the step never started"
    started = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)  # what scancel does (the batch step's processes get it)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "hyperlaunch: stopped by SIGTERM; ending the training step" in stderr
    assert not _running_with(stuck), "the trainer outlived the supervisor"
    assert time.monotonic() - started < 10, "the step was killed only after the wait, not stopped"
    assert not lock.exists(), "a cancelled job keeps no lock"
    ends = [m for m in map(parse_attempt_marker, stdout.splitlines()) if m and m["event"] == "end"]
    assert not ends, "a cancelled attempt writes no end marker: Slurm's accounting tells"
