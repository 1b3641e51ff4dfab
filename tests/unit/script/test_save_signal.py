"""The save signal reaches the trainers on every torch the package allows: the rendered step
script starts the real torchrun with USR2 ignored (torch < 2.9 dies of it) and sends it to
torchrun's children itself. Slurm signals every process of the step, as killpg does here; the
trainers get it at least once, torchrun survives, and its workers' exit 75 is what it reports."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyperlaunch.script import supervisor_bundle
from tests.support.free_port import free_port

TORCHRUN = Path(sys.executable).parent / "torchrun"
_WORKER = """
import os, signal, sys, time
out = os.environ["OUT"]
rank = os.environ["RANK"]
got = []
signal.signal(signal.SIGUSR2, lambda *_: got.append(1))
open(f"{out}/ready{rank}", "w").close()
deadline = time.time() + 60
while not got and time.time() < deadline:
    time.sleep(0.05)
def record():
    open(f"{out}/.got{rank}", "w").write(str(len(got)))
    os.replace(f"{out}/.got{rank}", f"{out}/got{rank}")
# At once: torchrun stops the other worker as soon as this one exits. Then again, counting a
# second copy of the signal if one comes.
record()
time.sleep(0.3)
record()
sys.exit(75 if got else 3)
"""


def _step_script() -> str:
    return supervisor_bundle.step_script()


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside this Python")
@pytest.mark.parametrize("whole_step", [False, True], ids=["step-shell", "every-process"])
@pytest.mark.slow
def test_real_torchrun_survives_the_save_signal_and_its_trainers_get_it(tmp_path: Path, whole_step: bool) -> None:
    (tmp_path / "worker.py").write_text(_WORKER)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nexit 1\n")  # no cluster: the head node comes from SLURM_LAUNCH_NODE_IPADDR
    (bin_dir / "scontrol").chmod(0o755)
    env = dict(
        os.environ, OUT=str(tmp_path), PATH=f"{bin_dir}:{os.environ['PATH']}", OMP_NUM_THREADS="1",
        SLURM_JOB_ID=str(random.randrange(1, 10**6)), HYPERLAUNCH_RENDEZVOUS_PORT=str(free_port()), SLURM_JOB_NUM_NODES="1", SLURM_LAUNCH_NODE_IPADDR="127.0.0.1",
        PET_SIGNALS_TO_HANDLE="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
    )
    command = ["bash", "-c", _step_script(), "hyperlaunch-step", str(TORCHRUN), "--nproc_per_node=2", str(tmp_path / "worker.py")]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready{rank}").exists() for rank in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
            time.sleep(0.1)
        if whole_step:
            os.killpg(proc.pid, signal.SIGUSR2)
        else:
            os.kill(proc.pid, signal.SIGUSR2)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert [(tmp_path / f"got{rank}").read_text() for rank in (0, 1)] in (["1", "1"], ["1", "2"], ["2", "1"], ["2", "2"]), output[-3000:]
    assert proc.returncode == 1, "torchrun itself ended normally, reporting its workers' exit 75"
    assert "exitcode  : 75" in output
