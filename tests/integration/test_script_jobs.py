"""A user's own training script, end to end on the dev cluster with the real CLI, supervisor
and torchrun: the examples/ scripts survive a killed node (the DCP one with the same losses, the
plain DDP one from its own checkpoint), run the code as submitted, end for good on
runtime.fail, and save on the time-limit warning without using the restart budget."""

from __future__ import annotations

import json
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints
from hyperlaunch.supervisor.decisions import job_port
from tests.support.devcluster_helpers import DevCluster, wait_until
from tests.support.fault_helpers import Job, kill_a_node_of, revive

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STEPS = 40
EVERY = 10


@dataclass
class ScriptJob(Job):
    """A submitted script job: the scenarios' Job, its files under its run name (the defaults:
    ./checkpoints, ./runs/<name>), and its text `status` and log."""

    name: str = ""

    @property
    def run_dir(self) -> Path:
        return self.workdir / "runs" / self.name

    def pointer_step(self) -> int | None:
        named = checkpoints.read_pointer(self.ckpt_dir, self.name)
        return checkpoints.parse_step(named, self.name) if named else None

    def status_text(self) -> str:
        result = self.cluster.hyperlaunch("status", self.job_id, cwd=self.workdir)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def log(self) -> str:
        path = self.workdir / "logs" / f"{self.name}_{self.job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""


def _project(workdir: Path, example: str) -> Path:
    """A folder of the user's with one of the examples in it (no git: the folder is the snapshot)."""
    project = workdir / "project"
    project.mkdir(parents=True)
    shutil.copy(ROOT / "examples" / example, project / example)
    return project / example


