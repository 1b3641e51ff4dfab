"""The supervisor's decisions as pure functions (hyperlaunch.supervisor.decisions) and the restart
budget's arithmetic (hyperlaunch.core.protocol), which `status` uses too: what comes after each
kind of round end, which spare replaces which node, which nodes a requeued job avoids."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hyperlaunch.core import protocol as p
from hyperlaunch.core.protocol import RestartCause
from hyperlaunch.supervisor.decisions import (
    PORT_TRIES,
    RoundEnd,
    after_round,
    exclusions,
    job_port,
    rendezvous_port,
    replace_lost,
)


def _none() -> list[str]:
    return []


def _down() -> list[str]:
    return ["node9"]


@pytest.mark.parametrize(
    ("end", "down", "expected"),
    [
        (RoundEnd(status=0), _down, ("exit", RestartCause.COMPLETED, "")),
        (RoundEnd(status=1, failure_kind="invalid-data", failure_final=True), _none, ("exit", RestartCause.TRAINER_ERROR, "kind=invalid-data")),
        # A down node comes first: it may have caused the failure, which healthy nodes then show.
        (RoundEnd(status=1, failure_kind="invalid-data", failure_final=True), _down, ("lost", RestartCause.NODE_FAILURE, "nodes=node9")),
        # A lost node comes first too: the probe found it while the step ran.
        (RoundEnd(status=1, lost=("node2",), failure_kind="invalid-data", failure_final=True), _none, ("lost", RestartCause.NODE_FAILURE, "nodes=node2")),
        # A final failure comes before the stop signal: a trainer that stopped for it records nothing.
        (RoundEnd(status=1, failure_kind="invalid-data", failure_final=True, save_requested=True), _none, ("exit", RestartCause.TRAINER_ERROR, "kind=invalid-data")),
        (RoundEnd(status=1, save_requested=True, requeue_requested=True), _none, ("requeue", RestartCause.TIME_LIMIT, "")),
        (RoundEnd(status=1, requeue_requested=True), _none, ("requeue", RestartCause.REQUEUE_REQUESTED, "")),
        (RoundEnd(status=p.REQUEUE_EXIT_CODE), _none, ("requeue", RestartCause.REQUEUE_REQUESTED, "")),
        (RoundEnd(status=1, lost=("node2", "node3")), _none, ("lost", RestartCause.NODE_FAILURE, "nodes=node2,node3")),
        # Slurm's down, drained or not responding nodes are lost like the probe's: Slurm would
        # requeue the job itself only once it marks one DOWN, never a drained one.
        (RoundEnd(status=137), _down, ("lost", RestartCause.NODE_FAILURE, "nodes=node9")),
        (RoundEnd(status=1, restarts_in_allocation=2), _none, ("restart", RestartCause.CRASH, "in_row=1")),
        (RoundEnd(status=1, failure_kind="hang", restarts_in_allocation=2, in_row=1), _none, ("restart", RestartCause.HANG, "in_row=2")),
        (RoundEnd(status=1, failure_kind="hang", restarts_in_allocation=2, in_row=2), _none, ("requeue", RestartCause.HANG, "")),
        (RoundEnd(status=1, failure_kind="unexpected"), _none, ("requeue", RestartCause.CRASH, "")),
    ],
)
def test_after_round(end: RoundEnd, down: object, expected: tuple[str, RestartCause, str]) -> None:
    decision = after_round(end, down)  # type: ignore[arg-type]
    assert (decision.action, decision.cause, decision.fields) == expected
    if decision.action == "lost":
        assert decision.nodes == tuple(expected[2].removeprefix("nodes=").split(","))


def test_slurm_is_asked_for_down_nodes_only_where_it_decides() -> None:
    asked: list[int] = []

    def down() -> list[str]:
        asked.append(1)
        return []

    after_round(RoundEnd(status=0), down)
    after_round(RoundEnd(status=1, save_requested=True), down)
    after_round(RoundEnd(status=1, lost=("node2",)), down)
    assert not asked
    after_round(RoundEnd(status=1), down)
    assert len(asked) == 1

    # A final trainer error on a node Slurm lists down: asked once, and the node is lost.
    asked.clear()

    def node2_down() -> list[str]:
        asked.append(1)
        return ["node2"]

    decision = after_round(RoundEnd(status=1, failure_final=True, failure_kind="data"), node2_down)
    assert (decision.action, decision.nodes, len(asked)) == ("lost", ("node2",), 1)


def test_each_lost_node_is_replaced_in_its_place_by_the_next_spare() -> None:
    r = replace_lost(["n1", "n2", "n3"], ["n2"], ["s1", "s2"])
    assert (r.nodes, r.replaced_by, r.spares_left) == (("n1", "s1", "n3"), ("s1",), ("s2",))
    r = replace_lost(["n1", "n2", "n3"], ["n1", "n3"], ["s1"])
    assert (r.nodes, r.replaced_by, r.spares_left) == (("s1", "n2"), ("s1",), ())


def test_exclusions_keep_the_users_own_and_the_newest_within_the_partitions_room() -> None:
    # 6 nodes, the job needs 3: room for 3 exclusions; n1 is the user's, never dropped.
    e = exclusions(["n1", "n4", "n5"], ["n6"], ["n1"], partition_nodes=6, job_nodes=3)
    assert e.nodes == ("n1", "n6", "n5") and e.dropped == ("n4",) and e.room == 3
    e = exclusions([], ["n2"], [], partition_nodes=2, job_nodes=2)
    assert e.nodes == () and e.dropped == ("n2",) and e.room == 0
    assert exclusions(["n2"], ["n2"], [], partition_nodes=9, job_nodes=2).nodes == ("n2",)


@pytest.mark.parametrize(
    ("failures", "restart", "max_restarts", "may"),
    [(0, 0, 0, True), (1, 0, 0, False), (3, 7, 3, True), (4, 7, 3, False), (0, p.RESTART_CEILING - 1, 3, True), (0, p.RESTART_CEILING, 3, False)],
)
def test_the_budget_allows_a_requeue(failures: int, restart: int, max_restarts: int, may: bool) -> None:
    assert p.may_requeue(failures, restart, max_restarts) is may
    if not may:
        assert p.refusal_to_requeue(failures, restart, max_restarts).startswith("not requeued: ")


def test_an_attempt_starts_only_within_the_budget() -> None:
    assert p.refusal_at_start(3, 5, 3) is None
    assert "4 attempts in a row made no progress" in (p.refusal_at_start(4, 5, 3) or "")
    assert "restart limit reached: 1 attempt in a row made no progress" in (p.refusal_at_start(1, 1, 0) or "")
    assert "restart ceiling reached" in (p.refusal_at_start(0, p.RESTART_CEILING + 1, 3) or "")
    assert p.refusal_at_start(0, p.RESTART_CEILING, 3) is None


def test_progress_resets_the_failures_in_a_row(tmp_path: Path) -> None:
    assert p.failures_after(True, 5) == 0 and p.failures_after(False, 5) == 6
    for attempt in (0, 2):
        p.write_progress(tmp_path, "7", attempt, 10)
    assert [p.failures_in_a_row(tmp_path, "7", ended) for ended in range(5)] == [0, 0, 1, 0, 1]


def test_the_progress_step_reads_back_what_the_trainer_wrote(tmp_path: Path) -> None:
    assert p.progress_step(tmp_path, "7", 0) == 0
    p.write_progress(tmp_path, "7", 0, 40)
    assert p.progress_step(tmp_path, "7", 0) == 40 and p.progress_step(tmp_path, "7", 1) == 0
    p.progress_path(tmp_path, "7", 1).write_text("forty\n")
    assert p.progress_step(tmp_path, "7", 1) == 0


def test_each_round_of_a_job_has_a_port_of_its_own_below_the_ephemeral_range() -> None:
    assert [job_port("4321", r) for r in (0, 1, 15, 16)] == [29136, 29137, 29151, 29136]
    assert job_port("0", 0) == 20000 and job_port("624", 15) == 29999
    ports = {job_port(str(job), r) for job in range(625) for r in range(16)}
    assert ports == set(range(20000, 30000))


def test_jobs_whose_ids_differ_by_625_share_a_port_and_the_second_moves_off_it() -> None:
    assert job_port("1000", 0) == job_port("1625", 0) == 26000
    held = {job_port("1000", 0)}
    assert rendezvous_port("1625", 0, held.__contains__) == 26001
    assert rendezvous_port("1000", 0, lambda port: False) == 26000


def test_the_next_free_port_wraps_within_the_range_and_none_free_keeps_the_jobs_own() -> None:
    assert rendezvous_port("624", 15, {29999}.__contains__) == 20000
    busy = set(range(20000, 20000 + PORT_TRIES - 1))
    assert rendezvous_port("0", 0, busy.__contains__) == 20000 + PORT_TRIES - 1
    assert rendezvous_port("0", 0, lambda port: True) == 20000
    assert rendezvous_port("", 3, lambda port: False) == 20003


def test_the_same_error_at_the_same_step_as_the_round_before_ends_the_job() -> None:
    repeated = RoundEnd(status=1, failure_kind="unexpected", repeated=True, restarts_in_allocation=2)
    decision = after_round(repeated, lambda: [])
    assert (decision.action, decision.cause, decision.fields) == ("exit", RestartCause.TRAINER_ERROR, "kind=unexpected repeated=1")
    assert after_round(dataclasses.replace(repeated, repeated=False), lambda: []).action == "restart"
    # A node down behind it may have caused it: lost, as before.
    assert after_round(repeated, lambda: ["n2"]).action == "lost"
    assert after_round(dataclasses.replace(repeated, lost=("n2",)), lambda: []).action == "lost"
