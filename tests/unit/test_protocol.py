"""The protocol between the batch script, the trainer and `status` (hyperlaunch.protocol):
each vocabulary is the one the template is rendered with, and each record reads back what
its writer wrote."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from hyperlaunch import protocol as p
from hyperlaunch.errors import EXIT_CODES
from hyperlaunch.render import render_sbatch
from hyperlaunch.spec import JobSpec


def _script(tmp_path: Path) -> str:
    dirs = {name: str(tmp_path / name) for name in ("checkpoint_dir", "log_dir", "run_dir")}
    return render_sbatch(JobSpec(model="qwen3_tiny", nodes=2, **dirs))


def test_the_script_writes_exactly_the_causes_and_actions_of_the_enums(tmp_path: Path) -> None:
    script = _script(tmp_path)
    written_causes = set(re.findall(r"cause=([a-z-]+)", script))
    written_actions = set(re.findall(r"action=([a-z-]+)", script))
    assert written_causes == {cause.value for cause in p.RestartCause}
    assert written_actions == {action.value for action in p.AttemptAction}
    for value in [*written_causes, *written_actions]:
        assert shlex.quote(value) == value, "marker values must be plain words (the script splits on spaces)"
    assert shlex.quote(p.ATTEMPT_MARKER_PRINTF) in script


def test_every_cause_has_the_words_status_shows() -> None:
    assert all(cause.value in p.CAUSE_TEXT for cause in p.RestartCause)


def test_an_attempt_marker_reads_back_what_was_written() -> None:
    line = p.format_attempt_marker("end", 2, "41", "exit=1 cause=node-failure nodes=node1,node2 action=slurm-requeue", "T")
    marker = p.parse_attempt_marker(line)
    assert marker == {
        "event": "end", "restart": "2", "job": "41", "exit": "1", "cause": "node-failure",
        "nodes": "node1,node2", "action": "slurm-requeue", "time": "T",
    }
    assert p.RestartCause(marker["cause"]) is p.RestartCause.NODE_FAILURE
    assert p.parse_attempt_marker("step 3 | loss 2.0") is None


def test_metrics_records_round_trip_and_tolerate_extra_fields_and_cut_lines() -> None:
    step = p.StepRecord(step=3, loss=2.5, mfu=None, peak_memory_bytes_per_rank=(1, 2), job_id="7", restart=1)
    assert p.parse_metrics_line(p.metrics_line(step)) == step
    event = p.EventRecord(event=p.TrainerEvent.RESUMED.value, message="m", step=4, details={"path": "/c/x-4steps"})
    back = p.parse_metrics_line(p.metrics_line(event))
    assert back == event and isinstance(back, p.EventRecord) and back.get("path") == "/c/x-4steps"
    newer = '{"type": "step", "step": 5, "loss": 1.0, "a_field_from_a_newer_trainer": 1}'
    assert p.parse_metrics_line(newer) == p.StepRecord(step=5, loss=1.0)
    assert p.parse_metrics_line(p.metrics_line(step)[:20]) is None
    assert p.parse_metrics_line('{"type": "step"}') is None and p.parse_metrics_line("[1]") is None


def test_a_metrics_line_of_the_previous_format_still_reads() -> None:
    line = (
        '{"grad_norm": 1.2, "loss": 5.1, "lr": 0.0003, "mfu": null, "peak_memory_bytes": 10, '
        '"peak_memory_bytes_per_rank": [10, 9], "samples_consumed": 8, "step": 2, "step_time_s": 0.5, '
        '"tflops_per_device": 0.1, "time": 1.0, "tokens_per_s": 100.0, "tokens_per_s_per_device": 50.0, '
        '"tokens_seen": 256, "type": "step", "world_size": 2, "job_id": "12", "restart": 0}'
    )
    record = p.parse_metrics_line(line)
    assert isinstance(record, p.StepRecord) and (record.step, record.job_id, record.peak_memory_bytes_per_rank) == (2, "12", (10, 9))


def test_the_requeue_exit_code_and_request_file() -> None:
    assert p.REQUEUE_EXIT_CODE not in EXIT_CODES
    assert p.requeue_request_path(Path("/r"), "12", 3) == Path("/r/requeue-request-12.3")
