"""Many faults in one training, on the dev cluster: a reference job (qwen3_tiny on 2 nodes and
a spare, a checkpoint every --every steps), then the same job under --faults faults injected
from outside while it trains, each at a step the seed draws, of the kinds below (by default
each once, in an order the seed draws), every killed node revived once the job has recovered.

    python -m hyperlaunch.bench chaos [--faults 8] [--seed 0] [--every 80] [--seq-len 512]
        [--micro-batch-size 12] [--kinds KIND,...] [--cluster-dir DIR] [--base-port PORT]
        [--workdir DIR] [--json FILE] [--memory-checkpoint-every N]

Examples:
    python -m hyperlaunch.bench chaos                       # the eight kinds once each, seed 0 (~13 min on 2 cores)
    python -m hyperlaunch.bench chaos --seed 7 --json chaos.json
    python -m hyperlaunch.bench chaos --faults 2 --kinds hang,disk-full
    python -m hyperlaunch.bench chaos --memory-checkpoint-every 5   # the same faults against memory snapshots
    python -m hyperlaunch.bench chaos --cluster-dir /tmp/c2 --base-port 47817   # a dev cluster of its own

Fault i lands in checkpoint interval i+1, at least 10 steps from a checkpoint, so a checkpoint
completes between two faults; the run trains (faults + 2) x --every steps. The checkpoint folder
is a 64 MiB tmpfs the benchmark mounts (a full disk fills it). A job a fault ends is resumed
(`hyperlaunch resume`). The batch (--seq-len, --micro-batch-size) makes a step long enough,
about 0.2 s on 2 cores, for a checkpoint interval to hold a fault and its recovery.

Per fault it prints the step of the last record before it, the restarts `hyperlaunch status J
--json` lists after it (`none`: the job just went on), the seconds from the fault to the next
step completed after it (by new trainers where any started) and the steps at or below that step
trained again after it. For the run: whether every step's final loss equals the reference's,
the steps trained twice, and goodput as steps kept / steps trained and as reference / chaos
wall time. Uses (and starts, if needed) the dev cluster in --cluster-dir; needs root."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hyperlaunch.bench.chaos_faults import ChaosError, Where, inject, released, revive, wait_for
from hyperlaunch.bench.chaos_figures import trainers_of
from hyperlaunch.bench.chaos_jobs import MODEL, Cli, Lineage, StepLog, cause_text, restarts_of
from hyperlaunch.bench.chaos_plan import ALL_KINDS, Fault, plan, total_steps
from hyperlaunch.bench.chaos_report import (
    Outcome,
    Run,
    fault_rows,
    ledger_lines,
    summary,
    summary_lines,
    table,
    with_ledger,
)
from hyperlaunch.bench.report import header, machine
from hyperlaunch.bench.runs import parser
from hyperlaunch.core.paths import hyperlaunch_home
from hyperlaunch.devcluster import cluster as devcluster
from hyperlaunch.devcluster.layout import DEFAULT_BASE_PORT

NODES = 6
"""2 train, 1 waits, and room for the nodes a fault takes away."""
DISK_MIB = 64
SETTLE_STEPS = 3
"""A fault after which the same trainers train this many steps caused no restart (yet: one that
comes later is still counted, until the next fault)."""
RECOVERY_TIMEOUT_S = 600.0
RELEASE_TIMEOUT_S = 90.0
"""Past Slurm's own notice of a dead node (SlurmdTimeout, 10 s on the dev cluster, and its ping)."""


