"""The step script's answer to a lost batch host (templates/partials/batch_host_lost.sh.j2): the
first node of the round after the batch host marks it DOWN only where both its slurmd and this
step's srun are gone, since marking a node down ends every job on it. Run with bash, the function
taken from the rendered step script, scontrol a stub that records what it is asked; the
listeners are real sockets on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperlaunch.script import supervisor_bundle

pytestmark = pytest.mark.slow

SCONTROL = """#!/bin/bash
echo "$*" >>"$HL_CALLS"
case "$1 $2" in
  "show job") echo "JobId=$3 JobName=t BatchHost=node1 StdOut=$HL_OUT StdErr=$HL_ERR" ;;
  "show node") echo "NodeName=$3 NodeAddr=127.0.0.1 NodeHostName=vm${HL_NODE_PORT:+ Port=$HL_NODE_PORT} Version=22.05.8" ;;
  "show config") echo "SlurmdPort              = $HL_CONFIG_PORT" ;;
  "update "*) exit "${HL_UPDATE_EXIT:-0}" ;;
esac
"""


def _functions() -> str:
    step = supervisor_bundle.step_script()
    start = step.index("listens_at() {")
    end = step.index("\n}\n", step.index("report_a_lost_batch_host() {")) + 3
    return step[start:end]


@contextlib.contextmanager
def _listener() -> Iterator[tuple[int, socket.socket]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    try:
        yield server.getsockname()[1], server
    finally:
        server.close()


def _closed_port() -> int:
    with _listener() as (port, _):
        return port


def _connections(server: socket.socket) -> int:
    count = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            server.accept()[0].close()
            count += 1
    return count


def _run(tmp_path: Path, *, node_port: int | None, config_port: int, srun_port: int, here: str = "node2",
         nodes: str = "node1 node2", update_exit: int = 0) -> tuple[list[str], str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    out, err, calls = tmp_path / "job.out", tmp_path / "job.err", tmp_path / "calls"
    for path in (out, err, calls):
        path.write_text("")
    script = f"{_functions()}\nstep_nodes=({nodes})\nreport_a_lost_batch_host\n"
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}", "HL_CALLS": str(calls), "HL_OUT": str(out), "HL_ERR": str(err),
        "HL_NODE_PORT": "" if node_port is None else str(node_port), "HL_CONFIG_PORT": str(config_port),
        "HL_UPDATE_EXIT": str(update_exit), "SLURMD_NODENAME": here, "SLURM_JOB_ID": "41", "SLURM_RESTART_COUNT": "2",
        "SLURM_SRUN_COMM_HOST": "127.0.0.1", "SLURM_SRUN_COMM_PORT": str(srun_port),
    }
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines(), out.read_text(), err.read_text()


def test_both_gone_marks_the_batch_host_down_and_ends_the_attempt_in_the_logs(tmp_path: Path) -> None:
    calls, out, err = _run(tmp_path, node_port=_closed_port(), config_port=6818, srun_port=_closed_port())
    assert "update NodeName=node1 State=DOWN Reason=hyperlaunch: batch host of job 41 lost" in calls
    for log in (out, err):
        assert "the batch host node1 stopped answering (its supervisor is gone): marked it down from node2" in log
        assert "### hyperlaunch attempt-end restart=2 job=41 exit=1 cause=node-failure nodes=node1 by=node2 action=requeue" in log


def test_a_live_srun_keeps_a_batch_host_whose_port_scontrol_left_out(tmp_path: Path) -> None:
    """As seen on the dev cluster at a time limit: scontrol named no Port=, SlurmdPort is not
    that node's, so its slurmd seemed gone; its srun (the supervisor's) still answered."""
    with _listener() as (slurmd_port, _), _listener() as (srun_port, srun):
        calls, out, err = _run(tmp_path, node_port=None, config_port=_closed_port(), srun_port=srun_port)
        assert _connections(srun) >= 1
    assert slurmd_port and not any(call.startswith("update") for call in calls)
    assert "marked it down" not in out + err and "attempt-end" not in out + err
    assert "the batch host node1 did not answer on 127.0.0.1:" in err and "but the srun of this step did: not marked down" in err


def test_a_live_slurmd_is_left_alone_and_its_srun_is_not_asked(tmp_path: Path) -> None:
    with _listener() as (slurmd_port, _), _listener() as (srun_port, srun):
        calls, out, err = _run(tmp_path, node_port=slurmd_port, config_port=6818, srun_port=srun_port)
        assert _connections(srun) == 0, "srun logs every empty connection to the job's stderr"
    assert not any(call.startswith("update") for call in calls) and out == err == ""


def test_only_the_first_node_after_the_batch_host_acts(tmp_path: Path) -> None:
    calls, out, err = _run(tmp_path, node_port=_closed_port(), config_port=6818, srun_port=_closed_port(),
                           here="node2", nodes="node1 node3 node2")
    assert calls == ["show job 41"] and out == err == ""


def test_without_admin_rights_the_log_says_why_the_job_waits(tmp_path: Path) -> None:
    calls, out, err = _run(tmp_path, node_port=_closed_port(), config_port=6818, srun_port=_closed_port(), update_exit=1)
    assert any(call.startswith("update NodeName=node1 State=DOWN") for call in calls)
    assert out == "" and "marking it down needs Slurm admin rights: Slurm requeues job 41 once it finds the node dead" in err
