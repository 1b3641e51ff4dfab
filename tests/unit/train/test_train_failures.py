"""The trainer names why it stopped: typed errors at the places input is read, and a failure
record (hyperlaunch.core.trainer_failures) for the batch script, written by main() on any rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core.errors import DataError, ModelUnavailable, NodeProblem
from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV, TrainerFailure, read_trainer_failure
from hyperlaunch.data.sources import find_sources, plan_units, read_unit
from hyperlaunch.train import train as train_main

ARGS = ["--model", "qwen3_tiny", "--checkpoint-dir", "/nonexistent/ckpt", "--max-steps", "1"]


@pytest.fixture()
def record_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "trainer-failure-12.0"
    monkeypatch.setenv(TRAINER_FAILURE_FILE_ENV, str(path))
    monkeypatch.setenv("RANK", "1")
    return path


def test_a_line_that_is_not_json_is_invalid_data_naming_file_and_line(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"text": "fine"}\n{not json\n')
    (source,) = find_sources([data])
    (unit,) = plan_units([source], "text", 1 << 20)
    with pytest.raises(DataError, match=r"^/.*/bad\.jsonl:2: not valid JSON$"):
        read_unit(source, unit, "text")
    with pytest.raises(DataError, match="no such file"):
        find_sources([tmp_path / "absent.jsonl"])


def test_no_cuda_device_is_the_nodes_problem() -> None:
    import torch

    from hyperlaunch.train.distributed import resolve_device

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(NodeProblem, match="no CUDA device"):
        resolve_device("cuda")


def test_a_model_directory_without_a_config_is_unavailable(tmp_path: Path) -> None:
    from hyperlaunch.train.modeling import resolve_model

    with pytest.raises(ModelUnavailable, match="config.json"):
        resolve_model(str(tmp_path), None)


def test_bad_flags_leave_a_final_record_and_only_rank_0_prints(record_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert train_main.main([*ARGS, "--no-such-flag"]) == 2
    record = read_trainer_failure(record_file)
    assert record is not None and (record.kind, record.final, record.rank) == ("invalid-arguments", True, 1)
    assert "--no-such-flag" in record.message
    assert capsys.readouterr().err == "", "rank 1 stays quiet; rank 0 prints the line"


def test_a_typed_error_is_recorded_with_its_kind(record_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(train_main, "run", _raising(DataError("--data /x/bad.jsonl:2: not valid JSON")))
    assert train_main.main(ARGS) == 2
    assert read_trainer_failure(record_file) == TrainerFailure(
        kind="invalid-data", final=True, rank=0, message="--data /x/bad.jsonl:2: not valid JSON"
    )
    assert capsys.readouterr().err == "hyperlaunch.train: error: --data /x/bad.jsonl:2: not valid JSON\n"


def test_an_unexpected_error_is_recorded_for_a_retry_and_still_raised(record_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train_main, "run", _raising(ValueError("boom")))
    with pytest.raises(ValueError, match="boom"):
        train_main.main(ARGS)
    assert read_trainer_failure(record_file) == TrainerFailure(
        kind="unexpected", final=False, rank=1, message="ValueError: boom (rank 1)"
    )


def test_outside_a_hyperlaunch_job_the_trainer_writes_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRAINER_FAILURE_FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert train_main.main([*ARGS, "--no-such-flag"]) == 2
    assert list(tmp_path.iterdir()) == []


def _raising(err: Exception):  # type: ignore[no-untyped-def]
    def run(*_args: object, **_kwargs: object) -> int:
        raise err

    return run


def test_a_failing_rank_records_before_closing_the_process_group(
    tmp_path: Path, record_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing fails the other ranks' collectives; their errors must not be recorded first."""
    from hyperlaunch.core.trainer_failures import FailureKind, write_trainer_failure
    from hyperlaunch.train import setup

    class Job:
        class trainer:  # noqa: N801 - stands in for the attribute
            @staticmethod
            def run(_state: object) -> int:
                raise RuntimeError("injected failure at step 8 on rank 1")

        state = None

        def close(self) -> None:  # what another rank does once this one closed the group
            write_trainer_failure(FailureKind.UNEXPECTED, "RuntimeError: Connection closed by peer (rank 0)", 0)

    monkeypatch.setattr(setup, "build", lambda *_args, **_kwargs: Job())
    args = ["--model", "qwen3_tiny", "--checkpoint-dir", str(tmp_path / "ck"), "--run-dir", str(tmp_path / "run"), "--max-steps", "1"]
    with pytest.raises(RuntimeError):
        train_main.main(args)
    record = read_trainer_failure(record_file)
    assert record is not None and record.message == "RuntimeError: injected failure at step 8 on rank 1 (rank 1)"


def test_a_tracker_missing_where_the_job_runs_fails_the_trainer_for_good_before_step_one(
    record_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("HYPERLAUNCH_TRACKERS", "wandb")
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: importlib finds none
    assert train_main.main(ARGS) == 2
    record = read_trainer_failure(record_file)
    assert record is not None and record.final and record.kind == "invalid-arguments"
    assert record.message.startswith("--tracker wandb: wandb is not installed where the job runs")
    assert capsys.readouterr().err.count("\n") == 1, "one line"
