"""The environment names the job depends on, which no `--env` may set.

The supervisor (hyperlaunch.supervisor) and the step script (templates/step.sh.j2) read Slurm's
job variables to decide restarts and the rendezvous, and export the launcher's own settings; bash itself runs BASH_ENV and ENV in every non-interactive shell (each
step is `bash -c`) and splits words on IFS. A user value for any of them would silently undo a
guarantee (`SLURM_RESTART_COUNT=0` lifts the restart limit), so JobSpec refuses them.

tests/unit/core/test_script_env.py scans the templates, the supervisor's code and the rendered script,
and fails when one of them reads or exports a name that is missing here. The instance
presets' NCCL/EFA variables are not reserved: overriding them with `--env` is their purpose.
"""

from __future__ import annotations

from hyperlaunch.core import trackers
from hyperlaunch.core.trainer_failures import TRAINER_FAILURE_FILE_ENV

TORCHRUN_SIGNALS_ENV = "PET_SIGNALS_TO_HANDLE"
"""torchrun's list of signals it forwards to its workers (the script adds the save signal)."""
TORCHRUN_SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
"""Seconds torchrun waits for its workers after a stop signal (the script sets the warning window)."""

SLURM_NAMES_READ = (
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_JOB_ID",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_PARTITION",
    "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_RESTART_COUNT",
    "SLURM_SRUN_COMM_HOST",
    "SLURM_SRUN_COMM_PORT",
    "SLURMD_NODENAME",
)
"""Slurm's job variables the supervisor and the step script read."""
STEP_NODES_ENV = "HYPERLAUNCH_STEP_NODES"
"""The nodes of a round of trainers, space-separated, when spares wait beside them."""
ROUND_ENV = "HYPERLAUNCH_ROUND"
"""Which round of trainers within the attempt (0, then 1 and on after restarts in the allocation)."""
RENDEZVOUS_PORT_ENV = "HYPERLAUNCH_RENDEZVOUS_PORT"
"""The round's rendezvous port on its head node, chosen by the supervisor."""
SLURM_JOB_ENV = "HYPERLAUNCH_SLURM_JOB"
"""The job as Slurm commands must name it (a sweep's element: `12_3`), for the step script's own
requeue when the batch host is lost (templates/partials/batch_host_lost.sh.j2)."""
NCCL_CHECK_ENV = "HYPERLAUNCH_NCCL_CHECK"
"""1: the step script logs which NCCL network plugin each node finds (GPU jobs); NCCL_REQUIRED:
a node that finds none ends the job for good (`submit --require-efa`)."""
NCCL_REQUIRED = "require"
CHECKPOINT_DIR_ENV = "HYPERLAUNCH_CHECKPOINT_DIR"
"""A script job's checkpoint folder (hyperlaunch.runtime reads it; so can any script)."""
RUN_DIR_ENV = "HYPERLAUNCH_RUN_DIR"
"""A script job's run folder: metrics.jsonl and the records `status` reads."""
NAME_ENV = "HYPERLAUNCH_NAME"
"""A script job's name: its checkpoints are `<name>-<N>steps`, its pointer `<name>-latest`."""
RESUME_FROM_ENV = "HYPERLAUNCH_RESUME_FROM"
"""The checkpoint `<name>-latest` named when the round of trainers started (absolute path),
empty for a fresh start: set by the supervisor for each round."""
SNAPSHOTS_ENV = "HYPERLAUNCH_MEMORY_SNAPSHOTS"
"""Where the round's keepers are, for its trainers' memory snapshots (core.memory_snapshots.Layout,
as JSON): set by the supervisor for each round of a job that keeps them."""
RESTORE_ENV = "HYPERLAUNCH_MEMORY_RESTORE"
"""The memory snapshot a round restores (core.memory_snapshots.restore_json), set only where one
is whole and newer than the checkpoint the pointer names."""
SCRIPT_NAMES = (CHECKPOINT_DIR_ENV, RUN_DIR_ENV, NAME_ENV, RESUME_FROM_ENV)
"""What a script job's scripts are told (docs/your-script.md)."""
NAMES_SET = (
    TORCHRUN_SIGNALS_ENV, TORCHRUN_SHUTDOWN_TIMEOUT_ENV, TRAINER_FAILURE_FILE_ENV, STEP_NODES_ENV, ROUND_ENV, RENDEZVOUS_PORT_ENV,
    SLURM_JOB_ENV, NCCL_CHECK_ENV, SNAPSHOTS_ENV, RESTORE_ENV, *SCRIPT_NAMES, *trackers.NAMES_SET,
)
"""Variables the batch script and the supervisor export for the step script, torchrun and the trainer."""
SHELL_NAMES = ("BASH_ENV", "ENV", "IFS")
"""Variables that change what bash runs or how it splits words."""

NAMES_READ_AS_GIVEN = ("LD_LIBRARY_PATH", "PYTHONPATH")
"""Read by the script but not reserved: a GPU job's step looks for NCCL's network plugin where
NCCL's loader would, so a value the user gives (`--env LD_LIBRARY_PATH=...`) is the one to read;
a script job's supervisor puts the runtime library ahead of the PYTHONPATH the user gives."""

RESERVED_ENV_NAMES: frozenset[str] = frozenset(SLURM_NAMES_READ + NAMES_SET + SHELL_NAMES)
"""Every name `--env` refuses. PATH and LD_* stay allowed (LD_PRELOAD is the NCCL-plugin workaround)."""

RESERVED_ENV_RULE = "names the job script reads or sets are reserved: " + ", ".join(
    SLURM_NAMES_READ + NAMES_SET + SHELL_NAMES
)
"""The rule in one line, for the error and for `--env`'s help."""
