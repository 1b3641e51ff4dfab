"""`bench chaos`'s pure parts: the seeded plan of faults, and the figures it reports from step
records (steps it hit, recovery, steps recomputed, goodput, losses against the reference). No
test runs the benchmark on a cluster."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from hyperlaunch.bench import chaos
from hyperlaunch.bench.chaos_faults import ChaosError
from hyperlaunch.bench.chaos_figures import fault_figures, final_losses, loss_mismatches, totals
from hyperlaunch.bench.chaos_jobs import StepLog, cause_text, restarts_of
from hyperlaunch.bench.chaos_plan import ALL_KINDS, MARGIN_STEPS, Kind, plan, spare_left, total_steps
from hyperlaunch.bench.chaos_report import (
    Outcome,
    Run,
    fault_rows,
    ledger_agrees,
    ledger_lines,
    summary,
    table,
    with_ledger,
)
from hyperlaunch.core.metrics_records import StepRecord, metrics_line


def _steps(first: int, last: int, start: float, job: str = "7", restart: int = 0, round_: int = 0) -> list[StepRecord]:
    """Steps first..last, one a second from `start`, by one set of trainers."""
    return [StepRecord(step=s, loss=10.0 / s, time=start + i, job_id=job, restart=restart, round=round_) for i, s in enumerate(range(first, last + 1))]


def test_the_default_plan_has_each_kind_once_in_an_order_the_seed_draws() -> None:
    faults = plan(8, seed=3, every=80)
    assert sorted(f.kind.value for f in faults) == sorted(k.value for k in ALL_KINDS)
    assert [f.index for f in faults] == list(range(8))
    assert plan(8, seed=3, every=80) == faults, "the same seed, the same plan"
    assert len({tuple(f.kind for f in plan(8, seed, 80)) for seed in range(20)}) > 10, "other seeds, other orders"


def test_each_fault_lands_inside_its_own_checkpoint_interval() -> None:
    for seed in range(50):
        for fault in plan(8, seed, every=80):
            start = (fault.index + 1) * 80
            assert start + MARGIN_STEPS <= fault.target_step <= start + 80 - MARGIN_STEPS
            assert fault.rank in (0, 1)
    assert total_steps(8, 80) == 800, "a clean interval before the first fault and after the last"


def test_every_idle_spare_kill_finds_a_spare() -> None:
    for seed in range(200):
        assert spare_left([f.kind for f in plan(8, seed, every=80)])
        assert spare_left([f.kind for f in plan(24, seed, every=40)])


@pytest.mark.parametrize(("kinds", "left"), [
    ([Kind.NODE_KILL, Kind.SPARE_KILL], False),  # the spare replaced the dead node
    ([Kind.SPARE_KILL, Kind.NODE_KILL], True),
    ([Kind.SPARE_KILL, Kind.SPARE_KILL], False),
    ([Kind.NODE_KILL, Kind.HANG, Kind.CRASH, Kind.SPARE_KILL], False),
    ([Kind.NODE_KILL, Kind.BATCH_HOST_KILL, Kind.SPARE_KILL], True),  # Slurm's requeue brings a spare
    ([Kind.NODE_KILL, Kind.DISK_FULL, Kind.SPARE_KILL], True),  # so does the resume
    ([Kind.NODE_KILL, Kind.NODE_KILL, Kind.SPARE_KILL], True),  # no spare: requeued, with one
])
def test_which_faults_take_the_spare_and_which_bring_one(kinds: list[Kind], left: bool) -> None:
    assert spare_left(kinds) is left


def test_fewer_or_more_faults_than_kinds_and_a_subset_of_kinds() -> None:
    assert len({f.kind for f in plan(3, seed=0, every=80)}) == 3
    more = plan(10, seed=0, every=80)
    assert {f.kind for f in more[:8]} == set(ALL_KINDS) and len(more) == 10
    assert {f.kind for f in plan(4, seed=1, every=30, kinds=[Kind.HANG, Kind.CRASH])} == {Kind.HANG, Kind.CRASH}
    with pytest.raises(ValueError):
        plan(8, seed=0, every=20)  # no room for the margins
    with pytest.raises(ValueError):
        plan(2, seed=0, every=80, kinds=[])


def test_a_restart_is_measured_to_the_new_trainers_first_step_and_counts_the_steps_trained_again() -> None:
    # Steps 1-10 at t=100..109, the fault at 109.5; the next round resumes from checkpoint 5 at
    # t=130 and trains 6..15.
    steps = _steps(1, 10, 100.0) + _steps(6, 15, 130.0, round_=1)
    figures = fault_figures(steps, at=109.5)
    assert figures.last_step == 10 and figures.restarted
    assert figures.recovery_s == pytest.approx(20.5)
    assert figures.recomputed == 5  # 6, 7, 8, 9, 10


def test_a_step_the_old_trainers_finish_after_the_fault_is_not_the_recovery() -> None:
    """A hang: the step in flight may still be logged after the fault; the recovery is the
    new trainers' first step, and only steps at or below the last before the fault count."""
    steps = _steps(1, 10, 100.0) + _steps(11, 11, 110.2) + _steps(6, 14, 140.0, restart=1)
    figures = fault_figures(steps, at=110.0)
    assert figures.recovery_s == pytest.approx(30.0)
    assert figures.recomputed == 5
    assert totals(steps).twice == 6, "step 11 too was trained twice: the total counts it"


