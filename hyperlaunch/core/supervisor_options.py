"""The job supervisor's command line, declared once: the batch script writes it (the render of a
job, and each element of a sweep) and the supervisor reads it back, both through
SupervisorOptions, so the two cannot drift apart. Standard library only, Python 3.8+: it ships in
the supervisor's bundle (hyperlaunch.script.supervisor_bundle)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

HYPERPOD_MODES = ("on", "off", "auto")
"""What --hyperpod takes."""

_USAGE = """The supervisor's command line, as the batch script calls it:

    python3 supervisor.pyz --run-dir DIR --checkpoint-dir DIR --checkpoint-lock FILE \\
        [--checkpoint-name NAME] --max-restarts N [--restarts-in-allocation N] [--spare-nodes N] [--exclude NODES] \\
        [--hyperpod on|off|auto] [--hyperpod-dir DIR] [--nccl-check [--require-efa]] [--script-name NAME] [--keepers RANKS --snapshot-every N] \\
        [--srun-flag=FLAG ...] -- torchrun ARGS...

Everything after `--` is the launch command the step script starts on each node (it adds
--nnodes and the rendezvous)."""


@dataclass(frozen=True)
class SupervisorOptions:
    """What the batch script tells the job's supervisor: where the job's files are, its recovery
    settings, the flags of every round's srun step and the launch command."""

    run_dir: str
    """Where the trainer writes its records (progress, requeue requests, failures); kept without
    a trailing slash (`/` for the root)."""
    checkpoint_dir: str
    """Where the trainer writes its checkpoints (created at the start of each attempt)."""
    checkpoint_lock: str
    """The lock file that keeps a second job from training into the same checkpoints
    (hyperlaunch.core.protocol.checkpoint_lock_path)."""
    max_restarts: int
    """Attempts in a row without a new checkpoint after which the job ends."""
    launch_command: tuple[str, ...]
    """What the step script starts on each node, everything after `--` (torchrun and the
    trainer's arguments; the step adds --nnodes and the rendezvous)."""
    checkpoint_name: str = ""
    """The name the job's checkpoints go by (`<name>-<N>steps`, `<name>-latest`): the one a round
    will load is checked before it starts, and a torn one set aside
    (hyperlaunch.core.checkpoint_integrity). '' checks none."""
    restarts_in_allocation: int = 0
    """Rounds in a row without a new checkpoint restarted inside the allocation before a requeue."""
    spare_nodes: int = 0
    """Allocated nodes that wait and take a lost node's place."""
    exclude: tuple[str, ...] = ()
    """The user's --exclude nodes: never dropped from the job's excluded nodes."""
    hyperpod: str = "off"
    """on: HyperPod re-runs the step on a replaced node (srun --auto-resume=1), so no lost-node
    probes here; auto: the same where `hyperpod_dir` exists on the batch host; off: never."""
    hyperpod_dir: str = ""
    """The folder that tells HyperPod from other clusters on the batch host ('' for none)."""
    nccl_check: bool = False
    """Each node logs which NCCL network plugin it finds (GPU jobs)."""
    require_efa: bool = False
    """A node whose step finds no plugin ends the job for good (`submit --require-efa`); it
    implies nccl_check."""
    script_name: str = ""
    """A script job's run name ('' for the bundled trainer): its trainers get the HYPERLAUNCH_*
    variables and the runtime library on their path (hyperlaunch.supervisor.script_job)."""
    srun_flags: tuple[str, ...] = ()
    """The flags of every round's srun step."""
    keepers: int = 0
    """The ranks each node runs, where the job keeps memory snapshots (the trainer's
    --memory-checkpoint-every): every node of the allocation runs a keeper
    (hyperlaunch.supervisor.keepers); 0: none."""
    snapshot_every: int = 0
    """Where keepers run: the steps between two snapshots (`submit --memory-checkpoint-every`, or
    the bundled trainer's own flag), which the trainers are told with the keepers' layout."""

    code_dir: str = ""
    """A script job's code snapshot, mirrored into work_dir before each round; '' for none."""
    work_dir: str = ""
    """A script job's working folder (the run's `work`), into which each round mirrors the code
    snapshot (hyperlaunch.supervisor.work_dir); '' for the bundled trainer."""
    checkpoint_layout: str = ""
    """Which framework checkpoints count as a script's progress and resume point
    (hyperlaunch.core.checkpoint_layouts: auto, one layout, or off); '' for the bundled trainer."""

    def __post_init__(self) -> None:
        # One spelling of the run folder, whichever side built the value; the plugin can only be
        # required where it is looked for.
        object.__setattr__(self, "run_dir", self.run_dir.rstrip("/") or "/")
        object.__setattr__(self, "nccl_check", self.nccl_check or self.require_efa)

    def lines(self) -> tuple[tuple[str, ...], ...]:
        """The options before `--`, one line of the batch script each: a flag with its value,
        --hyperpod with its folder, --nccl-check with --require-efa. An option at its default is
        left out, except the restart settings and --hyperpod, always written."""
        lines: list[tuple[str, ...]] = [
            ("--run-dir", self.run_dir),
            ("--checkpoint-dir", self.checkpoint_dir),
            ("--checkpoint-lock", self.checkpoint_lock),
            *((("--checkpoint-name", self.checkpoint_name),) if self.checkpoint_name else ()),
            ("--max-restarts", str(self.max_restarts)),
            ("--restarts-in-allocation", str(self.restarts_in_allocation)),
        ]
        if self.spare_nodes:
            lines.append(("--spare-nodes", str(self.spare_nodes)))
        if self.exclude:
            lines.append(("--exclude", ",".join(self.exclude)))
        lines.append(("--hyperpod", self.hyperpod, *(("--hyperpod-dir", self.hyperpod_dir) if self.hyperpod_dir else ())))
        if self.nccl_check:
            lines.append(("--nccl-check", *(("--require-efa",) if self.require_efa else ())))
        if self.script_name:
            lines.append(("--script-name", self.script_name))
        if self.code_dir:
            lines.append(("--code-dir", self.code_dir))
        if self.work_dir:
            lines.append(("--work-dir", self.work_dir))
        if self.checkpoint_layout:
            lines.append(("--checkpoint-layout", self.checkpoint_layout))
        if self.keepers:
            lines.append(("--keepers", str(self.keepers)))
        if self.snapshot_every:
            lines.append(("--snapshot-every", str(self.snapshot_every)))
        # The `=` form: an srun flag is itself a word that starts with `-`.
        lines += [(f"--srun-flag={flag}",) for flag in self.srun_flags]
        return tuple(lines)

    def argv(self) -> list[str]:
        """The whole command line, the launch command after `--`."""
        return [*(word for line in self.lines() for word in line), "--", *self.launch_command]

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> SupervisorOptions:
        """The options in `argv`, as argv() writes them; a wrong command line exits
        (SystemExit) with argparse's usage and error, or a line saying what is missing."""
        argv = list(argv)
        if "--" not in argv:
            raise SystemExit("hyperlaunch supervisor: no launch command: pass it after --")
        split = argv.index("--")
        own, command = argv[:split], argv[split + 1 :]
        if not command:
            raise SystemExit("hyperlaunch supervisor: the launch command after -- is empty")
        args = _parser().parse_args(own)
        return cls(
            run_dir=args.run_dir,
            checkpoint_dir=args.checkpoint_dir,
            checkpoint_lock=args.checkpoint_lock,
            max_restarts=args.max_restarts,
            launch_command=tuple(command),
            checkpoint_name=args.checkpoint_name,
            restarts_in_allocation=args.restarts_in_allocation,
            spare_nodes=args.spare_nodes,
            exclude=tuple(node for node in args.exclude.split(",") if node),
            hyperpod=args.hyperpod,
            hyperpod_dir=args.hyperpod_dir,
            nccl_check=args.nccl_check,
            require_efa=args.require_efa,
            script_name=args.script_name,
            srun_flags=tuple(args.srun_flag),
            keepers=args.keepers,
            snapshot_every=args.snapshot_every,
            code_dir=args.code_dir,
            work_dir=args.work_dir,
            checkpoint_layout=args.checkpoint_layout,
        )


def _parser() -> argparse.ArgumentParser:
    """The reader of lines(): each of its flags, with the defaults of the fields it leaves out."""
    parser = argparse.ArgumentParser(prog="hyperlaunch-supervisor", description=_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--checkpoint-lock", required=True)
    parser.add_argument("--checkpoint-name", default="")
    parser.add_argument("--max-restarts", type=int, required=True)
    parser.add_argument("--restarts-in-allocation", type=int, default=0)
    parser.add_argument("--spare-nodes", type=int, default=0)
    parser.add_argument("--exclude", default="")
    parser.add_argument("--hyperpod", choices=HYPERPOD_MODES, default="off")
    parser.add_argument("--hyperpod-dir", default="")
    parser.add_argument("--nccl-check", action="store_true")
    parser.add_argument("--require-efa", action="store_true")
    parser.add_argument("--script-name", default="")
    parser.add_argument("--srun-flag", action="append", default=[])
    parser.add_argument("--keepers", type=int, default=0)
    parser.add_argument("--snapshot-every", type=int, default=0)
    parser.add_argument("--code-dir", default="")
    parser.add_argument("--work-dir", default="")
    parser.add_argument("--checkpoint-layout", default="")
    return parser
