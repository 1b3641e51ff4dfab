"""Runs a rendered sbatch script with bash, as Slurm would on the batch host, but with stub
`srun`, `scontrol`, `squeue` and `torchrun` on PATH: srun runs its command once (one "node":
HL_TEST_STEP_NODE, node8 unless set; the keepers' step once on each node of HL_TEST_NODES),
scontrol answers like a 2-node job (HL_TEST_NODES: the allocation's nodes) and records
requeues, squeue answers with the states a test
wrote for a job (`job_states`, one per call, the last one repeated), or that it knows no such
job, and the torchrun stub records its argv and environment (what the trainer would get) and
writes HL_TEST_FAILURE_RECORD, if set, where a failing trainer would write its failure record,
and HL_TEST_PROGRESS, if set, where rank 0 records a completed checkpoint; it appends its
round (HYPERLAUNCH_ROUND) to `rounds` and exits HL_TEST_EXIT, or HL_TEST_EXIT_ONCE in its
first round only, after writing HL_TEST_STDERR on stderr. srun's arguments go to `srun.argv`. With
HL_TEST_WAIT_FOR_USR2 it starts a child, as torchrun starts the trainers, that waits for the
save signal."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.protocol import PROGRESS_PREFIX
from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV
from hyperlaunch.script import supervisor_bundle
from hyperlaunch.supervisor.decisions import job_port

JOB_ID = "4321"
HEAD_NODE = "node7"

def rendezvous_port(round_: int) -> int:
    """The port the supervisor gives a round's rendezvous where it is free."""
    return job_port(JOB_ID, round_)

