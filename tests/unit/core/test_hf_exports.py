"""Which checkpoint `hyperlaunch export` takes and where it writes, decided without torch, and
the refusals in one line: no such step, an incomplete checkpoint, a script job, no Python with
torch; and how exports are recorded and found for `hyperlaunch checkpoints`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core import hf_exports
from hyperlaunch.core.errors import CheckpointError, InvalidInput
from hyperlaunch.runs import hf_export


def _checkpoint(root: Path, step: int, complete: bool = True) -> Path:
    path = root / f"m-{step}steps"
    path.mkdir(parents=True)
    if complete:
        (path / ".metadata").write_bytes(b"x")
    return path


def test_the_latest_or_a_chosen_step_and_the_default_output_beside_it(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 20)
    (tmp_path / "m-latest").write_text("m-20steps\n")
    target = hf_export.choose(tmp_path, "m", step=None, output=None)
    assert (target.step, target.output) == (20, tmp_path / "m-20steps-hf")
    target = hf_export.choose(tmp_path, "m", step=10, output="~/eval/x")
    assert target.output == Path.home() / "eval" / "x" and target.checkpoint == tmp_path / "m-10steps"


def test_a_missing_step_or_an_incomplete_checkpoint_is_refused_naming_the_complete_ones(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 15, complete=False)
    with pytest.raises(CheckpointError, match="no checkpoint m-7steps") as missing:
        hf_export.choose(tmp_path, "m", step=7, output=None)
    assert "complete steps: 10" in missing.value.one_line()
    with pytest.raises(CheckpointError, match="incomplete: no .metadata"):
        hf_export.choose(tmp_path, "m", step=15, output=None)
    with pytest.raises(CheckpointError, match="no m-latest") as empty:
        hf_export.choose(tmp_path / "none", "m", step=None, output=None)
    # Said once (the line repeated "no complete checkpoint of m" in its hint).
    assert empty.value.one_line() == f"no m-latest in {tmp_path / 'none'} (no complete checkpoint of m there: nothing to export)"
    with pytest.raises(CheckpointError) as unpointed:
        hf_export.choose(tmp_path, "m", step=None, output=None)
    assert unpointed.value.one_line().endswith("(complete steps: 10; pass --step N)")


def test_no_python_with_torch_is_one_line_naming_the_train_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(hf_export.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InvalidInput, match="needs torch and transformers") as err:
        hf_export.exporter_python(None, None)
    assert "hyperlaunch[train]" in err.value.one_line()
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("#!/bin/sh\n")
    (venv / "python").chmod(0o755)
    assert hf_export.exporter_python(None, str(venv / "torchrun")) == str(venv / "python")
    assert hf_export.exporter_python("/opt/py", None) == "/opt/py"


@pytest.mark.slow
def test_the_exporters_own_error_becomes_this_commands_one_line_and_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "fake.py"
    script.write_text(
        "import json\n"
        "print(json.dumps({'event': 'progress', 'bytes': 5, 'total': 10}))\n"
        "print(json.dumps({'event': 'error', 'message': 'cannot export x: reasons', 'exit_code': 6}))\n"
        "raise SystemExit(6)\n"
    )
    seen = []
    with pytest.raises(hf_export.ExportFailed) as err:
        hf_export.run(["python3", str(script)], lambda done, total: seen.append((done, total)))
    assert (err.value.exit_code, err.value.one_line(), seen) == (6, "cannot export x: reasons", [(5, 10)])


def test_exports_are_recorded_in_their_checkpoint_and_found_after_it_is_pruned(tmp_path: Path) -> None:
    kept = _checkpoint(tmp_path, 20)
    for step in (10, 20):
        folder = hf_exports.default_output(tmp_path, "m", step)
        folder.mkdir()
        (folder / hf_exports.EXPORT_MARKER).write_text(json.dumps({"dtype": "bf16", "step": step}))
    elsewhere = tmp_path / "eval"
    elsewhere.mkdir()
    (elsewhere / hf_exports.EXPORT_MARKER).write_text("{}")
    hf_exports.record_export(kept, str(elsewhere), dtype="fp32", step=20)
    hf_exports.record_export(kept, str(tmp_path / "gone"), dtype="fp32", step=20)  # deleted since: not shown
    found = hf_exports.find(tmp_path, "m", [20])
    assert [(r["output"], r["dtype"]) for r in found[20]] == [(str(elsewhere), "fp32"), (str(tmp_path / "m-20steps-hf"), "bf16")]
    assert [r["output"] for r in found[10]] == [str(tmp_path / "m-10steps-hf")]  # its checkpoint was pruned


def test_an_export_folder_replaced_by_another_checkpoints_export_is_no_longer_listed_for_the_first(tmp_path: Path) -> None:
    # The trainer's -final export of step 30, replaced after a resume by step 400's.
    early, late = _checkpoint(tmp_path, 30), _checkpoint(tmp_path, 400)
    final = tmp_path / "m-final"
    final.mkdir()
    for checkpoint in (early, late):
        marker = {"checkpoint": f"/mounted/elsewhere/{checkpoint.name}", "step": int(checkpoint.name[2:-5]), "dtype": "fp32"}
        (final / hf_exports.EXPORT_MARKER).write_text(json.dumps(marker))
        hf_exports.record_export(checkpoint, str(final), dtype="fp32", step=marker["step"])
    assert hf_exports.exports_of(early) == []
    assert [r["output"] for r in hf_exports.exports_of(late)] == [str(final)]


def test_overwrite_replaces_only_an_earlier_export_or_an_empty_folder(tmp_path: Path) -> None:
    export, empty, precious = tmp_path / "export", tmp_path / "empty", tmp_path / "precious"
    for folder in (export, empty, precious):
        folder.mkdir()
    (export / hf_exports.EXPORT_MARKER).write_text("{}")
    (precious / "notes.txt").write_text("important")
    assert hf_exports.not_replaceable(export) is None and hf_exports.not_replaceable(empty) is None
    assert hf_exports.not_replaceable(tmp_path / "new") is None
    refusal = hf_exports.not_replaceable(precious)
    assert refusal == (
        f"--output {precious} holds files and is not a hyperlaunch export (no hyperlaunch-export.json): "
        "--overwrite replaces only an earlier export or an empty folder; choose a new folder"
    )


def test_the_exporters_command_line_refuses_to_overwrite_a_folder_of_the_users_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hyperlaunch.train.hf_export import main

    checkpoint = _checkpoint(tmp_path, 10)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("important")
    assert main(["--checkpoint", str(checkpoint), "--output", str(precious), "--overwrite"]) == 2
    assert "holds files and is not a hyperlaunch export" in capsys.readouterr().err
    assert (precious / "notes.txt").read_text() == "important"


def test_a_scripts_own_format_is_refused_without_calling_it_incomplete(tmp_path: Path) -> None:
    """`checkpoints` lists a runtime-committed torch.save folder as complete: export must not say
    there is no complete checkpoint, only that it reads DCP's."""
    from hyperlaunch.core.checkpoints import COMMITTED_FILE

    own = tmp_path / "m-30steps"
    own.mkdir()
    (own / COMMITTED_FILE).touch()
    (own / "state.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError) as refused:
        hf_export.choose(tmp_path, "m", step=30, output=None)
    line = refused.value.one_line()
    assert "a script's own format, not DCP" in line and "no complete checkpoint" not in line, line
    assert "export reads DCP checkpoints" in line


def test_a_long_list_of_complete_steps_is_shortened_to_the_first_and_the_newest(tmp_path: Path) -> None:
    """A training that keeps every checkpoint listed all 150 steps in one line (a trial)."""
    for step in range(10, 160, 10):
        _checkpoint(tmp_path, step)
    with pytest.raises(CheckpointError) as missing:
        hf_export.choose(tmp_path, "m", step=205, output=None)
    assert "(complete steps: 10, 20, ..., 80, 90, 100, 110, 120, 130, 140, 150, 15 in all)" in missing.value.one_line()