def test_a_fault_the_job_rides_through_measures_the_next_step_and_recomputes_nothing() -> None:
    steps = _steps(1, 20, 100.0)
    figures = fault_figures(steps, at=104.25)
    assert (figures.last_step, figures.restarted, figures.recomputed) == (5, False, 0)
    assert figures.recovery_s == pytest.approx(0.75)
    assert fault_figures(steps, at=90.0).last_step is None
    assert fault_figures(steps, at=200.0).recovery_s is None


def test_records_after_the_next_fault_belong_to_it() -> None:
    steps = _steps(1, 10, 100.0) + _steps(6, 12, 120.0, round_=1) + _steps(11, 20, 140.0, round_=2)
    first = fault_figures(steps, at=109.5, until=126.5)
    assert first.recomputed == 5 and first.recovery_s == pytest.approx(10.5)
    second = fault_figures(steps, at=126.5, until=float("inf"))
    assert (second.last_step, second.recomputed) == (12, 2)  # 11 and 12


def test_goodput_and_the_losses_against_the_reference() -> None:
    reference = _steps(1, 15, 0.0)
    steps = _steps(1, 10, 100.0) + _steps(6, 15, 130.0, round_=1)
    counted = totals(steps)
    assert (counted.trained, counted.kept, counted.twice) == (20, 15, 5)
    assert counted.goodput == pytest.approx(0.75)
    assert loss_mismatches(final_losses(steps), final_losses(reference)) == []
    changed = steps[:-1] + [StepRecord(step=15, loss=10.0 / 15 + 1e-3, time=200.0)]
    assert loss_mismatches(final_losses(changed), final_losses(reference)) == [15]
    assert loss_mismatches(final_losses(steps[:-1]), final_losses(reference)) == [15], "a step never trained"
    assert final_losses(steps[:10] + [StepRecord(step=10, loss=9.0, time=1.0)])[10] == 9.0, "the last value of a step counts"


def test_the_rows_summary_and_table() -> None:
    faults = plan(2, seed=0, every=30, kinds=[Kind.CRASH])
    steps = _steps(1, 45, 100.0) + _steps(31, 90, 160.0, round_=1)
    outcomes = [Outcome(faults[0], at=144.5, target="rank 1 on node2", causes=["crash in allocation (killed by SIGKILL)"]),
                Outcome(faults[1], notes=["the training completed"])]
    rows = fault_rows(outcomes, steps)
    assert (rows[0]["last_step"], rows[0]["recomputed"], rows[0]["recovery_s"]) == (45, 15, pytest.approx(15.5))
    assert "last_step" not in rows[1] and rows[1]["cause"] == ["none"]
    figures = summary(Run(jobs=["3"], wall_s=90.0, steps=_steps(1, 90, 0.0)), Run(jobs=["4"], wall_s=120.0, steps=steps), rows)
    assert figures["losses_equal"] and figures["steps_trained_twice"] == 15 == figures["steps_recomputed_after_faults"]
    assert (figures["goodput_steps"], figures["goodput_time"]) == (round(90 / 105, 3), 0.75)
    lines = table(rows)
    assert lines[2].startswith("| 1 | crash | 45 | rank 1 on node2 | crash in allocation (killed by SIGKILL) | 15.5 | 15 |")
    assert lines[3].startswith("| 2 | crash | not injected |")



