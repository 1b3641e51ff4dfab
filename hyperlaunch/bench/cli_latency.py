"""CLI latency: wall time of a fresh `hyperlaunch` process, as a user sees it.

    python -m hyperlaunch.bench cli [--runs 20] [--jobs 1000] [--hyperlaunch PATH] [--against CMD]

Times `hyperlaunch --help`, `render` of a 2-node qwen3_0_6b job, and `status` with --jobs
recorded jobs (the default 20 newest, and all of them with --json), each a new process; the
commands take turns, round after round, so a noisy moment hits all of them alike. Also timed
for scale: the bare interpreter and the one `sacct` call status makes; and with --against,
another tool's command in the same rounds (`--against "torchx --help"`), with `--help`'s
median as a multiple of its.

For status the jobs are real: that many held `sbatch --wrap true` jobs are submitted to the dev
cluster (started if none runs; needs root) and cancelled, so sacct reads real accounting
records; each gets a hyperlaunch record, a log with attempt markers and a metrics file. Job
records live in a temporary HYPERLAUNCH_HOME, so the user's own are untouched."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hyperlaunch.bench.report import header, spread

TARGETS_S = {"--help": 0.13, "render": 0.13, "status": 0.5, "status --json (all)": 0.5}
_SUBMIT_BATCH = 50


def _slurm_env() -> dict[str, str]:
    from hyperlaunch.cli._cluster import slurm_env

    env = slurm_env()
    if env.get("SLURM_CONF"):
        return env
    print("no Slurm cluster configured: starting the dev cluster", flush=True)
    subprocess.run([sys.executable, "-m", "hyperlaunch", "dev-cluster", "up"], check=True)
    return slurm_env()


def _submit_held(count: int, env: dict[str, str]) -> list[str]:
    """`count` held jobs, then cancelled: real accounting records for sacct to read. sbatch
    runs in batches of shell loops to spare a Python start per job."""
    ids: list[str] = []
    while len(ids) < count:
        batch = min(_SUBMIT_BATCH, count - len(ids))
        loop = f"for i in $(seq {batch}); do sbatch --parsable --hold -J hl-bench -o /dev/null --wrap true || exit 1; done"
        out = subprocess.run(["bash", "-c", loop], env=env, capture_output=True, text=True, check=True).stdout
        ids += [line.split(";")[0] for line in out.split()]
        print(f"\r  submitted {len(ids)}/{count} held jobs", end="", flush=True)
    print(flush=True)
    subprocess.run(["scancel", *ids], env=env, check=True)
    return ids


def _record_jobs(ids: list[str], home: Path, work: Path, slurm_conf: str) -> None:
    """A record, a two-attempt log and ten metrics lines per job, as real runs leave them."""
    from hyperlaunch.job.plan import build_spec
    from hyperlaunch.runs import jobs

    os.environ["HYPERLAUNCH_HOME"] = str(home)
    now = time.time()
    for index, job_id in enumerate(ids):
        run_dir = work / "runs" / f"job{job_id}"
        spec = build_spec(
            {"model": "qwen3_tiny", "nodes": 2, "run_dir": str(run_dir), "log_dir": str(work / "logs"),
             "checkpoint_dir": str(work / "checkpoints")},
            cwd=work, environ={},
        )
        record = jobs.JobRecord(job_id=job_id, spec=spec, submitted_at=now - len(ids) + index, slurm_conf=slurm_conf)
        jobs.save(record, script="#!/bin/bash\n")
        out, _ = record.log_paths
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            f"### hyperlaunch attempt-start restart=0 job={job_id} nodes=node[1-2] host=node1 time=0\n"
            f"### hyperlaunch attempt-end restart=0 job={job_id} exit=0 cause=completed action=exit time=1\n"
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps({"type": "step", "job_id": job_id, "restart": 0, "step": step, "loss": 5.0 - step / 10,
                        "tokens_per_s": 1000.0, "time": now})
            for step in range(1, 11)
        ]
        (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def _time_once(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.decode().strip()}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hyperlaunch.bench cli", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="rounds; every command runs once per round")
    parser.add_argument("--jobs", type=int, default=1000, help="recorded jobs for status (0: skip status)")
    parser.add_argument("--hyperlaunch", default=str(Path(sys.executable).with_name("hyperlaunch")),
                        help="the hyperlaunch executable to time [default: the one beside this Python]")
    parser.add_argument("--against", action="append", default=[], metavar="CMD",
                        help="another command to time in the same rounds, e.g. \"torchx --help\" (repeatable)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hyperlaunch-bench-cli-"))
    home = work / "home"
    env = {**os.environ, "HYPERLAUNCH_HOME": str(home)}
    exe = args.hyperlaunch
    commands: dict[str, list[str]] = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "--help": [exe, "--help"],
        "render": [exe, "render", "--nodes", "2", "--model", "qwen3_0_6b"],
        **{other: shlex.split(other) for other in args.against},
    }
    header("CLI latency", f"{exe}; {args.runs} rounds, a new process each run; seconds, median [min - max]")
    first_render = _time_once(commands["render"], env)  # compiles the templates into the cache
    if args.jobs:
        slurm = _slurm_env()
        ids = _submit_held(args.jobs, slurm)
        _record_jobs(ids, home, work, slurm["SLURM_CONF"])
        env["SLURM_CONF"] = slurm["SLURM_CONF"]
        from hyperlaunch.slurm.accounting import job_attempts_command

        commands["sacct alone (all jobs)"] = job_attempts_command(ids)
        commands["status"] = [exe, "status"]
        commands["status --json (all)"] = [exe, "status", "--json", "--limit", str(args.jobs)]
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_index in range(args.runs):
        for name, argv_ in commands.items():
            times[name].append(_time_once(argv_, env))
        print(f"\r  round {round_index + 1}/{args.runs}", end="", flush=True)
    print()
    print(f"  {'render, first run (templates compiled)':<32} {first_render:.3f}")
    for name, values in times.items():
        target = TARGETS_S.get(name)
        verdict = ""
        if target is not None:
            verdict = f"  target < {target:.2f}: " + ("met" if _median(values) < target else "MISSED")
        print(f"  {name:<32} {spread(values)}{verdict}")
    for other in args.against:
        ratio = _median(times["--help"]) / _median(times[other])
        print(f"  {'--help / ' + other:<32} {ratio:.2f}x")
    return 0


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


if __name__ == "__main__":
    sys.exit(main())
