"""The job's keepers (hyperlaunch.supervisor.keeper) as the supervisor runs them, where the job
keeps memory snapshots (SupervisorOptions.keepers: the ranks each node runs): one step with a
keeper on every node of the allocation, for as long as it lasts; what each round's trainers are
told (where their keepers are, and which snapshot to restore, when one is newer than the
checkpoint `<model>-latest` names); the snapshot written to the checkpoint folder before the job
goes back to the queue, where the keepers end."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.memory_snapshots import (
    KeeperRefused,
    Layout,
    Restore,
    address,
    holdings,
    keepers_dir,
    newest_restorable,
    read_keeper_address,
    restore_json,
    write_ring,
)
from hyperlaunch.core.script_env import RESTORE_ENV, SNAPSHOTS_ENV
from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.supervisor import PYTHON, keeper, slurm_calls
from hyperlaunch.supervisor.output import err
from hyperlaunch.supervisor.snapshot_persist import persist

START_WAIT_S = 30.0
"""How long the keepers may take to listen before the job trains without them."""
HOLDINGS_TIMEOUT_S = 2.0
"""How long a keeper may take to say what it holds: one that does not answer is lost."""


def bundle_path() -> str:
    """What the keepers import hyperlaunch from: the supervisor's bundle (this file is
    `<bundle>.pyz/hyperlaunch/supervisor/keepers.py`), or the folder of the installed package."""
    return str(Path(os.path.abspath(__file__)).parents[2])


class Keepers:
    def __init__(self, options: SupervisorOptions, environ: Mapping[str, str], job: str) -> None:
        self.options = options
        self.environ = dict(environ)
        self.ranks_per_node = options.keepers
        self.job = job
        self.directory = keepers_dir(Path(options.run_dir), job)
        self.process: subprocess.Popen[bytes] | None = None
        self.nodes: list[str] = []
        self.taken: Layout | None = None
        """The layout of the last round: whose snapshots the keepers hold."""

    def start(self, nodes: Sequence[str]) -> bool:
        """A keeper on each node, listening within START_WAIT_S; else none, and the job trains
        with its disk checkpoints alone."""
        shutil.rmtree(self.directory, ignore_errors=True)  # an earlier attempt's addresses
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [PYTHON, "-m", keeper.__name__, "--directory", str(self.directory)]
        env = {**self.environ, "PYTHONPATH": bundle_path()}
        self.process = slurm_calls.start_step_on_each(list(nodes), command, env)
        deadline = time.monotonic() + START_WAIT_S
        while self.process is not None and time.monotonic() < deadline:
            if all(read_keeper_address(self.directory, node) for node in nodes):
                self.nodes = list(nodes)
                return True
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        err(f"hyperlaunch: the memory snapshots' keepers did not start on {','.join(nodes)}; training with disk checkpoints alone")
        self.stop()
        return False

    def layout(self, round_nodes: Sequence[str]) -> Layout:
        per = self.ranks_per_node
        ranks_of = {node: list(range(index * per, (index + 1) * per)) for index, node in enumerate(round_nodes)}
        keepers = {node: read_keeper_address(self.directory, node) or "" for node in round_nodes}
        return Layout(ranks_of, {node: where for node, where in keepers.items() if where}, self.options.snapshot_every)

    def round_environment(self, round_nodes: Sequence[str], lost: Sequence[str] = ()) -> dict[str, str]:
        """What the round's trainers are told: where their keepers are, and the snapshot to
        restore where the keepers left (not `lost`) hold one newer than the pointer's checkpoint."""
        if not self.nodes:
            return {}
        write_ring(self.directory, round_nodes)
        layout = self.layout(round_nodes)
        env: dict[str, str] = {}
        env[SNAPSHOTS_ENV] = layout.to_json()
        restore = self._newest(lost)
        if restore is not None and self.taken is not None:
            env[RESTORE_ENV] = restore_json(restore, self.taken)
            err(f"hyperlaunch: the trainers restore the memory snapshot of step {restore.step}")
        self.taken = layout
        return env

    def persist_newest(self, lost: Sequence[str], restart: int) -> Path | None:
        """Before the keepers end with the allocation: the newest whole snapshot, where it is
        newer than the pointer's checkpoint, written to the checkpoint folder."""
        restore = self._newest(lost)
        if restore is None or self.taken is None:
            return None
        try:
            path = persist(
                restore.step, restore.addresses(self.taken), self.taken, Path(self.options.checkpoint_dir), self.options.checkpoint_name,
                run_dir=Path(self.options.run_dir), job=self.job, restart=restart,
            )
        except (OSError, KeeperRefused) as error:
            err(f"hyperlaunch: the memory snapshot of step {restore.step} was not written to the checkpoint folder: {error}")
            return None
        if path is not None:
            err(f"hyperlaunch: wrote the memory snapshot of step {restore.step} to {path}: the requeued job starts there")
        return path

    def _newest(self, lost: Sequence[str]) -> Restore | None:
        """The newest whole snapshot of the last round, where it is newer than the checkpoint the
        pointer names."""
        if self.taken is None:
            return None
        held = {}
        for node, where in self.taken.keepers.items():
            if node in lost:
                continue
            try:
                held[node] = holdings(address(where), timeout=HOLDINGS_TIMEOUT_S)
            except (OSError, ValueError, KeeperRefused) as error:
                err(f"hyperlaunch: the memory snapshots' keeper on {node} did not answer ({error}): what it held is lost")
                continue
        restore = newest_restorable(held, self.taken.ranks_of)
        name = self.options.checkpoint_name
        pointed = rules.read_pointer(Path(self.options.checkpoint_dir), name) if name else None
        pointed_step = rules.parse_step(pointed, name) if pointed else None
        if restore is None or (pointed_step is not None and pointed_step >= restore.step):
            return None
        return restore

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(5)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: it goes with the job anyway
            process.kill()
