"""`hyperlaunch checkpoints --verify`: each complete checkpoint checked against what its commit
recorded (hyperlaunch.core.checkpoint_integrity: every file's size, the small ones' CRC-32), so
a torn one (a shard cut short or missing, metadata rewritten) is found before a job loads it.
Reads sizes and small files only: seconds for a folder of large checkpoints. Exit code 6 when
one is torn."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.cli._output import out
from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.errors import CheckpointError

WHOLE = "whole"
TORN = "torn"
UNCHECKED = "not checked"
"""Committed before manifests were written: there is nothing to check it against."""


def verify(root: Path, models: list[str], *, as_json: bool) -> None:
    """Check every complete checkpoint of `models` in `root`, and say what was found."""
    rows: list[dict[str, object]] = []
    for model in models:
        for info in rules.list_checkpoints(root, model):
            if not info.complete:
                continue
            problems = integrity.verify(info.path)
            verdict = UNCHECKED if problems is None else TORN if problems else WHOLE
            rows.append(
                {
                    "model": model, "step": info.step, "name": info.path.name, "path": str(info.path), "verdict": verdict,
                    "problems": [f"{p.file} {p.what}" for p in problems or []],
                }
            )
    torn = [row for row in rows if row["verdict"] == TORN]
    if as_json:
        out.json({"checkpoint_dir": str(root), "checkpoints": rows})
    else:
        for row in rows:
            found = [str(problem) for problem in row["problems"]]  # type: ignore[attr-defined]
            detail = f": {'; '.join(found)}" if found else " (committed before sizes were recorded)" if row["verdict"] == UNCHECKED else ""
            out.text(f"{row['name']}  {row['verdict']}{detail}")
    if not rows:
        out.warn(f"no complete checkpoints to verify in {root}")
    if torn:
        names = ", ".join(str(row["name"]) for row in torn)
        raise CheckpointError(
            f"{len(torn)} of {len(rows)} checkpoint(s) torn: {names}",
            hint="a job sets a torn checkpoint aside by itself when it would load it; or move it away by hand",
        )