_SRUN = """#!/bin/bash
# The keepers' step (memory snapshots): one task on each node of HL_TEST_NODES, ended with srun.
if [[ " $* " == *" --job-name=hyperlaunch-keepers "* ]]; then
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
  trap 'kill $(jobs -p) 2>/dev/null' EXIT
  trap 'exit 143' TERM
  for node in ${HL_TEST_NODES:-node7 node8}; do SLURMD_NODENAME=$node "$@" & done
  wait
  exit
fi
# Skip srun's own flags (all --long=value forms in our scripts), then run the task once.
printf '%s\\0' "$@" > "$HL_TEST_DIR/srun.argv"
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
# The task runs as Slurm's would on STEP_NODE (the allocation's second node unless told).
export SLURMD_NODENAME=${HL_TEST_STEP_NODE-node8}
echo $$ > "$HL_TEST_DIR/srun.pid"
exec "$@"
"""
_SCONTROL = """#!/bin/bash
case "$1 $2" in
  "show jobid") printf 'JobId=%s JobName=x\\n   ReqNodeList=(null) NodeList=node[7-8] BatchHost=node7\\n' "$3" ;;
  "show hostnames") [ -z "${3:-}" ] || printf '%s\\n' ${HL_TEST_NODES:-node7 node8} ;;
  # HL_TEST_LOST_NODE's slurmd listens on HL_TEST_LOST_PORT (a closed port: the node is gone).
  "show node") [ "$3" = "${HL_TEST_LOST_NODE:-}" ] || exit 1; printf 'NodeName=%s NodeAddr=127.0.0.1 Port=%s\\n' "$3" "$HL_TEST_LOST_PORT" ;;
  requeue*) echo "$2" >> "$HL_TEST_DIR/requeued" ;;
  update*) echo "$*" >> "$HL_TEST_DIR/scontrol.updates" ;;
  *) exit 1 ;;
esac
"""
# Like Slurm's for a step on a dead node: the answer comes after MessageTimeout.
_SCANCEL = """#!/bin/bash
echo "$*" >> "$HL_TEST_DIR/scancel.calls"
# Whether srun still ran when the step was cancelled (its tasks report their end to it).
if kill -0 "$(cat "$HL_TEST_DIR/srun.pid" 2>/dev/null)" 2>/dev/null; then echo running; else echo gone; fi > "$HL_TEST_DIR/scancel.srun"
sleep "${HL_TEST_SCANCEL_SECONDS:-0}"
"""
_SQUEUE = """#!/bin/bash
# squeue -h -j JOB --states=all -o %A|%T
echo "$*" >> "$HL_TEST_DIR/squeue.calls"
steps=0
if [[ " $* " == *" -s "* ]]; then steps=1; fi  # squeue -h -s -j JOB -o %i: the job's steps
job=
while [ $# -gt 0 ]; do
  if [ "$1" = -j ]; then job=$2; fi
  shift
done
if [ "$steps" = 1 ]; then printf '%s.0\\n%s.batch\\n' "$job" "$job"; exit 0; fi
states="$HL_TEST_DIR/job-states/$job"
if [ ! -s "$states" ]; then
  echo "slurm_load_jobs error: Invalid job id specified" >&2
  exit 1
fi
printf '%s|%s\n' "$job" "$(head -n 1 "$states")"
# One state per call; the last one stays.
if [ "$(wc -l < "$states")" -gt 1 ]; then sed -i 1d "$states"; fi
"""
# A trainer as torchrun starts it: Python, which may replace an inherited SIG_IGN with its own
# handler. It counts the save signals it gets and exits 75 (saved, please requeue) after one.
_TRAINER = r"""
import os, signal, sys, time
from pathlib import Path
d = Path(os.environ["HL_TEST_DIR"])
got = []
signal.signal(signal.SIGUSR2, lambda signum, frame: got.append(signum))
(d / "ready").touch()
deadline = time.time() + 10
while not got and time.time() < deadline:
    time.sleep(0.02)
time.sleep(0.3)  # a second copy of the signal, if one comes, arrives meanwhile
(d / "got-usr2").write_text(str(len(got)))
sys.exit(75 if got else 1)
"""
# Bash, not Python, so that each run stays a few milliseconds: argv and environment are written
# NUL-separated, which keeps newlines and quotes in values intact.
_TORCHRUN = """#!/bin/bash
printf '%s\\0' "$@" > "$HL_TEST_DIR/trainer.argv"
env -0 > "$HL_TEST_DIR/trainer.env"
grep '^SigIgn:' /proc/$$/status > "$HL_TEST_DIR/torchrun.sigign"
# A failing trainer's record, where the script told the trainer to leave it.
if [ -n "${HL_TEST_FAILURE_RECORD:-}" ]; then
  printf '%s' "$HL_TEST_FAILURE_RECORD" > "$TRAINER_FAILURE_FILE_ENV"
fi
# Rank 0's record of a checkpoint completed in this attempt, in the run dir HL_TEST_PROGRESS
# names (hyperlaunch.core.protocol.write_progress).
if [ -n "${HL_TEST_PROGRESS:-}" ]; then
  echo 10 > "$HL_TEST_PROGRESS/PROGRESS_PREFIX$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}"
fi
# HL_TEST_STDERR: what the trainers write on stderr before they exit (a traceback).
[ -z "${HL_TEST_STDERR:-}" ] || printf '%s\n' "$HL_TEST_STDERR" >&2
if [ -n "${HL_TEST_WAIT_FOR_USR2:-}" ]; then
  "$HL_TEST_PYTHON" -c "$HL_TEST_TRAINER" &
  wait $!
  : > "$HL_TEST_DIR/torchrun-survived"
  exit 1  # what torchrun returns after a worker exited 75
fi
echo "$HYPERLAUNCH_ROUND" >> "$HL_TEST_DIR/rounds"
# HL_TEST_STEP_STUCK: the step does not end (its other node is gone: srun waits for Slurm).
if [ -n "${HL_TEST_STEP_STUCK:-}" ] && [ "$HYPERLAUNCH_ROUND" = 0 ]; then
  exec sleep "$HL_TEST_STEP_STUCK" >/dev/null 2>&1
fi
# HL_TEST_EXIT_ONCE: the first round fails with it, the next ones succeed.
if [ -n "${HL_TEST_EXIT_ONCE:-}" ] && [ ! -e "$HL_TEST_DIR/failed-once" ]; then
  : > "$HL_TEST_DIR/failed-once"
  exit "$HL_TEST_EXIT_ONCE"
fi
exit "${HL_TEST_EXIT:-0}"
""".replace("TRAINER_FAILURE_FILE_ENV", TRAINER_FAILURE_FILE_ENV).replace("PROGRESS_PREFIX", PROGRESS_PREFIX)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    trainer: dict | None
    requeued: bool
    directory: Path


