"""`hyperlaunch logs`: a requeued job's log split into its attempts."""

from __future__ import annotations

from hyperlaunch.cli.logs import annotate


def test_logs_split_into_attempts() -> None:
    lines = [
        "### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time=T0",
        "step 1",
        "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=crash action=requeue time=T1",
        "### hyperlaunch attempt-start restart=1 job=7 nodes=node[1,3] host=h time=T2",
        "step 2",
    ]
    shown = annotate(lines)
    assert shown[0].startswith("===== attempt 1 (restart 0) on node[1-2]")
    assert "===== attempt 2 (restart 1) on node[1,3] at T2 =====" in shown
    assert annotate(lines, attempt=1) == ["===== attempt 2 (restart 1) on node[1,3] at T2 =====", "step 2"]


def test_an_attempt_that_failed_says_how_and_where_its_errors_are() -> None:
    lines = [
        "### hyperlaunch attempt-start restart=0 job=7 nodes=node[1-2] host=h time=T0",
        "### hyperlaunch attempt-end restart=0 job=7 exit=1 cause=trainer-error kind=invalid-data action=exit time=T1",
    ]
    footer = annotate(lines, job_id="7")[-1]
    assert footer.startswith("===== attempt 1 ended: trainer error, invalid-data (exit 1)")
    assert "hyperlaunch logs 7 --err --attempt 0" in footer
    done = ["### hyperlaunch attempt-end restart=0 job=7 exit=0 cause=completed action=exit time=T1"]
    assert annotate(done) == done
