"""Loading a compiled-template cache entry runs code, so the cache is used only from this
user's private folder: an entry planted where someone else could write is never loaded (the
templates are compiled instead, same script, no error)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import jinja2.bccache
import pytest

from hyperlaunch.job.plan import build_spec
from hyperlaunch.script import render


class _Planted:
    """Unpickling this creates `marker`: proof that the cache entry was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.marker),))


def _script(tmp_path: Path) -> str:
    render._template.cache_clear()
    spec = build_spec({"model": "qwen3_tiny", "nodes": 2}, cwd=tmp_path, environ={})
    return render.render_sbatch(spec)


def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A populated cache folder and the script rendered (in `tmp_path`) without any cache."""
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HYPERLAUNCH_NO_TEMPLATE_CACHE", "1")
    plain = _script(tmp_path)
    monkeypatch.delenv("HYPERLAUNCH_NO_TEMPLATE_CACHE")
    assert _script(tmp_path) == plain
    folder = tmp_path / "home" / "cache" / "templates"
    assert len(list(folder.iterdir())) == 2  # sbatch.sh.j2 and its partial (the environment)
    return folder, plain


def _plant(folder: Path, marker: Path) -> list[Path]:
    """Replace every entry with one that passes Jinja's header check and runs code on load."""
    entries = sorted(folder.iterdir())
    for entry in entries:
        entry.write_bytes(jinja2.bccache.bc_magic + pickle.dumps(_Planted(marker), 2))
    return entries


def test_the_cache_folder_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0o022)
    try:
        folder, _ = _cache(tmp_path, monkeypatch)
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert all(entry.stat().st_mode & 0o777 == 0o600 for entry in folder.iterdir())


def test_an_entry_planted_in_a_folder_others_can_write_is_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, plain = _cache(tmp_path, monkeypatch)
    marker = tmp_path / "code-ran"
    _plant(folder, marker)
    folder.chmod(0o777)  # a shared folder: anyone could have put these files there
    assert _script(tmp_path) == plain
    assert not marker.exists()


def test_a_group_writable_entry_in_the_private_folder_is_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, plain = _cache(tmp_path, monkeypatch)
    marker = tmp_path / "code-ran"
    for entry in _plant(folder, marker):
        entry.chmod(0o664)
    assert _script(tmp_path) == plain
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_an_entry_owned_by_someone_else_is_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, plain = _cache(tmp_path, monkeypatch)
    marker = tmp_path / "code-ran"
    for entry in _plant(folder, marker):
        os.chown(entry, 54321, 54321)
        entry.chmod(0o600)
    assert _script(tmp_path) == plain
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
def test_a_folder_owned_by_someone_else_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, plain = _cache(tmp_path, monkeypatch)
    marker = tmp_path / "code-ran"
    _plant(folder, marker)
    os.chown(folder, 54321, 54321)
    assert _script(tmp_path) == plain
    assert not marker.exists()


def test_a_symlinked_cache_folder_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere, plain = _cache(tmp_path / "other", monkeypatch)
    marker = tmp_path / "code-ran"
    _plant(elsewhere, marker)
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    (home / "cache" / "templates").symlink_to(elsewhere)
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(home))
    assert _script(tmp_path / "other") == plain
    assert not marker.exists()


def test_a_folder_of_ours_that_others_cannot_write_is_made_private_and_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, plain = _cache(tmp_path, monkeypatch)
    folder.chmod(0o755)  # what an older hyperlaunch created under umask 022
    marker = tmp_path / "code-ran"
    _plant(folder, marker)
    _script(tmp_path)
    assert marker.exists(), "the user's own folder is trusted: the entry was loaded"
    assert folder.stat().st_mode & 0o777 == 0o700
