"""--after on a job Slurm has forgotten (it keeps an ended job for MinJobAge, 300 s by default,
then drops any dependency on it, and the new job starts at once): refused when it can never be
met, from accounting (sacct), before anything is submitted; a job still in the queue is left to
Slurm. Through the real CLI, with stub sbatch, squeue and sacct."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core.checkpoints import METADATA_FILE, checkpoint_path
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.runs import jobs
from tests.support.cli_runner import CliResult, one_error_line, run_cli, stub_slurm

_STUBS = {
    "sbatch": '#!/bin/sh\nfor arg in "$@"; do last=$arg; done\ncp "$last" "$STUB/submitted.sbatch"\necho "Submitted batch job 90"\n',
    # `squeue -h -j J --states=all -o %T`: $STUB/states/J, else nothing (Slurm has forgotten J).
    "squeue": '#!/bin/sh\njob=${*#*-j }\ncat "$STUB/states/${job%% *}" 2>/dev/null\nexit 0\n',
    # sacct: $STUB/sacct.out (JobID|JobIDRaw|State lines), each call recorded; $STUB/no-accounting: fails.
    "sacct": (
        '#!/bin/sh\necho "$*" >> "$STUB/sacct.calls"\n'
        '[ -e "$STUB/no-accounting" ] && { echo "Slurm accounting storage is disabled" >&2; exit 1; }\n'
        'cat "$STUB/sacct.out" 2>/dev/null\nexit 0\n'
    ),
    # No cluster to ask about its nodes (the real ones retry a missing slurm.conf).
    "sinfo": "#!/bin/sh\nexit 1\n",
    "scontrol": "#!/bin/sh\nexit 1\n",
}


@pytest.fixture()
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = stub_slurm(tmp_path / "stub", _STUBS, tmp_path, monkeypatch)
    (folder / "states").mkdir()
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    return folder


def _submit(monkeypatch: pytest.MonkeyPatch, *after: str) -> CliResult:
    flags = [flag for job in after for flag in ("--after", job)]
    return run_cli(["submit", "-m", "qwen3_tiny", "--torchrun", "torchrun", "--json", *flags], monkeypatch)


def _nothing_submitted(stub: Path) -> None:
    assert not (stub / "submitted.sbatch").exists() and jobs.recent(limit=None) == []


@pytest.mark.slow
def test_a_forgotten_job_that_failed_is_refused_for_afterok_and_nothing_is_submitted(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (stub / "sacct.out").write_text("40|40|FAILED\n")
    one_error_line(
        _submit(monkeypatch, "40:ok"), 2,
        "--after 40:ok can never be met: job 40 ended FAILED", "would start this job at once", "--after 40:any",
    )
    one_error_line(_submit(monkeypatch, "40"), 2, "--after 40:ok can never be met")  # :ok unless said
    _nothing_submitted(stub)


@pytest.mark.slow
def test_a_forgotten_job_that_ended_lets_an_afterany_or_its_completion_start_at_once(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (stub / "sacct.out").write_text("40|40|CANCELLED by 1000\n41|41|COMPLETED\n")
    result = _submit(monkeypatch, "40:any", "41:ok")
    assert result.exit_code == 0, result.stderr
    assert "#SBATCH --dependency=afterok:41,afterany:40" in (stub / "submitted.sbatch").read_text()


@pytest.mark.slow
def test_a_job_nothing_knows_is_refused(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one_error_line(_submit(monkeypatch, "99:any"), 2, "--after 99: Slurm knows no job 99", "sacct")
    _nothing_submitted(stub)


@pytest.mark.slow
def test_a_job_slurm_still_knows_is_left_to_slurm_without_asking_accounting(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Even one that has just failed: Slurm cancels the new job (--kill-on-invalid-dep), and
    # `status` names why.
    (stub / "states" / "41").write_text("RUNNING\n")
    (stub / "states" / "42").write_text("FAILED\n")
    result = _submit(monkeypatch, "41", "42")
    assert result.exit_code == 0, result.stderr
    assert not (stub / "sacct.calls").exists()


@pytest.mark.slow
def test_an_array_whose_task_failed_is_refused_for_afterok(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (stub / "sacct.out").write_text("40_0|41|COMPLETED\n40_1|40|FAILED\n")
    one_error_line(_submit(monkeypatch, "40"), 2, "job 40 ended FAILED")
    (stub / "sacct.out").write_text("40_0|41|COMPLETED\n40_1|40|COMPLETED\n")
    assert _submit(monkeypatch, "40").exit_code == 0


@pytest.mark.slow
def test_a_task_named_by_its_own_job_id_is_looked_up_as_that_task(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Task 70_3 ran as job 73 (sacct -j 73 lists it as 70_3): Slurm accepts --after 73 for it.
    (stub / "sacct.out").write_text("70_3|73|FAILED\n")
    one_error_line(_submit(monkeypatch, "73"), 2, "--after 73:ok can never be met: job 73 ended FAILED")
    (stub / "sacct.out").write_text("70_3|73|COMPLETED\n")
    assert _submit(monkeypatch, "73").exit_code == 0


@pytest.mark.slow
def test_prepare_data_export_and_sweep_refuse_it_too(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (stub / "sacct.out").write_text("40|40|TIMEOUT\n")
    (tmp_path / "raw.jsonl").write_text('{"text": "a document"}\n')
    never = "--after 40:ok can never be met: job 40 ended TIMEOUT"
    one_error_line(run_cli(["prepare-data", "raw.jsonl", "-m", "qwen3_tiny", "-o", "data", "--slurm", "--after", "40"], monkeypatch), 2, never)
    sweep = ["sweep", "-m", "qwen3_tiny", "--torchrun", "torchrun", "--grid", "lr=1e-3,3e-3", "--after", "40"]
    one_error_line(run_cli(sweep, monkeypatch), 2, never)
    (tmp_path / "ck" / "qwen3_tiny-5steps").mkdir(parents=True)
    export = ["export", "--checkpoint-dir", "ck", "--name", "qwen3_tiny", "--slurm", "--after", "40"]
    one_error_line(run_cli(export, monkeypatch), 2, never)
    _nothing_submitted(stub)
    assert not (tmp_path / "data").exists() and not (tmp_path / "ck" / "logs").exists()


@pytest.mark.slow
def test_without_accounting_a_forgotten_job_is_left_to_slurm(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing can tell how it ended: Slurm drops the dependency, as it always has.
    (stub / "no-accounting").touch()
    result = _submit(monkeypatch, "40:ok")
    assert result.exit_code == 0, result.stderr
    assert (stub / "sacct.calls").exists()


@pytest.mark.slow
def test_a_resumed_job_keeps_its_first_dependencies_and_a_purged_one_passes(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = job_spec(
        model="qwen3_tiny", checkpoint_dir=str(tmp_path / "ck"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"),
        torchrun="torchrun", after=("40",),
    )
    ckpt = checkpoint_path(tmp_path / "ck", spec.derived.checkpoint_name, 10)
    ckpt.mkdir(parents=True)
    (ckpt / METADATA_FILE).write_bytes(b"")
    jobs.save(jobs.JobRecord(job_id="50", spec=spec, submitted_at=1.0, slurm_conf=str(tmp_path / "slurm.conf")), "#!/bin/bash\n")
    # Job 40 long gone from accounting too: it was met (or dropped) when 50 was queued.
    (stub / "sacct.out").write_text("50|50|TIMEOUT\n")
    result = run_cli(["resume", "50", "--json"], monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert "#SBATCH --dependency=afterok:40" in (stub / "submitted.sbatch").read_text()
    # Job 40 failed: 50 was cancelled behind it and never ran; its resume would start at once.
    (stub / "sacct.out").write_text("40|40|FAILED\n50|50|CANCELLED by 0\n")
    one_error_line(run_cli(["resume", "50"], monkeypatch), 2, "--after 40:ok can never be met: job 40 ended FAILED")


@pytest.mark.slow
def test_a_job_accounting_still_lists_as_live_is_left_to_slurm(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another user's job hidden from squeue (PrivateData), or a controller that lost its state.
    (stub / "sacct.out").write_text("40|40|RUNNING\n41|41|PENDING\n")
    result = _submit(monkeypatch, "40:ok", "41:ok")
    assert result.exit_code == 0, result.stderr
