"""The protocol between the batch script, the trainer and `status` (hyperlaunch.core.protocol,
trainer_failures and metrics_records): each vocabulary is the one the template is rendered
with, and each record reads back what its writer wrote."""

from __future__ import annotations

import dataclasses
import errno
import re
import shlex
from pathlib import Path

import pytest

from hyperlaunch.core import metrics_records as mr
from hyperlaunch.core import protocol as p
from hyperlaunch.core import trainer_failures as tf
from hyperlaunch.core.errors import (
    EXIT_CODES,
    CheckpointError,
    CheckpointTorn,
    ConfigError,
    DataError,
    DiskFull,
    InvalidInput,
    ModelUnavailable,
    NodeProblem,
    SlurmError,
)
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.script.render import render_sbatch


def _script(tmp_path: Path) -> str:
    dirs = {name: str(tmp_path / name) for name in ("checkpoint_dir", "log_dir", "run_dir")}
    return render_sbatch(job_spec(model="qwen3_tiny", nodes=2, **dirs))


def test_the_script_holds_no_recovery_rule_and_marker_values_are_plain_words(tmp_path: Path) -> None:
    """The supervisor writes every marker from the enums (hyperlaunch.supervisor); the script
    only calls it: no branch, loop or marker of its own."""
    code = "\n".join(line for line in _script(tmp_path).splitlines() if not line.startswith("#"))
    assert not re.search(r"^\s*(if|while|for|case|until|trap|srun|scontrol|squeue|scancel)\b|cause=|action=", code, re.M), code
    for value in [*(c.value for c in p.RestartCause), *(a.value for a in p.AttemptAction)]:
        assert shlex.quote(value) == value, "marker values must be plain words (readers split on spaces)"


def test_every_cause_has_the_words_status_shows() -> None:
    assert all(cause.value in p.CAUSE_TEXT for cause in p.RestartCause)


def test_an_attempt_marker_reads_back_what_was_written() -> None:
    line = p.format_attempt_marker("end", 2, "41", "exit=1 cause=node-failure nodes=node1,node2 action=slurm-requeue", "T")
    marker = p.parse_attempt_marker(line)
    assert marker == {
        "event": "end", "restart": "2", "job": "41", "exit": "1", "cause": "node-failure",
        "nodes": "node1,node2", "action": "slurm-requeue", "time": "T",
    }
    assert p.RestartCause(marker["cause"]) is p.RestartCause.NODE_FAILURE
    assert p.parse_attempt_marker("step 3 | loss 2.0") is None


def test_metrics_records_round_trip_and_tolerate_extra_fields_and_cut_lines() -> None:
    step = mr.StepRecord(step=3, loss=2.5, mfu=None, peak_memory_bytes_per_rank=(1, 2), job_id="7", restart=1)
    assert mr.parse_metrics_line(mr.metrics_line(step)) == step
    event = mr.EventRecord(event=mr.TrainerEvent.RESUMED.value, message="m", step=4, details={"path": "/c/x-4steps"})
    back = mr.parse_metrics_line(mr.metrics_line(event))
    assert back == event and isinstance(back, mr.EventRecord) and back.get("path") == "/c/x-4steps"
    newer = '{"type": "step", "step": 5, "loss": 1.0, "a_field_from_a_newer_trainer": 1}'
    assert mr.parse_metrics_line(newer) == mr.StepRecord(step=5, loss=1.0)
    assert mr.parse_metrics_line(mr.metrics_line(step)[:20]) is None
    assert mr.parse_metrics_line('{"type": "step"}') is None and mr.parse_metrics_line("[1]") is None


@pytest.mark.parametrize(
    ("fields", "reads"),
    [
        ({"step": 5, "loss": 1}, True),  # an int where a float goes
        ({"step": True, "loss": 1.0}, False),  # a bool is no int
        ({"step": 5, "loss": False}, False),  # nor a float
        ({"step": 5.0, "loss": 1.0}, False),
        ({"step": 5, "loss": "abc"}, False),
        ({"step": 5, "loss": 1.0, "mfu": None, "lr": None}, True),  # null: the default
        ({"step": 5, "loss": 1.0, "peak_memory_bytes_per_rank": [1, 2]}, True),
        ({"step": 5, "loss": 1.0, "peak_memory_bytes_per_rank": [1, "x"]}, False),
        ({"step": 5, "loss": 1.0, "job_id": 7}, False),
        ({"loss": 1.0}, False),  # a required field missing
    ],
)
def test_a_metrics_lines_field_of_the_wrong_type_makes_it_no_record(fields: dict, reads: bool) -> None:
    import json

    record = mr.parse_metrics_line(json.dumps({"type": "step", **fields}))
    assert (record is not None) is reads, record


