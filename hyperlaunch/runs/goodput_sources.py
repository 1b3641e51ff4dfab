"""What the goodput ledger (hyperlaunch.runs.goodput) reads for a job: its lineage's records,
metrics and Slurm attempts (as `plot` reads them), each job's supervisor's decision records and
stdout log (its markers, for attempts with no record) and the times its rounds' failure records
were written."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hyperlaunch.core.metrics_records import MetricsRecord
from hyperlaunch.core.trainer_failures import trainer_failure_round
from hyperlaunch.runs import curves
from hyperlaunch.runs.attempts import read_lines
from hyperlaunch.runs.goodput import Ledger, RoundKey, build
from hyperlaunch.runs.job_status import JobStatus, job_decisions
from hyperlaunch.runs.jobs import JobRecord


def failure_times(run_dirs: Sequence[Path], job_ids: Sequence[str]) -> dict[RoundKey, float]:
    """(job, attempt, round) -> when that round's failure record was written (its file's time)."""
    wanted = set(job_ids)
    found: dict[RoundKey, float] = {}
    for folder in dict.fromkeys(run_dirs):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            key = trainer_failure_round(entry.name)
            if key is not None and key[0] in wanted:
                try:
                    found[key] = entry.stat().st_mtime
                except OSError:
                    continue
    return found


def devices_of(record: JobRecord) -> tuple[int, str]:
    """The job's GPUs (training nodes x GPUs a node), or its nodes where they have none."""
    nodes, gpus = record.spec.job.nodes, record.spec.cluster.gpus_per_node
    return (nodes * gpus, "GPU") if gpus > 0 else (nodes, "node")


def ledger_of(
    record: JobRecord, load: Callable[[str], JobRecord], statuses_of: Callable[[Sequence[JobRecord]], Sequence[JobStatus]],
    now: float | None = None,
) -> Ledger:
    """The ledger of `record`'s lineage (`load` reads an earlier job's record, `statuses_of`
    asks Slurm about the lineage's jobs, as `status` does)."""
    lineage = curves.lineage(record, load)
    return lineage_ledger(record, lineage, curves.read_records(lineage.metrics_paths), statuses_of, now)


def lineage_ledger(
    record: JobRecord, lineage: curves.Lineage, records: Sequence[MetricsRecord],
    statuses_of: Callable[[Sequence[JobRecord]], Sequence[JobStatus]], now: float | None = None,
) -> Ledger:
    """The ledger of a lineage whose metrics `records` are read already (`status J` reads them
    once for its loss line and this)."""
    statuses = list(statuses_of(list(lineage.records)))
    logs: Mapping[str, Sequence[str]] = {r.job_id: read_lines(r.log_paths[0]) for r in lineage.records}
    run_dirs = [Path(r.spec.output.run_dir) for r in lineage.records]
    decisions = {r.job_id: job_decisions(r) for r in lineage.records}
    devices, unit = devices_of(record)
    return build(
        records, statuses, logs, failure_times(run_dirs, lineage.job_ids), devices, unit, time.time() if now is None else now,
        decisions,
    )
