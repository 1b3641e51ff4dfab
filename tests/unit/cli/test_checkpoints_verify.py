"""`hyperlaunch checkpoints --verify` and the checkpoints set aside as torn, through the real CLI
on real folders: a whole checkpoint, one with a shard cut short, one with a shard missing, one
committed before manifests (not checked); a set-aside checkpoint is listed with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core import checkpoints as rules
from hyperlaunch.runtime.checkpoint import commit
from tests.support.cli_runner import run_cli

MODEL = "qwen3_tiny"


def _committed(root: Path, step: int) -> Path:
    path = rules.checkpoint_path(root, MODEL, step)
    path.mkdir(parents=True)
    for rank in (0, 1):
        (path / f"__{rank}_0.distcp").write_bytes(b"x" * 4096)
    (path / rules.METADATA_FILE).write_bytes(b"m" * 10)
    commit(root, MODEL, path, step, root / "run")
    return path


def test_verify_names_a_truncated_and_a_missing_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ck"
    _committed(root, 10)
    (_committed(root, 20) / "__1_0.distcp").write_bytes(b"x" * 100)
    (_committed(root, 30) / "__0_0.distcp").unlink()
    old = _committed(root, 40)
    (old / integrity.MANIFEST_FILE).unlink()
    result = run_cli(["checkpoints", "--checkpoint-dir", str(root), "--verify"], monkeypatch)
    assert result.exit_code == 6
    assert result.stdout.splitlines() == [
        f"{MODEL}-10steps  whole",
        f"{MODEL}-20steps  torn: __1_0.distcp is 100 bytes, 4,096 when committed",
        f"{MODEL}-30steps  torn: __0_0.distcp is missing",
        f"{MODEL}-40steps  not checked (committed before sizes were recorded)",
    ]
    assert result.stderr.strip() == (
        f"hyperlaunch: error: 2 of 4 checkpoint(s) torn: {MODEL}-20steps, {MODEL}-30steps (a job sets a torn checkpoint aside"
        " by itself when it would load it; or move it away by hand)"
    )
    document = json.loads(run_cli(["checkpoints", "--checkpoint-dir", str(root), "--verify", "--json"], monkeypatch).stdout)
    assert [(row["step"], row["verdict"]) for row in document["checkpoints"]] == [(10, "whole"), (20, "torn"), (30, "torn"), (40, "not checked")]


def test_whole_checkpoints_verify_with_exit_code_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _committed(tmp_path, 10)
    result = run_cli(["checkpoints", "--checkpoint-dir", str(tmp_path), "--verify"], monkeypatch)
    assert (result.exit_code, result.stdout) == (0, f"{MODEL}-10steps  whole\n")


def test_a_set_aside_checkpoint_is_listed_with_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _committed(tmp_path, 10)
    torn = _committed(tmp_path, 20)
    integrity.set_aside(tmp_path, MODEL, torn, f"checkpoint {MODEL}-20steps is torn: __1_0.distcp is missing", job="77")
    result = run_cli(["checkpoints", "--checkpoint-dir", str(tmp_path), "--json"], monkeypatch)
    (model,) = json.loads(result.stdout)["models"]
    assert model["latest"] == f"{MODEL}-10steps" and [c["step"] for c in model["checkpoints"]] == [10]
    assert [(a["name"], a["job"]) for a in model["set_aside"]] == [(f"{MODEL}-20steps.bad", "77")]
    table = run_cli(["checkpoints", "--checkpoint-dir", str(tmp_path)], monkeypatch)
    assert f"{MODEL}-20steps.bad" in table.stdout and "set aside" in table.stdout
    assert f"{MODEL}-20steps.bad was set aside by job 77: checkpoint {MODEL}-20steps is torn" in " ".join(table.stderr.split())
