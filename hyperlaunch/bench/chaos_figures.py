"""What the chaos benchmark measures, from the trainer's step records (metrics.jsonl, read with
hyperlaunch.core.metrics_records) and the times the faults were injected: per fault, the step it
hit, the seconds to the next completed step and the steps trained again; for the run, the
steps trained twice, the goodput and whether every step's final loss is the reference's. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hyperlaunch.core.metrics_records import StepRecord

LOSS_TOLERANCE = 1e-6
"""Relative, as the fault tests compare losses (a resumed run repeats them to the last bit on
CPU; the tolerance only absorbs the JSON round trip)."""

Trainers = tuple[str | None, int | None, int | None]


def trainers_of(step: StepRecord) -> Trainers:
    """Which trainers wrote the record: the Slurm job, its attempt and the round inside it."""
    return (step.job_id, step.restart, step.round)


@dataclass(frozen=True, kw_only=True)
class FaultFigures:
    last_step: int | None
    """The step of the last record written before the fault (None: no step yet)."""
    recovery_s: float | None
    """Seconds from the fault to the next step completed after it by trainers started after it
    (where any trained before the next fault), else by the same trainers; None: no step."""
    restarted: bool
    """Whether trainers started after the fault trained before the next one."""
    recomputed: int
    """Steps at or below last_step trained again after the fault, before the next fault."""


def fault_figures(steps: Sequence[StepRecord], at: float, until: float = math.inf) -> FaultFigures:
    """The figures of a fault injected at time `at` (epoch seconds, as the records' `time`),
    counting the records up to `until` (the next fault's time)."""
    before = [s for s in steps if s.time <= at]
    after = [s for s in steps if at < s.time <= until]
    last = before[-1] if before else None
    newer = [s for s in after if last is None or trainers_of(s) != trainers_of(last)]
    first = newer[0] if newer else (after[0] if after else None)
    return FaultFigures(
        last_step=last.step if last else None,
        recovery_s=first.time - at if first else None,
        restarted=bool(newer) and last is not None,
        recomputed=sum(1 for s in after if last is not None and s.step <= last.step),
    )


@dataclass(frozen=True, kw_only=True)
class Totals:
    trained: int
    """Step records written: every step trained, each time it was."""
    kept: int
    """Distinct steps: what the training has to show for it."""

    @property
    def twice(self) -> int:
        """Steps trained again after a fault threw them away."""
        return self.trained - self.kept

    @property
    def goodput(self) -> float:
        """Steps kept over steps trained."""
        return self.kept / self.trained if self.trained else 0.0


def totals(steps: Sequence[StepRecord]) -> Totals:
    return Totals(trained=len(steps), kept=len({s.step for s in steps}))


def final_losses(steps: Sequence[StepRecord]) -> dict[int, float]:
    """Each step's loss as finally trained: a step trained again keeps its last value."""
    return {s.step: s.loss for s in steps}


def loss_mismatches(losses: Mapping[int, float], reference: Mapping[int, float], tolerance: float = LOSS_TOLERANCE) -> list[int]:
    """The steps whose final loss is not the reference's (within `tolerance`, relative), or
    that only one of the two trained."""
    differ = set(losses) ^ set(reference)
    for step in set(losses) & set(reference):
        if not abs(losses[step] - reference[step]) <= tolerance * max(1.0, abs(reference[step])):
            differ.add(step)
    return sorted(differ)
