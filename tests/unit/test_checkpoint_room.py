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
        f"checkpoints: the run writes 60 checkpoints of about 6.7 GiB (all kept: --keep-last 0) and the 2.2 GiB "
        f"qwen3_0_6b-final export, {disk_space.size_text(60 * EACH + 4 * QWEN.num_params)} in all, and {tmp_path}/checkpoints "
        f"has 75.0 GiB free: it would end with disk-full at its checkpoint of step 600 "
        f"(pass -- --keep-last N, free space or choose another --checkpoint-dir)"
    )


def test_keep_last_counts_the_next_checkpoint_and_no_export_counts_none(tmp_path: Path) -> None:
    kept = _spec(tmp_path, "--keep-last", "3", "--no-export")
    assert checkpoint_room.warning(kept, QWEN, free=4 * EACH) is None
    text = checkpoint_room.warning(kept, QWEN, free=4 * EACH - 1)
    assert text is not None and "4 checkpoints of about 6.7 GiB (--keep-last 3 keeps 3 and the next), 26.6 GiB in all" in text
    assert "final export" not in text and "at its checkpoint of step 200" in text and "--keep-last N" not in text


def test_a_first_checkpoint_or_a_final_export_that_cannot_fit_is_said_so(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "--checkpoint-every", "0")
    first = checkpoint_room.warning(spec, QWEN, free=EACH - 1)
    assert first is not None and first.endswith("its first save would end it with disk-full (free space or choose another --checkpoint-dir)")
    export = checkpoint_room.warning(spec, QWEN, free=EACH + 1)
    assert export is not None and "the final export would not fit" in export
    assert checkpoint_room.warning(spec, QWEN, free=EACH + 4 * QWEN.num_params) is None


def test_scripts_jobs_and_runs_that_fit_get_no_warning(tmp_path: Path) -> None:
    assert checkpoint_room.warning(_spec(tmp_path, steps=2), QWEN, free=9 * GIB) is None  # 1 checkpoint and the export
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    mine = plan_job(
        {"script": str(script), "nodes": 1}, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml"
    ).spec
    assert checkpoint_room_warning(mine) is None


def test_submit_prints_it_as_one_warning_line(tmp_path: Path) -> None:
    """The real CLI, --dry-run, into a folder on /dev/shm: a run of 10,000 steps could never fit."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or disk_space.free_bytes(shm) is None:
        pytest.skip("no /dev/shm here")
    done = subprocess.run(
        [sys.executable, "-m", "hyperlaunch", "submit", "-N", "2", "-m", "qwen3_0_6b", "--max-steps", "100000",
         "--checkpoint-dir", str(shm / "hl-room-test" / "ck"), "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, check=False,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("hyperlaunch: warning: checkpoints:")]
    assert len(warnings) == 1 and "2000 checkpoints of about 6.7 GiB" in warnings[0], done.stderr
    assert not (shm / "hl-room-test").exists(), "nothing is created"
