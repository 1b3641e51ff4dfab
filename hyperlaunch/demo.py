"""The README's first command: on this one machine, bring up a 3-node Slurm cluster, train
the real Qwen3-0.6B architecture on 2 of its nodes with `hyperlaunch submit`, kill one of
those nodes part-way, and show the job coming back by itself from its last checkpoint.

Every step runs the same commands a user would type, printed before they run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hyperlaunch.core.paths import hyperlaunch_home

MODEL = "qwen3_0_6b"
STEPS = int(os.environ.get("HYPERLAUNCH_DEMO_STEPS", "16"))
EVERY = int(os.environ.get("HYPERLAUNCH_DEMO_CHECKPOINT_EVERY", "4"))
KILL_AT = int(os.environ.get("HYPERLAUNCH_DEMO_KILL_AT_STEP", "6"))
# Short sequences keep a step of the 0.6B model to seconds on two CPU cores.
TRAINER_ARGS = ["--seq-len", "32", "--micro-batch-size", "1", "--checkpoint-every", str(EVERY), "--keep-last", "2", "--tokenizer", "offline"]
WAIT_S = 20 * 60


class DemoFailed(Exception):
    pass


def say(message: str) -> None:
    print(f"\n[demo] {message}", flush=True)


def hl(*args: str, cwd: Path, show: bool = True, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `hyperlaunch ARGS` as a user would, echoing the command and its output."""
    if show:
        print(f"$ hyperlaunch {' '.join(args)}", flush=True)
    result = subprocess.run(
        [sys.executable, "-m", "hyperlaunch", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if show:
        print(result.stdout, end="", flush=True)
        if result.stderr.strip():
            print(result.stderr, end="", file=sys.stderr, flush=True)
    if check and result.returncode != 0:
        raise DemoFailed(f"'hyperlaunch {' '.join(args)}' exited {result.returncode}: {result.stderr.strip()}")
    return result


def status(job: str, cwd: Path) -> dict[str, Any]:
    return json.loads(hl("status", job, "--json", cwd=cwd, show=False).stdout)


def wait_for(what: str, predicate: Any, job: str, cwd: Path, timeout: float = WAIT_S) -> dict[str, Any]:
    """Poll status until predicate(status) holds, printing progress lines as they change."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        doc = status(job, cwd)
        line = f"  {doc['state']:<10} step {doc['last_step'] or 0:>3}/{STEPS}  loss {doc['last_loss'] or 0:.4f}  checkpoint {doc['checkpoint_step'] or '-'}  nodes {doc['node_list'] or '-'}"
        if line != last:
            print(line, flush=True)
            last = line
        if predicate(doc):
            return doc
        if doc["state"] in ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY"):
            raise DemoFailed(f"job {job} ended {doc['state']} while waiting for {what}; see 'hyperlaunch logs {job}'")
        time.sleep(3)
    raise DemoFailed(f"timed out after {timeout:.0f} s waiting for {what}")


def main() -> int:
    started = time.monotonic()
    work = hyperlaunch_home() / "demo"
    say(f"working in {work} (the demo's own folder: a previous demo's files there are replaced)")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    say("1/6 a 3-node Slurm cluster on this machine: munge, MariaDB + slurmdbd, slurmctld, 3 slurmd")
    hl("dev-cluster", "up", "--nodes", "3", cwd=work)
    conf = json.loads(hl("dev-cluster", "status", "--json", cwd=work, show=False).stdout)["slurm_conf"]
    os.environ["SLURM_CONF"] = conf

    say("2/6 is this cluster ready for hyperlaunch?")
    hl("doctor", cwd=work, check=False)

    say(f"3/6 train the real {MODEL} architecture (596M parameters) on 2 nodes, checkpoints every {EVERY} steps")
    submitted = hl("submit", "--nodes", "2", "--model", MODEL, "--max-steps", str(STEPS), "--json", "--", *TRAINER_ARGS, cwd=work)
    job = json.loads(submitted.stdout)["job_id"]
    wait_for(f"step {KILL_AT}", lambda d: (d["last_step"] or 0) >= KILL_AT, job, work)

    victim = status(job, work)["node_list"]
    nodes = subprocess.run(["scontrol", "show", "hostnames", victim], capture_output=True, text=True, check=True).stdout.split()
    say(f"4/6 a machine dies: killing {nodes[-1]} (its slurmd and every process of the job on it)")
    killed_at = time.monotonic()
    hl("dev-cluster", "kill-node", nodes[-1], cwd=work)

    say("5/6 nobody touches anything: Slurm notices, requeues the job, the trainer resumes from -latest")
    wait_for("the resumed job", lambda d: d["resumed_from_steps"] and d["state"] == "RUNNING", job, work)
    resumed = status(job, work)
    print(f"  back after {time.monotonic() - killed_at:.0f} s, resumed from step {resumed['resumed_from_steps'][-1]} on {resumed['node_list']}")
    final = wait_for("the end of training", lambda d: d["state"] == "COMPLETED", job, work)
    hl("dev-cluster", "revive-node", nodes[-1], cwd=work)

    say("6/6 what happened, the checkpoints, and the exported Hugging Face model")
    hl("status", job, cwd=work)
    hl("checkpoints", "--model", MODEL, cwd=work)
    exported = work / "checkpoints" / f"{MODEL}-final"
    for path in sorted(exported.iterdir()):
        print(f"  {path.name:<32} {path.stat().st_size / 2**20:>9.1f} MiB")
    print(f"  load it with: AutoModelForCausalLM.from_pretrained({str(exported)!r})")

    restarts = final["restarts"]
    if not (restarts and restarts[0]["cause"] == "node failure" and final["last_step"] == STEPS):
        raise DemoFailed(f"expected one node-failure restart and {STEPS} steps, got {restarts} and {final['last_step']}")
    say(f"done in {(time.monotonic() - started) / 60:.1f} min. The cluster keeps running: 'hyperlaunch dev-cluster down' stops it.")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DemoFailed as err:
        print(f"\nhyperlaunch demo: failed: {err}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("\nhyperlaunch demo: interrupted", file=sys.stderr)
        sys.exit(130)
