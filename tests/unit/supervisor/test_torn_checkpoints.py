"""The supervisor and a torn checkpoint: the trainer's record names it, the decision is another
round here without spending the budget (a lost node still comes first), and the checkpoint is
set aside before the next round: the one the pointer names when its manifest finds it torn, or
the one the trainer failed to load (hyperlaunch.supervisor.torn_checkpoints)."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core import trainer_failures as tf
from hyperlaunch.core.protocol import RestartCause
from hyperlaunch.runtime.checkpoint import commit
from hyperlaunch.supervisor.decisions import RoundEnd, after_round
from hyperlaunch.supervisor.torn_checkpoints import TornCheckpoints

MODEL = "qwen3_tiny"


def _saved(ckpt_dir: Path, step: int) -> Path:
    path = rules.checkpoint_path(ckpt_dir, MODEL, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"x" * 100)
    (path / rules.METADATA_FILE).write_bytes(b"m")
    commit(ckpt_dir, MODEL, path, step, ckpt_dir / "run")
    return path


def test_the_record_names_the_torn_checkpoint() -> None:
    text = tf.format_trainer_failure(tf.FailureKind.CHECKPOINT_TORN, "checkpoint m-4steps is torn", 1, "m-4steps")
    assert text.splitlines()[0] == "retry checkpoint-torn rank=1 checkpoint=m-4steps"
    assert tf.parse_trainer_failure(text) == tf.TrainerFailure("checkpoint-torn", False, 1, "checkpoint m-4steps is torn", "m-4steps")
    # A path or a word with a space is no checkpoint name: not carried.
    assert "checkpoint=" not in tf.format_trainer_failure(tf.FailureKind.CHECKPOINT_TORN, "m", 1, "../x y")


def test_a_torn_checkpoint_restarts_the_round_and_a_lost_node_comes_first() -> None:
    torn = RoundEnd(status=1, failure_kind="checkpoint-torn", in_row=2, restarts_in_allocation=2)
    decision = after_round(torn, lambda: [])
    assert (decision.action, decision.cause) == ("torn", RestartCause.CHECKPOINT_TORN)
    lost = after_round(RoundEnd(status=1, failure_kind="checkpoint-torn", lost=("node2",)), lambda: [])
    assert lost.action == "lost"


def test_before_a_round_the_pointed_checkpoint_is_set_aside_when_torn(tmp_path: Path) -> None:
    said: list[str] = []
    guard = TornCheckpoints(str(tmp_path), MODEL, "42", said.append)
    _saved(tmp_path, 10)
    guard.before_round()
    assert said == [], "a whole checkpoint is left alone"
    torn = _saved(tmp_path, 20)
    (torn / "__0_0.distcp").write_bytes(b"x" * 7)
    guard.before_round()
    assert said == [
        f"hyperlaunch: checkpoint {MODEL}-20steps is torn: {MODEL}-20steps/__0_0.distcp is 7 bytes, 100 when committed:"
        f" set aside as {MODEL}-20steps.bad; {MODEL}-latest now names {MODEL}-10steps"
    ]
    (aside,) = integrity.set_aside_checkpoints(tmp_path, MODEL)
    assert aside.job == "42" and aside.file == "__0_0.distcp"


def test_after_a_round_the_checkpoint_the_trainer_could_not_load_is_set_aside(tmp_path: Path) -> None:
    said: list[str] = []
    guard = TornCheckpoints(str(tmp_path), MODEL, "42", said.append)
    _saved(tmp_path, 10)
    _saved(tmp_path, 20)  # whole by its manifest: a flipped bit the sizes do not show
    message = f"checkpoint {MODEL}-20steps is torn: UnpicklingError: invalid load key"
    assert guard.after_round(f"{MODEL}-20steps", message) == f"{MODEL}-20steps"
    assert rules.read_pointer(tmp_path, MODEL) == f"{MODEL}-10steps"
    assert said[-1].endswith(f"set aside as {MODEL}-20steps.bad; {MODEL}-latest now names {MODEL}-10steps")
    # Another model's folder, or one already gone, is not touched.
    assert guard.after_round("llama_tiny-5steps", "x") == "" and guard.after_round(f"{MODEL}-20steps", "x") == ""
