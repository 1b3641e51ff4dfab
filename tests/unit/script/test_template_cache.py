"""The compiled-template cache: same script with or without it, recompiled when a template
changes, and an unwritable cache is no error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hyperlaunch.job.plan import build_spec
from hyperlaunch.script import render


def _script(tmp_path: Path) -> str:
    render._template.cache_clear()
    spec = build_spec({"model": "qwen3_tiny", "nodes": 2}, cwd=tmp_path, environ={})
    return render.render_sbatch(spec)


def test_cached_templates_render_the_same_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HYPERLAUNCH_NO_TEMPLATE_CACHE", "1")
    plain = _script(tmp_path)
    monkeypatch.delenv("HYPERLAUNCH_NO_TEMPLATE_CACHE")
    first = _script(tmp_path)
    cache = tmp_path / "home" / "cache" / "templates"
    assert len(list(cache.iterdir())) == 2  # sbatch.sh.j2 and its partial (the environment)
    assert _script(tmp_path) == first == plain


def test_an_edited_template_is_compiled_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    _script(tmp_path)
    original = render._load_template
    monkeypatch.setattr(render, "_load_template", lambda name: original(name) + ("# edited\n" if name == "sbatch.sh.j2" else ""))
    assert _script(tmp_path).endswith("# edited\n")


def test_an_unwritable_cache_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "cache").write_text("a file where the cache folder would go")
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(home))
    assert _script(tmp_path).startswith("#!/bin/bash")
    if os.geteuid() != 0:  # root may write anywhere; the file-in-the-way case above covers it
        (home / "cache").unlink()
        home.chmod(0o500)
        assert _script(tmp_path).startswith("#!/bin/bash")
