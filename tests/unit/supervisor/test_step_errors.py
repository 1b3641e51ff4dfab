"""Errors no restart fixes, read from a failed round's output (hyperlaunch.supervisor.step_errors):
the job ends at the first such round instead of relaunching the same broken script twelve times
(--restarts-in-allocation 2 in each of --max-restarts 3 + 1 attempts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hyperlaunch.core.protocol import parse_attempt_marker
from hyperlaunch.core.trainer_failures import FailureKind, read_trainer_failure, trainer_failure_path
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs.restart_causes import Restart
from hyperlaunch.script.render import render_sbatch
from hyperlaunch.supervisor.step_errors import TAIL_BYTES, RoundOutput, unfixable_error
from tests.support.sbatch_harness import JOB_ID, run_script

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


def _label(task: int, lines: list[str]) -> list[str]:
    """As srun --label shows a task's lines."""
    return [f"{task}: {line}" for line in lines]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (_traceback("ModuleNotFoundError: No module named 'mypkg.trian'") + _TORCHRUN_SUMMARY,
         ("ModuleNotFoundError: No module named 'mypkg.trian'", None)),
        (_traceback("ImportError: cannot import name 'Trainer' from 'mypkg'", "[rank1]: "),
         ("ImportError: cannot import name 'Trainer' from 'mypkg'", None)),
        (['  File "/p/train.py", line 7', "    for x in", "             ^", "SyntaxError: invalid syntax"],
         ("SyntaxError: invalid syntax", None)),
        (["0: IndentationError: unexpected indent"], ("IndentationError: unexpected indent", 0)),
        (_traceback("NameError: name 'optimzer' is not defined"), ("NameError: name 'optimzer' is not defined", None)),
        (["usage: train.py [-h] [--steps STEPS]", "train.py: error: unrecognized arguments: --stepz 10", *_TORCHRUN_SUMMARY],
         ("train.py: error: unrecognized arguments: --stepz 10", None)),
        (_label(1, ["usage: train.py [-h]", "train.py: error: argument --lr: invalid float value: 'x'"]),
         ("train.py: error: argument --lr: invalid float value: 'x'", 1)),
        # transformers' HfArgumentParser refuses a flag it does not know with a ValueError.
        (_label(1, _traceback("ValueError: Some specified arguments are not used by the HfArgumentParser: ['--resume_from_checkprint', '/o/checkpoint-40']", "[rank1]: ")),
         ("ValueError: Some specified arguments are not used by the HfArgumentParser: ['--resume_from_checkprint', '/o/checkpoint-40']", 1)),
        (["/usr/bin/python3: can't open file '/home/me/project/trian.py': [Errno 2] No such file or directory"],
         ("/usr/bin/python3: can't open file '/home/me/project/trian.py': [Errno 2] No such file or directory", None)),
        (["/opt/venv/bin/python3.10: No module named mypkg.trian"], ("/opt/venv/bin/python3.10: No module named mypkg.trian", None)),
        # Every task failed alike, their lines interleaved: the first task's names it.
        (_label(1, _traceback("NameError: name 'x' is not defined")[:2]) + _label(0, _traceback("NameError: name 'x' is not defined"))
         + _label(1, _traceback("NameError: name 'x' is not defined")[2:]), ("NameError: name 'x' is not defined", 1)),
        # Other ranks react to the first one's end: still its error.
        (_label(0, _traceback("NameError: name 'x' is not defined", "[rank0]: "))
         + _label(1, ["[rank5]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 5."]),
         ("NameError: name 'x' is not defined", 0)),
        # Eight workers on a node: the first to fail makes torchrun stop the others with SIGTERM.
        (_traceback("ModuleNotFoundError: No module named 'x'")
         + ["  exitcode  : 1 (pid: 11)", "  exitcode  : -15 (pid: 12)", "Signal 15 (SIGTERM) received by PID 12"],
         ("ModuleNotFoundError: No module named 'x'", None)),
        # torchrun --tee's prefix.
        (["[default0]:Traceback (most recent call last):", "[default0]:ModuleNotFoundError: No module named 'x'"],
         ("ModuleNotFoundError: No module named 'x'", None)),
    ],
)
def test_errors_no_restart_fixes_are_named_by_their_line_and_task(lines: list[str], expected: tuple[str, int | None]) -> None:
    assert unfixable_error(lines) == expected


_SHUTDOWN = [
    "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>",
    "Traceback (most recent call last):",
    '  File "/venv/torch/utils/data/dataloader.py", line 1478, in __del__',
    "ImportError: sys.meta_path is None, Python is likely shutting down",
]