def test_a_metrics_line_of_the_previous_format_still_reads() -> None:
    line = (
        '{"grad_norm": 1.2, "loss": 5.1, "lr": 0.0003, "mfu": null, "peak_memory_bytes": 10, '
        '"peak_memory_bytes_per_rank": [10, 9], "samples_consumed": 8, "step": 2, "step_time_s": 0.5, '
        '"tflops_per_device": 0.1, "time": 1.0, "tokens_per_s": 100.0, "tokens_per_s_per_device": 50.0, '
        '"tokens_seen": 256, "type": "step", "world_size": 2, "job_id": "12", "restart": 0}'
    )
    record = mr.parse_metrics_line(line)
    assert isinstance(record, mr.StepRecord) and (record.step, record.job_id, record.peak_memory_bytes_per_rank) == (2, "12", (10, 9))


def test_the_requeue_exit_code_and_request_file() -> None:
    assert p.REQUEUE_EXIT_CODE not in EXIT_CODES
    assert p.requeue_request_path(Path("/r"), "12", 3) == Path("/r/requeue-request-12.3")


def _raised_from_enospc() -> RuntimeError:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as full:
            raise RuntimeError("writing the data cache failed") from full
    except RuntimeError as err:
        return err


# Each kind: errors the trainer may stop on that stand for it, and whether it ends the job.
FAILURE_KINDS: dict[tf.FailureKind, tuple[list[BaseException], bool]] = {
    tf.FailureKind.INVALID_ARGUMENTS: ([InvalidInput("--lr must be > 0"), ConfigError("bad toml")], True),
    tf.FailureKind.INVALID_DATA: ([DataError("--data /x/bad.jsonl:2: not valid JSON")], True),
    tf.FailureKind.MODEL_UNAVAILABLE: ([ModelUnavailable("--tokenizer /t: no such directory")], True),
    tf.FailureKind.CHECKPOINT_UNUSABLE: ([CheckpointError("pointer names no checkpoint")], True),
    # Retried from the checkpoint before it: the supervisor sets the torn one aside.
    tf.FailureKind.CHECKPOINT_TORN: ([CheckpointTorn("m-4steps", "checkpoint m-4steps is torn (__0_0.distcp): EOFError")], False),
    tf.FailureKind.DISK_FULL: (
        [DiskFull("no room for checkpoint m-4steps: it needs about 7.2 GiB in /fsx/ck, which has 1.0 GiB free"),
         OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "Disk quota exceeded"), _raised_from_enospc()],
        True,
    ),
    tf.FailureKind.NODE_PROBLEM: ([NodeProblem("no CUDA device is visible")], False),
    tf.FailureKind.UNEXPECTED: (
        [ValueError("boom"), RuntimeError("NCCL"), SlurmError("not the trainer's"),
         ImportError("libcuda.so.1: cannot open shared object file: No such file or directory")],  # the node's
        False,
    ),
    tf.FailureKind.HANG: ([], False),  # no exception: the trainer's watchdog writes it (hyperlaunch/runtime/watchdog.py)
    tf.FailureKind.SCRIPT_ERROR: ([], True),  # no exception: a script calls hyperlaunch.runtime.fail
    tf.FailureKind.SCRIPT_RETRY: ([], False),  # fail(..., final=False)
    tf.FailureKind.EFA_PLUGIN_MISSING: ([], True),  # no exception: the step script writes it (--require-efa)
    tf.FailureKind.SCRIPT_BROKEN: ([], True),  # no exception: the supervisor reads it off the round's output
    # The bundled trainer's own import of a package the image or venv lacks; else the supervisor
    # reads it off the output, as for a script.
    tf.FailureKind.TRAINER_BROKEN: (
        [ModuleNotFoundError("No module named 'transformers'"), ImportError("cannot import name 'Qwen3Config' from 'transformers'")],
        True,
    ),
}


@pytest.mark.parametrize("kind", list(tf.FailureKind), ids=lambda kind: kind.value)
def test_each_failure_kind_has_its_errors_and_its_verdict(kind: tf.FailureKind) -> None:
    errors, final = FAILURE_KINDS[kind]  # a KeyError: a new kind without its line above
    for err in errors:
        assert tf.failure_kind(err) is kind, err
    assert (kind in tf.FINAL_FAILURE_KINDS) is final
    record = tf.parse_trainer_failure(tf.format_trainer_failure(kind, "m", 3))
    assert record == tf.TrainerFailure(kind=kind.value, final=final, rank=3, message="m")
    assert shlex.quote(kind.value) == kind.value, "the script reads the kind as one word"


