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
