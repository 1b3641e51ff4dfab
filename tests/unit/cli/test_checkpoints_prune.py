"""`hyperlaunch checkpoints --prune N [--yes]`: what keeping one model's newest N complete
checkpoints removes (said first, removed only with --yes), never the one `-latest` names nor a
save that may be under way; and a removal cut short leaves no checkpoint that looks complete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoint_pruning
from hyperlaunch.core import checkpoints as rules
from tests.support.checkpoint_folders import make_checkpoint, point
from tests.support.cli_runner import CliResult, run_cli


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ck"
    for step in (10, 20, 30, 40):
        make_checkpoint(root, "qwen3_tiny", step, payload=1024)
    make_checkpoint(root, "qwen3_tiny", 50, complete=False)  # a save under way
    point(root, "qwen3_tiny", "qwen3_tiny-40steps")
    return root


@pytest.fixture()
def cli(monkeypatch: pytest.MonkeyPatch):
    def invoke(root: Path, *args: str) -> CliResult:
        return run_cli(["checkpoints", "--checkpoint-dir", str(root), *args], monkeypatch)

    return invoke


def _prune(cli, root: Path, *args: str) -> tuple[int, str, str]:
    result = cli(root, "--prune", *args)
    return result.exit_code, result.stdout, result.stderr


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def test_without_yes_it_says_what_would_go_and_removes_nothing(cli, root: Path) -> None:
    code, stdout, _ = _prune(cli, root, "2")
    assert code == 0
    assert stdout.splitlines() == [
        "qwen3_tiny: would remove 2 checkpoints (2.0 KiB): qwen3_tiny-10steps, qwen3_tiny-20steps; keeps qwen3_tiny-30steps, "
        "qwen3_tiny-40steps (latest), qwen3_tiny-50steps (incomplete: a save under way, or one a newer save will replace)",
        "pass --yes as well to remove them",
    ]
    assert _left(root) == [f"qwen3_tiny-{s}steps" for s in (10, 20, 30, 40, 50)]


def test_with_yes_it_removes_them_and_keeps_the_latest_and_a_save_under_way(cli, root: Path) -> None:
    code, stdout, _ = _prune(cli, root, "1", "--yes")
    assert code == 0 and stdout.startswith("qwen3_tiny: removed 3 checkpoints (3.0 KiB): qwen3_tiny-10steps, qwen3_tiny-20steps, qwen3_tiny-30steps; kept")
    assert _left(root) == ["qwen3_tiny-40steps", "qwen3_tiny-50steps"]
    assert rules.read_pointer(root, "qwen3_tiny") == "qwen3_tiny-40steps"
    code, stdout, _ = _prune(cli, root, "1", "--yes")
    assert code == 0 and stdout.startswith("qwen3_tiny: nothing to remove")


def test_the_checkpoint_latest_names_stays_even_when_older_than_the_newest_n(cli, root: Path) -> None:
    point(root, "qwen3_tiny", "qwen3_tiny-10steps")  # e.g. a resume from an older step was asked for
    code, stdout, _ = _prune(cli, root, "1", "--yes", "--json")
    document = json.loads(stdout)
    assert code == 0 and document["removed"] is True
    assert document["checkpoints"] == ["qwen3_tiny-20steps", "qwen3_tiny-30steps"] and document["bytes"] == 2 * 1034
    assert document["kept"] == ["qwen3_tiny-10steps", "qwen3_tiny-40steps", "qwen3_tiny-50steps"]
    assert _left(root) == document["kept"]


def test_a_long_list_is_cut_in_the_middle(cli, tmp_path: Path) -> None:
    for step in range(1, 21):
        make_checkpoint(tmp_path, "m", step)
    _code, stdout, _ = _prune(cli, tmp_path, "1")
    assert "would remove 19 checkpoints (2.0 KiB): m-1steps, m-2steps, ..., m-18steps, m-19steps; keeps m-20steps\n" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prune", "1"], "--prune keeps one model's newest checkpoints: pass --model (llama_tiny, qwen3_tiny in"),
        (["--yes"], "--yes confirms --prune N: pass both"),
        (["--prune", "1", "--copy-to", "s3://b/p"], "--prune removes checkpoints and --copy-to/--step copy one"),
        (["--prune", "0"], "Invalid value for '--prune'"),
    ],
)
def test_what_it_cannot_do_is_one_line_and_removes_nothing(cli, root: Path, args: list[str], message: str) -> None:
    make_checkpoint(root, "llama_tiny", 5)
    result = cli(root, *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output and len(_left(root)) == 6


def test_a_folder_without_checkpoints_says_so(cli, tmp_path: Path) -> None:
    code, _, stderr = _prune(cli, tmp_path / "nope", "1")
    assert code == 2 and "--prune: no checkpoints in" in stderr and "(no such folder)" in stderr


def test_a_removal_that_fails_names_the_folder_and_what_went_before(cli, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = checkpoint_pruning.remove_checkpoint

    def remove(path: Path, ignore_errors: bool = False) -> None:
        if path.name == "qwen3_tiny-20steps":
            raise PermissionError(13, "Permission denied")
        real(path, ignore_errors)

    monkeypatch.setattr(checkpoint_pruning, "remove_checkpoint", remove)
    code, _, stderr = _prune(cli, root, "1", "--yes")
    assert code != 0 and len(stderr.strip().splitlines()) == 1
    assert f"could not remove {root / 'qwen3_tiny-20steps'}: Permission denied after removing qwen3_tiny-10steps" in stderr


def test_a_removal_cut_short_leaves_an_incomplete_checkpoint_not_a_complete_looking_one(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = root / "qwen3_tiny-10steps"

    def cut_short(target: Path, ignore_errors: bool = False) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(shutil, "rmtree", cut_short)
    with pytest.raises(OSError):
        checkpoint_pruning.remove_checkpoint(path)
    assert path.is_dir() and not rules.is_complete(path)


def test_a_pointer_it_cannot_read_stops_it_before_anything_goes(cli, root: Path) -> None:
    rules.pointer_path(root, "qwen3_tiny").write_text("qwen3_tiny-10steps\nqwen3_tiny-10steps\n")  # garbage
    code, _, stderr = _prune(cli, root, "1", "--yes")
    assert code != 0 and stderr.startswith("hyperlaunch: error: --prune: ") and "fix or remove qwen3_tiny-latest first" in stderr
    assert len(_left(root)) == 5


def test_a_mistyped_model_is_an_error_not_nothing_to_remove(cli, root: Path) -> None:
    code, _, stderr = _prune(cli, root, "1", "--model", "qwen3_tinny")
    assert code == 2 and "--prune: no checkpoints of qwen3_tinny in" in stderr and "models there: qwen3_tiny" in stderr


def test_a_linked_checkpoint_loses_its_link_and_its_target_stays_whole(root: Path, tmp_path: Path) -> None:
    elsewhere = make_checkpoint(tmp_path / "other", "qwen3_tiny", 5)
    link = root / "qwen3_tiny-5steps"
    link.symlink_to(elsewhere, target_is_directory=True)
    assert checkpoint_pruning.prune(root, "qwen3_tiny", 2) == [link, root / "qwen3_tiny-10steps", root / "qwen3_tiny-20steps"]
    assert not link.exists() and not link.is_symlink()
    assert rules.is_complete(elsewhere) and (elsewhere / "__0_0.distcp").exists()
