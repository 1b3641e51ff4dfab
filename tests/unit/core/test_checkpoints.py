"""Pointer and checkpoint-directory rules (torch-free): naming, completeness, atomic pointer,
listing, the resume choice and pruning."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints as ck
from hyperlaunch.core.checkpoint_pruning import prune
from hyperlaunch.core.checkpoint_resume import ResumeChoice, choose_resume, validate_checkpoint
from hyperlaunch.core.errors import CheckpointError, InvalidInput

MODEL = "qwen3_tiny"


def make_ckpt(root: Path, step: int, *, complete: bool = True, model: str = MODEL) -> Path:
    path = root / ck.checkpoint_dir_name(model, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"x" * 100)
    if complete:
        (path / ck.METADATA_FILE).write_bytes(b"meta")
    return path


def test_names_follow_the_reference_layout(tmp_path: Path) -> None:
    assert ck.checkpoint_dir_name("qwen3_0_6b", 50) == "qwen3_0_6b-50steps"
    assert ck.pointer_path(tmp_path, "qwen3_0_6b") == tmp_path / "qwen3_0_6b-latest"
    assert ck.final_dir(tmp_path, "qwen3_0_6b") == tmp_path / "qwen3_0_6b-final"
    assert ck.parse_step("qwen3_0_6b-50steps", "qwen3_0_6b") == 50
    assert ck.parse_step("qwen3_1_7b-50steps", "qwen3_0_6b") is None
    assert ck.parse_step("qwen3_0_6b-final", "qwen3_0_6b") is None


def test_pointer_round_trip_and_refuses_incomplete(tmp_path: Path) -> None:
    make_ckpt(tmp_path, 10)
    make_ckpt(tmp_path, 20, complete=False)
    ck.write_pointer(tmp_path, MODEL, "qwen3_tiny-10steps")
    assert ck.pointer_path(tmp_path, MODEL).read_text() == "qwen3_tiny-10steps\n"
    assert ck.read_pointer(tmp_path, MODEL) == "qwen3_tiny-10steps"
    with pytest.raises(CheckpointError, match="incomplete"):
        ck.write_pointer(tmp_path, MODEL, "qwen3_tiny-20steps")
    assert ck.read_pointer(tmp_path, MODEL) == "qwen3_tiny-10steps"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_pointer_write_is_a_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_ckpt(tmp_path, 10)
    make_ckpt(tmp_path, 20)
    ck.write_pointer(tmp_path, MODEL, "qwen3_tiny-10steps")
    inode = ck.pointer_path(tmp_path, MODEL).stat().st_ino

    def crash(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(ck.os, "replace", crash)
    with pytest.raises(OSError):
        ck.write_pointer(tmp_path, MODEL, "qwen3_tiny-20steps")
    # A failed update leaves the old pointer intact and no temp files behind.
    assert ck.read_pointer(tmp_path, MODEL) == "qwen3_tiny-10steps"
    assert ck.pointer_path(tmp_path, MODEL).stat().st_ino == inode
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "qwen3_tiny-10steps", "qwen3_tiny-20steps", "qwen3_tiny-latest",
    ]


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe garbage", b"hello world", b"a\nb\n"])
def test_garbage_pointer_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    make_ckpt(tmp_path, 10)
    ck.pointer_path(tmp_path, MODEL).write_bytes(content)
    with pytest.raises(CheckpointError) as err:
        choose_resume(tmp_path, MODEL)
    assert "qwen3_tiny-latest" in err.value.one_line()
    assert "\n" not in err.value.one_line()


def test_pointer_naming_another_model_is_refused(tmp_path: Path) -> None:
    make_ckpt(tmp_path, 10, model="llama_tiny")
    ck.pointer_path(tmp_path, MODEL).write_text("llama_tiny-10steps\n")
    with pytest.raises(CheckpointError, match="llama_tiny"):
        choose_resume(tmp_path, MODEL)


def test_pointer_holding_a_path_is_accepted(tmp_path: Path) -> None:
    make_ckpt(tmp_path, 10)
    ck.pointer_path(tmp_path, MODEL).write_text(f"{tmp_path}/qwen3_tiny-10steps")
    assert choose_resume(tmp_path, MODEL).step == 10


def test_listing_reports_step_size_completeness_and_pointer(tmp_path: Path) -> None:
    make_ckpt(tmp_path, 20)
    make_ckpt(tmp_path, 5)
    make_ckpt(tmp_path, 30, complete=False)
    make_ckpt(tmp_path, 10, model="llama_tiny")
    ck.write_pointer(tmp_path, MODEL, "qwen3_tiny-20steps")
    infos = ck.list_checkpoints(tmp_path, MODEL)
    assert [(i.step, i.complete, i.is_latest) for i in infos] == [
        (5, True, False), (20, True, True), (30, False, False),
    ]
    assert infos[0].size_bytes == 104
    assert ck.list_models(tmp_path) == ["llama_tiny", MODEL]
    assert ck.list_checkpoints(tmp_path / "absent", MODEL) == []


def test_resume_follows_the_pointer(tmp_path: Path) -> None:
    make_ckpt(tmp_path, 10)
    make_ckpt(tmp_path, 20)
    ck.write_pointer(tmp_path, MODEL, "qwen3_tiny-10steps")
    choice = choose_resume(tmp_path, MODEL)
    assert (choice.step, choice.warning) == (10, None)
    assert choice.path == tmp_path / "qwen3_tiny-10steps"


@pytest.mark.parametrize("state", ["does not exist", "incomplete"])
def test_pointer_to_bad_dir_falls_back_with_a_warning(tmp_path: Path, state: str) -> None:
    make_ckpt(tmp_path, 10)
    if state == "incomplete":
        make_ckpt(tmp_path, 20, complete=False)
    ck.pointer_path(tmp_path, MODEL).write_text("qwen3_tiny-20steps\n")
    choice = choose_resume(tmp_path, MODEL)
    assert choice.step == 10
    assert choice.warning and state in choice.warning


def test_never_silently_from_scratch_while_complete_checkpoints_exist(tmp_path: Path) -> None:
    assert choose_resume(tmp_path, MODEL) == ResumeChoice(path=None, step=0)
    make_ckpt(tmp_path, 10)
    choice = choose_resume(tmp_path, MODEL)
    assert choice.step == 10 and choice.warning
    assert choose_resume(tmp_path, MODEL, from_scratch=True).path is None


def test_resume_from_checks_model_and_completeness(tmp_path: Path) -> None:
    mine = make_ckpt(tmp_path, 10)
    theirs = make_ckpt(tmp_path, 10, model="llama_tiny")
    half = make_ckpt(tmp_path, 20, complete=False)
    assert choose_resume(tmp_path, MODEL, resume_from=mine).step == 10
    with pytest.raises(CheckpointError, match="llama_tiny"):
        choose_resume(tmp_path, MODEL, resume_from=theirs)
    with pytest.raises(CheckpointError, match="incomplete"):
        choose_resume(tmp_path, MODEL, resume_from=half)
    with pytest.raises(CheckpointError, match="does not exist"):
        choose_resume(tmp_path, MODEL, resume_from=tmp_path / "nope")


def test_info_file_identifies_a_renamed_checkpoint(tmp_path: Path) -> None:
    renamed = tmp_path / "somewhere"
    renamed.mkdir()
    (renamed / ck.METADATA_FILE).write_bytes(b"")
    ck.write_info(renamed, {"model": "llama_tiny", "step": 7})
    with pytest.raises(CheckpointError, match="llama_tiny"):
        validate_checkpoint(renamed, MODEL)
    assert validate_checkpoint(renamed, "llama_tiny") == 7


def test_prune_keeps_last_k_the_pointer_and_inflight_saves(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        make_ckpt(tmp_path, step)
    make_ckpt(tmp_path, 15, complete=False)  # leftover of a killed save
    make_ckpt(tmp_path, 50, complete=False)  # an async save still writing
    ck.write_pointer(tmp_path, MODEL, "qwen3_tiny-10steps")
    removed = prune(tmp_path, MODEL, keep_last=2)
    assert sorted(p.name for p in removed) == ["qwen3_tiny-15steps", "qwen3_tiny-20steps"]
    left = [i.step for i in ck.list_checkpoints(tmp_path, MODEL)]
    assert left == [10, 30, 40, 50]
    assert prune(tmp_path, MODEL, keep_last=0) == []


def test_check_writable(tmp_path: Path) -> None:
    ck.check_writable(tmp_path / "new" / "dir")
    # A regular file in the way fails even for root (chmod would not).
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CheckpointError, match="not writable"):
        ck.check_writable(blocker / "ckpt")
    assert blocker.read_text() == "x"


def test_one_checkpoint_name_for_presets_directories_symlinks_and_model_name(tmp_path: Path) -> None:
    from hyperlaunch.core.checkpoints import checkpoint_name, is_model_directory
    from hyperlaunch.core.errors import InvalidInput

    real = tmp_path / "real model v1.0"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert checkpoint_name("qwen3_tiny") == "qwen3_tiny" and not is_model_directory("qwen3_tiny")
    assert is_model_directory(str(link)) and is_model_directory(str(real))
    assert checkpoint_name(str(real)) == checkpoint_name(str(link)) == "real_model_v1.0"
    assert checkpoint_name(str(link), "mine") == "mine"
    with pytest.raises(InvalidInput, match="--model-name"):
        checkpoint_name(str(link), "a/b")
    with pytest.raises(InvalidInput, match="unknown model preset 'gpt5'"):
        checkpoint_name("gpt5")


def test_the_spec_carries_the_name_the_trainer_writes(tmp_path: Path) -> None:
    from hyperlaunch.job.defaults import job_spec

    real = tmp_path / "real-model"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    dirs = {name: str(tmp_path / name) for name in ("checkpoint_dir", "log_dir", "run_dir")}
    assert job_spec(model=str(tmp_path / "link"), **dirs).derived.checkpoint_name == "real-model"
    spec = job_spec(model=str(tmp_path / "link"), trainer_args=("--model-name=x",), **dirs)
    assert spec.derived.checkpoint_name == "x"


def test_the_data_cache_and_other_hidden_names_are_never_checkpoints(tmp_path: Path) -> None:
    """The trainer prepares raw --data into <ckpt>/.hyperlaunch-data/: listing, pruning, the
    resume choice and the pointer pass it by, whatever it holds."""
    make_ckpt(tmp_path, 10)
    make_ckpt(tmp_path, 20)
    ck.write_pointer(tmp_path, MODEL, "qwen3_tiny-20steps")
    cache = ck.data_cache_dir(tmp_path)
    assert cache == tmp_path / ".hyperlaunch-data"
    (cache / "corpus.jsonl-0123abcd").mkdir(parents=True)
    (cache / "corpus.jsonl-0123abcd" / "manifest.json").write_text("{}")
    hidden = tmp_path / f".{MODEL}-30steps"  # shaped like a newer checkpoint, but hidden
    hidden.mkdir()
    (hidden / ck.METADATA_FILE).write_bytes(b"meta")
    (tmp_path / f".{MODEL}-latest").write_text(f".{MODEL}-30steps\n")
    assert ck.list_models(tmp_path) == [MODEL]
    assert [info.step for info in ck.list_checkpoints(tmp_path, MODEL)] == [10, 20]
    assert choose_resume(tmp_path, MODEL).path == tmp_path / "qwen3_tiny-20steps"
    assert prune(tmp_path, MODEL, keep_last=1) == [tmp_path / "qwen3_tiny-10steps"]
    assert (cache / "corpus.jsonl-0123abcd" / "manifest.json").exists() and hidden.is_dir()
    with pytest.raises(InvalidInput, match="--model-name"):
        ck.checkpoint_name("/some/model/dir", ".hyperlaunch")
    assert ck.checkpoint_name(str(tmp_path / ".mymodel")) == "_mymodel"