def test_the_trainers_failure_record_reads_back_and_the_first_writer_wins(tmp_path: Path) -> None:
    target = tf.trainer_failure_path(tmp_path, "12", 0)
    assert target == tmp_path / "trainer-failure-12.0"
    env = {tf.TRAINER_FAILURE_FILE_ENV: str(target)}
    message = "--data /x/bad.jsonl:2: not\nvalid   JSON"
    assert tf.write_trainer_failure(tf.FailureKind.INVALID_DATA, message, 1, env) == target
    assert target.read_text().splitlines() == ["final invalid-data rank=1", "--data /x/bad.jsonl:2: not valid JSON"]
    later = tf.write_trainer_failure(tf.FailureKind.UNEXPECTED, "RuntimeError: peer gone (rank 0)", 0, env)
    assert later is None
    assert tf.read_trainer_failure(target) == tf.TrainerFailure(
        kind="invalid-data", final=True, rank=1, message="--data /x/bad.jsonl:2: not valid JSON"
    )
    assert list(tmp_path.iterdir()) == [target], "no temporary file is left behind"



def test_a_record_carries_the_step_and_knows_a_repeat_of_the_round_before() -> None:
    text = tf.format_trainer_failure(tf.FailureKind.UNEXPECTED, "ValueError: bad batch (rank 1)", 1, step=8)
    assert text.splitlines()[0] == "retry unexpected rank=1 step=8"
    first = tf.parse_trainer_failure(text)
    assert first is not None and first.step == 8
    # Another rank met it first the next time: the same error.
    again = tf.TrainerFailure(kind="unexpected", final=False, rank=0, message="ValueError: bad batch (rank 0)", step=8)
    assert again.repeats(first)
    assert not again.repeats(None)
    assert not dataclasses.replace(again, step=9).repeats(first), "another step: the training moved on"
    assert not dataclasses.replace(again, step=None).repeats(dataclasses.replace(first, step=None)), "no step: nothing to compare"
    assert not dataclasses.replace(again, message="ValueError: other").repeats(first)
    hang = tf.TrainerFailure(kind="hang", final=False, rank=0, message="hang: no step completed", step=8)
    assert not hang.repeats(hang), "a hang is the machine's, never deterministic"
    node = tf.TrainerFailure(kind="node-problem", final=False, rank=0, message="no GPU", step=8)
    assert not node.repeats(node)
    script = tf.TrainerFailure(kind="script-retry", final=False, rank=0, message="loss is nan", step=3)
    assert script.repeats(script)
    for machine in ("RuntimeError: CUDA error: uncorrectable ECC error encountered (rank 3)",
                    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer (rank 0)",
                    "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (rank 1)",
                    "OSError: [Errno 5] Input/output error: '/fsx/data/shard-7.bin' (rank 0)"):
        bad_node = dataclasses.replace(again, message=machine)
        assert not bad_node.repeats(bad_node), f"maybe the machine's, retried within the budget: {machine}"
    assert tf.parse_trainer_failure("retry unexpected rank=1 step=x\nm\n").step is None


def test_a_records_file_name_reads_back_as_its_round(tmp_path: Path) -> None:
    for job, restart, round_ in (("12", 0, 0), ("12", 3, 2), ("45_1", 1, 0)):
        assert tf.trainer_failure_round(tf.trainer_failure_path(tmp_path, job, restart, round_).name) == (job, restart, round_)
    for other in ("trainer-failure-12.0.node1.77.tmp", "trainer-failure-12", "metrics.jsonl", "trainer-failure-x.0"):
        assert tf.trainer_failure_round(other) is None

def test_without_hard_links_the_first_writer_still_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: str, dst: str) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(tf.os, "link", no_links)
    target = tmp_path / "f"
    env = {tf.TRAINER_FAILURE_FILE_ENV: str(target)}
    assert tf.write_trainer_failure(tf.FailureKind.NODE_PROBLEM, "no GPU", 2, env) == target
    assert tf.write_trainer_failure(tf.FailureKind.UNEXPECTED, "later", 0, env) is None
    record = tf.read_trainer_failure(target)
    assert record is not None and (record.kind, record.final, record.rank) == ("node-problem", False, 2)
    assert list(tmp_path.iterdir()) == [target]


def test_no_failure_record_without_the_variable_and_writing_one_never_raises(tmp_path: Path) -> None:
    assert tf.write_trainer_failure(tf.FailureKind.INVALID_DATA, "m", 0, {}) is None
    assert list(tmp_path.iterdir()) == []
    unwritable = {tf.TRAINER_FAILURE_FILE_ENV: str(tmp_path / "no-such-dir" / "f")}
    assert tf.write_trainer_failure(tf.FailureKind.INVALID_DATA, "m", 0, unwritable) is None
    assert tf.read_trainer_failure(tmp_path / "absent") is None
    assert tf.parse_trainer_failure("") is None and tf.parse_trainer_failure("maybe x rank=0\nm") is None
