"""The one-line markers the sbatch script prints at each attempt's start and end, and their
parser. Kept apart from hyperlaunch.render so that reading logs (status, logs) needs no Jinja."""

from __future__ import annotations

import re

ATTEMPT_MARKER = "### hyperlaunch attempt-"
"""Prefix of the one-line markers the script prints at each attempt's start and end, e.g.
`### hyperlaunch attempt-start restart=0 job=12 nodes=node[1-2] host=node1 time=...` and
`### hyperlaunch attempt-end restart=0 job=12 exit=0 cause=completed action=exit time=...`.
cause is one of completed, time-limit (USR2 received), requeue-requested (the trainer saved
after a stop signal: its requeue-request file, or REQUEUE_EXIT_CODE), crash, restart-limit
(the attempt found the job already restarted max_restarts times); action is requeue or exit."""
_MARKER_FIELD = re.compile(r"(\w+)=(\S*)")


def parse_attempt_marker(line: str) -> dict[str, str] | None:
    """The fields of an attempt marker line ({'event': 'start'|'end', 'restart': ..., ...}),
    or None for any other line. Used to split a job's log into attempts."""
    stripped = line.strip()
    if not stripped.startswith(ATTEMPT_MARKER):
        return None
    event, _, rest = stripped[len(ATTEMPT_MARKER) :].partition(" ")
    return {"event": event, **dict(_MARKER_FIELD.findall(rest))}
