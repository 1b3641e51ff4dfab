"""Files hyperlaunch and the trainer write into a (shared) checkpoint folder: the `-latest`
pointer and `hyperlaunch.json` follow the user's umask like any other file there, so a
teammate can read the pointer; a writer killed before its rename leaves only a hidden temp
file that readers skip and the next writer removes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints

MODEL = "qwen3_tiny"


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _complete(ckpt: Path, step: int) -> str:
    name = checkpoints.checkpoint_dir_name(MODEL, step)
    (ckpt / name).mkdir(parents=True)
    (ckpt / name / checkpoints.METADATA_FILE).write_text("")
    return name


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600), (0o002, 0o664)])
def test_pointer_and_info_follow_the_umask(mask: int, expected: int, tmp_path: Path) -> None:
    name = _complete(tmp_path, 10)
    old = os.umask(mask)
    try:
        checkpoints.write_pointer(tmp_path, MODEL, name)
        checkpoints.write_info(tmp_path / name, {"model": MODEL, "step": 10})
    finally:
        os.umask(old)
    assert _mode(checkpoints.pointer_path(tmp_path, MODEL)) == expected
    assert _mode(tmp_path / name / checkpoints.INFO_FILE) == expected


def _killed_writer(ckpt: Path, name: str) -> None:
    """A process that dies (SIGKILL: no cleanup runs) between writing the temp file and the rename."""
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from hyperlaunch.core import checkpoints\n"
        "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "checkpoints.write_pointer(Path(sys.argv[1]), sys.argv[2], sys.argv[3])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(checkpoints.__file__).parent.parent)}
    proc = subprocess.run([sys.executable, "-c", code, str(ckpt), MODEL, name], env=env, check=False)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_a_writer_killed_before_the_rename_leaves_nothing_readers_trip_on(tmp_path: Path, umask: None) -> None:
    first = _complete(tmp_path, 10)
    checkpoints.write_pointer(tmp_path, MODEL, first)
    second = _complete(tmp_path, 20)
    _killed_writer(tmp_path, second)

    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(f".{MODEL}-latest.")
    assert checkpoints.read_pointer(tmp_path, MODEL) == first, "the pointer still names the old checkpoint"
    assert checkpoints.list_models(tmp_path) == [MODEL]
    assert [info.step for info in checkpoints.list_checkpoints(tmp_path, MODEL)] == [10, 20]

    checkpoints.write_pointer(tmp_path, MODEL, second)
    assert leftovers[0].exists(), "a young temp file may be another writer's: kept"
    past = time.time() - checkpoints.STALE_TEMP_SECONDS - 5
    os.utime(leftovers[0], (past, past))
    checkpoints.write_pointer(tmp_path, MODEL, second)
    assert not leftovers[0].exists(), "the next writer removes a stale one"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert checkpoints.read_pointer(tmp_path, MODEL) == second


def test_an_interrupted_write_removes_its_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _complete(tmp_path, 10)

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.write_pointer(tmp_path, MODEL, name)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_only_this_files_stale_temps_are_removed(tmp_path: Path) -> None:
    name = _complete(tmp_path, 10)
    past = time.time() - checkpoints.STALE_TEMP_SECONDS - 5
    others = [tmp_path / ".other_model-latest.abc.tmp", tmp_path / "notes.tmp", tmp_path / f".{MODEL}-latest.keep"]
    for path in others:
        path.write_text("x")
        os.utime(path, (past, past))
    checkpoints.write_pointer(tmp_path, MODEL, name)
    assert all(path.exists() for path in others)
