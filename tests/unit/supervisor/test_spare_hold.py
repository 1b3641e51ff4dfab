"""The step the idle spares wait in (hyperlaunch.supervisor.spare_hold): started on the spares
before a round's srun, moved when the spares change, ended before a dead spare is given back
and at the attempt's end; with real processes standing in for srun."""

from __future__ import annotations

import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.supervisor import slurm_calls, spare_hold
from hyperlaunch.supervisor.allocation import Allocation
from hyperlaunch.supervisor.rounds import Rounds
from hyperlaunch.supervisor.spare_hold import SpareHold
from hyperlaunch.supervisor.step import TrainingStep


class Started:
    """A start function that runs `command` for each hold and remembers the nodes and processes."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.held: list[list[str]] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    def __call__(self, nodes: list[str]) -> subprocess.Popen[bytes]:
        self.held.append(nodes)
        self.processes.append(subprocess.Popen(self.command))
        return self.processes[-1]


def _soon(check: Callable[[], bool]) -> None:
    """Wait for what a started process writes (srun here starts in the background)."""
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "nothing came in 10 s"
        time.sleep(0.02)


def test_the_step_follows_the_spares_and_ends_with_them() -> None:
    start = Started(["sleep", "60"])
    hold = SpareHold(start, lambda: pytest.fail("srun ended the step: nothing to cancel"))
    hold.hold(["n3", "n4"])
    hold.hold(["n3", "n4"])
    assert start.held == [["n3", "n4"]], "the same spares: the running step is kept"
    hold.hold(["n4"])  # n3 took a lost node's place
    assert start.held == [["n3", "n4"], ["n4"]] and start.processes[0].returncode == -15
    start.processes[1].kill()
    start.processes[1].wait()
    hold.hold(["n4"])
    assert start.held[-1] == ["n4"] and len(start.processes) == 3, "a step that ended is started again"
    hold.hold([])
    assert start.processes[2].returncode == -15 and hold.process is None and hold.nodes == []


def test_a_step_srun_does_not_end_is_killed_and_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As srun whose task on a dead spare never answers: its live part would go on holding a
    spare's memory and GPUs, so the step is cancelled through Slurm."""
    monkeypatch.setattr(spare_hold, "RELEASE_WAIT_S", 0.3)
    ready = tmp_path / "ready"
    ignores = f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open({str(ready)!r}, 'w'); time.sleep(60)"
    start = Started([sys.executable, "-c", ignores])
    cancelled: list[bool] = []
    hold = SpareHold(start, lambda: cancelled.append(True))
    hold.hold(["n4"])
    _soon(ready.exists)
    hold.release()
    assert start.processes[0].returncode == -9 and cancelled == [True]


def test_a_step_srun_could_not_start_is_tried_again_next_time() -> None:
    hold = SpareHold(lambda nodes: None, lambda: None)
    hold.hold(["n4"])
    assert hold.nodes == [] and hold.process is None


def _stub(folder: Path, name: str, body: str) -> None:
    program = folder / name
    program.write_text("#!/bin/bash\n" + body)
    program.chmod(program.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def stub_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """srun that records its arguments, a line a call, and waits where it is the spares' step."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "srun.calls"
    _stub(bin_dir, "srun", f'echo "$*" >> {calls}\ncase "$*" in *"sleep infinity") exec sleep 60 ;; esac\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return calls


def test_hold_nodes_asks_srun_for_a_waiting_step_that_takes_no_cpu(stub_srun: Path) -> None:
    process = slurm_calls.hold_nodes(["n3", "n4"])
    assert process is not None
    _soon(stub_srun.exists)
    assert process.poll() is None
    process.terminate()
    process.wait()
    argv = stub_srun.read_text().split()
    assert argv[-2:] == ["sleep", "infinity"]
    assert {"--overlap", "--mem=0", "--nodes=2", "--ntasks=2", "--nodelist=n3,n4", "--input=none"} <= set(argv)
    assert not any(arg.startswith("--container") for arg in argv)


def test_a_round_starts_the_spares_step_and_a_dead_spare_leaves_it(
    tmp_path: Path, stub_srun: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slurm_calls, "hostnames", lambda nodelist: ["n1", "n2", "n3", "n4"])
    given_back: list[tuple[list[str], bool]] = []
    step: TrainingStep | None = None

    def shrink_to(job: str, nodes: list[str]) -> bool:
        waiting = step.spare_hold.process if step else None
        given_back.append((list(nodes), waiting is not None and waiting.poll() is None))
        return True

    monkeypatch.setattr(slurm_calls, "shrink_to", shrink_to)
    options = SupervisorOptions(
        run_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "c"), checkpoint_lock="/c/lock", max_restarts=3,
        launch_command=("t",), spare_nodes=2,
    )
    allocation = Allocation(options, {"SLURM_JOB_NODELIST": "n[1-4]"}, "12")
    allocation.take()
    step = TrainingStep(options, {"PATH": f"{stub_srun.parent / 'bin'}:/usr/bin:/bin"}, "true", "12", "12", "n1")
    rounds = Rounds(tmp_path, "12", 0, None)
    rounds.first()
    try:
        assert step.run(rounds, allocation) == (0, [])
        _soon(lambda: len(stub_srun.read_text().splitlines()) == 2)
        (training,) = [line for line in stub_srun.read_text().splitlines() if "hyperlaunch-step" in line]
        assert "--nodelist=n1,n2" in training
        assert "--nodelist=n3,n4 sleep infinity" in stub_srun.read_text()
        waiting = step.spare_hold.process
        assert waiting is not None and waiting.poll() is None, "the spares wait in their step between rounds"
        assert step.spare_hold.nodes == ["n3", "n4"]

        step._drop_spares(["n3"], allocation)
        assert waiting.returncode == -15
        assert given_back == [(["n1", "n2", "n4"], True)], "the dead spare is given back first, its step ended after"
        assert step.spare_hold.nodes == ["n4"]
        _soon(lambda: "--nodelist=n4 sleep infinity" in stub_srun.read_text())
    finally:
        step.spare_hold.release()
    assert step.spare_hold.process is None