def _options() -> argparse.ArgumentParser:
    options = parser("chaos", __doc__ + "\n\nkinds:\n" + "\n".join(f"  {k.value:<19} {k.words}" for k in ALL_KINDS))
    options.add_argument("--faults", type=int, default=len(ALL_KINDS), help="how many faults [default: 8, each kind once]")
    options.add_argument("--seed", type=int, default=0, help="draws the order, the steps and the ranks [default: 0]")
    options.add_argument("--every", type=int, default=80, help="checkpoint interval, steps [default: 80]")
    options.add_argument("--seq-len", type=int, default=512, help="the trainer's sequence length [default: 512]")
    options.add_argument("--micro-batch-size", type=int, default=12, help="sequences a rank trains on a step [default: 12]")
    options.add_argument("--kinds", default=",".join(k.value for k in ALL_KINDS), help="the kinds to draw from, comma-separated [default: all]")
    options.add_argument("--cluster-dir", type=Path, default=None, help="the dev cluster's folder [default: $HYPERLAUNCH_HOME/dev-cluster]")
    options.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT, help=f"its first port, where it is started [default: {DEFAULT_BASE_PORT}]")
    options.add_argument("--workdir", type=Path, default=None, help="the jobs' folders [default: a new temporary folder]")
    options.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    options.add_argument("--memory-checkpoint-every", type=int, default=0, metavar="N",
                         help="the faulted job also keeps memory snapshots every N steps (the reference never) [default: 0: none]")
    return options


def _cluster(root: Path, base_port: int, cli: Cli) -> bool:
    """The dev cluster up in `root`; whether this call started it."""
    running = devcluster.running_state(root)
    if running is not None:
        if running.layout.nodes < NODES - 1:
            raise ChaosError(f"the dev cluster in {root} has {running.layout.nodes} nodes; this needs {NODES - 1} (down, then up --nodes {NODES})")
        return False
    cli("dev-cluster", "up", "--dir", str(root), "--base-port", str(base_port), "--nodes", str(NODES), cwd=root.parent)
    return True


def _mount_tmpfs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "hyperlaunch-bench-chaos", str(folder)], check=True)


