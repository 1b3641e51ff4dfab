"""The supervisor's command line, as the batch script calls it:

    python3 supervisor.pyz --run-dir DIR --checkpoint-dir DIR --checkpoint-lock FILE \\
        --max-restarts N [--restarts-in-allocation N] [--spare-nodes N] [--exclude NODES] \\
        [--hyperpod on|off|auto] [--hyperpod-dir DIR] [--nccl-check [--require-efa]] [--script-name NAME] \\
        [--srun-flag=FLAG ...] -- torchrun ARGS...

Everything after `--` is the launch command the step script starts on each node (it adds
--nnodes and the rendezvous)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    run_dir: str
    """Where the trainer writes its records (progress, requeue requests, failures)."""
    checkpoint_dir: str
    checkpoint_lock: str
    max_restarts: int
    """Attempts in a row without a new checkpoint after which the job ends."""
    restarts_in_allocation: int
    """Rounds in a row without a new checkpoint restarted inside the allocation before a requeue."""
    spare_nodes: int
    """Allocated nodes that wait and take a lost node's place."""
    exclude: tuple[str, ...]
    """The user's --exclude nodes: never dropped from the job's excluded nodes."""
    hyperpod: str
    """on: HyperPod re-runs the step on a replaced node (srun --auto-resume=1), so no lost-node
    probes here; auto: the same where `hyperpod_dir` exists on the batch host; off: never."""
    hyperpod_dir: str
    nccl_check: bool
    """Each node logs which NCCL network plugin it finds (GPU jobs)."""
    require_efa: bool
    """A node whose step finds no plugin ends the job for good (`submit --require-efa`)."""
    script_name: str
    """A script job's run name ('' for the bundled trainer): its trainers get the HYPERLAUNCH_*
    variables and the runtime library on their path (hyperlaunch.supervisor.script_job)."""
    srun_flags: tuple[str, ...]
    launch_command: tuple[str, ...]


def parse(argv: Sequence[str]) -> Settings:
    argv = list(argv)
    if "--" not in argv:
        raise SystemExit("hyperlaunch supervisor: no launch command: pass it after --")
    split = argv.index("--")
    own, command = argv[:split], argv[split + 1 :]
    if not command:
        raise SystemExit("hyperlaunch supervisor: the launch command after -- is empty")
    parser = argparse.ArgumentParser(prog="hyperlaunch-supervisor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--checkpoint-lock", required=True)
    parser.add_argument("--max-restarts", type=int, required=True)
    parser.add_argument("--restarts-in-allocation", type=int, default=0)
    parser.add_argument("--spare-nodes", type=int, default=0)
    parser.add_argument("--exclude", default="")
    parser.add_argument("--hyperpod", choices=("on", "off", "auto"), default="off")
    parser.add_argument("--hyperpod-dir", default="")
    parser.add_argument("--nccl-check", action="store_true")
    parser.add_argument("--require-efa", action="store_true")
    parser.add_argument("--script-name", default="")
    parser.add_argument("--srun-flag", action="append", default=[])
    args = parser.parse_args(own)
    return Settings(
        run_dir=args.run_dir.rstrip("/") or "/",
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_lock=args.checkpoint_lock,
        max_restarts=args.max_restarts,
        restarts_in_allocation=args.restarts_in_allocation,
        spare_nodes=args.spare_nodes,
        exclude=tuple(node for node in args.exclude.split(",") if node),
        hyperpod=args.hyperpod,
        hyperpod_dir=args.hyperpod_dir,
        nccl_check=args.nccl_check or args.require_efa,
        require_efa=args.require_efa,
        script_name=args.script_name,
        srun_flags=tuple(args.srun_flag),
        launch_command=tuple(command),
    )