@pytest.mark.parametrize(
    "lines",
    [
        [],
        _traceback("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error") + _TORCHRUN_SUMMARY,
        _traceback("torch.OutOfMemoryError: CUDA out of memory."),
        # An optional import that failed, then a real crash while handling it: a crash.
        [*_traceback("ImportError: No module named 'flash_attn'"), "During handling of the above exception, another exception occurred:",
         "ValueError: no attention implementation"],
        # A logged ImportError, then a death with no exception to read.
        [*_traceback("ModuleNotFoundError: No module named 'flash_attn'"), "terminate called after throwing an instance of 'c10::Error'"],
        [*_traceback("ImportError: x"), "Segmentation fault (core dumped)"],
        ["slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks have been OOM Killed.",
         *_traceback("NameError: name 'x' is not defined")],
        ["exitcode  : -9 (pid: 4242)", *_traceback("ImportError: cannot import name 'y'")],
        # Python shutting down, or a compiled library: the node or a race, not the code.
        [*_SHUTDOWN, "srun: error: node1: task 0: Exited with exit code 1"],
        _traceback("ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"),
        _traceback("ImportError: /tmp/torch_extensions/fused_adam/fused_adam.so: file too short"),
        # One task could not import, another failed otherwise.
        _label(0, _traceback("ModuleNotFoundError: No module named 'x'")) + _label(1, _traceback("RuntimeError: boom")),
        # argparse's words without its usage line, or another program's usage with srun's error.
        ["train.py: error: the data loader stalled"],
        ["usage: git describe [<options>] [<commit-ish>...]", "srun: error: node1: task 0: Exited with exit code 1"],
        ["srun: error: node1: task 0: Exited with exit code 1"],
        ["a log line that mentions ImportError: in passing"],
    ],
)
def test_any_other_failure_is_a_crash_like_before(lines: list[str]) -> None:
    assert unfixable_error(lines) == ("", None)


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


def test_srun_saying_a_task_failed_is_seen_once_its_line_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "job.err"
    with path.open("w") as handle:
        handle.write("srun: error: node1: task 0: Exited with exit code 1\n")  # an earlier round's
        handle.flush()
        output = RoundOutput(handle.fileno())
        output.mark()
        assert not output.task_failed()
        # A task's own text, srun's line for a task that succeeded, another tool's error.
        handle.write("1: srun: error: node2: task 1: Exited with exit code 1\nsrun: error: node1: task 0: Exited with exit code 0\n")
        handle.write("srun: error: Unable to create step for job 7: Invalid generic resource\n")
        handle.write("srun: error: node2: task 1: Exited with exit code 1")  # not whole yet
        handle.flush()
        assert not output.task_failed()
        handle.write("\n")
        handle.flush()
        assert output.task_failed() and output.task_failed(), "it stays seen until the next round"
        output.mark()
        assert not output.task_failed()
        handle.write("x" * TAIL_BYTES + "\nslurmstepd: error: node3: task 2: Killed\n")
        handle.flush()
        assert output.task_failed(), "a long round: read from its end"


def test_a_pipe_or_no_mark_gives_no_output() -> None:
    read, write = os.pipe()
    try:
        output = RoundOutput(write)
        assert output.lines() == []
        output.mark()
        os.write(write, b"SyntaxError: x\nsrun: error: node1: task 0: Exited with exit code 1\n")
        assert output.lines() == [] and not output.task_failed()
    finally:
        os.close(read)
        os.close(write)


def _spec(tmp_path: Path) -> JobSpec:
    return job_spec(
        model="qwen3_tiny", torchrun="torchrun", max_restarts=3, restarts_in_allocation=2,
        checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"),
    )


def _ends(stdout: str) -> list[dict[str, str]]:
    return [m for m in map(parse_attempt_marker, stdout.splitlines()) if m and m["event"] == "end"]


