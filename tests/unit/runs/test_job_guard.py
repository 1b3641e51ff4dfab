"""Safe resume (issue 15): `resume J` refuses while J is pending or running, or with
--after-end queues the new job behind it (`--dependency=afterany:J`); `submit` refuses a
second live job on one checkpoint folder and model. Through the real CLI, with stub sbatch and
squeue that answer for a test's jobs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hyperlaunch.core import protocol
from hyperlaunch.core.checkpoints import METADATA_FILE, checkpoint_path
from hyperlaunch.core.errors import JobConflict
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.runs import jobs
from tests.support.cli_runner import CliResult, run_cli, stub_slurm

_SBATCH = """#!/bin/sh
for arg in "$@"; do last=$arg; done
cp "$last" "$STUB/submitted.sbatch"
echo "Submitted batch job 5151"
"""
# `squeue -h --me --states=all -o %i|%T` lists $STUB/queue; `squeue -h -j J ...` answers with
# $STUB/states/J, or that it knows no such job.
_SQUEUE = """#!/bin/sh
echo "$*" >> "$STUB/squeue.calls"
job=
while [ $# -gt 0 ]; do
  [ "$1" = -j ] && job=$2
  shift
done
if [ -z "$job" ]; then
  cat "$STUB/queue" 2>/dev/null
  exit 0
fi
if [ -f "$STUB/states/$job" ]; then cat "$STUB/states/$job"; exit 0; fi
echo "slurm_load_jobs error: Invalid job id specified" >&2
exit 1
"""


@pytest.fixture()
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = stub_slurm(tmp_path / "stub", {"sbatch": _SBATCH, "squeue": _SQUEUE}, tmp_path, monkeypatch)
    (folder / "states").mkdir()
    return folder


def _live(stub: Path, job: str, state: str) -> None:
    (stub / "states" / job).write_text(state + "\n")
    with (stub / "queue").open("a") as queue:
        queue.write(f"{job}|{state}\n")


def _record(tmp_path: Path, job: str, *, model: str = "qwen3_tiny", checkpoint: int | None = 10, after: str | None = None) -> jobs.JobRecord:
    spec = job_spec(
        model=model, checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"),
        run_dir=str(tmp_path / "run"), torchrun="torchrun", after_job=after,
    )
    if checkpoint is not None:
        path = checkpoint_path(tmp_path / "ck", spec.derived.checkpoint_name, checkpoint)
        path.mkdir(parents=True, exist_ok=True)
        (path / METADATA_FILE).write_bytes(b"")
    record = jobs.JobRecord(job_id=job, spec=spec, submitted_at=float(job), slurm_conf=os.environ["SLURM_CONF"])
    jobs.save(record, "#!/bin/bash\n")
    return record


def _submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> CliResult:
    return run_cli(
        ["submit", "-m", "qwen3_tiny", "--checkpoint-dir", str(tmp_path / "ck"), "--torchrun", "torchrun", *args], monkeypatch
    )


@pytest.mark.slow
def test_resume_of_a_running_job_refuses_in_one_line_naming_its_state(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(tmp_path, "41")
    _live(stub, "41", "RUNNING")
    result = run_cli(["resume", "41"], monkeypatch)
    assert result.exit_code == JobConflict.exit_code == 11, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "job 41 is RUNNING" in line and "--after-end" in line and "hyperlaunch cancel 41" in line
    assert not (stub / "submitted.sbatch").exists(), "nothing reached sbatch"


@pytest.mark.slow
def test_resume_after_end_queues_the_new_job_behind_the_live_one(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No checkpoint yet: the job still running may save one, and the new one picks -latest when it starts.
    _record(tmp_path, "41", checkpoint=None)
    _live(stub, "41", "PENDING")
    result = run_cli(["resume", "41", "--after-end", "--json"], monkeypatch)
    assert result.exit_code == 0, result.output
    script = (stub / "submitted.sbatch").read_text()
    assert "#SBATCH --dependency=afterany:41\n" in script
    assert "--resume-from" not in script, "the checkpoint is chosen when the job starts"
    record = jobs.load("5151")
    assert record.spec.derived.after_job == "41" and record.resumed_from == "41"
    assert "starts once it ends" in result.stderr


@pytest.mark.slow
def test_resume_dry_run_json_is_one_document_holding_the_script(tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record(tmp_path, "41")
    result = run_cli(["resume", "41", "--dry-run", "--json"], monkeypatch)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["job_id"], doc["log"], doc["resumed_from"], doc["model"]) == (None, None, "41", "qwen3_tiny")
    assert doc["script"].startswith("#!/bin/bash") and doc["checkpoint_dir"] == str(tmp_path / "ck")
    assert not (stub / "submitted.sbatch").exists(), "nothing reached sbatch"


@pytest.mark.slow
def test_resume_without_a_job_says_which_job_it_took(tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest recorded job may be another project's: `resume` says which before submitting."""
    _record(tmp_path, "40")
    _record(tmp_path, "41")
    result = run_cli(["resume", "--dry-run", "--json"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert f"no job named: the newest recorded is job 41 (qwen3_tiny, checkpoints in {tmp_path / 'ck'})" in result.stderr
    assert json.loads(result.stdout)["resumed_from"] == "41"
    assert "no job named" not in run_cli(["resume", "41", "--dry-run"], monkeypatch).stderr


@pytest.mark.slow
def test_resume_of_an_ended_job_needs_no_dependency(tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record(tmp_path, "41", after="40")  # it once waited for 40 itself
    result = run_cli(["resume", "41", "--after-end"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "--dependency" not in (stub / "submitted.sbatch").read_text()
    assert jobs.load("5151").spec.derived.after_job is None


@pytest.mark.slow
def test_submit_refuses_a_second_live_job_on_the_same_folder_and_model(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(tmp_path, "41")
    _live(stub, "41", "RUNNING")
    result = _submit(tmp_path, monkeypatch)
    assert result.exit_code == 11, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "job 41 (RUNNING) already trains qwen3_tiny into" in line
    assert "hyperlaunch resume 41 --after-end" in line and "hyperlaunch cancel 41" in line
    assert not (stub / "submitted.sbatch").exists()


@pytest.mark.slow
def test_submit_goes_ahead_beside_an_ended_job_or_another_model(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(tmp_path, "41")  # no longer in the queue
    _record(tmp_path, "42", model="qwen3_0_6b")
    _live(stub, "42", "RUNNING")
    assert _submit(tmp_path, monkeypatch).exit_code == 0
    assert (stub / "submitted.sbatch").exists()


@pytest.mark.slow
def test_submit_without_a_job_on_the_folder_asks_slurm_nothing(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _submit(tmp_path, monkeypatch).exit_code == 0
    assert not (stub / "squeue.calls").exists()


@pytest.mark.slow
def test_submit_refuses_when_the_folders_lock_names_a_live_job_it_never_recorded(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = protocol.checkpoint_lock_path(tmp_path / "ck", "qwen3_tiny")
    lock.parent.mkdir(parents=True)
    lock.write_text(protocol.format_checkpoint_lock("77", "elsewhere", "t"))
    (stub / "states" / "77").write_text("RUNNING\n")
    result = _submit(tmp_path, monkeypatch)
    assert result.exit_code == 11 and "job 77 (RUNNING)" in result.stderr
    (stub / "states" / "77").write_text("COMPLETED\n")
    assert _submit(tmp_path, monkeypatch).exit_code == 0, "an ended holder's lock is stale"


@pytest.mark.slow
def test_a_chain_of_resumes_each_waits_for_the_one_before(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(tmp_path, "41")
    _record(tmp_path, "42", after="41")  # `resume 41 --after-end`, waiting
    _live(stub, "41", "RUNNING")
    _live(stub, "42", "PENDING")
    again = run_cli(["resume", "41", "--after-end"], monkeypatch)
    assert again.exit_code == 11 and "job 42 (PENDING)" in again.stderr, "42 already continues 41"
    chained = run_cli(["resume", "42", "--after-end"], monkeypatch)
    assert chained.exit_code == 0, chained.output
    assert "#SBATCH --dependency=afterany:42\n" in (stub / "submitted.sbatch").read_text()


@pytest.mark.slow
def test_submit_beside_an_ended_jobs_checkpoints_says_it_continues_from_them(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hyperlaunch.core.checkpoints import write_pointer

    _record(tmp_path, "41", checkpoint=30)  # no longer in the queue; its pointer names step 30
    write_pointer(tmp_path / "ck", "qwen3_tiny", "qwen3_tiny-30steps")
    result = _submit(tmp_path, monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert f"hyperlaunch: {tmp_path / 'ck'}/qwen3_tiny-latest names qwen3_tiny-30steps: this job continues from step 30" in result.stderr
    assert "continues from" not in _submit(tmp_path, monkeypatch, "--", "--from-scratch").stderr


@pytest.mark.slow
def test_submit_warns_of_a_data_path_missing_here_unless_it_waits_for_another_job(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "data" / "nothere"
    result = _submit(tmp_path, monkeypatch, "--data", str(missing))
    assert result.exit_code == 0, result.stderr
    assert f"hyperlaunch: warning: --data {missing}: nothing is there on this machine" in result.stderr
    (tmp_path / "data").mkdir()
    assert "--data" not in _submit(tmp_path, monkeypatch, "--data", str(tmp_path / "data")).stderr
