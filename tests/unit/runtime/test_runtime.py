"""hyperlaunch.runtime, the library a user's training script calls: where things go inside and
outside a job, committing a checkpoint and what `status` and the supervisor read back (pointer,
progress, requeue request, failure record, metrics), the save signal, and the hang watchdog.

Whatever ends a process or lives for its whole life (signals, exits, atexit, the watchdog's
thread) runs in a subprocess of its own; the rest runs here, on a fresh session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from hyperlaunch import runtime
from hyperlaunch.core import checkpoints, protocol
from hyperlaunch.core.errors import CheckpointError
from hyperlaunch.core.metrics_records import METRICS_FILE, EventRecord, StepRecord, parse_metrics_line
from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV, read_trainer_failure
from hyperlaunch.runtime.signals import STOP_SIGNALS
from hyperlaunch.runtime.watchdog import HANG_EXIT_CODE

ROOT = Path(__file__).resolve().parents[3]
_JOB_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", TRAINER_FAILURE_FILE_ENV)


def _outside_a_job(name: str) -> bool:
    """What a test's own environment must not hand down: Slurm's and hyperlaunch's job variables."""
    return name in _JOB_NAMES or name.startswith("SLURM_") or (name.startswith("HYPERLAUNCH_") and name != "HYPERLAUNCH_HOME")


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A script's view from here: cwd tmp_path, no job variables, the watchdog off (a thread
    armed in pytest's process would outlive the test), a fresh session whose signal handlers
    go when the test ends."""
    for name in [name for name in os.environ if _outside_a_job(name)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(runtime.HANG_TIMEOUT_ENV, "0")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runtime, "_SESSION", None)
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield tmp_path
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@pytest.fixture()
def job(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Inside attempt 2 of Slurm job 7, round 1, with the folders a script job is given."""
    for name, value in {
        "SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "2", "HYPERLAUNCH_ROUND": "1", "HYPERLAUNCH_NAME": "lm",
        "HYPERLAUNCH_CHECKPOINT_DIR": str(workdir / "ckpt"), "HYPERLAUNCH_RUN_DIR": str(workdir / "run"),
    }.items():
        monkeypatch.setenv(name, value)
    (workdir / "run").mkdir()
    return workdir


def _saved(step: int) -> Path:
    """A checkpoint the way torch.save leaves it: a folder holding the script's own file."""
    path = runtime.checkpoint_path(step)
    path.mkdir(parents=True)
    (path / "state.pt").write_bytes(b"weights")
    return path


