"""Every error a documented one-liner: values that used to end in "internal error" (exit 1)
or slip through validation, through the real CLI with its error mapping. Also: what
`render` prints is byte for byte what `submit` submits, and a job id saved twice is fine."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

from hyperlaunch.core.errors import EXIT_CODES
from hyperlaunch.runs import jobs
from hyperlaunch.slurm import queue as slurm_queue
from hyperlaunch.slurm import submission as slurm_submission
from tests.support.cli_runner import CliResult, run_cli

LONG = "a" * 300
"""A path component longer than a file name can be (255 bytes): ENAMETOOLONG."""


def _one_error_line(result: CliResult, code: int, *parts: str, after_settings: bool = False) -> None:
    """Exactly one error line on stderr; `after_settings`: a submit that got as far as
    printing the job's settings (a note block) before it failed."""
    assert result.exit_code == code, result.output
    assert code in EXIT_CODES
    lines = result.stderr.splitlines()
    if after_settings:
        lines = [line for line in lines if not line.startswith(("hyperlaunch: training ", "  "))]
    assert len(lines) == 1 and lines[0].startswith("hyperlaunch: error: "), result.stderr
    assert "internal error" not in lines[0] and "Traceback" not in result.stderr
    for part in parts:
        assert part in lines[0], lines[0]


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


RENDER = ["render", "--model", "qwen3_tiny"]


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--time", "4:00:00\n"], 2, "is not a Slurm time"),
        (["--time", "\u0664:\u0660\u0660:\u0660\u0660"], 2, "is not a Slurm time"),
        (["--time", "4:00:00 "], 2, "is not a Slurm time"),
        (["--time", "99999999999999999999"], 2, "at most 2147483647 minutes"),
        (["--nodes", "99999999999999999999"], 2, "--nodes must be between 1 and 2147483647"),
        (["--nodes", "0"], 2, "--nodes must be between 1 and 2147483647"),
        (["--max-restarts", "99999999999999999999"], 2, "--max-restarts must be between 0 and 2147483647"),
        (["--max-steps", "99999999999999999999"], 2, "--max-steps must be between 1 and 2147483647"),
        (["--signal-seconds", "99999999999999999999"], 2, "--signal-seconds must be between 1 and 65535"),
        (["--gpus-per-node", "99999999999999999999"], 2, "--gpus-per-node must be 0"),
        (["--instance-type", "p5.48xlarge", "--gpus-per-node", "99999999999999999999"], 2, "between 1 and 8"),
        (["--checkpoint-dir", ""], 2, "must not be empty"),
        (["--log-dir", ""], 2, "must not be empty"),
        (["--run-dir", ""], 2, "must not be empty"),
        (["--job-name", ""], 2, "must not be empty"),
        (["--data", ""], 2, "must not be empty"),
        (["--checkpoint-dir", f"/tmp/{LONG}"], 2, "at most 255"),
        (["--log-dir", "/x/" + "b/" * 3000], 2, "at most 4095"),
        (["--job-name", "j" * 240], 2, "job name must be at most"),
        (["--output", "missing-folder/job.sbatch"], 2, "no folder missing-folder"),
        (["--output", "."], 2, "it is a folder"),
    ],
)
@pytest.mark.slow
def test_bad_values_are_one_line_with_the_bound(here: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], code: int, said: str) -> None:
    _one_error_line(run_cli([*RENDER, *args], monkeypatch), code, said)


@pytest.mark.parametrize("model", [f"/tmp/{LONG}/m", LONG, f"/tmp/{LONG}"])
@pytest.mark.slow
def test_a_model_path_the_file_system_cannot_hold_is_one_line(here: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    _one_error_line(run_cli(["render", "--model", model], monkeypatch), 2)


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("HYPERLAUNCH_NODES", "\u0664", "digits 0-9"),
        ("HYPERLAUNCH_NODES", "1_000", "digits 0-9"),
        ("HYPERLAUNCH_MAX_RESTARTS", "99999999999999999999", "between 0 and 2147483647"),
        ("HYPERLAUNCH_TIME", "\u0664:00:00", "not a Slurm time"),
    ],
)
@pytest.mark.slow
def test_environment_values_are_checked_like_flags(here: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, said: str) -> None:
    monkeypatch.setenv(variable, value)
    result = run_cli(RENDER, monkeypatch)
    assert result.exit_code in (2, 3)
    _one_error_line(result, result.exit_code, said)


@pytest.mark.slow
def test_config_files_that_are_not_files_are_one_line(here: Path, monkeypatch: pytest.MonkeyPatch, _isolated_home: Path) -> None:
    project = here / "hyperlaunch.toml"
    project.mkdir()
    _one_error_line(run_cli(RENDER, monkeypatch), 3, str(project), "is a folder")
    project.rmdir()
    project.symlink_to(here / "gone.toml")
    _one_error_line(run_cli(RENDER, monkeypatch), 3, str(project), "does not exist")
    project.unlink()
    project.write_text("nodes = " + "[" * 5000 + "]" * 5000 + "\n")
    _one_error_line(run_cli(RENDER, monkeypatch), 3, str(project), "nested too deeply")
    project.write_text("checkpoint_dir = ''\n")
    _one_error_line(run_cli(RENDER, monkeypatch), 3, "must not be empty")
    project.write_text("nodes = 99999999999999999999\n")
    _one_error_line(run_cli(RENDER, monkeypatch), 2, "between 1 and 2147483647")
    project.unlink()
    user_config = _isolated_home / "config.toml"
    user_config.mkdir()
    _one_error_line(run_cli(RENDER, monkeypatch), 3, str(user_config), "is a folder")


