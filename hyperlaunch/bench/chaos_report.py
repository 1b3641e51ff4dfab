"""The chaos benchmark's results: a row per fault and the run's figures, as a table (Markdown,
as docs/performance.md shows it) and as one JSON document."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hyperlaunch.bench.chaos_figures import fault_figures, final_losses, loss_mismatches, totals
from hyperlaunch.bench.chaos_plan import Fault
from hyperlaunch.core.metrics_records import StepRecord
from hyperlaunch.runs.restart_causes import cut

CAUSE_CHARS = 90
"""A cause's length in the table (the JSON has it whole)."""


@dataclass
class Outcome:
    """One fault as it happened."""

    fault: Fault
    at: float | None = None
    """When it was injected (epoch seconds); None: never (the training had ended)."""
    target: str = ""
    causes: list[str] = field(default_factory=list)
    """The restarts `status --json` lists that appeared after it, in status's words."""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Run:
    """One training's wall time and step records."""

    jobs: Sequence[str]
    wall_s: float
    steps: Sequence[StepRecord]


def fault_rows(outcomes: Sequence[Outcome], steps: Sequence[StepRecord]) -> list[dict[str, Any]]:
    """Each fault's row: what it was and hit, and its figures from the step records."""
    times = [o.at for o in outcomes if o.at is not None]
    rows = []
    for outcome in outcomes:
        row: dict[str, Any] = {"index": outcome.fault.index + 1, "kind": outcome.fault.kind.value, "target_step": outcome.fault.target_step,
                               "hit": outcome.target, "cause": outcome.causes or ["none"], "notes": outcome.notes}
        if outcome.at is not None:
            later = [t for t in times if t > outcome.at]
            row.update(asdict(fault_figures(steps, outcome.at, min(later) if later else math.inf)))
        rows.append(row)
    return rows


LEDGER_SLACK_S = 2.0
"""How far the ledger's time lost to a fault may be from what the benchmark measured."""


def with_ledger(rows: Sequence[dict[str, Any]], outcomes: Sequence[Outcome], ledger: dict[str, Any]) -> None:
    """Each fault row that restarted the training gets the ledger's row for that restart
    (`hyperlaunch goodput J --json`): the restart whose failed round last progressed before
    the fault, its seconds lost and steps recomputed."""
    restarts = sorted(ledger.get("restarts") or [], key=lambda r: r["at"])
    used: set[int] = set()
    for row, outcome in zip(rows, outcomes, strict=True):
        if outcome.at is None or row["cause"] == ["none"]:
            continue
        before = [i for i, r in enumerate(restarts) if r["at"] <= outcome.at + 0.5 and i not in used]
        if before:
            used.add(before[-1])
            row["ledger_lost_s"] = restarts[before[-1]]["lost_s"]
            row["ledger_recomputed"] = restarts[before[-1]]["steps_recomputed"]


def ledger_agrees(rows: Sequence[dict[str, Any]]) -> bool:
    """Every fault that restarted the training has a ledger row within LEDGER_SLACK_S of the
    measured time to the next step and with the same steps recomputed."""
    restarted = [row for row in rows if row["cause"] != ["none"] and "recovery_s" in row]
    return all(
        "ledger_lost_s" in row and abs(row["ledger_lost_s"] - row["recovery_s"]) <= LEDGER_SLACK_S and row["ledger_recomputed"] == row.get("recomputed")
        for row in restarted
    )


def summary(reference: Run, chaos: Run, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    counted = totals(chaos.steps)
    differ = loss_mismatches(final_losses(chaos.steps), final_losses(reference.steps))
    return {
        "reference_wall_s": round(reference.wall_s, 1),
        "chaos_wall_s": round(chaos.wall_s, 1),
        "reference_jobs": list(reference.jobs),
        "chaos_jobs": list(chaos.jobs),
        "steps_kept": counted.kept,
        "steps_trained": counted.trained,
        "steps_trained_twice": counted.twice,
        "steps_recomputed_after_faults": sum(row.get("recomputed", 0) for row in rows),
        "losses_equal": not differ,
        "steps_whose_loss_differs": differ,
        "goodput_steps": round(counted.goodput, 3),
        "goodput_time": round(reference.wall_s / chaos.wall_s, 3) if chaos.wall_s else None,
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The faults as a Markdown table."""
    lines = [
        "| # | fault | step | hit | cause (`status --json`) | fault -> next step, s | steps recomputed | ledger: lost s, steps | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        step = "not injected" if "last_step" not in row else str(row["last_step"])
        cells = [
            str(row["index"]), row["kind"], step, row["hit"] or "-", "; ".join(cut(cause, CAUSE_CHARS) for cause in row["cause"]),
            _seconds(row.get("recovery_s")), str(row.get("recomputed", "-")),
            f"{row['ledger_lost_s']:.1f}, {row['ledger_recomputed']}" if "ledger_lost_s" in row else "-", "; ".join(row["notes"]),
        ]
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return lines


def ledger_lines(ledger: dict[str, Any], rows: Sequence[dict[str, Any]]) -> list[str]:
    """What `hyperlaunch goodput` says of the same training, beside the benchmark's figures."""
    parts = ledger["parts"]
    lost = sorted(((part, p["seconds"]) for part, p in parts.items() if part != "productive" and p["seconds"] >= 0.5), key=lambda item: -item[1])
    agrees = "yes" if ledger_agrees(rows) else f"NO (more than {LEDGER_SLACK_S:.0f} s apart, or other steps)"
    return [
        f"ledger (hyperlaunch goodput {ledger['jobs'][-1]}): goodput {ledger['goodput']:.3f} of {ledger['wall_s']:.1f} s wall time "
        f"(from the first submission); lost: " + ", ".join(f"{part} {seconds:.1f} s" for part, seconds in lost),
        f"ledger rows agree with the faults measured (within {LEDGER_SLACK_S:.0f} s, steps exactly): {agrees}",
    ]


def summary_lines(figures: dict[str, Any]) -> list[str]:
    equal = "yes, every step" if figures["losses_equal"] else f"NO: {len(figures['steps_whose_loss_differs'])} step(s) differ, first {figures['steps_whose_loss_differs'][:5]}"
    return [
        f"reference: {figures['reference_wall_s']:.1f} s (job {', '.join(figures['reference_jobs'])}); "
        f"under faults: {figures['chaos_wall_s']:.1f} s (job(s) {', '.join(figures['chaos_jobs'])})",
        f"final losses equal to the reference's: {equal}",
        f"steps trained twice: {figures['steps_trained_twice']} ({figures['steps_recomputed_after_faults']} of them below a fault's step, in the rows)",
        f"goodput: steps kept / trained {figures['steps_kept']} / {figures['steps_trained']} = {figures['goodput_steps']:.3f}; "
        f"reference / chaos wall time = {figures['goodput_time']:.3f}",
    ]