def _run(code: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`code` as a script of its own, in `cwd`, importing hyperlaunch from this tree."""
    base = {name: value for name, value in os.environ.items() if not _outside_a_job(name)}
    environ = {**base, "PYTHONPATH": str(ROOT), **(env or {})}
    command = [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout, check=False)


def _records(run_dir: Path) -> list[StepRecord | EventRecord | None]:
    path = run_dir / METRICS_FILE
    return [parse_metrics_line(line) for line in path.read_text().splitlines()] if path.exists() else []


# Where things go


def test_outside_a_job_the_script_names_its_run_and_works_in_its_folder(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/home/me/train_lm.py", "--lr", "3e-4"])
    assert runtime.name() == "train_lm"
    assert runtime.checkpoint_dir() == workdir / "checkpoints"
    assert runtime.run_dir() == workdir / "runs" / "train_lm"
    assert (runtime.rank(), runtime.is_main()) == (0, True)
    assert runtime.resume_path() is None, "a fresh start"
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert runtime.name() == "script"


def test_the_jobs_variables_say_where_things_go(job: Path) -> None:
    assert runtime.name() == "lm"
    assert runtime.checkpoint_dir() == job / "ckpt"
    assert runtime.run_dir() == job / "run"
    assert runtime.checkpoint_path(12) == job / "ckpt" / "lm-12steps"
    assert runtime.checkpoint_path(0).name == "lm-0steps"


# Committing a checkpoint


def test_a_committed_checkpoint_is_marked_complete_named_by_the_pointer_and_recorded_as_progress(job: Path) -> None:
    path = _saved(12)
    assert runtime.resume_path() is None
    runtime.commit_checkpoint(12, path)
    assert (path / checkpoints.COMMITTED_FILE).is_file(), "torch.save's folder has no .metadata: the commit marks it"
    assert (job / "ckpt" / "lm-latest").read_text() == "lm-12steps\n"
    assert runtime.resume_path() == path
    assert protocol.progress_path(job / "run", "7", 2).name == "progress-7.2"
    assert protocol.progress_step(job / "run", "7", 2) == 12, "the attempt made progress: its requeue is free"

    runtime.commit_checkpoint(24, _saved(24))  # path left out: checkpoint_path(24)
    assert runtime.resume_path() == job / "ckpt" / "lm-24steps"
    assert protocol.progress_step(job / "run", "7", 2) == 24


def test_a_dcp_checkpoint_is_complete_by_its_own_metadata(job: Path) -> None:
    path = runtime.checkpoint_path(5)
    path.mkdir(parents=True)
    (path / checkpoints.METADATA_FILE).write_bytes(b"dcp")
    runtime.commit_checkpoint(5, str(path))
    assert not (path / checkpoints.COMMITTED_FILE).exists()
    assert runtime.resume_path() == path


def test_outside_slurm_a_commit_records_no_progress(workdir: Path) -> None:
    runtime.commit_checkpoint(3, _saved(3))
    assert runtime.resume_path() == runtime.checkpoint_path(3)
    assert not runtime.run_dir().exists()


def test_committing_the_wrong_path_or_an_unsaved_one_is_refused_and_moves_nothing(job: Path) -> None:
    other = _saved(10)
    with pytest.raises(CheckpointError, match="lm-12steps"):
        runtime.commit_checkpoint(12, other)
    with pytest.raises(CheckpointError, match="not a folder"):
        runtime.commit_checkpoint(12)
    assert runtime.resume_path() is None
    assert not (other / checkpoints.COMMITTED_FILE).exists()
    assert not protocol.made_progress(job / "run", "7", 2)


def test_keep_last_removes_the_older_checkpoints(job: Path) -> None:
    for step in (1, 2, 3, 4):
        runtime.commit_checkpoint(step, _saved(step), keep_last=2)
    assert sorted(path.name for path in (job / "ckpt").iterdir()) == ["lm-3steps", "lm-4steps", "lm-latest"]


def test_other_ranks_commit_and_log_nothing(job: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RANK", "1")
    assert (runtime.rank(), runtime.is_main()) == (1, False)
    path = _saved(3)  # rank 1's part of it
    runtime.commit_checkpoint(3, path)
    runtime.log(3, loss=1.5)
    assert sorted(p.name for p in path.iterdir()) == ["state.pt"]
    assert not (job / "ckpt" / "lm-latest").exists()
    assert list((job / "run").iterdir()) == []
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("pointer", ["\x00\xff garbage\n", "lm-12steps\n", "gpt-12steps\n", "lm-12steps\nlm-13steps\n"])
def test_a_pointer_that_names_no_usable_checkpoint_is_an_error_not_a_fresh_start(job: Path, pointer: str) -> None:
    (job / "ckpt").mkdir()
    (job / "ckpt" / "gpt-12steps").mkdir()
    (job / "ckpt" / "lm-12steps").mkdir()  # a save that never completed
    (job / "ckpt" / "lm-latest").write_text(pointer)
    with pytest.raises(CheckpointError):
        runtime.resume_path()


# Metrics


def test_log_prints_and_records_steps_that_status_reads_back_with_the_jobs_tags(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runtime.log(1, loss=2.5, tokens_per_s=12345.6)
    runtime.log(2, loss=2.25, tokens_per_s=13000.0, lr=3e-4)
    assert capsys.readouterr().out.splitlines() == [
        "step 1 | loss 2.5 | tokens_per_s 12346",
        "step 2 | loss 2.25 | tokens_per_s 13000 | lr 0.0003",
    ]
    records = _records(job / "run")
    assert [type(record) for record in records] == [StepRecord, StepRecord]
    first, second = records
    assert isinstance(first, StepRecord) and isinstance(second, StepRecord)
    assert (first.step, first.loss, first.tokens_per_s) == (1, 2.5, 12345.6)
    assert (second.step, second.loss, second.lr) == (2, 2.25, 3e-4)
    assert (first.job_id, first.restart, first.round) == ("7", 2, 1)
    assert first.time > 0


class _Scalar:
    """What a 0-d tensor is to log(): no JSON type, but a number through float()."""

    def __float__(self) -> float:
        return 1.5


def test_log_takes_tensors_as_their_number(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runtime.log(3, loss=_Scalar(), note=object)  # json.dumps would fail on rank 0 alone: a hang
    assert capsys.readouterr().out.startswith("step 3 | loss 1.5 | note <class 'object'>")
    record = _records(job / "run")[-1]
    assert isinstance(record, StepRecord) and record.loss == 1.5


def test_outside_slurm_step_records_carry_no_job(workdir: Path) -> None:
    runtime.log(4, loss=1.0)
    (record,) = _records(runtime.run_dir())
    assert isinstance(record, StepRecord)
    assert (record.step, record.job_id, record.restart, record.round) == (4, None, None, None)


# The save signal, the end of a process


@pytest.mark.parametrize("sig", ["SIGUSR2", "SIGTERM"])
@pytest.mark.slow
def test_the_save_signal_and_a_stop_make_should_save_true(tmp_path: Path, sig: str) -> None:
    result = _run(
        f"""
        import os, signal
        from hyperlaunch import runtime
        assert runtime.should_save() is False
        os.kill(os.getpid(), signal.{sig})
        assert runtime.should_save() is True
        print("still here")
        """,
        tmp_path,
    )
    assert (result.returncode, result.stdout) == (0, "still here\n"), result.stderr


@pytest.mark.slow
def test_a_save_signal_after_the_scripts_last_line_does_not_fail_it(tmp_path: Path) -> None:
    # A shell sends USR2 as fast as it can while the script ends: Python gives handled signals
    # back to their default action as it shuts down, and USR2's would end the process.
    code = """
        import os, subprocess, time
        from hyperlaunch import runtime
        runtime.resume_path()
        sender = subprocess.Popen(
            ["bash", "-c", "while kill -USR2 $0 2>/dev/null; do :; done", str(os.getpid())],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # the test reads this script's output to its end
        )
        deadline = time.time() + 10
        while not runtime.should_save() and time.time() < deadline:
            time.sleep(0.01)
        assert runtime.should_save()
        """
    for _ in range(3):
        result = _run(code, tmp_path)
        assert result.returncode == 0, (result.returncode, result.stderr)


@pytest.mark.parametrize("rank", ["0", "1"])
@pytest.mark.slow
def test_requeue_exits_75_and_rank_0_asks_the_supervisor_for_a_requeue(tmp_path: Path, rank: str) -> None:
    (tmp_path / "run").mkdir()
    env = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "2", "HYPERLAUNCH_RUN_DIR": str(tmp_path / "run"), "RANK": rank}
    result = _run("from hyperlaunch import runtime\nruntime.requeue()\nprint('not reached')", tmp_path, env)
    assert (result.returncode, result.stdout) == (protocol.REQUEUE_EXIT_CODE, ""), result.stderr
    request = protocol.requeue_request_path(tmp_path / "run", "7", 2)
    assert request.name == "requeue-request-7.2"
    assert request.exists() == (rank == "0")


@pytest.mark.slow
def test_under_slurm_without_a_run_folder_yet_commit_and_requeue_still_do_their_part(tmp_path: Path) -> None:
    # A script run by plain srun/sbatch (SLURM_JOB_ID set, no hyperlaunch job around it) that
    # commits before its first log(): ./runs/<name> does not exist yet.
    code = """
        from hyperlaunch import runtime
        path = runtime.checkpoint_path(3)
        path.mkdir(parents=True)
        runtime.commit_checkpoint(3, path)
        runtime.requeue()
        """
    result = _run(code, tmp_path, {"SLURM_JOB_ID": "7", "HYPERLAUNCH_NAME": "lm"})
    assert result.returncode == protocol.REQUEUE_EXIT_CODE, result.stderr
    assert protocol.progress_step(tmp_path / "runs" / "lm", "7", 0) == 3
    assert protocol.requeue_request_path(tmp_path / "runs" / "lm", "7", 0).exists()


@pytest.mark.parametrize(("final", "kind"), [(True, "script-error"), (False, "script-retry")])
@pytest.mark.slow
def test_fail_exits_1_with_one_line_and_a_failure_record(tmp_path: Path, final: bool, kind: str) -> None:
    record = tmp_path / "trainer-failure-7.2"
    result = _run(f"from hyperlaunch import runtime\nruntime.fail('bad --lr', final={final})", tmp_path, {TRAINER_FAILURE_FILE_ENV: str(record)})
    assert result.returncode == 1
    assert (result.stdout, result.stderr) == ("", "hyperlaunch: error: bad --lr\n")
    failure = read_trainer_failure(record)
    assert failure is not None
    assert (failure.kind, failure.final, failure.rank, failure.message) == (kind, final, 0, "bad --lr")



@pytest.mark.slow
def test_a_retried_fail_after_logged_steps_names_the_step_in_progress(tmp_path: Path) -> None:
    record = tmp_path / "trainer-failure-7.0"
    code = "from hyperlaunch import runtime\nfor step in (1, 2, 3):\n    runtime.log(step, loss=1.0)\nruntime.fail('loss is nan', final=False)"
    env = {TRAINER_FAILURE_FILE_ENV: str(record), "HYPERLAUNCH_RUN_DIR": str(tmp_path), "SLURM_JOB_ID": "7"}
    assert _run(code, tmp_path, env).returncode == 1
    failure = read_trainer_failure(record)
    assert failure is not None and (failure.kind, failure.step) == ("script-retry", 4)

# The hang watchdog


def _hang_env(tmp_path: Path, timeout: str, floor: str = "1") -> dict[str, str]:
    (tmp_path / "run").mkdir(exist_ok=True)
    return {
        runtime.HANG_TIMEOUT_ENV: timeout, runtime.HANG_FLOOR_ENV: floor, "HYPERLAUNCH_RUN_DIR": str(tmp_path / "run"),
        TRAINER_FAILURE_FILE_ENV: str(tmp_path / "trainer-failure-7.0"), "SLURM_JOB_ID": "7",
    }


@pytest.mark.slow
def test_a_script_that_stops_logging_steps_is_ended_by_the_watchdog(tmp_path: Path) -> None:
    code = """
        import time
        from hyperlaunch import runtime
        runtime.log(1, loss=3.0)
        runtime.log(2, loss=2.9)
        time.sleep(30)
        """
    started = time.monotonic()
    result = _run(code, tmp_path, _hang_env(tmp_path, "2"))
    # No step duration known yet: step 3 may take 3 floors (3 s), then 5 s for the other ranks' dumps.
    assert result.returncode == HANG_EXIT_CODE, result.stderr
    assert time.monotonic() - started < 15
    assert "hyperlaunch: hang watchdog: rank 0" in result.stderr and "Thread 0x" in result.stderr
    failure = read_trainer_failure(tmp_path / "trainer-failure-7.0")
    assert failure is not None
    assert (failure.kind, failure.final) == ("hang", False)
    assert "after step 2 (step 3 in progress)" in failure.message
    events = [record for record in _records(tmp_path / "run") if isinstance(record, EventRecord)]
    assert [(event.event, event.step) for event in events] == [("hang", 2)]


@pytest.mark.slow
def test_a_hang_timeout_of_0_turns_the_watchdog_off(tmp_path: Path) -> None:
    code = """
        import time
        from hyperlaunch import runtime
        runtime.log(1, loss=3.0)
        runtime.log(2, loss=2.9)
        time.sleep(1.5)  # 5 times the 0.3 s a step would get with the watchdog on
        """
    result = _run(code, tmp_path, _hang_env(tmp_path, "0", floor="0.1"))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "trainer-failure-7.0").exists()


@pytest.mark.slow
def test_a_save_gets_the_longer_limit_of_saves(tmp_path: Path) -> None:
    code = """
        import time
        from hyperlaunch import runtime
        from hyperlaunch.runtime.watchdog import Phase
        for step in (1, 2, 3):
            runtime.log(step, loss=3.0)
        limits = runtime._session().watchdog.limits
        assert limits.limit(Phase.STEP) < 2 < limits.limit(Phase.CHECKPOINT), (limits.limit(Phase.STEP), limits.limit(Phase.CHECKPOINT))
        with runtime.saving():
            time.sleep(2)
        runtime.log(4, loss=2.0)
        """
    result = _run(code, tmp_path, _hang_env(tmp_path, "2"))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "trainer-failure-7.0").exists()