def make_stubs(directory: Path) -> Path:
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("srun", _SRUN), ("scontrol", _SCONTROL), ("squeue", _SQUEUE), ("scancel", _SCANCEL), ("torchrun", _TORCHRUN)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return bin_dir


def job_states(directory: Path, job_id: str, *states: str) -> None:
    """What the squeue stub answers for `job_id`: one state per call, the last one repeated."""
    folder = directory / "job-states"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / job_id).write_text("".join(f"{state}\n" for state in states))


def install_supervisor(script: str) -> Path:
    """Write the supervisor's bundle where the script runs it from, as `submit` does."""
    words = shlex.shlex(script[script.index("\nexec ") + 1 :], posix=True)
    words.whitespace_split = True
    path = Path([words.get_token() for _ in range(3)][2])  # exec python3 PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(supervisor_bundle.bundle_bytes())
    return path


def run_script(
    script: str, directory: Path, *, env: dict[str, str] | None = None, send_usr2: bool = False, stderr_file: bool = False
) -> Run:
    """Run the script; with `stderr_file` its stderr is a file (job.err), as Slurm's --error
    makes it, not a pipe."""
    bin_dir = make_stubs(directory)
    install_supervisor(script)
    script_path = directory / "job.sbatch"
    script_path.write_text(script)
    environ = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(directory),
        "HL_TEST_DIR": str(directory),
        "SLURM_JOB_ID": JOB_ID,
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "node[1-2]",
        **(env or {}),
    }
    if send_usr2:
        environ.update(HL_TEST_WAIT_FOR_USR2="1", HL_TEST_PYTHON=sys.executable, HL_TEST_TRAINER=_TRAINER)
    err_path = directory / "job.err"
    err_file = err_path.open("w") if stderr_file else None
    proc = subprocess.Popen(
        ["bash", str(script_path)], cwd=directory, env=environ, stdout=subprocess.PIPE,
        stderr=err_file or subprocess.PIPE, text=True,
    )
    if send_usr2:
        deadline = time.time() + 10
        while not (directory / "ready").exists() and time.time() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGUSR2)  # what --signal=B:USR2@N does
    stdout, stderr = proc.communicate(timeout=30)
    if err_file is not None:
        err_file.close()
        stderr = err_path.read_text()
    trainer = None
    if (directory / "trainer.argv").exists():
        argv = (directory / "trainer.argv").read_bytes().decode().split("\0")[:-1]
        entries = (directory / "trainer.env").read_bytes().decode().split("\0")[:-1]
        trainer = {"argv": argv, "env": dict(entry.split("=", 1) for entry in entries)}
    return Run(proc.returncode, stdout, stderr, trainer, (directory / "requeued").exists(), directory)


def sbatch_directive_args(script: str, *, legacy: bool = False) -> list[str]:
    """The arguments sbatch reads from the script's #SBATCH lines, parsed the way Slurm's
    `_get_argument` does (modern: ' or " quote; legacy Slurm: only " toggles and # always
    ends the line). Backslash escapes the next character in both."""
    args: list[str] = []
    for line in script.splitlines():
        if not line.startswith("#SBATCH"):
            continue
        text, i = line[len("#SBATCH") :], 0
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text) or text[i] == "#":
                break
            arg: list[str] = []
            quote, escape = "", False
            while i < len(text) and (quote or not text[i].isspace()):
                char = text[i]
                i += 1
                if escape:
                    escape = False
                elif char == "\\":
                    escape = True
                    continue
                elif legacy and char == '"':
                    quote = "" if quote else '"'
                    continue
                elif legacy and char == "#":
                    i = len(text)
                    break
                elif not legacy and quote:
                    if char == quote:
                        quote = ""
                        continue
                elif not legacy and char in "\"'":
                    quote = char
                    continue
                elif not legacy and char == "#":
                    i = len(text)
                    break
                arg.append(char)
            assert not quote, f"unmatched quote in {line!r}"
            if arg:
                args.append("".join(arg))
    return args
