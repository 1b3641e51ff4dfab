"""A torn checkpoint told from a whole one (hyperlaunch.core.checkpoint_integrity): the commit
records each file's size and the small ones' CRC-32, a truncated, missing or rewritten file is
named, and a torn checkpoint is set aside, renamed and never deleted, with the pointer moved
to the one before it."""

from __future__ import annotations

import json
from pathlib import Path

from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core import checkpoints as rules
from hyperlaunch.runtime.checkpoint import commit

MODEL = "qwen3_tiny"


def _saved(ckpt_dir: Path, step: int, *, shard: int = 5000) -> Path:
    """A checkpoint as DCP leaves it (two shards, then `.metadata`), committed."""
    path = rules.checkpoint_path(ckpt_dir, MODEL, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"a" * shard)
    (path / "__1_0.distcp").write_bytes(b"b" * shard)
    (path / rules.METADATA_FILE).write_bytes(b"metadata")
    commit(ckpt_dir, MODEL, path, step, ckpt_dir / "run")
    return path


def test_the_commit_records_every_file_and_a_whole_checkpoint_verifies(tmp_path: Path) -> None:
    path = _saved(tmp_path, 10)
    files = json.loads((path / integrity.MANIFEST_FILE).read_text())["files"]
    assert set(files) == {"__0_0.distcp", "__1_0.distcp", ".metadata"}
    assert files["__0_0.distcp"]["size"] == 5000 and isinstance(files[".metadata"]["crc32"], int)
    assert integrity.verify(path) == []


def test_a_truncated_a_missing_and_a_rewritten_file_are_each_named(tmp_path: Path) -> None:
    path = _saved(tmp_path, 10)
    (path / "__1_0.distcp").write_bytes(b"b" * 1234)
    (path / "__0_0.distcp").unlink()
    (path / rules.METADATA_FILE).write_bytes(b"METADATA")  # the same size, other bytes
    problems = {p.file: p.what for p in integrity.verify(path) or []}
    assert problems == {
        "__1_0.distcp": "is 1,234 bytes, 5,000 when committed",
        "__0_0.distcp": "is missing",
        ".metadata": "has other bytes than when committed (CRC-32)",
    }


def test_a_checkpoint_committed_before_manifests_has_nothing_to_check_against(tmp_path: Path) -> None:
    path = _saved(tmp_path, 10)
    (path / integrity.MANIFEST_FILE).unlink()
    assert integrity.verify(path) is None
    (path / integrity.MANIFEST_FILE).write_text('{"files": ')  # cut short
    assert [p.file for p in integrity.verify(path) or []] == [integrity.MANIFEST_FILE]


def test_a_torn_checkpoint_is_set_aside_and_the_pointer_moves_to_the_one_before(tmp_path: Path) -> None:
    _saved(tmp_path, 10)
    torn = _saved(tmp_path, 20)
    (torn / "__0_0.distcp").write_bytes(b"")
    found = integrity.torn_pointed(tmp_path, MODEL)
    assert found is not None and found[0] == torn
    aside = integrity.set_aside(tmp_path, MODEL, torn, "torn: x", file="__0_0.distcp", job="42")
    assert aside.path == tmp_path / f"{MODEL}-20steps.bad" and aside.path.is_dir()
    assert (aside.path / "__1_0.distcp").read_bytes() == b"b" * 5000, "nothing of it is deleted"
    assert rules.read_pointer(tmp_path, MODEL) == f"{MODEL}-10steps"
    assert [info.step for info in rules.list_checkpoints(tmp_path, MODEL)] == [10]
    (listed,) = integrity.set_aside_checkpoints(tmp_path, MODEL)
    assert (listed.step, listed.reason, listed.file, listed.job) == (20, "torn: x", "__0_0.distcp", "42")
    assert integrity.torn_pointed(tmp_path, MODEL) is None


def test_the_same_step_torn_twice_is_kept_twice_and_with_none_left_the_pointer_goes(tmp_path: Path) -> None:
    for _ in range(2):
        torn = _saved(tmp_path, 20)
        integrity.set_aside(tmp_path, MODEL, torn, "torn: again")
    assert [a.path.name for a in integrity.set_aside_checkpoints(tmp_path, MODEL)] == [f"{MODEL}-20steps.bad", f"{MODEL}-20steps.bad.2"]
    assert rules.read_pointer(tmp_path, MODEL) is None and not rules.pointer_path(tmp_path, MODEL).exists()


def test_a_scripts_own_format_is_checked_the_same_way(tmp_path: Path) -> None:
    path = rules.checkpoint_path(tmp_path, MODEL, 3)
    path.mkdir(parents=True)
    (path / "model.pt").write_bytes(b"w" * 2_000_000)  # over the checksum limit: its size alone
    commit(tmp_path, MODEL, path, 3, tmp_path / "run")
    files = json.loads((path / integrity.MANIFEST_FILE).read_text())["files"]
    assert files["model.pt"] == {"size": 2_000_000} and rules.COMMITTED_FILE in files
    (path / "model.pt").write_bytes(b"w" * 10)
    assert [p.file for p in integrity.verify(path) or []] == ["model.pt"]
