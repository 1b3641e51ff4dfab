"""Recovery time on the dev cluster: node kill -> first resumed training step, split into
detection (the supervisor probing the nodes once a rank failed, or Slurm's node timeout),
the requeue wait, job start, trainer start-up (imports, build, checkpoint load) and the first
step; plus the steps lost. With `--spare-nodes 1` the job holds a spare node and recovers
inside its allocation: detection and the new step's start are one phase there.

    python -m hyperlaunch.bench recovery [--runs 3] [--model qwen3_tiny] [--data DIR] [--spare-nodes 1]

With `--data` (a prepare-data folder, or raw data) the job trains on it: run it on a small and
a large prepared corpus to see that a resume costs the same whatever the corpus size.

Uses (and starts, if needed) the dev cluster in $HYPERLAUNCH_HOME/dev-cluster; needs root."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from hyperlaunch.bench.report import header
from hyperlaunch.bench.runs import parser


def _hl(*args: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "hyperlaunch", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"hyperlaunch {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def _records(run_dir: Path, job: str) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("job_id") == job:
            rows.append(row)
    return rows


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def _epoch(slurm_time: str) -> float:
    return datetime.fromisoformat(slurm_time).timestamp()  # sacct prints local time


def one_run(model: str, work: Path, data: Path | None = None, spare_nodes: int = 0) -> dict[str, float]:
    work.mkdir(parents=True)
    with_data = ["--data", str(data.absolute())] if data is not None else []
    submitted = json.loads(_hl(
        "submit", "--model", model, "--nodes", "2", "--spare-nodes", str(spare_nodes), "--exclusive",
        "--max-steps", "100000", *with_data, "--json", "--",
        "--seq-len", "32", "--micro-batch-size", "2", "--checkpoint-every", "10", "--keep-last", "2", cwd=work,
    ))
    job, run_dir = submitted["job_id"], Path(submitted["run_dir"])

    # The trainers' second run: the next Slurm attempt, or the next round inside the allocation.
    key = ("round", 1) if spare_nodes else ("restart", 1)

    def steps(which: tuple[str, int]) -> list[dict[str, Any]]:
        name, value = which
        return [r for r in _records(run_dir, job) if r.get("type") == "step" and r.get(name, 0) == value]

    _wait(lambda: len(steps(("restart", 0))) >= 25, 300, "25 steps")
    nodes = json.loads(_hl("status", job, "--json", cwd=work))["node_list"]
    # A training node that is not the batch host (the first): the second of the allocation.
    victim = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=True).stdout.split()[1]
    last_step = steps(("restart", 0))[-1]["step"]
    killed_at = time.time()
    _hl("dev-cluster", "kill-node", victim, cwd=work)
    first = _wait(lambda: next(iter(steps(key)), None), 600, "the first resumed step")
    resumed = next(r for r in _records(run_dir, job) if r.get("event") == "resumed" and r.get(key[0], 0) == key[1])
    attempts = json.loads(_hl("status", job, "--json", cwd=work))["attempts"]
    _hl("cancel", job, cwd=work)
    _hl("dev-cluster", "revive-node", victim, cwd=work)
    startup = resumed["startup"]
    if spare_nodes:
        # No Slurm attempt ends: the supervisor started the next round on the spare.
        failed_at = started_at = startup["process_start"]
    else:
        failed_at, started_at = _epoch(attempts[0]["end"]), _epoch(attempts[1]["start"])
    figures = {
        "detection": failed_at - killed_at,
        "requeue wait": started_at - failed_at,
        "job start": startup["process_start"] - started_at,
        "imports": startup["imports_s"],
        "build": startup["build_s"],
        "checkpoint load": startup["load_s"],
        "first step": first["time"] - resumed["time"],
        "total": first["time"] - killed_at,
        "hyperlaunch-owned (job start -> first step)": first["time"] - started_at,
        "steps lost": float(last_step - resumed["step"]),
    }
    return figures


def main(argv: list[str] | None = None) -> int:
    options = parser("recovery", __doc__)
    options.add_argument("--runs", type=int, default=3)
    options.add_argument("--model", default="qwen3_tiny")
    options.add_argument("--data", type=Path, default=None, help="train on this (a prepare-data folder, or raw data) [default: the built-in corpus]")
    options.add_argument("--spare-nodes", type=int, default=0, help="hold this many spare nodes: recover inside the allocation [default: 0]")
    args = options.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="hyperlaunch-bench-recovery-"))
    _hl("dev-cluster", "up", "--nodes", "4", cwd=base)
    status = json.loads(_hl("dev-cluster", "status", "--json", cwd=base))
    os.environ["SLURM_CONF"] = status["slurm_conf"]
    spares = f"{args.spare_nodes} spare node(s)" if args.spare_nodes else "no spare node"
    header("Recovery", f"model {args.model}, 2 nodes of a dev cluster, {spares}; SlurmdTimeout=10 s, cred_expire=5 s; {args.runs} run(s); data {args.data or 'built-in corpus'}")
    runs = []
    for index in range(args.runs):
        figures = one_run(args.model, base / f"run{index}", args.data, args.spare_nodes)
        runs.append(figures)
        print(f"run {index + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()), flush=True)
    print("\nmedian [min - max] seconds:")
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"  {key:<45} {statistics.median(values):7.1f}  [{min(values):.1f} - {max(values):.1f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