def test_a_hyperlaunch_home_that_is_a_file_is_one_line(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = here / "home-file"
    home.write_text("")
    for location in (home, home / "below"):
        monkeypatch.setenv("HYPERLAUNCH_HOME", str(location))
        for command in (["status"], ["status", "1"], ["logs", "1"], RENDER, ["submit", "--model", "qwen3_tiny"]):
            _one_error_line(run_cli(command, monkeypatch), 3, "HYPERLAUNCH_HOME")


@pytest.mark.parametrize("job_id", ["1" * 5000, "/abs/path", "../x", "12/../13", "\u0661\u0662", "12 ", "", "1_2_3"])
def test_a_job_id_is_digits_or_a_one_line_error(here: Path, monkeypatch: pytest.MonkeyPatch, job_id: str) -> None:
    for command in ("status", "logs", "cancel", "resume"):
        result = run_cli([command, job_id], monkeypatch)
        _one_error_line(result, 2, "is not a job id")
        assert len(result.stderr) < 200


@pytest.mark.slow
def test_render_prints_exactly_what_submit_submits(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a pipe that is not UTF-8 (bytes out, no locale encoding), to a file, and as
    submitted: the same bytes, escapes and non-ASCII text included."""
    values = ["--data", "d\x1b[31m\u00e9\u4e2d\r", "--env", "NOTE=\x1b[1mbold\x1b[0m \u00fc", "--job-name", "j\u00e9.v2"]
    piped = io.BytesIO()
    stream = io.TextIOWrapper(piped, encoding="ascii", errors="strict")
    monkeypatch.setattr(sys, "argv", ["hyperlaunch", *RENDER, *values])
    from hyperlaunch.cli import main

    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        main()
    stream.flush()
    printed = piped.getvalue()
    assert b"\x1b[31m" in printed and "\u4e2d".encode() in printed

    assert run_cli([*RENDER, *values, "--output", "job.sbatch"], monkeypatch).exit_code == 0
    assert (here / "job.sbatch").read_bytes() == printed

    submitted: list[str] = []
    monkeypatch.setattr(slurm_submission, "submit_script", lambda script, folder, *, env, forward=(): submitted.append(script) or "77")
    assert run_cli(["submit", "--model", "qwen3_tiny", *values], monkeypatch).exit_code == 0
    assert submitted[0].encode("utf-8") == printed
    assert jobs.script_of("77").encode("utf-8") == printed
    assert (jobs.jobs_dir() / "77" / jobs.SCRIPT_FILE).read_bytes() == printed


@pytest.mark.slow
def test_text_that_is_not_unicode_is_refused_before_anything_is_written(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes that were not UTF-8 on the command line arrive as lone surrogates."""
    for args in (["--data", "caf\udce9"], ["--partition", "p\udcff"], ["--", "--lr", "\udce9"]):
        _one_error_line(run_cli([*RENDER, *args], monkeypatch), 2, "not valid UTF-8")


@pytest.mark.slow
def test_the_same_job_id_saved_again_within_a_second_keeps_both(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dev cluster started afresh hands out job ids again: sbatch accepted each job, so
    recording it must not fail."""
    monkeypatch.setattr(slurm_submission, "submit_script", lambda script, folder, *, env, forward=(): "5")
    # The earlier job 5 is gone from the fresh cluster's queue, so the same checkpoint folder is free.
    monkeypatch.setattr(slurm_queue, "my_queue_states", lambda *, env=None: {})
    for max_steps in ("2", "3", "4"):
        result = run_cli(["submit", "--model", "qwen3_tiny", "--max-steps", max_steps], monkeypatch)
        assert result.exit_code == 0, result.output
    assert jobs.load("5").spec.job.max_steps == 4
    assert len([p for p in jobs.jobs_dir().iterdir() if p.name.startswith(".5-replaced-")]) == 2


@pytest.mark.slow
def test_a_record_that_cannot_be_written_after_sbatch_says_the_job_runs(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_submission, "submit_script", lambda script, folder, *, env, forward=(): "6")

    def full_disk(record: object, script: str) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jobs, "save", full_disk)
    _one_error_line(run_cli(["submit", "--model", "qwen3_tiny"], monkeypatch), 3, "job 6 was submitted", "scancel 6", after_settings=True)


@pytest.mark.slow
def test_a_log_folder_that_cannot_be_made_is_one_line(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (here / "file").write_text("")
    monkeypatch.setattr(slurm_submission, "submit_script", lambda script, folder, *, env, forward=(): pytest.fail("submitted"))
    _one_error_line(run_cli(["submit", "--model", "qwen3_tiny", "--log-dir", "file/logs"], monkeypatch), 2, "log_dir", after_settings=True)


def test_status_watch_interval_is_bounded(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for interval in ("-1", "nan", "1e300"):
        _one_error_line(run_cli(["status", "--watch", "--interval", interval], monkeypatch), 2, "--interval")