def _submit(cluster: DevCluster, workdir: Path, script: Path, *flags: str, args: tuple[str, ...] = ()) -> ScriptJob:
    result = cluster.hyperlaunch(
        "submit", "--script", str(script), "--nodes", "2", "--exclusive", "--json", *flags, "--", *args, cwd=workdir
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    return ScriptJob(cluster, workdir, doc["job_id"], name=doc["name"])


def _wait_two_attempts(job: ScriptJob, timeout: float = 200) -> None:
    wait_until(lambda: len(job.status()["attempts"]) >= 2, timeout, f"attempt 2 of job {job.job_id}", interval=1)


def test_the_dcp_example_survives_a_killed_node_with_the_same_losses_and_runs_the_code_as_submitted(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    reference_script = _project(tmp_path / "reference", "fsdp2_dcp.py")
    reference = _submit(dev_cluster, tmp_path / "reference", reference_script, args=("--steps", str(STEPS), "--save-every", str(EVERY)))

    script = _project(tmp_path / "killed", "fsdp2_dcp.py")
    job = _submit(
        dev_cluster, tmp_path / "killed", script, "--tracker", "tensorboard",
        args=("--steps", str(STEPS), "--save-every", str(EVERY), "--step-seconds", "0.3"),
    )
    # Edited after submit: a requeued attempt must still run the submitted copy.
    marker = tmp_path / "edited-code-ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n" + script.read_text())
    wait_until(lambda: (job.pointer_step() or 0) >= EVERY, 240, "the first checkpoint", interval=0.2)
    victim = kill_a_node_of(job)
    _wait_two_attempts(job)
    revive(dev_cluster, victim)

    assert reference.wait_final()["state"] == "COMPLETED"
    final = job.wait_final()
    assert final["state"] == "COMPLETED", job.status_text() + job.log()
    assert len(final["attempts"]) >= 2
    assert not marker.exists(), "the requeued attempt ran the edited script"
    expected = reference.losses()
    assert sorted(expected) == list(range(1, STEPS + 1))
    losses = job.losses()
    assert sorted(losses) == sorted(expected)
    for step, loss in expected.items():
        assert abs(losses[step] - loss) <= 1e-6 * max(1.0, abs(loss)), (step, losses[step], loss)
    assert job.pointer_step() == STEPS
    text = job.status_text()
    assert "script fsdp2_dcp.py" in text and "code:" in text and ".hyperlaunch/code-" in text
    # runtime.log reached the tracker: each step once, the attempt that kept it, across the restart.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(job.run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    scalars = events.Scalars("train/loss")
    assert [s.step for s in scalars] == list(range(1, STEPS + 1))
    assert all(abs(s.value - losses[s.step]) <= 1e-5 * max(1.0, abs(s.value)) for s in scalars)


def test_the_plain_ddp_example_resumes_from_its_own_checkpoint_after_a_killed_node(dev_cluster: DevCluster, tmp_path: Path) -> None:
    script = _project(tmp_path, "plain_ddp.py")
    job = _submit(dev_cluster, tmp_path, script, args=("--steps", str(STEPS), "--save-every", str(EVERY), "--step-seconds", "0.3"))
    saved = job.ckpt_dir / f"{job.name}-{EVERY}steps" / "state.pt"
    wait_until(saved.exists, 240, "the plain script's first checkpoint", interval=0.2)
    victim = kill_a_node_of(job)
    _wait_two_attempts(job)
    revive(dev_cluster, victim)

    final = job.wait_final()
    assert final["state"] == "COMPLETED", job.status_text() + job.log()
    # The surviving rank's gloo error records nothing: srun's line for its task's end sent the
    # supervisor to probe the nodes, and it requeued the job itself, not Slurm after SlurmdTimeout.
    (restart,) = final["restarts"]
    assert (restart["cause"], restart["nodes"]) == ("node failure", [victim]), final["restarts"]
    assert "action=requeue" in job.log() and "action=slurm-requeue" not in job.log()
    assert "stopped answering" in (job.workdir / "logs" / f"{job.name}_{job.job_id}.err").read_text()
    assert "resumed from step" in job.log()
    resumed = [line for line in job.log().splitlines() if "resumed from step" in line]
    assert int(resumed[-1].rsplit(" ", 1)[-1]) >= EVERY


def test_a_rendezvous_port_held_on_the_head_node_is_stepped_over(dev_cluster: DevCluster, tmp_path: Path) -> None:
    """Another job whose id is a multiple of 625 away, or any service, listens on the job's
    rendezvous port on its head node: the round rendezvouses on the next free port. Before, the
    head's store failed to bind, and with no restart to spend the job ended FAILED."""
    gate = tmp_path / "gate"
    gate.touch()
    blocker = tmp_path / "blocker.sbatch"
    blocker.write_text(f"#!/bin/bash\n#SBATCH --nodes=1 --output=/dev/null\nwhile [ -e {gate} ]; do sleep 0.2; done\n")
    blocker_id = dev_cluster.sbatch(blocker)
    script = _project(tmp_path, "plain_ddp.py")
    # Held back until the port is taken: its id is known only once submitted.
    job = _submit(
        dev_cluster, tmp_path, script, "--max-restarts", "0", "--restarts-in-allocation", "0", "--after", f"{blocker_id}:any",
        args=("--steps", "3", "--save-every", "3"),
    )
    port = job_port(job.job_id, 0)
    family, address = (socket.AF_INET6, "::") if socket.has_ipv6 else (socket.AF_INET, "0.0.0.0")
    with socket.socket(family) as held:
        if family == socket.AF_INET6:
            held.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        held.bind((address, port))  # every address, as a rendezvous store listens
        held.listen()
        gate.unlink()
        final = job.wait_final()
    assert final["state"] == "COMPLETED", job.status_text() + job.log()
    assert len(final["attempts"]) == 1
    errors = (job.workdir / "logs" / f"{job.name}_{job.job_id}.err").read_text()
    assert f"rendezvous port {port} is in use on node" in errors


def test_runtime_fail_ends_the_job_on_that_attempt_with_the_scripts_line(dev_cluster: DevCluster, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = project / "bad_input.py"
    script.write_text(
        "import sys\n"
        "from hyperlaunch import runtime\n"
        "if '--lr' in sys.argv and float(sys.argv[sys.argv.index('--lr') + 1]) <= 0:\n"
        "    runtime.fail('--lr must be > 0, got ' + sys.argv[sys.argv.index('--lr') + 1])\n"
    )
    job = _submit(dev_cluster, tmp_path, script, "--max-restarts", "3", args=("--lr", "-1"))
    final = job.wait_final()
    assert final["state"] == "FAILED", final
    assert len(final["attempts"]) == 1, "a final failure is never requeued"
    assert final["failure"] is not None and "--lr must be > 0, got -1" in json.dumps(final["failure"])
    assert "script error (--lr must be > 0, got -1" in job.status_text()


@pytest.mark.parametrize(
    ("code", "args", "line"),
    [
        ("import mypkg.trian\n", (), "ModuleNotFoundError: No module named 'mypkg'"),
        ("import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--steps')\nparser.parse_args()\n", ("--stepz", "10"),
         "error: unrecognized arguments: --stepz 10"),
    ],
    ids=["missing-module", "refused-arguments"],
)
def test_a_script_that_cannot_start_ends_after_one_launch(
    dev_cluster: DevCluster, tmp_path: Path, code: str, args: tuple[str, ...], line: str
) -> None:
    """No failure record (the script never imported hyperlaunch.runtime): the supervisor finds
    the error in the round's output and ends the job, where it used to launch it twelve times
    (--restarts-in-allocation 2 in each of --max-restarts 3 + 1 attempts)."""
    project = tmp_path / "project"
    project.mkdir()
    script = project / "broken.py"
    script.write_text(code)
    job = _submit(dev_cluster, tmp_path, script, "--max-restarts", "3", "--restarts-in-allocation", "2", args=args)
    final = job.wait_final()
    assert final["state"] == "FAILED", final
    assert len(final["attempts"]) == 1, "never requeued"
    assert "### hyperlaunch attempt-restart" not in job.log(), "no second round inside the allocation"
    text = job.status_text()
    assert f"script error ({line}" in text or f"script error (broken.py: {line}" in text, text


def test_a_time_limited_script_saves_on_the_warning_and_is_requeued_without_using_the_budget(
    dev_cluster: DevCluster, tmp_path: Path
) -> None:
    # A 2-minute limit, the save signal 45 s before it (Slurm may send it up to 30 s early);
    # no periodic checkpoints and --max-restarts 0: only the committed save lets it come back.
    script = _project(tmp_path, "fsdp2_dcp.py")
    steps = 400
    job = _submit(
        dev_cluster, tmp_path, script, "--time", "2", "--signal-seconds", "45", "--max-restarts", "0",
        args=("--steps", str(steps), "--save-every", "100000", "--step-seconds", "0.25"),
    )
    final = job.wait_final(timeout=600)
    assert final["state"] == "COMPLETED", job.status_text() + job.log()
    assert len(final["attempts"]) >= 2
    assert final["restarts"] and all(r["cause"] == "time limit" for r in final["restarts"]), final["restarts"]
    assert "resumed" in job.log() or job.pointer_step() is not None
    assert sorted(job.losses()) == list(range(1, steps + 1))
