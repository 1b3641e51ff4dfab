"""The checkpoint lock the job's supervisor takes before training (hyperlaunch.supervisor.lock):
it belongs to a Slurm job, so a requeued attempt of the same job takes it over, a job Slurm
reports ended (or no longer knows) leaves it stale, and a live other job ends the attempt
before anything trains. Run by the harness, with the squeue stub answering for the holder."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints
from hyperlaunch.core import protocol as p
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.script.render import render_sbatch
from tests.support.sbatch_harness import JOB_ID, Run, job_states, run_script

OTHER = "977"


def _spec(tmp_path: Path) -> JobSpec:
    return job_spec(
        model="qwen3_tiny", torchrun="torchrun", max_restarts=2,
        checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"),
    )


def _lock(tmp_path: Path) -> Path:
    return p.checkpoint_lock_path(tmp_path / "ck", "qwen3_tiny")


def _held_by(tmp_path: Path, job: str) -> Path:
    lock = _lock(tmp_path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(p.format_checkpoint_lock(job, "node1", "2026-01-01T00:00:00Z"))
    return lock


def _run(tmp_path: Path, **env: str) -> Run:
    return run_script(render_sbatch(_spec(tmp_path)), tmp_path, env=env)


def _end(run: Run) -> dict[str, str]:
    ends = [m for m in map(p.parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] == "end"]
    assert ends, run.stdout + run.stderr
    return ends[-1]


@pytest.mark.slow
def test_a_requeued_job_keeps_its_lock_and_a_finished_one_releases_it(tmp_path: Path) -> None:
    run = _run(tmp_path, HL_TEST_EXIT="1")
    assert run.requeued
    assert p.read_checkpoint_lock(_lock(tmp_path)) == JOB_ID, "held for the next attempt"
    done = tmp_path / "done"
    done.mkdir()
    finished = _run(done)
    assert finished.returncode == 0 and finished.trainer is not None
    assert not _lock(done).exists(), "a job that ended leaves the folder free"
    # A hidden name: the checkpoint rules never count it.
    assert checkpoints.list_models(tmp_path / "ck") == []


@pytest.mark.slow
def test_a_requeued_attempt_of_the_same_job_takes_the_lock_over(tmp_path: Path) -> None:
    _held_by(tmp_path, JOB_ID)
    run = _run(tmp_path, SLURM_RESTART_COUNT="1")
    assert run.returncode == 0 and run.trainer is not None
    assert not (tmp_path / "squeue.calls").exists(), "its own lock needs no question to Slurm"


@pytest.mark.slow
def test_a_lock_of_a_live_other_job_ends_the_attempt_before_training(tmp_path: Path) -> None:
    for state in ("RUNNING", "PENDING"):
        lock = _held_by(tmp_path, OTHER)
        job_states(tmp_path, OTHER, state)
        run = _run(tmp_path)
        assert run.trainer is None, "never trains beside a live job"
        assert run.returncode == 1 and not run.requeued, "a final failure: no requeue"
        end = _end(run)
        assert (end["cause"], end["holder"], end["action"]) == ("checkpoint-locked", OTHER, "exit")
        assert f"job {OTHER} ({state}) trains into the same checkpoint folder" in run.stderr
        assert p.read_checkpoint_lock(lock) == OTHER, "the holder keeps its lock"


@pytest.mark.slow
def test_a_lock_of_a_job_slurm_no_longer_knows_is_stale_and_taken(tmp_path: Path) -> None:
    _held_by(tmp_path, OTHER)  # the squeue stub: "Invalid job id specified"
    run = _run(tmp_path, HL_TEST_EXIT="1")
    assert run.trainer is not None and run.requeued
    assert f"took over the stale checkpoint lock of job {OTHER}" in run.stderr
    assert p.read_checkpoint_lock(_lock(tmp_path)) == JOB_ID
    assert sorted(path.name for path in _lock(tmp_path).parent.iterdir()) == [_lock(tmp_path).name], "nothing left beside it"


@pytest.mark.slow
def test_a_lock_of_an_ended_job_is_stale_and_one_still_completing_is_waited_for(tmp_path: Path) -> None:
    _held_by(tmp_path, OTHER)
    job_states(tmp_path, OTHER, "COMPLETING", "TIMEOUT")
    run = _run(tmp_path)
    assert run.returncode == 0 and run.trainer is not None
    assert (tmp_path / "squeue.calls").read_text().count(f"-j {OTHER}") == 2
    assert "(TIMEOUT)" in run.stderr


@pytest.mark.slow
def test_the_lock_reads_back_what_the_script_wrote(tmp_path: Path) -> None:
    _run(tmp_path, HL_TEST_EXIT="1")
    text = _lock(tmp_path).read_text().splitlines()
    assert text[0] == f"job={JOB_ID}" and text[1].startswith("host=") and text[2].startswith("time=")
    assert p.read_checkpoint_lock(tmp_path / "nothing") is None
    garbage = tmp_path / "garbage"
    garbage.write_text("job=../x\n")
    assert p.read_checkpoint_lock(garbage) is None


@pytest.mark.slow
def test_status_says_which_job_held_the_lock(tmp_path: Path) -> None:
    from hyperlaunch.runs.job_status import summarize
    from hyperlaunch.runs.jobs import JobRecord
    from hyperlaunch.slurm.accounting import Attempt

    _held_by(tmp_path, OTHER)
    job_states(tmp_path, OTHER, "RUNNING")
    run = _run(tmp_path)
    record = JobRecord(job_id=JOB_ID, spec=_spec(tmp_path), submitted_at=0.0)
    record.log_paths[0].parent.mkdir(parents=True, exist_ok=True)
    record.log_paths[0].write_text(run.stdout)
    failure = summarize(record, [Attempt(JOB_ID, "FAILED", "n1", "t", "t", "1:0")], []).failure
    assert failure is not None
    assert failure.describe() == f"checkpoint folder in use (job {OTHER} holds its lock, .hyperlaunch-lock-qwen3_tiny)"
