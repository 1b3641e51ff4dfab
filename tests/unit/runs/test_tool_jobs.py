"""prepare-data and export jobs (--slurm) are recorded: `status` lists them under the trainings
and shows one with its error, `logs` prints its log, `cancel` cancels it, and the commands that
need a training say in one line that it is not one. Through the real CLI, with stub Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.runs import jobs, tool_jobs
from tests.support.cli_runner import one_error_line, run_cli, stub_slurm

_STUBS = {
    # sbatch: answers the next id in $STUB/next (90 first), keeps the script.
    "sbatch": (
        '#!/bin/sh\nfor arg in "$@"; do last=$arg; done\ncp "$last" "$STUB/submitted.sbatch"\n'
        'id=$(cat "$STUB/next" 2>/dev/null || echo 90)\necho $((id + 1)) > "$STUB/next"\necho "Submitted batch job $id"\n'
    ),
    # squeue: `--me` lists $STUB/queue (id|id|state lines); `-j J` answers $STUB/states/J.
    "squeue": (
        '#!/bin/sh\ncase "$*" in *--me*) cat "$STUB/queue" 2>/dev/null; exit 0;; esac\n'
        'job=${*#*-j }\ncat "$STUB/states/${job%% *}" 2>/dev/null\nexit 0\n'
    ),
    # sacct: attempts (8 fields) from $STUB/attempts, states (3 fields) from $STUB/states.out.
    "sacct": (
        '#!/bin/sh\ncase "$*" in *JobIDRaw,State,NodeList*) cat "$STUB/attempts" 2>/dev/null;; '
        '*) cat "$STUB/states.out" 2>/dev/null;; esac\nexit 0\n'
    ),
    "scancel": '#!/bin/sh\necho "$*" >> "$STUB/scancel.calls"\n',
    "sacctmgr": "#!/bin/sh\nexit 0\n",
    "sinfo": "#!/bin/sh\nexit 1\n",
    "scontrol": "#!/bin/sh\nexit 1\n",
}


@pytest.fixture()
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = stub_slurm(tmp_path / "stub", _STUBS, tmp_path, monkeypatch)
    (folder / "states").mkdir()
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    (tmp_path / "raw.jsonl").write_text('{"text": "a document"}\n')
    return folder


def _prepare(monkeypatch: pytest.MonkeyPatch, *extra: str) -> None:
    result = run_cli(["prepare-data", "raw.jsonl", "-m", "qwen3_tiny", "-o", "data", "--slurm", *extra], monkeypatch)
    assert result.exit_code == 0, result.stderr


def _attempt(job: str, state: str, nodes: str = "node1") -> str:
    return f"{job}|{state}|{nodes}|2026-01-01T00:00:00|2026-01-01T00:00:12|1:0|12|60\n"


@pytest.mark.slow
def test_a_prepare_job_is_listed_and_shown_with_its_error(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _prepare(monkeypatch)
    submitted = run_cli(["prepare-data", "raw.jsonl", "-m", "qwen3_tiny", "-o", "more", "--slurm"], monkeypatch).stdout
    assert "hyperlaunch status 91" in submitted and "hyperlaunch logs 91 -f" in submitted
    (stub / "queue").write_text("91|91|PENDING\n")
    (stub / "attempts").write_text(_attempt("90", "FAILED"))
    (tmp_path / "logs" / "prepare-data-data_90.out").write_text(
        "tokenizing\nhyperlaunch: error: raw.jsonl line 1: no 'text' field\nsrun: error: node1: task 0: Exited with exit code 2\n\n"
    )
    listed = run_cli(["status"], monkeypatch)
    assert listed.exit_code == 0 and listed.stderr == "", listed.stderr  # no "unreadable record" warning
    lines = listed.stdout.splitlines()
    assert lines[0] == "prepare-data and export jobs" and lines[1].split() == ["JOB", "KIND", "STATE", "ELAPSED", "WHAT"]
    assert lines[2].split()[:4] == ["91", "prepare-data", "PENDING", "0:00:00"]
    assert lines[3].split()[:4] == ["90", "prepare-data", "FAILED", "0:00:12"] and lines[3].endswith(f"-> {tmp_path / 'data'} on 1 node(s)")
    shown = run_cli(["status", "90"], monkeypatch).stdout
    assert shown.startswith(f"job 90: prepare-data, 1 input(s) -> {tmp_path / 'data'} on 1 node(s), FAILED\n")
    assert "  error:      hyperlaunch: error: raw.jsonl line 1: no 'text' field\n" in shown and " 0  FAILED  node1" in shown
    doc = json.loads(run_cli(["status", "90", "--json"], monkeypatch).stdout)
    assert (doc["kind"], doc["state"], doc["elapsed_s"], doc["output"]) == ("prepare-data", "FAILED", 12, str(tmp_path / "data"))
    listing = json.loads(run_cli(["status", "--json"], monkeypatch).stdout)
    assert listing["jobs"] == [] and [t["job_id"] for t in listing["tool_jobs"]] == ["91", "90"]
    logs = run_cli(["logs", "90"], monkeypatch)
    assert logs.exit_code == 0 and logs.stdout.startswith("tokenizing\nhyperlaunch: error:")
    one_error_line(run_cli(["logs", "90", "--err"], monkeypatch), 2, "prepare-data job 90 has one log")


@pytest.mark.slow
def test_a_pending_tool_job_says_why_slurm_holds_it(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _prepare(monkeypatch)
    assert run_cli(["prepare-data", "raw.jsonl", "-m", "qwen3_tiny", "-o", "more", "--slurm"], monkeypatch).exit_code == 0
    (stub / "queue").write_text("91|91|PENDING|Resources\n")
    lines = run_cli(["status"], monkeypatch).stdout.splitlines()
    assert lines[2].split()[:4] == ["91", "prepare-data", "PENDING", "(Resources)"], lines
    shown = run_cli(["status", "91"], monkeypatch).stdout
    assert "PENDING (Resources)" in shown.splitlines()[0] and "  pending:    Resources (waiting for enough idle nodes)" in shown, shown
    assert json.loads(run_cli(["status", "91", "--json"], monkeypatch).stdout)["pending_reason"] == "Resources"


@pytest.mark.slow
def test_a_job_behind_a_failed_one_says_it_never_runs(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (stub / "states" / "41").write_text("RUNNING\n")
    _prepare(monkeypatch, "--after", "41")
    (stub / "states.out").write_text("41|41|FAILED\n")
    (stub / "attempts").write_text("90|CANCELLED by 0|None assigned|None|2026-01-01T00:00:08|0:0|0|\n")
    assert "CANCELLED (never runs: job 41 FAILED)" in run_cli(["status"], monkeypatch).stdout
    assert "never runs: job 41 ended FAILED; this one waited for it to complete (--after 41:ok)" in run_cli(["status", "90"], monkeypatch).stdout


@pytest.mark.slow
def test_an_export_job_is_listed_by_its_model_and_cancelled(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (stub / "states" / "40").write_text("RUNNING\n")
    (tmp_path / "ck").mkdir()
    export = run_cli(["export", "--checkpoint-dir", "ck", "--name", "qwen3_tiny", "--slurm", "--after", "40:any"], monkeypatch)
    assert export.exit_code == 0, export.stderr
    folder = str(tmp_path / "ck" / "qwen3_tiny-<N>steps-hf")  # N: the step of the checkpoint it finds when it starts
    assert tool_jobs.load("90") == tool_jobs.ToolJob(
        job_id="90", kind="export", what=f"qwen3_tiny-latest -> {folder}",
        output=folder, log=str(tmp_path / "ck" / "logs" / "export-qwen3_tiny-latest-90.out"),
        submitted_at=tool_jobs.load("90").submitted_at, waits=(("40", "any"),), models=("qwen3_tiny",), slurm_conf=str(tmp_path / "slurm.conf"),  # type: ignore[union-attr]
    )
    (stub / "queue").write_text("90|90|PENDING\n")
    (stub / "states.out").write_text("40|40|RUNNING\n")
    assert "PENDING (after 40)" in run_cli(["status", "--model", "qwen3_tiny"], monkeypatch).stdout
    assert "no recorded jobs" in run_cli(["status", "--model", "qwen3_0_6b"], monkeypatch).stdout
    assert "waits for:  job 40 (to end; RUNNING)" in run_cli(["status", "90"], monkeypatch).stdout
    (stub / "states" / "90").write_text("PENDING\n")
    cancelled = run_cli(["cancel", "90"], monkeypatch)
    assert cancelled.exit_code == 0 and cancelled.stdout.startswith("cancelled export job 90: qwen3_tiny-latest ->")
    assert (stub / "scancel.calls").read_text().split() == ["90"]
    # Once it has run, its log names the folder it wrote.
    (stub / "queue").write_text("")
    (stub / "attempts").write_text(_attempt("90", "COMPLETED"))
    written = tmp_path / "ck" / "qwen3_tiny-7steps-hf"
    (tmp_path / "ck" / "logs" / "export-qwen3_tiny-latest-90.out").write_text(json.dumps({"event": "done", "output": str(written)}) + "\n")
    assert f"COMPLETED  0:00:12  qwen3_tiny-latest -> {written}" in run_cli(["status"], monkeypatch).stdout
    assert f"  output:     {written}\n" in run_cli(["status", "90"], monkeypatch).stdout
    assert json.loads(run_cli(["status", "90", "--json"], monkeypatch).stdout)["written"] == str(written)


@pytest.mark.parametrize("command", [["resume", "90"], ["plot", "90"], ["export", "90"], ["checkpoints", "90"]])
@pytest.mark.slow
def test_commands_that_need_a_training_say_it_is_none(stub: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    _prepare(monkeypatch)
    one_error_line(run_cli(command, monkeypatch), 2, "job 90 is a prepare-data job, not a training", "'hyperlaunch status 90'")


@pytest.mark.slow
def test_a_broken_tool_record_is_named_and_trainings_still_list(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _prepare(monkeypatch)
    record = jobs.jobs_dir() / "90" / "tool.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "kind": "rm -rf"}))
    one_error_line(run_cli(["status", "90"], monkeypatch), 7, "the record of job 90 is unreadable", "kind 'rm -rf' is not one of: prepare-data, export")
    assert "no recorded jobs" in run_cli(["status"], monkeypatch).stdout
    for broken in ([], {"job_id": "../x"}, {"waits": [["40", "maybe"]]}, {"submitted_at": float("nan")}):
        data = broken if isinstance(broken, list) else {**json.loads(json.dumps(tool_jobs.ToolJob(
            job_id="5", kind="export", what="w", output="o", log="l", submitted_at=1.0).to_json())), **broken}
        with pytest.raises(ValueError):
            tool_jobs.ToolJob.from_json(data)


@pytest.mark.slow
def test_a_training_submitted_under_a_reused_id_replaces_the_tool_record(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A dev cluster started afresh gives ids out again: the newer job is the one recorded.
    _prepare(monkeypatch)
    (stub / "next").write_text("90")
    submitted = run_cli(["submit", "-m", "qwen3_tiny", "--torchrun", "torchrun"], monkeypatch)
    assert submitted.exit_code == 0, submitted.stderr
    assert tool_jobs.load("90") is None and jobs.load("90").spec.job.model == "qwen3_tiny"


@pytest.mark.slow
def test_a_record_that_cannot_be_written_names_the_job_that_was_submitted(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "jobs").write_text("not a folder")
    result = run_cli(["prepare-data", "raw.jsonl", "-m", "qwen3_tiny", "-o", "data", "--slurm"], monkeypatch)
    one_error_line(result, 3, "prepare-data job 90 was submitted, but its record could not be written", "'scancel 90' to stop it")


@pytest.mark.slow
def test_odd_records_are_skipped_with_a_warning_and_slurm_trouble_hides_no_training(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _prepare(monkeypatch)
    record = jobs.jobs_dir() / "90" / "tool.json"
    good = record.read_text()
    record.write_text(good.replace('"submitted_at": ', '"submitted_at": 1' + "0" * 400 + ", \"was\": "))
    listed = run_cli(["status"], monkeypatch)
    assert listed.exit_code == 0 and "skipped 1 unreadable job record(s)" in listed.stderr and str(record) in listed.stderr
    one_error_line(run_cli(["status", "90"], monkeypatch), 7, "the record of job 90 is unreadable", "finite number")
    # The same number in a training's record: skipped and named, not an internal error.
    (stub / "next").write_text("95")
    assert run_cli(["submit", "-m", "qwen3_tiny", "--torchrun", "torchrun"], monkeypatch).exit_code == 0
    training = jobs.jobs_dir() / "95" / "record.json"
    training.write_text(training.read_text().replace('"submitted_at": ', '"submitted_at": 1' + "0" * 400 + ", \"was\": "))
    assert "skipped 2 unreadable job record(s)" in run_cli(["status"], monkeypatch).stderr
    one_error_line(run_cli(["status", "95"], monkeypatch), 7, "the record of job 95 is unreadable")
    # sacct failing for the prepare-data jobs' cluster: the trainings are listed all the same.
    record.write_text(good)
    training.unlink()
    (stub / "next").write_text("96")
    assert run_cli(["submit", "-m", "qwen3_tiny", "--torchrun", "torchrun"], monkeypatch).exit_code == 0
    (stub / "sacct").write_text('#!/bin/sh\ncase "$*" in *"-j 90"*) echo "sacct: error: slurmdbd down" >&2; exit 1;; esac\nexit 0\n')
    listed = run_cli(["status"], monkeypatch)
    assert listed.exit_code == 0 and listed.stdout.splitlines()[1].split()[0] == "96", listed.stdout
    assert "prepare-data and export jobs not listed: sacct failed: sacct: error: slurmdbd down" in listed.stderr


@pytest.mark.slow
def test_an_export_of_a_given_step_names_its_folder(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (stub / "states" / "40").write_text("RUNNING\n")
    (tmp_path / "ck").mkdir()
    result = run_cli(["export", "--checkpoint-dir", "ck", "--name", "qwen3_tiny", "--step", "40", "--slurm", "--after", "40"], monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert f"-> {tmp_path / 'ck' / 'qwen3_tiny-40steps-hf'} once job(s) 40 end" in result.stdout
    assert tool_jobs.load("90").output == str(tmp_path / "ck" / "qwen3_tiny-40steps-hf")  # type: ignore[union-attr]


@pytest.mark.slow
def test_an_export_of_a_model_directorys_training_is_listed_by_either_name(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from tests.support.model_configs import TINY_QWEN3_CONFIG

    model = tmp_path / "models" / "Tiny-0.1B"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(TINY_QWEN3_CONFIG))
    assert run_cli(["submit", "-m", str(model), "--torchrun", "torchrun"], monkeypatch).exit_code == 0  # job 90
    (stub / "states" / "90").write_text("RUNNING\n")
    exported = run_cli(["export", "90", "--slurm", "--after", "90", "--python", sys.executable], monkeypatch)
    assert exported.exit_code == 0, exported.stderr
    (stub / "queue").write_text("90|90|RUNNING\n91|91|PENDING\n")
    for name in (str(model), "Tiny-0.1B"):
        listed = run_cli(["status", "--model", name], monkeypatch).stdout
        assert listed.splitlines()[1].startswith("90 ") and "91   export" in listed, (name, listed)
