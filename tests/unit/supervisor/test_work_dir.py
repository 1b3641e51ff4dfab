"""A script job's working folder (hyperlaunch.supervisor.work_dir): the snapshot mirrored in for
its relative reads, what it writes kept there across rounds and a refreshed snapshot, and the
snapshot never written into."""

from __future__ import annotations

import os
from pathlib import Path

from hyperlaunch.supervisor.work_dir import mirror


def _snapshot(root: Path, name: str, files: dict[str, str]) -> Path:
    folder = root / ".hyperlaunch" / name
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    (folder / ".hyperlaunch-snapshot.json").write_text("{}")
    return folder


def test_relative_reads_find_the_code_and_relative_writes_stay_out_of_the_snapshot(tmp_path: Path) -> None:
    code = _snapshot(tmp_path, "code-1", {"train.py": "v1", "configs/small.yaml": "lr: 1", "pkg/__init__.py": ""})
    work = tmp_path / "work"
    assert mirror(str(code), str(work)) == 3
    assert (work / "configs" / "small.yaml").read_text() == "lr: 1"
    assert (work / "configs").is_dir() and not (work / "configs").is_symlink(), "a folder of its own: writes into it stay here"
    assert not (work / ".hyperlaunch-snapshot.json").exists()
    (work / "configs" / "out.txt").write_text("written by the script")
    (work / "checkpoints").mkdir()
    assert sorted(os.listdir(code / "configs")) == ["small.yaml"]
    assert mirror(str(code), str(work)) == 0, "the next round changes nothing"
    assert (work / "configs" / "out.txt").read_text() == "written by the script"


def test_a_refreshed_snapshot_replaces_the_code_and_keeps_the_outputs(tmp_path: Path) -> None:
    old = _snapshot(tmp_path, "code-1", {"train.py": "v1", "gone.py": "x"})
    work = tmp_path / "work"
    mirror(str(old), str(work))
    (work / "ckpt.pt").write_text("the script's")
    (work / "train.py").unlink()
    (work / "train.py").write_text("the script wrote over its own file")
    new = _snapshot(tmp_path, "code-2", {"train.py": "v2", "new.py": "y", "ckpt.pt": "shipped"})
    mirror(str(new), str(work))
    assert not (work / "gone.py").exists(), "a file the new code no longer has"
    assert os.readlink(work / "new.py") == str(new / "new.py")
    assert (work / "ckpt.pt").read_text() == "the script's", "what the script wrote wins over the code"
    assert (work / "train.py").read_text() == "the script wrote over its own file"