def test_each_restarting_fault_is_matched_with_the_ledgers_row_for_it() -> None:
    from hyperlaunch.bench.chaos_plan import Fault

    faults = [Fault(index=i, kind=k, target_step=s, rank=0) for i, (k, s) in enumerate(((Kind.CRASH, 115), (Kind.CONTROLLER_RESTART, 287), (Kind.NODE_KILL, 428)))]
    outcomes = [Outcome(faults[0], at=100.0, causes=["crash in allocation"]), Outcome(faults[1], at=150.0),
                Outcome(faults[2], at=200.0, causes=["node failure (node3)"])]
    rows = [{"cause": o.causes or ["none"], "recovery_s": r, "recomputed": n} for o, r, n in zip(outcomes, (5.4, 0.1, 14.3), (35, 0, 28), strict=True)]
    ledger = {
        "jobs": ["5", "6"], "goodput": 0.5, "wall_s": 339.0,
        "parts": {"productive": {"seconds": 170.0}, "recomputed": {"seconds": 85.0}, "hang": {"seconds": 0.2}},
        # The failed round's last step ended just before the fault: 99.8 and 199.9.
        "restarts": [{"at": 199.9, "lost_s": 14.6, "steps_recomputed": 28}, {"at": 99.8, "lost_s": 5.3, "steps_recomputed": 35}],
    }
    with_ledger(rows, outcomes, ledger)
    assert (rows[0]["ledger_lost_s"], rows[0]["ledger_recomputed"]) == (5.3, 35)
    assert "ledger_lost_s" not in rows[1], "the job rode through the controller's restart"
    assert (rows[2]["ledger_lost_s"], rows[2]["ledger_recomputed"]) == (14.6, 28)
    assert ledger_agrees(rows)
    lines = ledger_lines(ledger, rows)
    assert lines[0].startswith("ledger (hyperlaunch goodput 6): goodput 0.500 of 339.0 s wall time") and "recomputed 85.0 s" in lines[0]
    assert "hang" not in lines[0], "under half a second is left out"
    rows[2]["ledger_recomputed"] = 27
    assert not ledger_agrees(rows)

def test_status_restarts_in_status_words_with_keys_that_stay() -> None:
    status = {
        "job_id": "9",
        "restarts": [{"attempt": 0, "cause": "node failure", "detail": "node1", "nodes": ["node1"], "kind": "", "round": 0}],
        "restarts_in_allocation": [{"attempt": 0, "cause": "hang", "detail": "exit 124: hang:\n no step", "nodes": [], "kind": "hang", "round": 1}],
        "failure": {"attempt": 1, "cause": "trainer error", "detail": "saving checkpoint: no space left", "nodes": [], "kind": "disk-full", "round": 0},
    }
    found = restarts_of(status)
    assert [key for key, _ in found] == ["9/attempt/0", "9/round/0", "9/failure"]
    assert [cause_text(r) for _, r in found] == ["node failure (node1)", "hang in allocation (exit 124: hang:\n no step)", "trainer error (saving checkpoint: no space left)"]


def test_the_step_log_reads_as_far_as_written(tmp_path: Path) -> None:
    log = StepLog(tmp_path)
    assert log.read() == [] and log.last_step() == 0
    first, second = _steps(1, 2, 100.0)
    path = tmp_path / "metrics.jsonl"
    path.write_text(metrics_line(first) + '{"type": "event", "event": "started"}\n' + metrics_line(second)[:20])
    assert [s.step for s in log.read()] == [1]
    with path.open("a") as file:
        file.write(metrics_line(second)[20:])
    assert [s.step for s in log.read()] == [1, 2] and log.last_step() == 2


def test_an_unknown_kind_is_one_line_naming_the_valid_ones_before_any_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        chaos.main(["--kinds", "hang,bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("unknown kind 'bogus' in --kinds; valid: " + ", ".join(k.value for k in ALL_KINDS))


def test_without_the_trainers_libraries_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Seen from a login install: the reference job failed in its first second (no transformers)."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else find_spec(name, *a))
    monkeypatch.setattr(chaos, "_run", lambda *a: pytest.fail("no cluster may start"))
    with pytest.raises(SystemExit) as exited:
        chaos.main([])
    assert exited.value.code == 2
    assert "has no transformers: pip install 'hyperlaunch[train]'" in capsys.readouterr().err


def test_a_failure_while_it_runs_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def fail(*_: object) -> int:
        raise ChaosError("the reference job 1 ended FAILED (trainer error (ModuleNotFoundError)): read /w/logs/m_1.out")

    monkeypatch.setattr(chaos, "_run", fail)
    assert chaos.main([]) == 1
    assert capsys.readouterr().err == "bench chaos: error: the reference job 1 ended FAILED (trainer error (ModuleNotFoundError)): read /w/logs/m_1.out\n"


def test_a_failed_reference_says_why(tmp_path: Path) -> None:
    class Ended:
        job, jobs, submitted_at, run_dir = "1", ["1"], 0.0, tmp_path

        def submit(self, **_: object) -> None:
            pass

        def wait_end(self) -> tuple[dict[str, object], float]:
            failure = {"attempt": 0, "cause": "trainer error", "detail": "ModuleNotFoundError: No module named 'transformers'", "nodes": []}
            return {"state": "FAILED", "log": "/w/logs/m_1.out", "failure": failure}, 1.0

    with pytest.raises(ChaosError, match=r"ended FAILED \(trainer error \(ModuleNotFoundError: No module named 'transformers'\)\): read /w/logs/m_1.out"):
        chaos.reference_run(Ended(), 160, 80, (512, 12))  # type: ignore[arg-type]
