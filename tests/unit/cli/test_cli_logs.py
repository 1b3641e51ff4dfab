"""`hyperlaunch logs`: a requeued job's log split into its attempts."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.cli.logs import annotate
from tests.support.cli_runner import run_cli


def test_logs_split_into_attempts() -> None:
    lines = [
        "### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time=T0",
        "step 1",
        "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=crash action=requeue time=T1",
        "### hyperlaunch attempt-start restart=1 job=7 nodes=node[1,3] host=h time=T2",
        "step 2",
    ]
    shown = annotate(lines)
    assert shown[0].startswith("===== attempt 0 on node[1-2]")
    assert "===== attempt 1 on node[1,3] at T2 =====" in shown
    assert annotate(lines, attempt=1) == ["===== attempt 1 on node[1,3] at T2 =====", "step 2"]


def test_an_attempt_that_failed_says_how_and_where_its_errors_are() -> None:
    lines = [
        "### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time=T0",
        "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=trainer-error kind=invalid-data action=exit time=T1",
    ]
    footer = annotate(lines, job_id="7")[-1]
    assert footer.startswith("===== attempt 0 ended: trainer error, invalid-data (exit 1)")
    assert "hyperlaunch logs 7 --err --attempt 0" in footer
    done = ["### hyperlaunch attempt-end restart=0 job=7 exit=0 cause=completed action=exit time=T1"]
    assert annotate(done) == done
    # A user's script's own error is not the bundled trainer's.
    broken = [lines[0], "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=trainer-error kind=script-broken action=exit time=T1"]
    assert annotate(broken, job_id="7")[-1].startswith("===== attempt 0 ended: script error, script-broken (exit 1)")


def _job_with_two_attempts(tmp_path: Path) -> None:
    from hyperlaunch.job.defaults import job_spec
    from hyperlaunch.runs import jobs

    spec = job_spec(model="qwen3_tiny", checkpoint_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"))
    record = jobs.JobRecord(job_id="22", spec=spec, submitted_at=1.0)
    jobs.save(record, "#!/bin/bash\n")
    out_log, err_log = record.log_paths
    out_log.parent.mkdir(parents=True)
    starts = [f"### hyperlaunch attempt-start restart={n} job=22 nodes=n1 host=h time=T{n}" for n in (0, 1)]
    out_log.write_text("\n".join([starts[0], "step 1", starts[1], "step 2"]) + "\n")
    err_log.write_text("\n".join([starts[0], "Traceback of attempt 0", starts[1], "warning of attempt 1"]) + "\n")


def test_err_with_attempt_shows_that_attempts_errors_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job_with_two_attempts(tmp_path)
    first = run_cli(["logs", "22", "--err", "--attempt", "0"], monkeypatch)
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines() == ["===== attempt 0 on n1 at T0 =====", "Traceback of attempt 0"], "headers as the .out's"
    assert run_cli(["logs", "22", "--err", "--attempt", "1"], monkeypatch).stdout.splitlines()[1:] == ["warning of attempt 1"]
    assert len(run_cli(["logs", "22", "--err"], monkeypatch).stdout.splitlines()) == 4


def test_logs_without_a_job_shows_the_newest_trainings_as_status_and_resume_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job_with_two_attempts(tmp_path)
    result = run_cli(["logs"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "no job named: the newest recorded training, job 22" in result.stderr
    assert result.stdout.splitlines()[-1] == "step 2"


def test_an_attempt_the_log_does_not_have_is_one_line_naming_those_it_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job_with_two_attempts(tmp_path)
    for args in (["--attempt", "2"], ["--err", "--attempt", "7"]):
        result = run_cli(["logs", "22", *args], monkeypatch)
        assert result.exit_code == 2 and result.stdout == "", result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"hyperlaunch: error: job 22 has no attempt {args[-1]}: its log has attempt(s) 0, 1"), line
    negative = run_cli(["logs", "22", "--attempt", "-1"], monkeypatch)
    assert negative.exit_code == 2 and "-1" in negative.stderr


def test_following_one_attempt_keeps_its_lines_across_chunks() -> None:
    from hyperlaunch.cli.logs import Attempts

    follow = Attempts(1, "22")
    assert follow.feed(["### hyperlaunch attempt-start restart=0 job=22 nodes=n1 host=h time=T0", "step 1"]) == []
    assert follow.feed(["### hyperlaunch attempt-start restart=1 job=22 nodes=n2 host=h time=T1"]) == ["===== attempt 1 on n2 at T1 ====="]
    assert follow.feed(["step 2"]) == ["step 2"]  # a later chunk of the same attempt


def _follow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, growth: list[str]) -> None:
    """`logs -f` of job 22 while its .out log grows by `growth`, one piece each time the loop
    asks Slurm whether the job still runs; after the last, the job has ended."""
    import hyperlaunch.cli._cluster
    import hyperlaunch.slurm.queue

    out_log = _job_with_two_attempts_log(tmp_path)
    pieces = list(growth)

    def queue_state(job_id: str, env: object = None) -> str:
        if not pieces:
            return ""
        with out_log.open("a") as log:
            log.write(pieces.pop(0))
        return "RUNNING"

    monkeypatch.setattr(hyperlaunch.slurm.queue, "queue_state", queue_state)
    monkeypatch.setattr(hyperlaunch.cli._cluster, "slurm_env", lambda conf=None: {})
    monkeypatch.setattr("time.sleep", lambda seconds: None)


def _job_with_two_attempts_log(tmp_path: Path) -> Path:
    from hyperlaunch.runs import jobs

    _job_with_two_attempts(tmp_path)
    out_log, _ = jobs.load("22").log_paths
    out_log.write_text("### hyperlaunch attempt-start restart=0 job=22 nodes=n1 host=h time=T0\nstep 1\n### hyperlaunch attempt-st")
    return out_log


def test_following_reads_whole_lines_so_a_marker_written_in_two_pieces_still_starts_its_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _follow(tmp_path, monkeypatch, ["art restart=1 job=22 nodes=n2 host=h time=T1\nstep ", "2\nstep 3 é"])
    result = run_cli(["logs", "22", "-f", "--attempt", "1"], monkeypatch)
    assert result.exit_code == 0, result.output
    # The last line, never ended by a newline, is printed once the job has ended.
    assert result.stdout.splitlines() == ["===== attempt 1 on n2 at T1 =====", "step 2", "step 3 é"]


def test_following_an_attempt_the_log_never_had_ends_in_the_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _follow(tmp_path, monkeypatch, ["art restart=1 job=22 nodes=n2 host=h time=T1\n"])
    result = run_cli(["logs", "22", "-f", "--attempt", "5"], monkeypatch)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "job 22 has no attempt 5: its log has attempt(s) 0, 1" in result.stderr


def test_following_shows_a_progress_bar_as_it_redraws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _follow(tmp_path, monkeypatch, ["art restart=1 job=22 nodes=n2 host=h time=T1\n 10%|#", " |\r 50%|#####"])
    result = run_cli(["logs", "22", "-f"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-2:] == [" 10%|# |", " 50%|#####"], result.stdout


def test_a_carriage_return_ends_a_followed_line_as_a_newline_does() -> None:
    from hyperlaunch.cli.logs import _whole_lines_end

    assert _whole_lines_end(b"step 1\n 10%|#\r 50%|##") == len(b"step 1\n 10%|#\r")  # the bar's update shows now
    assert _whole_lines_end(b"step 1\nstep 2 half") == len(b"step 1\n") and _whole_lines_end(b"no end") == 0
