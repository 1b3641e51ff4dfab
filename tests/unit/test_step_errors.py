"""Errors no restart fixes, read from a failed round's output (hyperlaunch.supervisor.step_errors):
the job ends at the first such round instead of relaunching the same broken script twelve times
(--restarts-in-allocation 2 in each of --max-restarts 3 + 1 attempts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hyperlaunch.core.protocol import parse_attempt_marker
from hyperlaunch.core.trainer_failures import FailureKind, read_trainer_failure, trainer_failure_path
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs.job_status import Restart
from hyperlaunch.script.render import render_sbatch
from hyperlaunch.supervisor.step_errors import TAIL_BYTES, RoundOutput, unfixable_error
from tests.unit.sbatch_harness import JOB_ID, run_script

# What torchrun's log holds after a worker failed (abridged): the worker's traceback, then
# torchrun's own summary, whose ChildFailedError is never the cause.
_TORCHRUN_SUMMARY = [
    "E1127 09:12:01.123000 4242 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1)",
    "Traceback (most recent call last):",
    '  File "/venv/bin/torchrun", line 8, in <module>',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "srun: error: node1: task 0: Exited with exit code 1",
]


def _traceback(last: str, prefix: str = "") -> list[str]:
    return [
        f"{prefix}Traceback (most recent call last):",
        f'{prefix}  File "/home/me/project/train.py", line 3, in <module>',
        f"{prefix}    import mypkg.trian",
        f"{prefix}{last}",
    ]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (_traceback("ModuleNotFoundError: No module named 'mypkg.trian'") + _TORCHRUN_SUMMARY,
         "ModuleNotFoundError: No module named 'mypkg.trian'"),
        (_traceback("ImportError: cannot import name 'Trainer' from 'mypkg'", "[rank1]: "),
         "ImportError: cannot import name 'Trainer' from 'mypkg'"),
        (['  File "/p/train.py", line 7', "    for x in", "             ^", "SyntaxError: invalid syntax"],
         "SyntaxError: invalid syntax"),
        (["0: IndentationError: unexpected indent"], "IndentationError: unexpected indent"),
        (["1: usage: train.py [-h]", "1: train.py: error: argument --lr: invalid float value: 'x'"],
         "train.py: error: argument --lr: invalid float value: 'x'"),
        (_traceback("NameError: name 'optimzer' is not defined"), "NameError: name 'optimzer' is not defined"),
        (["usage: train.py [-h] [--steps STEPS]", "train.py: error: unrecognized arguments: --stepz 10", *_TORCHRUN_SUMMARY],
         "train.py: error: unrecognized arguments: --stepz 10"),
        (["/usr/bin/python3: can't open file '/home/me/project/trian.py': [Errno 2] No such file or directory"],
         "/usr/bin/python3: can't open file '/home/me/project/trian.py': [Errno 2] No such file or directory"),
        (["/opt/venv/bin/python3.10: No module named mypkg.trian"], "/opt/venv/bin/python3.10: No module named mypkg.trian"),
        # A rank that lost its peer reacts to the first one's error: still that error.
        (_traceback("ModuleNotFoundError: No module named 'x'")
         + ["torch.distributed.DistNetworkError: Connection reset by peer"], "ModuleNotFoundError: No module named 'x'"),
    ],
)
def test_errors_no_restart_fixes_are_named_by_their_line(lines: list[str], expected: str) -> None:
    assert unfixable_error(lines) == expected


@pytest.mark.parametrize(
    "lines",
    [
        [],
        _traceback("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error") + _TORCHRUN_SUMMARY,
        _traceback("torch.OutOfMemoryError: CUDA out of memory."),
        # An optional import that failed, then a real crash while handling it: a crash.
        [*_traceback("ImportError: No module named 'flash_attn'"), "During handling of the above exception, another exception occurred:",
         "ValueError: no attention implementation"],
        # argparse's words without its usage line: some other program's error message.
        ["train.py: error: the data loader stalled"],
        ["srun: error: node1: task 0: Exited with exit code 1"],
        ["a log line that mentions ImportError: in passing"],
    ],
)
def test_any_other_failure_is_a_crash_like_before(lines: list[str]) -> None:
    assert unfixable_error(lines) == ""


def test_the_round_output_is_what_the_file_got_since_the_mark(tmp_path: Path) -> None:
    path = tmp_path / "job.err"
    with path.open("w") as handle:
        handle.write("ModuleNotFoundError: from an earlier attempt\n")
        handle.flush()
        output = RoundOutput(handle.fileno())
        output.mark()
        handle.write("round line 1\nround line 2\n")
        handle.flush()
        assert output.lines() == ["round line 1", "round line 2"]
        # A long round: only its end is read, from a whole line on.
        handle.write("x" * TAIL_BYTES + "\nlast\n")
        handle.flush()
        assert output.lines() == ["last"]


def test_a_pipe_or_no_mark_gives_no_output() -> None:
    read, write = os.pipe()
    try:
        output = RoundOutput(write)
        assert output.lines() == []
        output.mark()
        os.write(write, b"SyntaxError: x\n")
        assert output.lines() == []
    finally:
        os.close(read)
        os.close(write)


def _spec(tmp_path: Path) -> JobSpec:
    return JobSpec(
        model="qwen3_tiny", torchrun="torchrun", max_restarts=3, restarts_in_allocation=2,
        checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"),
    )


def _ends(stdout: str) -> list[dict[str, str]]:
    return [m for m in map(parse_attempt_marker, stdout.splitlines()) if m and m["event"] == "end"]


def test_a_script_that_cannot_import_ends_the_job_after_its_first_round(tmp_path: Path) -> None:
    traceback = "\n".join(_traceback("ModuleNotFoundError: No module named 'mypkg.trian'"))
    run = run_script(render_sbatch(_spec(tmp_path)), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_STDERR": traceback}, stderr_file=True)
    assert (tmp_path / "rounds").read_text().split() == ["0"], "no restart inside the allocation"
    assert not run.requeued and run.returncode == 1
    (end,) = _ends(run.stdout)
    assert (end["cause"], end["action"], end["kind"]) == ("trainer-error", "exit", FailureKind.SCRIPT_BROKEN.value)
    assert "no restart can fix (ModuleNotFoundError: No module named 'mypkg.trian'): not requeued" in run.stderr
    record = read_trainer_failure(trainer_failure_path(tmp_path / "run", JOB_ID, 0))
    assert record is not None and record.final and record.rank is None
    assert record.message == "ModuleNotFoundError: No module named 'mypkg.trian'"
    restart = Restart(0, "trainer error", record.message, kind=record.kind)
    assert restart.describe() == "script error (ModuleNotFoundError: No module named 'mypkg.trian')"


def test_a_crash_is_still_restarted_in_the_allocation_then_requeued(tmp_path: Path) -> None:
    traceback = "\n".join(_traceback("RuntimeError: NCCL error: unhandled system error"))
    run = run_script(render_sbatch(_spec(tmp_path)), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_STDERR": traceback}, stderr_file=True)
    assert (tmp_path / "rounds").read_text().split() == ["0", "1", "2"]
    assert run.requeued and _ends(run.stdout)[-1]["cause"] == "crash"
    assert not trainer_failure_path(tmp_path / "run", JOB_ID, 0).exists()


def test_a_trainers_own_record_comes_first(tmp_path: Path) -> None:
    """A rank that recorded a retryable failure is retried, whatever its output says."""
    from hyperlaunch.core.trainer_failures import format_trainer_failure

    record = format_trainer_failure(FailureKind.UNEXPECTED, "flaky import on a bad mount", 0)
    env = {"HL_TEST_EXIT": "1", "HL_TEST_STDERR": "ImportError: flaky", "HL_TEST_FAILURE_RECORD": record}
    run = run_script(render_sbatch(_spec(tmp_path)), tmp_path, env=env, stderr_file=True)
    assert (tmp_path / "rounds").read_text().split() == ["0", "1", "2"] and run.requeued
