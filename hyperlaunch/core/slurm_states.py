"""Slurm's words for where a job is in its life, as squeue and sacct print them."""

from __future__ import annotations

ACTIVE_STATES: frozenset[str] = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUE_HOLD", "REQUEUE_FED"}
)
"""The states of a job that has not ended: queued, running, or on its way back to the queue."""