def _unmount(folder: Path) -> None:
    if subprocess.run(["umount", str(folder)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def reference_run(lineage: Lineage, max_steps: int, every: int, batch: tuple[int, int]) -> Run:
    lineage.submit(max_steps=max_steps, every=every, batch=batch)
    final, ended_at = lineage.wait_end()
    if final["state"] != "COMPLETED":
        failure = final.get("failure")
        why = f" ({cause_text(failure)})" if isinstance(failure, dict) else ""
        raise ChaosError(f"the reference job {lineage.job} ended {final['state']}{why}: read {final['log']}")
    return Run(jobs=list(lineage.jobs), wall_s=ended_at - lineage.submitted_at, steps=StepLog(lineage.run_dir).read())


class Chaos:
    """The submitted training under faults: each injected at its step, waited out, its killed
    nodes revived."""

    def __init__(self, lineage: Lineage, root: Path, every: int) -> None:
        self.lineage, self.root, self.every = lineage, root, every
        self.log = StepLog(lineage.run_dir)
        self.outcomes: list[Outcome] = []
        self.seen: set[str] = set()
        """The restarts already attributed to a fault."""
        self.dead: list[str] = []
        self.notes: list[str] = []
        """What happened outside any fault's recovery."""

    def run(self, faults: list[Fault]) -> Run:
        for fault in faults:
            outcome = Outcome(fault)
            self.outcomes.append(outcome)
            if not self._reach(fault.target_step - 8):
                continue
            self._attribute()
            if not self._reach(fault.target_step):
                continue
            self._inject(outcome)
        for _ in range(3):
            final, ended_at = self.lineage.wait_end()
            if final["state"] == "COMPLETED":
                break
            self._resume(final, self.notes)
        else:
            raise ChaosError(f"the training did not complete: job {self.lineage.job} ended {final['state']}")
        self._attribute()
        return Run(jobs=list(self.lineage.jobs), wall_s=ended_at - self.lineage.submitted_at, steps=self.log.read())

    def _reach(self, step: int) -> bool:
        """Wait until the training has passed `step`; False where it completed first."""
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        polls = 0
        while self.log.last_step() < step:
            polls += 1
            final = self.lineage.ended() if polls % 10 == 0 else None  # squeue every 2 s
            if final is not None:
                if final["state"] == "COMPLETED":
                    return False
                self._resume(final, self.notes)
            if time.monotonic() > deadline:
                raise ChaosError(f"job {self.lineage.job} did not reach step {step} within {RECOVERY_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
        return True

    def _attribute(self) -> None:
        """Give the last fault the restarts and set-aside checkpoints `status` lists that no
        fault has yet."""
        injected = [o for o in self.outcomes if o.at is not None]
        causes, notes = (injected[-1].causes, injected[-1].notes) if injected else (self.notes, self.notes)
        for job in dict.fromkeys(self.lineage.jobs[-2:]):
            status = self.lineage.status(job)
            for key, restart in restarts_of(status):
                if key not in self.seen:
                    self.seen.add(key)
                    causes.append(cause_text(restart))
            for aside in status.get("set_aside") or []:
                if aside["name"] not in self.seen:
                    self.seen.add(aside["name"])
                    notes.append(f"set aside as {aside['name']}: {aside['reason']}")

    def _inject(self, outcome: Outcome) -> None:
        fault = outcome.fault
        where = Where(root=self.root, job=self.lineage.job, ckpt_dir=self.lineage.ckpt_dir, model=MODEL,
                      every=self.every, last_step=self.log.last_step)
        injected = inject(fault, where)
        outcome.at, outcome.target = injected.at, injected.target
        outcome.notes += [injected.note] if injected.note else []
        self.dead += injected.killed
        hit = [s.step for s in self.log.read() if s.time <= injected.at][-1:]
        print(f"fault {fault.index + 1} {fault.kind.value}: {injected.target or '-'} after step {hit[0] if hit else 0}", flush=True)
        self._recover(outcome)
        self._revive(outcome)

    def _revive(self, outcome: Outcome) -> None:
        """Revive the killed nodes once the job has let go of them (given back, or the job
        requeued without them): revived sooner, a dead idle spare comes back before the
        supervisor's probe finds it, and the job never lost it."""
        assert outcome.at is not None
        for node in self.dead:
            try:
                wait_for(f"job {self.lineage.job} to let go of {node}", functools.partial(released, self.lineage.job, node), timeout=RELEASE_TIMEOUT_S)
                outcome.notes.append(f"{node} out of the job {time.time() - outcome.at:.1f} s after the fault")
            except ChaosError as error:
                outcome.notes.append(str(error))
            revive(self.root, node)
        self.dead.clear()

    def _recover(self, outcome: Outcome) -> None:
        """Until trainers started after the fault train a step, or the same trainers train
        SETTLE_STEPS; a job that ends meanwhile is resumed."""
        assert outcome.at is not None
        at = outcome.at
        before = [s for s in self.log.read() if s.time <= at]
        trainers = trainers_of(before[-1]) if before else None
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while True:
            after = [s for s in self.log.read() if s.time > at]
            if any(trainers_of(s) != trainers for s in after) or len(after) >= SETTLE_STEPS:
                return
            final = self.lineage.ended()
            if final is not None:
                if final["state"] == "COMPLETED":
                    outcome.notes.append("the training completed")
                    return
                self._resume(final, outcome.notes)
            if time.monotonic() > deadline:
                raise ChaosError(f"no step within {RECOVERY_TIMEOUT_S:.0f} s of fault {outcome.fault.index + 1} ({outcome.fault.kind.value})")
            time.sleep(0.5)

    def _resume(self, final: dict[str, object], notes: list[str]) -> None:
        for node in self.dead:
            revive(self.root, node)
        self.dead.clear()
        ended = self.lineage.job
        notes.append(f"job {ended} ended {final['state']}; resumed as job {self.lineage.resume()}")
        print(f"  {notes[-1]}", flush=True)


def _cleanup(lineages: list[Lineage], dead: list[str], root: Path, disk: Path | None, started: bool, cli: Cli) -> None:
    for lineage in lineages:
        for job in lineage.jobs:
            subprocess.run(["scancel", job], capture_output=True, check=False)
    for node in dead:
        try:
            revive(root, node)
        except Exception as error:  # noqa: BLE001 - the rest of the cleanup goes on
            print(f"could not revive {node}: {error}", file=sys.stderr)
    if disk is not None:
        _unmount(disk)
    if started:
        cli("dev-cluster", "down", "--dir", str(root), cwd=root.parent)


def main(argv: list[str] | None = None) -> int:
    options = _options()
    args = options.parse_args(argv)
    known = {kind.value: kind for kind in ALL_KINDS}
    names = [name.strip() for name in args.kinds.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        options.error(f"unknown kind {unknown[0]!r} in --kinds; valid: {', '.join(known)}")
    try:
        faults = plan(args.faults, args.seed, args.every, [known[name] for name in names])
    except ValueError as error:
        options.error(str(error))
    if importlib.util.find_spec("transformers") is None:
        options.error(f"the dev cluster's jobs run the trainer with this Python ({sys.executable}), which has no transformers: "
                      "pip install 'hyperlaunch[train]'")
    try:
        return _run(args, faults)
    except ChaosError as error:
        print(f"bench chaos: error: {error}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, faults: list[Fault]) -> int:
    root = (args.cluster_dir or hyperlaunch_home() / "dev-cluster").absolute()
    root.parent.mkdir(parents=True, exist_ok=True)
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="hyperlaunch-bench-chaos-"))).absolute()
    cli = Cli(dict(os.environ))
    started = _cluster(root, args.base_port, cli)
    os.environ["SLURM_CONF"] = cli.env["SLURM_CONF"] = str(root / "etc" / "slurm.conf")
    max_steps, batch = total_steps(args.faults, args.every), (args.seq_len, args.micro_batch_size)
    header("Many faults in one training", f"qwen3_tiny on 2 nodes of the dev cluster in {root} and a spare; {max_steps} steps, a checkpoint every "
           f"{args.every}{f', a memory snapshot every {args.memory_checkpoint_every}' if args.memory_checkpoint_every else ''}, "
           f"seq {args.seq_len} x micro-batch {args.micro_batch_size}; {args.faults} fault(s), seed {args.seed}; jobs in {work}")
    for fault in faults:
        print(f"  plan {fault.index + 1}: {fault.kind.value} past step {fault.target_step} (rank {fault.rank})", flush=True)
    reference, chaos = Lineage(cli, work / "reference"), Lineage(cli, work / "chaos")
    for lineage in (reference, chaos):
        lineage.workdir.mkdir(parents=True, exist_ok=True)
    runner: Chaos | None = None
    disk: Path | None = None
    try:
        ref = reference_run(reference, max_steps, args.every, batch)
        print(f"reference: {ref.wall_s:.1f} s, {len(ref.steps)} steps (job {reference.job})", flush=True)
        disk = chaos.ckpt_dir
        _mount_tmpfs(disk)
        chaos.submit(max_steps=max_steps, every=args.every, batch=batch, snapshots=args.memory_checkpoint_every)
        runner = Chaos(chaos, root, args.every)
        run = runner.run(faults)
        # While the cluster is up: the ledger asks Slurm about the jobs.
        ledger = json.loads(cli("goodput", chaos.job, "--json", cwd=chaos.workdir))
    finally:
        _cleanup([reference, chaos], runner.dead if runner else [], root, disk, started, cli)
    _report(ref, run, runner, ledger, args)
    return 0


def _report(ref: Run, run: Run, runner: Chaos, ledger: dict[str, Any], args: argparse.Namespace) -> None:
    rows = fault_rows(runner.outcomes, run.steps)
    with_ledger(rows, runner.outcomes, ledger)
    figures = summary(ref, run, rows)
    print("\n" + "\n".join(table(rows)) + "\n\n" + "\n".join(summary_lines(figures) + ledger_lines(ledger, rows)))
    for note in runner.notes:
        print(f"also: {note}")
    if args.json:
        document = {"machine": machine(), "seed": args.seed, "faults": rows, "notes": runner.notes, **figures, "ledger": ledger}
        args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
