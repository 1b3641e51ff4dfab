"""The README's first command: bring up a local multi-node Slurm cluster and run the main
job on it, saying what happens at each stage.

Today the main job is a 2-node smoke job; it becomes `hyperlaunch submit --nodes 2 --model
qwen3_0_6b` with a node killed part-way once the CLI and the trainer land."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from hyperlaunch import slurm
from hyperlaunch.devcluster import cluster
from hyperlaunch.errors import HyperlaunchError

SMOKE_SCRIPT = """#!/bin/bash
#SBATCH --job-name=hyperlaunch-smoke
#SBATCH --nodes=2
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={log}
echo "attempt ${{SLURM_RESTART_COUNT:-0}} on $SLURM_JOB_NODELIST"
srun --ntasks-per-node=1 bash -c 'echo "task on $SLURMD_NODENAME"'
"""


def _say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def main() -> int:
    root = cluster.default_root()
    _say(f"bringing up a 3-node dev Slurm cluster in {root}")
    result = cluster.up(root=root, nodes=3, cpus_per_node=2, progress=lambda m: _say(m))
    layout = result.state.layout
    env = dict(os.environ, SLURM_CONF=str(layout.slurm_conf))
    _say("nodes: " + ", ".join(f"{n.name}={n.state}" for n in slurm.node_states(env=env)))
    workdir = Path(tempfile.mkdtemp(prefix="hyperlaunch-demo-"))
    log = workdir / "smoke-%j.out"
    script = workdir / "smoke.sbatch"
    script.write_text(SMOKE_SCRIPT.format(log=log))
    job = slurm.sbatch(str(script), env=env)
    _say(f"submitted 2-node smoke job {job}")
    deadline = time.monotonic() + 120
    while slurm.queue_state(job, env=env) and time.monotonic() < deadline:
        time.sleep(1)
    for _ in range(30):
        attempts = slurm.job_attempts([job], env=env)[job]
        if attempts and attempts[-1].state not in ("RUNNING", "PENDING", ""):
            break
        time.sleep(1)
    for attempt in attempts:
        _say(f"sacct: job {job} {attempt.state} on {attempt.node_list}")
    print(Path(str(log).replace("%j", job)).read_text(), end="")
    _say(f"done. Use the cluster with: export SLURM_CONF={layout.slurm_conf}")
    _say("stop it with: hyperlaunch dev-cluster down")
    return 0 if attempts and attempts[-1].state == "COMPLETED" else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except HyperlaunchError as err:
        print(f"hyperlaunch demo: error: {err.one_line()}", file=sys.stderr)
        sys.exit(err.exit_code)
