"""Loading a checkpoint that fails is told apart (train/load_errors.py), on real DCP checkpoints
in one process: a truncated shard, a missing one and unreadable metadata are the checkpoint's
(CheckpointTorn, set aside), a model of another shape or other keys is the job's
(CheckpointError, not set aside), anything else is raised as it is."""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from hyperlaunch.core.errors import CheckpointError, CheckpointTorn
from hyperlaunch.train.load_errors import load_failure


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dcp") / "qwen3_tiny-10steps"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP: no process group, one process
        dcp.save({"model": torch.nn.Linear(64, 64).state_dict(), "train": '{"step": 10}'}, checkpoint_id=str(path))
    return path


def _load_error(saved: Path, tmp_path: Path, tear: Callable[[Path], None], model: torch.nn.Module | None = None) -> BaseException:
    path = tmp_path / saved.name
    shutil.copytree(saved, path)
    tear(path)
    state = {"model": (model or torch.nn.Linear(64, 64)).state_dict(), "train": ""}
    with warnings.catch_warnings(), pytest.raises(BaseException) as raised:
        warnings.simplefilter("ignore")
        dcp.load(state, checkpoint_id=str(path))
    return raised.value


def _shard(path: Path) -> Path:
    return next(path.glob("*.distcp"))


@pytest.mark.parametrize(
    "tear",
    [
        lambda p: os.truncate(_shard(p), _shard(p).stat().st_size // 2),
        lambda p: os.truncate(_shard(p), 100),
        lambda p: _shard(p).unlink(),
        lambda p: os.truncate(p / ".metadata", 10),
        lambda p: (p / ".metadata").unlink(),
    ],
    ids=["shard-halved", "shard-cut-to-100-bytes", "shard-missing", "metadata-cut", "metadata-missing"],
)
def test_a_torn_checkpoint_is_the_checkpoints_fault(saved: Path, tmp_path: Path, tear: Callable[[Path], None]) -> None:
    error = load_failure(tmp_path / saved.name, _load_error(saved, tmp_path, tear))
    assert isinstance(error, CheckpointTorn) and error.checkpoint == saved.name
    assert str(error).startswith(f"checkpoint {saved.name} is torn")


def test_a_missing_shard_is_named(saved: Path, tmp_path: Path) -> None:
    error = load_failure(tmp_path / saved.name, _load_error(saved, tmp_path, lambda p: _shard(p).unlink()))
    assert isinstance(error, CheckpointTorn) and error.file == _shard(saved).name


@pytest.mark.parametrize("model", [torch.nn.Linear(64, 32), torch.nn.Sequential(torch.nn.Linear(64, 64))], ids=["other-shape", "other-keys"])
def test_another_model_is_the_jobs_fault_not_the_checkpoints(saved: Path, tmp_path: Path, model: torch.nn.Module) -> None:
    error = load_failure(tmp_path / saved.name, _load_error(saved, tmp_path, lambda p: None, model))
    assert isinstance(error, CheckpointError) and not isinstance(error, CheckpointTorn)
    assert "does not fit this job's model" in str(error)


def test_an_error_of_neither_kind_is_left_as_it_is(tmp_path: Path) -> None:
    assert load_failure(tmp_path / "m-1steps", RuntimeError("NCCL watchdog timeout")) is None
