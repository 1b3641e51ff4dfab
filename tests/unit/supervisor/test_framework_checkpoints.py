"""A script's framework checkpoints as the supervisor counts them
(hyperlaunch.supervisor.framework_checkpoints): a new complete one is the attempt's progress and
an event `status` reads, one there at the start is not progress, and a round with nothing in
`-latest` resumes from the newest."""

from __future__ import annotations

import json
from pathlib import Path

from hyperlaunch.core.protocol import made_progress, progress_step
from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.supervisor.framework_checkpoints import FrameworkCheckpoints


def _options(tmp_path: Path, layout: str = "auto") -> SupervisorOptions:
    return SupervisorOptions(
        run_dir=str(tmp_path / "run"), checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_lock="/l", max_restarts=3,
        launch_command=("t",), script_name="train", work_dir=str(tmp_path / "run" / "work"), checkpoint_layout=layout,
    )


def _hf(folder: Path, step: int) -> None:
    (folder / f"checkpoint-{step}").mkdir(parents=True)
    (folder / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def _events(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "run" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_new_checkpoint_in_the_working_folder_is_progress_and_an_event(tmp_path: Path) -> None:
    out = tmp_path / "run" / "work" / "out"
    _hf(out, 10)  # from an earlier attempt
    frameworks = FrameworkCheckpoints(_options(tmp_path), "12", 1)
    frameworks.poll(0, now=True)
    assert not made_progress(tmp_path / "run", "12", 1), "there before the attempt: not this attempt's"
    _hf(out, 20)
    frameworks.poll(0)  # within POLL_S of the last look: not looked
    assert not made_progress(tmp_path / "run", "12", 1)
    frameworks.poll(0, now=True)
    assert progress_step(tmp_path / "run", "12", 1) == 20
    (event,) = _events(tmp_path)
    assert (event["event"], event["step"], event["layout"], event["job_id"], event["restart"]) == ("checkpoint_completed", 20, "transformers", "12", 1)
    assert str(event["path"]).endswith("out/checkpoint-20")


def test_a_round_resumes_from_the_newest_one_and_says_so(tmp_path: Path) -> None:
    _hf(tmp_path / "ckpt", 30)
    _hf(tmp_path / "run" / "work", 20)
    found = FrameworkCheckpoints(_options(tmp_path), "12", 2).resume(1)
    assert found is not None and found.path == str(tmp_path / "ckpt" / "checkpoint-30")
    (event,) = _events(tmp_path)
    assert (event["event"], event["step"], event["source"], event["round"]) == ("resumed", 30, "transformers", 1)


def test_off_and_the_bundled_trainer_look_for_nothing(tmp_path: Path) -> None:
    _hf(tmp_path / "ckpt", 30)
    for layout in ("off", ""):
        frameworks = FrameworkCheckpoints(_options(tmp_path, layout), "12", 0)
        assert frameworks.resume(0) is None
        _hf(tmp_path / "ckpt", 40 if layout else 50)
        frameworks.poll(0, now=True)
    assert _events(tmp_path) == [] and not made_progress(tmp_path / "run", "12", 0)
