"""Other trainers' checkpoints found as they lie (hyperlaunch.core.checkpoint_layouts): each
layout's newest complete one, its step, a torn one passed by, and nothing of a file run. The
torch.save files are real ones; the transformers, Lightning and DCP folders are what those
libraries write, with the files that tell completeness (the dev-cluster tests have the real
libraries write them)."""

from __future__ import annotations

import json
import os
import pickle
import time
import zipfile
from pathlib import Path

import pytest
import torch

from hyperlaunch.core import checkpoint_layouts as layouts


def _hf(root: Path, step: int, *, complete: bool = True) -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x" * 16)
    state = json.dumps({"global_step": step, "log_history": []})
    (folder / "trainer_state.json").write_text(state if complete else state[: len(state) // 2])
    return folder


def _torch_file(path: Path, payload: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path)
    return path


def _age(path: Path, seconds_ago: float) -> None:
    moment = time.time() - seconds_ago
    os.utime(path, (moment, moment))


def test_the_transformers_trainer_newest_complete_checkpoint_and_never_a_torn_one(tmp_path: Path) -> None:
    _hf(tmp_path / "out", 10)
    _hf(tmp_path / "out", 20)
    _hf(tmp_path / "out", 30, complete=False)  # its trainer_state.json half written
    (tmp_path / "out" / "checkpoint-40").mkdir()  # the model being saved: no state yet
    found = layouts.newest([str(tmp_path)])
    assert found is not None and (found.layout, found.step, Path(found.path).name) == ("transformers", 20, "checkpoint-20")
    assert layouts.describe(found).startswith("step 20 (transformers, ")


def test_lightning_ckpt_files_by_the_step_in_their_name_or_inside_and_last_ckpt(tmp_path: Path) -> None:
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    _age(_torch_file(folder / "epoch=0-step=50.ckpt", {"global_step": 50, "state_dict": {"w": torch.ones(2)}}), 20)
    last = _torch_file(folder / "last.ckpt", {"global_step": 75, "epoch": 1, "state_dict": {"w": torch.ones(2)}})
    torn = folder / "epoch=1-step=100.ckpt"
    torn.write_bytes(last.read_bytes()[:-40])  # cut before the zip directory: still being written
    found = layouts.newest([str(tmp_path)], "lightning")
    assert found is not None and (Path(found.path).name, found.step) == ("last.ckpt", 75)


def test_a_single_torch_save_file_gets_the_step_it_records(tmp_path: Path) -> None:
    _torch_file(tmp_path / "out" / "ckpt.pt", {"model": {"w": torch.zeros(3)}, "iter_num": 250, "best_val_loss": torch.tensor(2.5), "config": {"lr": 1e-3}})
    found = layouts.newest([str(tmp_path)])
    assert found is not None and (found.layout, found.step) == ("torch-save", 250)


def test_dcp_and_torchtitan_step_folders_count_once_their_metadata_is_there(tmp_path: Path) -> None:
    for step in (5, 10):
        (tmp_path / "checkpoint" / f"step-{step}").mkdir(parents=True)
        (tmp_path / "checkpoint" / f"step-{step}" / "__0_0.distcp").write_bytes(b"x")
    (tmp_path / "checkpoint" / "step-5" / ".metadata").write_bytes(b"m")
    found = layouts.newest([str(tmp_path)], "auto")
    assert found is not None and (found.layout, found.step) == ("dcp", 5)


def test_auto_follows_the_framework_that_wrote_last_and_off_finds_nothing(tmp_path: Path) -> None:
    old = _hf(tmp_path, 900)
    _age(old / "trainer_state.json", 60)
    _torch_file(tmp_path / "ckpt.pt", {"iter_num": 3})
    found = layouts.newest([str(tmp_path)])
    assert found is not None and (found.layout, found.step) == ("torch-save", 3)
    assert layouts.newest([str(tmp_path)], "transformers").step == 900  # type: ignore[union-attr]
    assert layouts.newest([str(tmp_path)], layouts.OFF) is None


def test_nothing_found_in_an_empty_missing_or_hidden_folder(tmp_path: Path) -> None:
    assert layouts.newest([str(tmp_path / "missing")]) is None
    _hf(tmp_path / ".cache", 5)
    _hf(tmp_path / "a" / "b" / "c" / "d" / "e", 5)  # deeper than anyone keeps checkpoints
    assert layouts.newest([str(tmp_path)]) is None


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned",))


def test_reading_the_step_runs_nothing_of_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evil/data.pkl", pickle.dumps({"hook": _Boom(), "step": 7}))
    assert layouts.step_inside(str(path)) == 7
    assert not (tmp_path / "pwned").exists()
    assert layouts.step_inside(str(tmp_path / "missing.pt")) is None


def test_hyperlaunchs_own_checkpoint_folders_are_never_a_frameworks(tmp_path: Path) -> None:
    """examples/plain_ddp.py saves `<name>-<N>steps/state.pt`: the pointer's and the runtime
    library's to name, not a torch.save checkpoint to hand over as a file."""
    _torch_file(tmp_path / "plain_ddp-10steps" / "state.pt", {"step": 10})
    _torch_file(tmp_path / "plain_ddp-20steps.bad-12" / "state.pt", {"step": 20})
    _torch_file(tmp_path / "qwen3-final" / "extra.pt", {"step": 30})
    assert layouts.newest([str(tmp_path)]) is None
