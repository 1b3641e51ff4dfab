"""TensorBoard across attempts: two processes of one training write into one log folder, and
TensorBoard's own reader (EventAccumulator, purge_orphaned_data on by default, as the UI's
multiplexer) shows each step once, with the values of the attempt that kept it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core import trackers as names
from tests.support.tracker_attempts import FIRST, SECOND, attempt, job_env, loss

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def _reader(folder: Path) -> EventAccumulator:
    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    reader.Reload()
    return reader


@pytest.mark.slow
def test_a_restart_replaces_the_failed_attempts_tail_in_tensorboards_reader(tmp_path: Path) -> None:
    env = job_env(tmp_path, "tensorboard")
    attempt(env, FIRST)
    after_first = _reader(tmp_path / "tensorboard")
    assert [e.step for e in after_first.Scalars("train/loss")] == list(range(1, 9))

    attempt(env, SECOND, restart=1, cause="crash")
    reader = _reader(tmp_path / "tensorboard")
    losses = reader.Scalars("train/loss")
    assert [e.step for e in losses] == list(range(1, 11))
    assert [e.value for e in losses] == pytest.approx([loss(step) for step in range(1, 11)])
    assert [e.value for e in reader.Scalars("train/mine")] == [1.0] * 4 + [2.0] * 6  # a script's own key
    assert [e.step for e in reader.Scalars("train/tokens_per_s")] == list(range(1, 11))

    restart = reader.Tensors("events/restart")
    assert [e.step for e in restart] == [5]
    text = restart[0].tensor_proto.string_val[0].decode()
    assert "after crash" in text and "attempt 1" in text and "steps 5-8" in text
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 2
    locations = json.loads((tmp_path / "run" / names.LOCATIONS_FILE).read_text())
    assert locations == {"tensorboard": str(tmp_path / "tensorboard")}
