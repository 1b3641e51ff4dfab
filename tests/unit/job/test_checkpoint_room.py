"""At submit, a bundled-trainer run's checkpoints against their folder's free space: what the
run writes at its fullest (each checkpoint, --keep-last, the final export) and where it would
stop with disk-full, as one warning; nothing when it fits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hyperlaunch.core import disk_space
from hyperlaunch.core.models import get_preset
from hyperlaunch.job import checkpoint_room
from hyperlaunch.job.plan import checkpoint_room_warning, plan_job
from hyperlaunch.job.spec import JobSpec

GIB = 1 << 30
QWEN = get_preset("qwen3_0_6b")
EACH = 12 * QWEN.num_params


def _spec(tmp_path: Path, *trainer_args: str, steps: int = 3000, **flags: object) -> JobSpec:
    given = {"model": "qwen3_0_6b", "nodes": 2, "max_steps": steps, "trainer_args": trainer_args, **flags}
    return plan_job(given, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml").spec


@pytest.mark.parametrize(
    ("steps", "every", "keep", "held"),
    [(3000, 50, 0, 60), (3001, 50, 0, 61), (3000, 50, 2, 3), (100, 50, 5, 2), (3000, 0, 0, 1), (3000, 0, 3, 1)],
)
def test_the_checkpoints_a_run_holds_at_its_fullest(steps: int, every: int, keep: int, held: int) -> None:
    assert disk_space.checkpoints_held(steps, every, keep) == held


def test_all_kept_checkpoints_that_outgrow_the_folder_name_the_step_that_would_fail(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    text = checkpoint_room.warning(spec, QWEN, free=75 * GIB)
    assert text == (
        f"checkpoints: the run keeps up to 60 checkpoints of about 6.7 GiB (all kept: --keep-last 0) and the 2.2 GiB "
        f"qwen3_0_6b-final export, {disk_space.format_size(60 * EACH + 4 * QWEN.num_params)} in all, and {tmp_path}/checkpoints "
        f"has 75.0 GiB free: it would end with disk-full at its checkpoint of step 600 "
        f"(pass -- --keep-last N, free space or choose another --checkpoint-dir)"
    )


def test_keep_last_counts_the_next_checkpoint_and_no_export_counts_none(tmp_path: Path) -> None:
    kept = _spec(tmp_path, "--keep-last", "3", "--no-export")
    assert checkpoint_room.warning(kept, QWEN, free=4 * EACH) is None
    text = checkpoint_room.warning(kept, QWEN, free=4 * EACH - 1)
    assert text is not None and "4 checkpoints of about 6.7 GiB (--keep-last 3 and the next, at once), 26.6 GiB in all" in text
    assert "final export" not in text and "at its checkpoint of step 200" in text and "--keep-last N" not in text


def test_the_final_export_comes_after_the_last_pruning(tmp_path: Path) -> None:
    """--keep-last 2: 3 checkpoints at once during the run, then 2 and the export."""
    kept = _spec(tmp_path, "--keep-last", "2", steps=1000)
    assert checkpoint_room.warning(kept, QWEN, free=3 * EACH) is None
    assert checkpoint_room.warning(kept, QWEN, free=3 * EACH - 1) is not None


def test_the_step_named_is_never_past_the_runs_end(tmp_path: Path) -> None:
    """Saves at 300, 600, 900 and 1000: room for 3.5 checkpoints fails the one at 1000."""
    spec = _spec(tmp_path, "--checkpoint-every", "300", steps=1000)
    text = checkpoint_room.warning(spec, QWEN, free=int(3.5 * EACH))
    assert text is not None and "at its checkpoint of step 1000 " in text


def test_a_sweeps_trainings_each_keep_their_own(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "--keep-last", "1", "--no-export", steps=200)
    assert checkpoint_room.warning(spec, QWEN, free=2 * EACH) is None
    text = checkpoint_room.warning(spec, QWEN, free=2 * EACH, trainings=6)
    assert text is not None and text.startswith("checkpoints: each of the sweep's 6 trainings keeps up to 2 checkpoints of about 6.7 GiB")
    assert f"{disk_space.format_size(12 * EACH)} in all" in text and "the sweep would end with disk-full" in text


def test_a_first_checkpoint_or_a_final_export_that_cannot_fit_is_said_so(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "--checkpoint-every", "0")
    first = checkpoint_room.warning(spec, QWEN, free=EACH - 1)
    assert first is not None and first.endswith("its first save would end it with disk-full (free space or choose another --checkpoint-dir)")
    export = checkpoint_room.warning(spec, QWEN, free=EACH + 1)
    assert export is not None and "the final export would not fit" in export
    assert checkpoint_room.warning(spec, QWEN, free=EACH + 4 * QWEN.num_params) is None


@pytest.mark.slow
def test_scripts_jobs_and_runs_that_fit_get_no_warning(tmp_path: Path) -> None:
    assert checkpoint_room.warning(_spec(tmp_path, steps=2), QWEN, free=9 * GIB) is None  # 1 checkpoint and the export
    assert checkpoint_room.warning(_spec(tmp_path, "--no-checkpoints"), QWEN, free=0) is None  # saves nothing
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    mine = plan_job(
        {"script": str(script), "nodes": 1}, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml"
    ).spec
    assert checkpoint_room_warning(mine) is None


@pytest.mark.parametrize(
    ("command", "said"),
    [(["submit"], "the run keeps up to 2000 checkpoints of about 6.7 GiB"),
     (["sweep", "--grid", "lr=1e-4,3e-4"], "each of the sweep's 2 trainings keeps up to 2000 checkpoints")],
)
@pytest.mark.slow
def test_submit_and_sweep_print_it_as_one_warning_line(tmp_path: Path, command: list[str], said: str) -> None:
    """The real CLI, --dry-run, into a folder on /dev/shm: a run of 100,000 steps could never fit."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or disk_space.free_bytes(shm) is None:
        pytest.skip("no /dev/shm here")
    done = subprocess.run(
        [sys.executable, "-m", "hyperlaunch", *command, "-N", "2", "-m", "qwen3_0_6b", "--max-steps", "100000",
         "--checkpoint-dir", str(shm / "hl-room-test" / "ck"), "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("hyperlaunch: warning: checkpoints:")]
    assert len(warnings) == 1 and said in warnings[0], done.stderr
    assert not (shm / "hl-room-test").exists(), "nothing is created"
