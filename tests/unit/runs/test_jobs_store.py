"""Job records: written whole or not at all, read back from any directory, submitted
through submitit with a fake sbatch (the real one runs in the integration tests)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hyperlaunch.core.errors import JobNotFound, SlurmError
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs import jobs
from hyperlaunch.runs.submission import submit


def _spec(tmp_path: Path, **changes: object) -> JobSpec:
    base: dict[str, object] = dict(
        model="qwen3_tiny",
        nodes=2,
        checkpoint_dir=str(tmp_path / "ckpt"),
        log_dir=str(tmp_path / "logs"),
        run_dir=str(tmp_path / "run"),
        env=(("A", "1 2"),),
        trainer_args=("--lr", "3e-4"),
    )
    base.update(changes)
    return job_spec(**base)  # type: ignore[arg-type]


def test_record_round_trips_with_its_script(tmp_path: Path) -> None:
    record = jobs.JobRecord(job_id="12", spec=_spec(tmp_path), submitted_at=5.0, slurm_conf="/x/slurm.conf")
    jobs.save(record, "#!/bin/bash\necho hi\n")
    assert jobs.load("12") == record
    assert jobs.script_of("12").startswith("#!/bin/bash")
    assert record.log_paths[0] == tmp_path / "logs" / "qwen3_tiny_12.out"


def test_recent_is_newest_first_and_skips_unreadable_records(tmp_path: Path) -> None:
    for job_id, when in (("1", 1.0), ("3", 3.0), ("2", 2.0)):
        jobs.save(jobs.JobRecord(job_id=job_id, spec=_spec(tmp_path), submitted_at=when), "")
    (jobs.jobs_dir() / "9").mkdir()
    (jobs.jobs_dir() / "9" / jobs.RECORD_FILE).write_text("{broken")
    assert [r.job_id for r in jobs.recent()] == ["3", "2", "1"]
    assert [r.job_id for r in jobs.recent(limit=1)] == ["3"]
    assert jobs.recent(model="llama_tiny") == []


def test_recent_builds_only_the_records_it_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """status lists the 20 newest of possibly thousands: the rest are only read as JSON."""
    for index in range(30):
        model = "llama_tiny" if index % 2 else "qwen3_tiny"
        jobs.save(jobs.JobRecord(job_id=str(index), spec=_spec(tmp_path, model=model), submitted_at=float(index)), "")
    built: list[str] = []
    original = jobs.JobRecord.from_json.__func__  # type: ignore[attr-defined]

    def counting(cls: type[jobs.JobRecord], data: dict[str, object]) -> jobs.JobRecord:
        built.append(str(data["job_id"]))
        return original(cls, data)

    monkeypatch.setattr(jobs.JobRecord, "from_json", classmethod(counting))
    assert [r.job_id for r in jobs.recent(limit=3, model="llama_tiny")] == ["29", "27", "25"]
    assert built == ["29", "27", "25"]


def test_unknown_job_is_a_one_line_error() -> None:
    with pytest.raises(JobNotFound, match="no recorded job 404"):
        jobs.load("404")


def _fake_sbatch(tmp_path: Path, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "sbatch"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"


@pytest.mark.slow
def test_submit_hands_our_script_to_sbatch_and_records_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.environ["PATH"])
    seen = tmp_path / "submitted.sh"
    _fake_sbatch(tmp_path, f'cp "$1" {seen}\necho "Submitted batch job 4242"\n')
    record = submit(_spec(tmp_path), "#!/bin/bash\n# our rendered script\n")
    assert record.job_id == "4242"
    assert seen.read_text() == "#!/bin/bash\n# our rendered script\n"
    assert jobs.load("4242").spec == _spec(tmp_path)
    assert (tmp_path / "logs").is_dir(), "Slurm does not create the log folder itself"


@pytest.mark.slow
def test_sbatch_refusal_carries_slurms_message_and_writes_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.environ["PATH"])
    _fake_sbatch(tmp_path, 'echo "sbatch: error: invalid partition specified: gpu" >&2\nexit 1\n')
    with pytest.raises(SlurmError, match="invalid partition specified: gpu"):
        submit(_spec(tmp_path), "#!/bin/bash\n")
    assert jobs.recent() == []


@pytest.mark.slow
def test_no_slurm_config_is_said_plainly_and_sbatch_noise_is_not_echoed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", os.environ["PATH"])
    _fake_sbatch(
        tmp_path,
        'echo "sbatch: error: fetch_config: DNS SRV lookup failed" >&2\n'
        'echo "sbatch: fatal: Could not establish a configuration source" >&2\nexit 1\n',
    )
    with pytest.raises(SlurmError) as caught:
        submit(_spec(tmp_path), "#!/bin/bash\n")
    assert caught.value.one_line() == (
        "no Slurm cluster configured: sbatch: fatal: Could not establish a configuration source "
        "(set SLURM_CONF, or start a local one with 'hyperlaunch dev-cluster up')"
    )
    assert capsys.readouterr().err == ""
    assert jobs.recent() == []
