"""The job's supervisor as the job runs it: one zipapp (`python3 supervisor-<hash>.pyz ARGS`)
holding hyperlaunch.supervisor, the core modules it reads (the protocol, its options, the
failure records, Slurm's state words, the checkpoint pointer and pruning rule), the per-node step script (templates/step.sh.j2,
rendered) and the runtime library scripts import (hyperlaunch.runtime), and nothing else: the
batch host's python3 needs no hyperlaunch installed, and neither does a script job's container.

`submit` writes it into the run folder (storage every node sees), named by the hash of its
bytes: a requeued attempt runs the copy its script names, the one it was submitted with, and a
newer hyperlaunch writes a new file beside it instead of changing it under a running job. The
bytes are the same for the same code (fixed timestamps and order), so `render` names the same
file that `submit` writes."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import zipfile
from importlib import resources
from pathlib import Path

from hyperlaunch import __version__
from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.paths import job_files_dir
from hyperlaunch.core.protocol import SAVE_SIGNAL
from hyperlaunch.script import nccl_plugin
from hyperlaunch.script.jinja_env import environment

BUNDLED_MODULES = (
    "core/__init__.py",
    "core/atomic_file.py",
    "core/bounded_read.py",
    "core/checkpoint_integrity.py",
    "core/checkpoint_layouts.py",
    "core/checkpoint_pruning.py",
    "core/checkpoints.py",
    "core/decision_records.py",
    "core/error_lines.py",
    "core/errors.py",
    "core/memory_snapshots.py",
    "core/metrics_reader.py",
    "core/metrics_records.py",
    "core/paths.py",
    "core/protocol.py",
    "core/script_args.py",
    "core/script_env.py",
    "core/slurm_states.py",
    "core/srun_lines.py",
    "core/supervisor_options.py",
    "core/trackers.py",
    "core/trainer_failures.py",
    "integrations/__init__.py",
    "integrations/_lazy_class.py",
    "integrations/_stop.py",
    "integrations/lightning.py",
    "integrations/transformers.py",
    "runtime/__init__.py",
    "runtime/checkpoint.py",
    "runtime/records.py",
    "runtime/signals.py",
    "runtime/snapshots.py",
    "runtime/watchdog.py",
    "supervisor/__init__.py",
    "supervisor/__main__.py",
    "supervisor/allocation.py",
    "supervisor/attempt.py",
    "supervisor/budget.py",
    "supervisor/decisions.py",
    "supervisor/framework_checkpoints.py",
    "supervisor/keeper.py",
    "supervisor/keepers.py",
    "supervisor/lock.py",
    "supervisor/output.py",
    "supervisor/ports.py",
    "supervisor/probe.py",
    "supervisor/rounds.py",
    "supervisor/script_job.py",
    "supervisor/signals.py",
    "supervisor/slurm_calls.py",
    "supervisor/snapshot_persist.py",
    "supervisor/spare_watch.py",
    "supervisor/step.py",
    "supervisor/step_errors.py",
    "supervisor/sweep_element.py",
    "supervisor/torn_checkpoints.py",
    "supervisor/work_dir.py",
    "trackers/__init__.py",
    "trackers/lineage.py",
    "trackers/mlflow_runs.py",
    "trackers/tensorboard_log.py",
    "trackers/wandb_run.py",
)
"""Under hyperlaunch/: what the supervisor imports, the runtime library a script job's scripts
import (the supervisor puts the bundle on their path) and the experiment trackers it forwards
their records to (each tracker's library comes from the script's environment); tests/unit/script/test_supervisor_bundle.py
runs both on an interpreter that sees nothing else."""
NEEDS_TORCH = ("runtime/snapshots.py",)
"""Bundled modules that import torch: the runtime library's memory snapshots, which only a
training that takes them imports (the script's environment has torch)."""
_PACKAGE_INIT = f'"""hyperlaunch {__version__}: the job supervisor\'s bundle (see hyperlaunch.script.supervisor_bundle)."""\n__version__ = {__version__!r}\n'
_MAIN = "import runpy\n\nrunpy.run_module('hyperlaunch.supervisor', run_name='__main__', alter_sys=True)\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def step_script() -> str:
    """The per-node step (templates/step.sh.j2): rendezvous, torchrun, the save signal passed on."""
    return environment().get_template("step.sh.j2").render(save_signal=SAVE_SIGNAL, **nccl_plugin.template_values())


@functools.lru_cache(maxsize=1)
def bundle_bytes() -> bytes:
    files = {"__main__.py": _MAIN, "hyperlaunch/__init__.py": _PACKAGE_INIT, "hyperlaunch/supervisor/step.sh": step_script()}
    package = resources.files("hyperlaunch")
    for name in BUNDLED_MODULES:
        files[f"hyperlaunch/{name}"] = package.joinpath(*name.split("/")).read_text(encoding="utf-8")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name])
    return buffer.getvalue()


def bundle_name() -> str:
    return f"supervisor-{hashlib.sha256(bundle_bytes()).hexdigest()[:16]}.pyz"


def bundle_path(run_dir: str) -> str:
    """Where the job's script runs the supervisor from."""
    return os.path.join(job_files_dir(run_dir), bundle_name())


def write_bundle(run_dir: str) -> tuple[Path, bool]:
    """The bundle written to bundle_path(run_dir), whole or not at all (hyperlaunch.core.atomic_file);
    (its path, whether this call created it). An existing one has the same bytes
    (its name is their hash) and is left as it is."""
    path = Path(bundle_path(run_dir))
    if path.is_file():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, bundle_bytes(), mode=0o644)
    return path, True
