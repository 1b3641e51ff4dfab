"""The round counter (hyperlaunch.supervisor.rounds) and the restart budget as one attempt spends
it (hyperlaunch.supervisor.budget), on real record files: each round its own failure record,
in_row counting only restarts without a new checkpoint, and the budget counted from the earlier
attempts and reset by a completed checkpoint."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.core.protocol import RestartCause, write_progress
from hyperlaunch.core.trainer_failures import trainer_failure_path
from hyperlaunch.supervisor.budget import RestartBudget
from hyperlaunch.supervisor.rounds import Rounds


def test_each_round_has_its_number_cause_and_failure_record(tmp_path: Path) -> None:
    rounds = Rounds(tmp_path, "12", 1, "time-limit")
    assert (rounds.number, rounds.restart_cause, rounds.failure_record) == (None, "time-limit", trainer_failure_path(tmp_path, "12", 1))
    rounds.first()
    assert rounds.next(RestartCause.CRASH, in_row=True) == 1
    assert (rounds.in_row, rounds.restart_cause, rounds.failure_record) == (1, "crash", trainer_failure_path(tmp_path, "12", 1, 1))
    assert rounds.next(RestartCause.NODE_FAILURE, in_row=False) == 2 and rounds.in_row == 1, "a spare's start is no restart in a row"
    rounds.progressed()
    assert rounds.in_row == 0 and rounds.failure_record == trainer_failure_path(tmp_path, "12", 1, 2)


def test_the_budget_counts_the_earlier_attempts_and_this_one(tmp_path: Path) -> None:
    write_progress(tmp_path, "12", 0, 10)  # attempt 0 completed a checkpoint; 1 and 2 none
    stale = write_progress(tmp_path, "12", 3, 99)  # an earlier job of the same id's
    budget = RestartBudget(tmp_path, "12", 3, max_restarts=2)
    assert budget.start() is None and budget.failures == 2 and not stale.exists()
    assert budget.checkpoint_step() == 0
    assert not budget.spend() and budget.failures == 3
    assert "3 attempts in a row made no progress" in budget.refusal() and "--max-restarts allows 2" in budget.refusal()

    again = RestartBudget(tmp_path, "12", 3, max_restarts=2)
    again.start()
    write_progress(tmp_path, "12", 3, 40)
    assert again.checkpoint_step() == 40 and again.spend() and again.failures == 0


def test_an_attempt_past_the_budget_is_refused_at_its_start(tmp_path: Path) -> None:
    budget = RestartBudget(tmp_path, "12", 2, max_restarts=1)
    refusal = budget.start()
    assert refusal is not None and refusal.startswith("restart limit reached: 2 attempts in a row") and budget.failures == 2


def test_the_record_before_a_round_is_the_previous_rounds_or_the_last_of_the_attempt_before(tmp_path: Path) -> None:
    first = Rounds(tmp_path, "12", 0, None)
    first.first()
    assert first.record_before() is None, "the job's first round"
    first.next(RestartCause.CRASH, in_row=True)
    assert first.record_before() == trainer_failure_path(tmp_path, "12", 0)
    for restart, round_ in ((1, 0), (1, 1), (1, 3), (2, 0)):
        trainer_failure_path(tmp_path, "12", restart, round_).write_text("retry unexpected\nm\n")
    trainer_failure_path(tmp_path, "120", 1, 7).write_text("another job's")
    requeued = Rounds(tmp_path, "12", 2, "crash")
    requeued.first()
    assert requeued.record_before() == trainer_failure_path(tmp_path, "12", 1, 3)
    absent = Rounds(tmp_path / "absent", "12", 2, None)
    absent.first()
    assert absent.record_before() is None