@pytest.mark.slow
def test_a_step_that_cannot_import_ends_the_job_after_its_first_round(tmp_path: Path) -> None:
    """The bundled trainer's job here (a script job's record says script-broken, and `status`
    script error: tests/integration/test_script_jobs.py)."""
    traceback = "\n".join(_traceback("ModuleNotFoundError: No module named 'transformers'"))
    run = run_script(render_sbatch(_spec(tmp_path)), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_STDERR": traceback}, stderr_file=True)
    assert (tmp_path / "rounds").read_text().split() == ["0"], "no restart inside the allocation"
    assert not run.requeued and run.returncode == 1
    (end,) = _ends(run.stdout)
    assert (end["cause"], end["action"], end["kind"]) == ("trainer-error", "exit", FailureKind.TRAINER_BROKEN.value)
    assert "no restart can fix (ModuleNotFoundError: No module named 'transformers'): not requeued" in run.stderr
    assert f"hyperlaunch logs {JOB_ID} --err" in run.stderr
    record = read_trainer_failure(trainer_failure_path(tmp_path / "run", JOB_ID, 0))
    assert record is not None and record.final and record.rank is None
    assert record.message == "ModuleNotFoundError: No module named 'transformers'"
    restart = Restart(0, "trainer error", record.message, kind=record.kind)
    assert restart.describe() == "trainer error (ModuleNotFoundError: No module named 'transformers')"
    assert Restart(0, "trainer error", "m", kind=FailureKind.SCRIPT_BROKEN.value).describe() == "script error (m)"


@pytest.mark.slow
def test_a_crash_is_still_restarted_in_the_allocation_then_requeued(tmp_path: Path) -> None:
    traceback = "\n".join(_traceback("RuntimeError: NCCL error: unhandled system error"))
    run = run_script(render_sbatch(_spec(tmp_path)), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_STDERR": traceback}, stderr_file=True)
    assert (tmp_path / "rounds").read_text().split() == ["0", "1", "2"]
    assert run.requeued and _ends(run.stdout)[-1]["cause"] == "crash"
    assert not trainer_failure_path(tmp_path / "run", JOB_ID, 0).exists()


@pytest.mark.slow
def test_a_round_that_stopped_to_save_is_requeued_whatever_its_output_says(tmp_path: Path) -> None:
    """The time-limit warning: the trainers save and exit; an error Python prints on its way out
    must not end the job in place of the requeue."""
    env = {"HL_TEST_EXIT": "1", "HL_TEST_STDERR": "\n".join(_traceback("NameError: name 'x' is not defined"))}
    run = run_script(render_sbatch(_spec(tmp_path)), tmp_path, env=env, send_usr2=True, stderr_file=True)
    assert run.requeued and _ends(run.stdout)[-1]["cause"] == "time-limit", run.stdout + run.stderr
    assert not trainer_failure_path(tmp_path / "run", JOB_ID, 0).exists()


@pytest.mark.slow
def test_a_trainers_own_record_comes_first(tmp_path: Path) -> None:
    """A rank that recorded a retryable failure is retried, whatever its output says."""
    from hyperlaunch.core.trainer_failures import format_trainer_failure

    record = format_trainer_failure(FailureKind.UNEXPECTED, "flaky import on a bad mount", 0)
    env = {"HL_TEST_EXIT": "1", "HL_TEST_STDERR": "ImportError: flaky", "HL_TEST_FAILURE_RECORD": record}
    run = run_script(render_sbatch(_spec(tmp_path)), tmp_path, env=env, stderr_file=True)
    assert (tmp_path / "rounds").read_text().split() == ["0", "1", "2"] and run.requeued


@pytest.mark.slow
def test_each_decision_is_recorded_with_the_rounds_error_and_its_times(tmp_path: Path) -> None:
    """Two restarts inside the allocation, then the requeue: three decision records, each as its
    marker says, with the error line of its round's output and the times of its phases."""
    from hyperlaunch.core.decision_records import END, RESTART, read_decisions

    traceback = "\n".join([*_traceback("RuntimeError: NCCL error: unhandled system error"), "  exitcode  : 3 (pid: 11)"])
    run = run_script(render_sbatch(_spec(tmp_path)), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_STDERR": traceback}, stderr_file=True)
    assert run.requeued
    records = read_decisions(tmp_path / "run", JOB_ID)
    assert [(r.event, r.round, r.next_round, r.action) for r in records] == [
        (RESTART, 0, 1, "restart-in-allocation"), (RESTART, 1, 2, "restart-in-allocation"), (END, 2, None, "requeue"),
    ]
    logged = [m for m in map(parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] in ("restart", "end")]
    for record, marker in zip(records, logged, strict=True):
        assert record.as_marker() == {k: v for k, v in marker.items() if k not in ("job", "time")} | {"time": record.time}
    for record in records:
        assert (record.error_line, record.task_exit, record.exit) == ("RuntimeError: NCCL error: unhandled system error", "3", 1)
        assert record.nodes_in == ("node7", "node8") and record.nodes_out == (), "the allocation as scontrol tells it"
        assert record.failure_seen is not None and record.step_stopped is not None
        assert record.failure_seen <= record.step_stopped
    first, second, end = records
    assert first.next_round_started is not None and first.step_stopped <= first.next_round_started  # type: ignore[operator]
    assert second.failure_seen >= first.next_round_started  # type: ignore[operator]
    assert end.requeue_asked is not None and end.requeue_asked >= end.step_stopped and end.fields == {"failures": "1"}  # type: ignore[operator]
