"""One broken file never breaks a command: job records that no longer validate, metrics and
log lines that are not records, odd files where a pointer or log should be, names holding
Rich markup or dots. Each goes through the real CLI with Slurm faked at hyperlaunch.slurm.runner.run."""

from __future__ import annotations

import json
import os
import signal
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints
from hyperlaunch.core.errors import CheckpointError
from hyperlaunch.core.metrics_records import METRICS_FILE
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.runs import jobs
from hyperlaunch.slurm import runner as slurm_runner
from hyperlaunch.slurm import submission as slurm_submission
from tests.support.cli_runner import one_error_line, run_cli


@pytest.fixture(autouse=True)
def _fake_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """sacct, squeue and sacctmgr answer with nothing: the job left the queue long ago."""
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, "", ""))


class Blocked(BaseException):
    """Raised by the alarm: a BaseException, so the CLI's last-resort handler cannot turn it
    into an "internal error" and let the test block again on the next FIFO."""


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A reader that blocks (a FIFO opened for reading) fails the test instead of hanging it."""

    def stop(*_: object) -> None:
        signal.alarm(2)  # and again, should anything catch this one
        raise Blocked("a reader waited on a FIFO")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _record(tmp_path: Path, job_id: str, *, when: float = 1.0, **changes: object) -> jobs.JobRecord:
    base: dict[str, object] = dict(
        model="qwen3_tiny",
        checkpoint_dir=str(tmp_path / "ckpt"),
        log_dir=str(tmp_path / "logs"),
        run_dir=str(tmp_path / "run"),
    )
    base.update(changes)
    record = jobs.JobRecord(job_id=job_id, spec=job_spec(**base), submitted_at=when)  # type: ignore[arg-type]
    jobs.save(record, "#!/bin/bash\n")
    return record


def _no_longer_valid(job_id: str, how: str) -> Path:
    """Break job `job_id`'s record the way `how` says; returns the record file's path."""
    path = jobs.jobs_dir() / job_id / jobs.RECORD_FILE
    data = json.loads(path.read_text())
    if how == "folder":
        path.unlink()
        path.mkdir()
        return path
    if how == "fifo":
        path.unlink()
        os.mkfifo(path)
        return path
    if how == "truncated":
        path.write_text(json.dumps(data)[:40])
        return path
    if how == "nested":
        path.write_text("[" * 100_000 + "]" * 100_000)
        return path
    if how == "not an object":
        path.write_text("[1, 2]")
        return path
    edits = {
        "old instance type": lambda d: d["spec"].update(instance_type="p3.old"),
        "nodes 0": lambda d: d["spec"].update(nodes=0),
        "spec null": lambda d: d.update(spec=None),
        "nodes as text": lambda d: d["spec"].update(nodes="2"),
        "env not pairs": lambda d: d["spec"].update(env=[["A"]]),
        "job id a path": lambda d: d.update(job_id="../../etc"),
        "no submit time": lambda d: d.pop("submitted_at"),
    }
    edits[how](data)
    path.write_text(json.dumps(data))
    return path


BROKEN = ["old instance type", "nodes 0", "spec null", "nodes as text", "env not pairs", "not an object",
          "job id a path", "no submit time", "truncated", "nested", "folder", "fifo"]


@pytest.mark.parametrize("how", BROKEN)
def test_one_broken_record_never_breaks_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    _record(tmp_path, "11", when=1.0)
    _record(tmp_path, "12", when=2.0)
    _record(tmp_path, "13", when=3.0)
    broken = _no_longer_valid("12", how)

    listed = run_cli(["status"], monkeypatch)
    assert listed.exit_code == 0, listed.output
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["13", "11"]
    warnings = [line for line in listed.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and str(broken) in warnings[0], listed.stderr

    as_json = run_cli(["status", "--json"], monkeypatch)
    assert as_json.exit_code == 0 and [j["job_id"] for j in json.loads(as_json.stdout)["jobs"]] == ["13", "11"]

    for command in (["status", "12"], ["logs", "12"], ["resume", "12"], ["cancel", "12"]):
        one_error_line(run_cli(command, monkeypatch), 7, str(broken))


def test_several_broken_records_are_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record(tmp_path, "1")
    for job_id in ("2", "3"):
        _record(tmp_path, job_id)
        _no_longer_valid(job_id, "spec null")
    (jobs.jobs_dir() / "4").mkdir()  # a folder with no record at all
    result = run_cli(["status"], monkeypatch)
    assert result.exit_code == 0
    (warning,) = result.stderr.splitlines()
    assert "skipped 3 unreadable job record(s)" in warning


def test_metrics_lines_that_are_not_records_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record(tmp_path, "21")
    run_dir = Path(record.spec.output.run_dir)
    run_dir.mkdir(parents=True)
    lines = [
        '{"type": "step", "step": 1, "loss": 2.5, "tokens_per_s": 10.0}',
        "1", '"text"', "null", "[1, 2]", '{"type": "step"}',
        '{"type": "step", "step": 2, "loss": "abc"}',
        '{"type": "step", "step": null, "loss": null}',
        '{"type": "step", "step": true, "loss": 1.0}',
        '{"type": "step", "step": 3, "loss": 1.0, "job_id": 21}',
        '{"type": "step", "step": 4, "loss": 1.5, "peak_memory_bytes_per_rank": ["x"]}',
        '{"type": "event", "event": 7}',
        '{"type": "event", "event": "resumed", "step": "ten"}',
        '{"type": "step", "step": 5, "loss": 1.25, "lr": null, "tokens_per_s": null, "mfu": null}',
        '{"type": "step", "step": 6, "loss',
    ]
    (run_dir / METRICS_FILE).write_text("\n".join(lines) + "\n")
    detail = run_cli(["status", "21"], monkeypatch)
    assert detail.exit_code == 0, detail.output
    assert "last step:  5  loss 1.2500" in detail.stdout
    document = json.loads(run_cli(["status", "21", "--json"], monkeypatch).stdout)
    # A null (or absent) tokens_per_s is unknown, not 0: a script's runtime.log may leave it out.
    assert (document["last_step"], document["last_loss"], document["tokens_per_s"]) == (5, 1.25, None)


def test_attempt_markers_with_a_count_that_is_not_one_are_plain_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record(tmp_path, "22")
    out_log, err_log = record.log_paths
    out_log.parent.mkdir(parents=True)
    bad = [
        "### hyperlaunch attempt-start restart=abc job=22 nodes=n1 host=h time=T0",
        "### hyperlaunch attempt-start restart=\u0663 job=22 nodes=n1 host=h time=T0",
        "### hyperlaunch attempt-end restart=\u00b2 job=22 exit=1 cause=crash action=requeue time=T1",
        "### hyperlaunch attempt-start restart= job=22 nodes=n1 host=h time=T0",
    ]
    out_log.write_text("\n".join(["### hyperlaunch attempt-start restart=0 job=22 nodes=n1 host=h time=T0", *bad, "step 1"]) + "\n")
    err_log.write_text("\n".join(bad) + "\n")
    shown = run_cli(["logs", "22"], monkeypatch)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[1:] == [*bad, "step 1"]
    assert run_cli(["logs", "22", "--attempt", "0"], monkeypatch).exit_code == 0
    assert run_cli(["logs", "22", "--err"], monkeypatch).exit_code == 0
    sacct = "22|FAILED|n1|2026-01-01T00:00:00|2026-01-01T00:01:00|1:0|60|10\n"
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, sacct if args[0] == "sacct" else "", ""))
    assert run_cli(["status", "22"], monkeypatch).exit_code == 0


def test_a_job_name_with_dots_finds_its_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for job_id, name in (("1010", "run.v2"), ("1011", "Qwen2.5-0.5B"), ("1012", "a.b.c.out")):
        record = _record(tmp_path, job_id, job_name=name)
        out_log, err_log = record.log_paths
        assert out_log.name == f"{name}_{job_id}.out" and err_log.name == f"{name}_{job_id}.err"
        out_log.parent.mkdir(parents=True, exist_ok=True)
        out_log.write_text(f"hello from {name}\n")
        shown = run_cli(["logs", job_id], monkeypatch)
        assert shown.exit_code == 0 and shown.stdout == f"hello from {name}\n", shown.output
        detail = run_cli(["status", job_id], monkeypatch)
        assert f"{name}_{job_id}.out" in detail.stdout


def test_submit_output_names_the_log_of_a_dotted_job_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(slurm_submission, "submit_script", lambda script, folder, *, env, forward=(): "3131")
    submitted = run_cli(["submit", "--model", "qwen3_tiny", "--job-name", "run.v2", "--max-steps", "2"], monkeypatch)
    assert submitted.exit_code == 0, submitted.output
    assert f"log:         {tmp_path / 'logs' / 'run.v2_3131.out'}" in submitted.stdout
    as_json = run_cli(["submit", "--model", "qwen3_tiny", "--job-name", "run.v2", "--max-steps", "2", "--json"], monkeypatch)
    assert json.loads(as_json.stdout)["err"] == str(tmp_path / "logs" / "run.v2_3131.err")


def test_status_json_is_json_when_the_loss_diverged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record(tmp_path, "31")
    run_dir = Path(record.spec.output.run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / METRICS_FILE).write_text('{"type": "step", "step": 3, "loss": NaN, "tokens_per_s": Infinity}\n')

    def strict(text: str) -> object:
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))

    one = strict(run_cli(["status", "31", "--json"], monkeypatch).stdout)
    listed = strict(run_cli(["status", "--json"], monkeypatch).stdout)
    for document in (one, listed["jobs"][0]):  # type: ignore[index]
        assert document["last_loss"] is None and document["last_loss_non_finite"] == "nan"
        assert document["tokens_per_s"] is None and document["tokens_per_s_non_finite"] == "inf"
        assert document["last_step"] == 3
    text = run_cli(["status"], monkeypatch).stdout
    assert "nan" in text.splitlines()[1] and "inf" in text.splitlines()[1]


def test_names_with_rich_markup_are_shown_as_they_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ck[/bold]" / "[red]x[/red] :smile:"
    model = "m[bold]x:smile:"  # a file name cannot hold the "/" of a closing tag; the folder can
    step_dir = root / f"{model}-5steps"
    step_dir.mkdir(parents=True)
    (step_dir / checkpoints.METADATA_FILE).write_text("")
    checkpoints.pointer_path(root, model).write_text(f"{model}-5steps\n")
    listed = run_cli(["checkpoints", "--checkpoint-dir", str(root)], monkeypatch)
    assert listed.exit_code == 0, listed.output
    assert _squeezed(str(root)) in _squeezed(listed.stdout) and f"{model}-5steps" in listed.stdout

    _record(tmp_path, "41", checkpoint_dir=str(root), run_dir=str(tmp_path / "[bold]run[/]"), job_name="j[b]")
    sacct = "41|COMPLETED|node[/x]|2026-01-01T00:00:00|2026-01-01T00:01:00|0:0|60|10\n"
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, sacct if args[0] == "sacct" else "", ""))
    detail = run_cli(["status", "41"], monkeypatch)
    assert detail.exit_code == 0, detail.output
    assert _squeezed(str(root)) in _squeezed(detail.stdout) and "node[/x]" in detail.stdout and "j[b]_41.out" in detail.stdout


def _squeezed(text: str) -> str:
    """Text without the spaces and line breaks a table wraps a long title with."""
    return "".join(text.split())


def test_a_pointer_that_is_a_fifo_does_not_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    os.mkfifo(checkpoints.pointer_path(root, "qwen3_tiny"))
    with pytest.raises(CheckpointError, match="not a regular file"):
        checkpoints.read_pointer(root, "qwen3_tiny")
    listed = run_cli(["checkpoints", "--checkpoint-dir", str(root), "--model", "qwen3_tiny"], monkeypatch)
    assert listed.exit_code == 0 and "not a regular file" in listed.stderr
    _record(tmp_path, "51", checkpoint_dir=str(root))
    assert run_cli(["status", "51"], monkeypatch).exit_code == 0


def test_a_pointer_is_read_only_as_far_as_a_pointer_can_be(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    endless = tmp_path / "endless"
    with endless.open("wb") as handle:
        handle.truncate(256 << 20)  # sparse: costs no disk, but reading it whole costs memory
    checkpoints.pointer_path(root, "qwen3_tiny").symlink_to(endless)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="does not hold a checkpoint directory name"):
            checkpoints.read_pointer(root, "qwen3_tiny")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"read {peak} bytes of a pointer"
    checkpoints.pointer_path(root, "qwen3_tiny").unlink()
    checkpoints.pointer_path(root, "qwen3_tiny").symlink_to("/dev/null")  # a device: not read at all
    with pytest.raises(CheckpointError, match="not a regular file"):
        checkpoints.read_pointer(root, "qwen3_tiny")


def test_odd_files_where_the_job_writes_are_no_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO or folder in place of a log, metrics.jsonl or a trainer failure record."""
    record = _record(tmp_path, "61")
    out_log, err_log = record.log_paths
    out_log.parent.mkdir(parents=True)
    os.mkfifo(out_log)
    err_log.mkdir()
    run_dir = Path(record.spec.output.run_dir)
    run_dir.mkdir(parents=True)
    os.mkfifo(run_dir / METRICS_FILE)
    os.mkfifo(run_dir / "trainer-failure-61.0")
    sacct = "61|FAILED|n1|2026-01-01T00:00:00|2026-01-01T00:01:00|1:0|60|10\n"
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, sacct if args[0] == "sacct" else "", ""))
    assert run_cli(["status", "61"], monkeypatch).exit_code == 0
    one_error_line(run_cli(["logs", "61"], monkeypatch), 7, str(out_log), "not a readable file")
    one_error_line(run_cli(["logs", "61", "--err"], monkeypatch), 7, str(err_log))
