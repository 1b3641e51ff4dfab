"""The one description of a training job: built once per invocation (see hyperlaunch.job.plan),
validated here before anything is rendered or submitted, then passed down unchanged."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.script_env import RESERVED_ENV_NAMES, RESERVED_ENV_RULE
from hyperlaunch.core.trackers import MLFLOW, NAMES_CHOSEN, TENSORBOARD, TRACKERS
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.text_checks import check_text, fail, shown

if TYPE_CHECKING:
    from hyperlaunch.job.containers import ContainerSettings

DEFAULT_TRAINER_MODULE = "hyperlaunch.train"
HyperpodMode = Literal["auto", "on", "off"]
HYPERPOD_MODES: tuple[str, ...] = typing.get_args(HyperpodMode)
GresMode = Literal["auto", "on", "off"]
GRES_MODES: tuple[str, ...] = typing.get_args(GresMode)
NCCL_DEBUG_LEVELS: tuple[str, ...] = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
"""NCCL_DEBUG's levels (NCCL's environment-variable guide)."""

# Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or no limit. ASCII digits only
# (Python's \d also takes other scripts' digits, which int() reads but Slurm does not), and
# fullmatch, since `$` would let a trailing newline through.
_SLURM_TIME = re.compile(r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}")
_UNLIMITED = ("UNLIMITED", "INFINITE")
# What people type (4h, 90m, 2d, 1d12h, 30s), each unit at most once and in this order, so a
# value has one reading; JobSpec turns it into Slurm's D-HH:MM:SS. Digits bounded: a longer
# number is past Slurm's limit anyway, and int() refuses very long ones.
_HUMAN_TIME = re.compile(r"(?:([0-9]{1,12})d)?(?:([0-9]{1,12})h)?(?:([0-9]{1,12})m)?(?:([0-9]{1,12})s)?", re.IGNORECASE)
_TIME_FORMS = "M, H:M:S, D-H, D-H:M:S, UNLIMITED, or 4h, 90m, 2d, 1d12h, 30s"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
INT32_MAX = 2**31 - 1
"""The bound of every count: Slurm keeps node counts and time limits in 32 bits, and the
job's tools compare restart counts as Slurm's 32-bit numbers, which a longer number overflows."""
_MAX_TIME_MINUTES = INT32_MAX
PATH_MAX_BYTES = 4095
NAME_MAX_BYTES = 255
"""Linux's limits on a path and on one of its components (ENAMETOOLONG beyond them)."""
# `<job name>_<job id>.out` must fit in one path component: room for an array job id.
_JOB_NAME_MAX_BYTES = NAME_MAX_BYTES - len("_4294967295_4294967295.out")
_SLURM_SIGNAL_MAX_SECONDS = 0xFFFF  # Slurm stores the warning time in 16 bits
_SIGNAL_SLACK_SECONDS = 60


AFTER_FORM = re.compile(r"(?P<job>[0-9]{1,10}(?:_[0-9]{1,10})?)(?::(?P<kind>ok|any))?")
"""One --after entry: a job id (an array task's too) and how it must end (ok: completed)."""


def parse_after(entries: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(job id, `ok`|`any`) of --after entries; InvalidInput naming a malformed one."""
    found = []
    for entry in entries:
        match = AFTER_FORM.fullmatch(entry)
        if match is None:
            raise InvalidInput(f"--after {entry[:80]!r}: expected a Slurm job id, JOB:ok or JOB:any (e.g. 42, 42:ok, 42_3:any)")
        found.append((match.group("job"), match.group("kind") or "ok"))
    return tuple(dict.fromkeys(found))


def dependencies(spec: JobSpec) -> tuple[tuple[str, str], ...]:
    """(job id, `ok`|`any`) of every job this one waits for: --after's (ok unless said), and
    `resume --after-end`'s (any)."""
    found = [(m.group("job"), m.group("kind") or "ok") for m in map(AFTER_FORM.fullmatch, spec.after) if m]
    if spec.after_job is not None:
        found.append((spec.after_job, "any"))
    return tuple(dict.fromkeys(found))


def dependency_value(waits: Sequence[tuple[str, str]]) -> str | None:
    """sbatch's --dependency for `waits`: afterok:1:2,afterany:3 (every one must be met)."""
    kinds = {kind: [job for job, k in waits if k == kind] for kind in ("ok", "any")}
    value = ",".join(f"after{kind}:{':'.join(jobs)}" for kind, jobs in kinds.items() if jobs)
    return value or None


FLAG = "flag"
"""The key of a field's metadata that holds its command-line flag (cli/_job_flags.py reads it)."""


@dataclass(frozen=True)
class Flag:
    """A JobSpec field's command-line option: its names, help and placeholder. The option's
    type is the field's (an `auto`/`on`/`off` field is an on/off switch, a tuple a repeatable
    option)."""

    names: tuple[str, ...]
    help: str
    metavar: str | None = None
    panel: str = "Job"


JOB_PANEL = "Job"
CLUSTER_PANEL = "Cluster"
CONTAINER_PANEL = "Container"
RECOVERY_PANEL = "Recovery"
OUTPUT_PANEL = "Output"
PANELS = (JOB_PANEL, CLUSTER_PANEL, CONTAINER_PANEL, RECOVERY_PANEL, OUTPUT_PANEL)
"""The groups `--help` shows the job options in, in this order (after the command's own)."""


def flag(*names: str, help: str, metavar: str | None = None, panel: str = JOB_PANEL) -> dict[str, Flag]:
    """Field metadata declaring the field's flag, e.g. `field(default=1, metadata=flag("--nodes", "-N", help=...))`."""
    return {FLAG: Flag(names, help, metavar, panel)}


_ENV_HELP = (
    "KEY=VALUE exported on every node, written into the job script (private to you); KEY alone "
    "forwards KEY from this environment without writing its value (repeatable). "
    f"PATH and LD_* are allowed; {RESERVED_ENV_RULE}."
)
_HYPERPOD_CLUSTER_HELP = (
    "SageMaker HyperPod cluster (name or ARN) to ask for the instance type when --instance-type and "
    "the configs name none: first this node's /opt/ml/config/resource_config.json (often root-only; "
    "SAGEMAKER_RESOURCE_CONFIG_PATH moves it), else this cluster's SageMaker API (describe_cluster, "
    "with your AWS credentials and region), mapping the partition's Slurm nodes (ip-10-1-38-128) to "
    "their instance group; else cpu. Also lets resume --exclude-failed keep nodes HyperPod replaced. "
    "Not Slurm's --cluster."
)


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """Everything needed to render and submit one training job. Each field a user sets is
    declared once, with its flag and help (`flag`): the CLI's job options, the config keys and
    the HYPERLAUNCH_* variables are all derived from these fields, in this order."""

    # Paths are absolute because the script runs on other machines (and maybe inside a container).
    # "" in a script job (script or module set): the script builds its own model.
    model: str = field(default="", metadata=flag("--model", "-m", panel=JOB_PANEL, help="Model preset (see `hyperlaunch models`) or a local HF model directory, for the bundled trainer; a --script or --module job builds its own model and takes no --model."))
    # Absolute, as submitted; the job runs the copy in code_dir.
    script: str | None = field(default=None, metadata=flag("--script", panel=JOB_PANEL, help="Your own training script instead of the bundled trainer: torchrun runs it on every node, with the arguments after `--`, "
        "from a snapshot of its project taken now (in git: tracked files and uncommitted changes; else its folder), so later edits change nothing. "
        "It finds its checkpoint folder and resume point in HYPERLAUNCH_* variables, or through `from hyperlaunch import runtime` (docs/your-script.md).", metavar="FILE"))
    module: str | None = field(default=None, metadata=flag("--module", panel=JOB_PANEL, help="Your own training module, run as `torchrun -m MODULE` from a snapshot of the current folder's project (as --script).", metavar="MODULE"))
    name: str | None = field(default=None, metadata=flag("--name", panel=JOB_PANEL, help="A --script or --module job's run name: its checkpoints are <name>-<N>steps, its pointer <name>-latest, its job name this [default: the script's stem, or the module's last part].", metavar="NAME"))
    code_limit_mb: int = field(default=100, metadata=flag("--code-limit-mb", panel=JOB_PANEL, help="Largest code snapshot a --script or --module job may take, in MB (1 MB = 10^6 bytes) [default: 100]."))
    nodes: int = field(default=1, metadata=flag("--nodes", "-N", panel=JOB_PANEL, help="Number of nodes [default: the preset's recommendation]."))
    # GPUs = torchrun processes per node; None takes all of the instance type's GPUs.
    gpus_per_node: int | None = field(default=None, metadata=flag("--gpus-per-node", panel=CLUSTER_PANEL, help="GPUs (torchrun processes) per node [default: the preset's, at most the instance's]."))
    # The preset's name (env/*.toml): SageMaker's `ml.p5.48xlarge` is kept as `p5.48xlarge`; `cpu` on the dev cluster.
    instance_type: str = field(default="cpu", metadata=flag("--instance-type", panel=CLUSTER_PANEL, help="Instance type whose EFA/NCCL preset is used (e.g. p5.48xlarge or ml.p5.48xlarge) [default: the HyperPod cluster's (see --hyperpod-cluster), else cpu]."))
    partition: str | None = field(default=None, metadata=flag("--partition", "-p", panel=CLUSTER_PANEL, help="Slurm partition."))
    account: str | None = field(default=None, metadata=flag("--account", "-A", panel=CLUSTER_PANEL, help="Slurm account."))
    qos: str | None = field(default=None, metadata=flag("--qos", panel=CLUSTER_PANEL, help="Slurm QOS."))
    time: str | None = field(default=None, metadata=flag("--time", "-t", panel=CLUSTER_PANEL, help="Time limit: Slurm's 4:00:00 or 2-00:00:00, or 4h, 90m, 2d, 1d12h (written to the script as D-HH:MM:SS)."))
    exclusive: bool = field(default=False, metadata=flag("--exclusive/--no-exclusive", panel=CLUSTER_PANEL, help="Whole nodes only [default: on for GPU instance types]."))
    # `on`/`off`, decided before rendering (hyperlaunch.job.detect); `auto`, a choice nobody made, renders as off.
    gres_gpus: GresMode = field(default="auto", metadata=flag("--gres-gpus/--no-gres-gpus", panel=CLUSTER_PANEL, help="Request the GPUs as Slurm GRES (--gpus-per-node) or not [default: where the partition's nodes have GPU GRES; none when no cluster answers]."))
    exclude: tuple[str, ...] = field(default=(), metadata=flag("--exclude", panel=CLUSTER_PANEL, help="A node Slurm must not use (repeatable).", metavar="NODE"))
    after: tuple[str, ...] = field(default=(), metadata=flag("--after", panel=CLUSTER_PANEL, metavar="JOB", help="Start only after Slurm job JOB ends: JOB or JOB:ok once it completed, JOB:any however it ended (repeatable; sbatch --dependency). A job whose JOB:ok can no longer be met is cancelled by Slurm, and status says which job failed it; one behind a job Slurm has forgotten (MinJobAge after it ended) is refused here when its accounting says JOB:ok can never be met."))
    # As Pyxis reads it (containers.pyxis_image); None runs on the host.
    container_image: str | None = field(default=None, metadata=flag("--container-image", panel=CONTAINER_PANEL, help="Run the trainer in a Pyxis/enroot container: a .sqsh file on storage every node reads (see setup-pyxis.sh), "
        "or a registry image such as 123456789012.dkr.ecr.us-west-2.amazonaws.com/repo:tag (sent to Pyxis as REGISTRY#repo:tag; "
        "for ECR run `hyperlaunch ecr-login` first)."))
    container_mounts: tuple[str, ...] = field(default=(), metadata=flag("--container-mounts", panel=CONTAINER_PANEL, help="Extra container mount SRC[:DST[:FLAGS]], FLAGS joined by '+' such as ro (repeatable). Already mounted at the same path: "
        "checkpoint, log and run dirs (read-write); a local --model dir, a --tokenizer dir after `--` and the --data folder (read-only).", metavar="MOUNT"))
    container_workdir: str | None = field(default=None, metadata=flag("--container-workdir", panel=CONTAINER_PANEL, help="Working directory in the container [default: the run dir]."))
    # None or an `hl-` name is derived again where the job is planned (JobSpec.settled).
    container_name: str | None = field(default=None, metadata=flag("--container-name", panel=CONTAINER_PANEL, help="Pyxis container name: a node that unpacked the image under this name before (a requeued attempt, a later job) "
        "reuses it instead of importing it again. [default: hl-<image>-<hash> of the image's identity: a .sqsh file's path, "
        "size and mtime, so a rebuilt file gets a new name; a registry image's reference, so a tag pushed again is NOT "
        "re-pulled where the old one is unpacked: use a digest (@sha256:...) or a new tag]. Letters, digits, _ . -", metavar="NAME"))
    checkpoint_dir: str = field(metadata=flag("--checkpoint-dir", panel=OUTPUT_PANEL, help="Checkpoint folder shared by all nodes [default: ./checkpoints]."))
    data: str | None = field(default=None, metadata=flag("--data", panel=JOB_PANEL, metavar="PATH", help="Training data path or dataset name, passed to the trainer."))
    max_steps: int | None = field(default=None, metadata=flag("--max-steps", panel=JOB_PANEL, help="Train to this many optimizer steps."))
    # (KEY, VALUE) after the instance preset's exports; VALUE None forwards KEY by name (sbatch --export).
    env: tuple[tuple[str, str | None], ...] = field(default=(), metadata=flag("--env", "-e", panel=JOB_PANEL, help=_ENV_HELP, metavar="KEY[=VALUE]"))
    nccl_debug: str | None = field(default=None, metadata=flag("--nccl-debug", panel=CLUSTER_PANEL, help="Export NCCL_DEBUG=LEVEL (VERSION, WARN, INFO, ABORT, TRACE): INFO says whether NCCL uses EFA (NET/OFI) or TCP (NET/Socket).", metavar="LEVEL"))
    require_efa: bool = field(default=False, metadata=flag("--require-efa/--no-require-efa", panel=CLUSTER_PANEL, help="End the job in its first seconds, for good, when a node's training step finds no aws-ofi-nccl plugin (NCCL's EFA network) instead of letting NCCL fall back to TCP sockets, many times slower between p4d/p5 nodes [default: log which network each node uses, and go on]."))
    # `auto`: decided on the node (/opt/sagemaker_cluster), unless the plan decided it.
    hyperpod: HyperpodMode = field(default="auto", metadata=flag("--hyperpod/--no-hyperpod", panel=CLUSTER_PANEL, help="Force HyperPod auto-resume on or off [default: on where /opt/sagemaker_cluster exists]."))
    hyperpod_cluster: str | None = field(default=None, metadata=flag("--hyperpod-cluster", panel=CLUSTER_PANEL, help=_HYPERPOD_CLUSTER_HELP, metavar="NAME"))
    # hyperlaunch.core.protocol.RESTART_CEILING bounds all requeues.
    max_restarts: int = field(default=3, metadata=flag("--max-restarts", panel=RECOVERY_PANEL, help="Restart budget: how many attempts in a row may end without a new checkpoint (a crash, a lost node) and still be requeued; an attempt that saved resets it, so time-limit and preemption requeues after a save never use it (at most 1000 requeues in all) [default: 3]."))
    job_name: str | None = field(default=None, metadata=flag("--job-name", "-J", panel=JOB_PANEL, help="Slurm job name [default: the model name]."))
    log_dir: str = field(metadata=flag("--log-dir", panel=OUTPUT_PANEL, help="Folder for %x_%j.out/.err logs [default: ./logs]."))
    run_dir: str = field(metadata=flag("--run-dir", panel=OUTPUT_PANEL, help="Folder for the run's metrics [default: ./runs/<job name>]."))
    tracker: tuple[str, ...] = field(default=(), metadata=flag("--tracker", panel=OUTPUT_PANEL, help="Also log to an experiment tracker: tensorboard, mlflow or wandb (repeatable). One run for the whole training: "
        "requeues, restarts and `resume` log into it, and the steps a failed attempt logged past the checkpoint it restarted from are dropped or marked (docs/trackers.md). "
        "Needs `pip install \"hyperlaunch[trackers]\"` where the job runs; `status` shows where each run is.", metavar="NAME"))
    # Derived where the job is built (JobSpec.__post_init__) for --tracker tensorboard.
    tensorboard_dir: str | None = field(default=None, metadata=flag("--tensorboard-dir", panel=OUTPUT_PANEL, help="TensorBoard log folder of --tracker tensorboard, on storage every node writes [default: <run dir>/tensorboard]."))
    mlflow_uri: str | None = field(default=None, metadata=flag("--mlflow-uri", panel=OUTPUT_PANEL, help="MLflow tracking server of --tracker mlflow, e.g. http://10.0.0.5:5000; the experiment is the job name [default: MLFLOW_TRACKING_URI]. Credentials: --env MLFLOW_TRACKING_TOKEN.", metavar="URI"))
    # Used by the supervisor's rounds (hyperlaunch.supervisor.attempt).
    spare_nodes: int = field(default=0, metadata=flag("--spare-nodes", panel=RECOVERY_PANEL, help="Allocate this many extra nodes that wait idle: when a node dies, the trainers restart on a spare inside the same allocation from the latest checkpoint, without waiting in the queue [default: 0]."))
    restarts_in_allocation: int = field(default=2, metadata=flag("--restarts-in-allocation", panel=RECOVERY_PANEL, help="After a crash or hang on nodes that are still healthy (a transient NCCL error), restart the trainers in the same allocation up to this many times in a row without a new checkpoint, before the job is requeued (--max-restarts); bad input, an unloadable model or data end the job at once [default: 2]."))
    signal_seconds: int = field(default=120, metadata=flag("--signal-seconds", panel=RECOVERY_PANEL, help="Send the save signal this many seconds before the time limit [default: 120]."))
    torchrun: str = field(default="torchrun", metadata=flag("--torchrun", panel=JOB_PANEL, metavar="PATH", help="torchrun command on the nodes [default: the one next to this Python, else torchrun]."))
    after_job: str | None = None
    """A Slurm job this one starts after, however it ends (`--dependency=afterany:<id>`): set by
    `resume --after-end` while the resumed job still runs, never by a flag or config."""
    trainer_args: tuple[str, ...] = ()
    """Extra arguments appended to the trainer's command line, verbatim (after `--`)."""
    trainer_module: str = DEFAULT_TRAINER_MODULE
    """Internal, never set by the user: the Python module torchrun runs on every node (the
    default one through its console script, see render.trainer_program). Tests run the
    trainer through an entry module of their own that injects faults."""
    checkpoint_name: str = ""
    """Derived ("" until then), never set by the user: the name the model's checkpoints go by, decided once by
    hyperlaunch.core.checkpoints.checkpoint_name from the model and a `--model-name` trainer flag
    (a script job's: its name)."""
    code_root: str | None = None
    """Derived for a script job where it is planned (hyperlaunch.job.plan), never set by the user:
    the folder its snapshot copies (the git work tree's top level, else the script's folder or,
    for --module, the current one)."""
    tracker_run_id: str | None = None
    """Chosen at submit for a job with trackers (hyperlaunch.runs.submission), never set by the
    user, kept by requeues and `resume`: the training's run id (W&B's run id, the MLflow run's
    `hyperlaunch.run_id` tag). None until then (`render` and `--dry-run` show a placeholder)."""
    mlflow_run_id: str | None = None
    """Chosen with tracker_run_id for --tracker mlflow: the MLflow run created at submit that
    every attempt's run nests under (MLFLOW_RUN_ID in the job)."""
    mlflow_experiment_id: str | None = None
    """That run's experiment (its page in the MLflow UI)."""
    code_dir: str | None = None
    """Derived with code_root: the snapshot the job runs from, `<run_dir>/.hyperlaunch/code-<hash>`
    (hyperlaunch.job.code_snapshot), written at submit; requeues and `resume` run the same one."""

    def __post_init__(self) -> None:
        # The rules' modules are imported here, not above: the CLI reads the fields' flags for
        # `--help`, which must not pay for loading the presets and the container rules
        # (hyperlaunch.cli._job_flags).
        from hyperlaunch.core import checkpoints
        from hyperlaunch.core.instances import get_instance
        from hyperlaunch.job import containers

        _check_types(self)
        instance = get_instance(self.instance_type, gpus_per_node=self.gpus_per_node)
        if self.time is not None:
            object.__setattr__(self, "time", slurm_time(self.time))
        # One name for the type (the preset's), whether the user typed SageMaker's `ml.` form or not.
        object.__setattr__(self, "instance_type", instance.name)
        if isinstance(self.nccl_debug, str):
            object.__setattr__(self, "nccl_debug", self.nccl_debug.upper())
        if self.container_image is not None:
            object.__setattr__(self, "container_image", containers.pyxis_image(self.container_image))
        if self.container_image is None and containers.is_derived_name(self.container_name):
            object.__setattr__(self, "container_name", None)  # a derived name goes with its image
        # Fill the two derived defaults once, so every later reader sees concrete values.
        if self.gpus_per_node is None:
            object.__setattr__(self, "gpus_per_node", instance.gpus_per_node)
        if self.is_script_job and self.name is None:
            object.__setattr__(self, "name", default_run_name(self.script, self.module))
        if self.job_name is None:
            base = self.name if self.is_script_job else os.path.basename(self.model.rstrip("/"))
            object.__setattr__(self, "job_name", base or "hyperlaunch")
        if TENSORBOARD in self.tracker and self.tensorboard_dir is None:
            object.__setattr__(self, "tensorboard_dir", os.path.join(self.run_dir, "tensorboard"))
        _validate(self, instance.gpus_per_node)
        if not self.checkpoint_name:
            if self.is_script_job:
                name = self.name or ""
            else:
                name = checkpoints.checkpoint_name(self.model, targs.value_of(self.trainer_args, targs.MODEL_NAME))
            object.__setattr__(self, "checkpoint_name", name)

    @property
    def is_script_job(self) -> bool:
        """The user's own script or module runs instead of the bundled trainer."""
        return self.script is not None or self.module is not None

    @property
    def saves_checkpoints(self) -> bool:
        """False for a bundled-trainer run with --no-checkpoints (a script's arguments are its own)."""
        return self.is_script_job or targs.NO_CHECKPOINTS not in self.trainer_args

    @property
    def what(self) -> str:
        """What the job trains, as people read it: `qwen3_0_6b`, `script train.py`, `module pkg.train`."""
        if self.script is not None:
            return f"script {os.path.basename(self.script)}"
        if self.module is not None:
            return f"module {self.module}"
        return self.model

    @property
    def script_in_snapshot(self) -> str | None:
        """The copy of --script the job runs: its place under code_root, under code_dir."""
        if self.script is None or self.code_dir is None or self.code_root is None:
            return None
        return os.path.join(self.code_dir, os.path.relpath(self.script, self.code_root))

    @property
    def procs_per_node(self) -> int:
        """torchrun processes per node: one per GPU, or one on CPU-only nodes."""
        return self.gpus_per_node or 1

    @property
    def nodes_text(self) -> str:
        """The job's size as people read it: `2 node(s)`, `2 node(s) + 1 spare`."""
        return f"{self.nodes} node(s)" + (f" + {self.spare_nodes} spare" if self.spare_nodes else "")

    @property
    def container(self) -> ContainerSettings | None:
        """The container settings as one value; None for a job on the host."""
        from hyperlaunch.job import containers

        if self.container_image is None:
            return None
        return containers.ContainerSettings(
            image=self.container_image, mounts=self.container_mounts, workdir=self.container_workdir, name=self.container_name
        )

    @property
    def output_dirs(self) -> tuple[str, ...]:
        """The folders the job writes: checkpoints, logs, its run folder, TensorBoard's."""
        return tuple(p for p in (self.checkpoint_dir, self.log_dir, self.run_dir, self.tensorboard_dir) if p is not None)

    @property
    def mounted_paths(self) -> list[tuple[str, bool]]:
        """(path, read only) for what the trainer reads or writes outside a container image."""
        from hyperlaunch.job import containers

        return containers.job_paths(
            writable=self.output_dirs,
            model=self.model,
            tokenizer=targs.value_of(self.trainer_args, targs.TOKENIZER),
            data=self.data,
        )

    def settled(self) -> JobSpec:
        """This job with its container name derived from the image as it is now
        (containers.settled_name reads a .sqsh file's size and mtime): done where a job is
        planned, so that building a JobSpec, from a record say, reads no file."""
        from hyperlaunch.job import containers

        name = containers.settled_name(self.container_image, self.container_name)
        return self if name == self.container_name else dataclasses.replace(self, container_name=name)

    def replace(self, **changes: object) -> JobSpec:
        """A copy with some fields changed, validated again, its container name settled again."""
        return dataclasses.replace(self, **changes).settled()  # type: ignore[arg-type]


@functools.cache
def _field_types() -> dict[str, object]:
    return typing.get_type_hints(JobSpec)


def _check_types(spec: JobSpec) -> None:
    """Every field holds its declared type (a record written by hand or by another version
    reaches here as JSON), and text is text a file can hold: a value with lone surrogates
    (bytes that were not UTF-8 on the command line) cannot be written into the script."""
    for name, kind in _field_types().items():
        value = getattr(spec, name)
        if not _is_a(value, kind):
            fail(f"{name} must be {_type_name(kind)}, got {shown(value)}")
        for text in _texts(value):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                fail(f"{name} is not valid UTF-8 text: {shown(text)}")


def _is_a(value: object, kind: object) -> bool:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return isinstance(value, str)  # which values: checked with the valid ones listed
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_is_a(item, args[0]) for item in value)
        return len(value) == len(args) and all(_is_a(item, arg) for item, arg in zip(value, args, strict=True))
    if args:  # X | None
        return any(_is_a(value, arg) for arg in args)
    if kind is type(None):
        return value is None
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)  # type: ignore[arg-type]


def _type_name(kind: object) -> str:
    text = str(kind).replace("typing.", "")
    return {"<class 'int'>": "an integer", "<class 'str'>": "text", "<class 'bool'>": "true or false"}.get(text, text)


def _texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple):
        return [text for item in value for text in _texts(item)]
    return []


def _check_count(flag: str, value: int | None, low: int, high: int = INT32_MAX) -> None:
    """A count within what Slurm and bash arithmetic take, the bound stated."""
    if value is not None and not low <= value <= high:
        fail(f"{flag} must be between {low} and {high}, got {shown(value, 40)}")


def _check_path(name: str, value: str | None) -> None:
    """An absolute path the file system can hold: no component over NAME_MAX bytes, at most
    PATH_MAX in all (beyond them every open fails with ENAMETOOLONG, here or on the nodes)."""
    if value is None:
        return
    check_text(name, value, allow_newlines=True)
    if not os.path.isabs(value):
        fail(f"{name} must be an absolute path (the script runs elsewhere), got {shown(value)}")
    encoded = value.encode("utf-8")
    if len(encoded) > PATH_MAX_BYTES:
        fail(f"{name} is {len(encoded)} bytes long; a path can be at most {PATH_MAX_BYTES}: {shown(value)}")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > NAME_MAX_BYTES:
        fail(f"{name} has a component of {len(longest)} bytes; at most {NAME_MAX_BYTES} fit in a file name: {shown(value)}")


def slurm_time(value: str) -> str:
    """`4h`, `90m`, `1d12h` -> Slurm's `0-04:00:00`, `0-01:30:00`, `1-12:00:00`; any other value
    as it is (a Slurm form, or one _validate_time refuses)."""
    match = _HUMAN_TIME.fullmatch(value)
    if not value or match is None:
        return value
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    days, rest = divmod(total, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def _time_limit_seconds(value: str) -> int | None:
    if value.upper() in _UNLIMITED:
        return None
    days, _, clock = value.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H[:M[:S]]
        parts += [0] * (3 - len(parts))
        return int(days) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    if len(parts) == 1:  # minutes
        return parts[0] * 60
    if len(parts) == 2:  # M:S
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def _validate(spec: JobSpec, instance_gpus: int) -> None:
    from hyperlaunch.aws.hyperpod import check_cluster_name

    if spec.is_script_job:
        _validate_script_job(spec)
    else:
        _validate_model(spec)
    _check_count("--nodes", spec.nodes, 1)
    gpus = spec.gpus_per_node
    assert gpus is not None
    if instance_gpus == 0 and gpus != 0:
        fail(f"instance type {spec.instance_type!r} has no GPUs; --gpus-per-node must be 0, got {gpus}")
    if instance_gpus > 0 and not 1 <= gpus <= instance_gpus:
        fail(f"--gpus-per-node must be between 1 and {instance_gpus} on {spec.instance_type}, got {gpus}")

    # job_name ends up in #SBATCH lines and in %x log names, so it cannot hold a newline or a slash.
    check_text("job name", spec.job_name)
    if spec.job_name and "/" in spec.job_name:
        fail(f"job name must not contain '/': {shown(spec.job_name)}")
    if spec.job_name and len(spec.job_name.encode("utf-8")) > _JOB_NAME_MAX_BYTES:
        fail(f"job name must be at most {_JOB_NAME_MAX_BYTES} bytes (it names the log files), got {shown(spec.job_name)}")
    for name in ("partition", "account", "qos"):
        value = getattr(spec, name)
        check_text(name, value)
        if value is not None and " " in value:
            fail(f"{name} must not contain spaces: {shown(value)}")
    for node in spec.exclude:
        check_text("excluded node", node)
    _validate_time(spec.time)

    _validate_paths(spec)
    _validate_container(spec)

    _check_count("--max-steps", spec.max_steps, 1)
    for key, value in spec.env:
        if not _ENV_NAME.fullmatch(key):
            fail(f"--env name {key!r} is not a valid variable name (letters, digits, _; not starting with a digit)")
        if key in RESERVED_ENV_NAMES:
            fail(f"--env {key} is refused: {RESERVED_ENV_RULE}")
        if value is not None and "\x00" in value:
            fail(f"--env {key} value must not contain NUL")
    _validate_trackers(spec)
    if spec.require_efa and not gpus:
        fail(f"--require-efa is for GPU jobs (EFA is NCCL's network); {spec.instance_type} trains on CPU")
    if spec.gres_gpus not in GRES_MODES:
        fail(f"gres_gpus must be one of: {', '.join(GRES_MODES)}; got {shown(spec.gres_gpus)}")
    if spec.nccl_debug is not None and spec.nccl_debug not in NCCL_DEBUG_LEVELS:
        fail(f"--nccl-debug must be one of: {', '.join(NCCL_DEBUG_LEVELS)}; got {shown(spec.nccl_debug)}")
    if spec.hyperpod not in HYPERPOD_MODES:
        fail(f"hyperpod must be one of: {', '.join(HYPERPOD_MODES)}; got {spec.hyperpod!r}")
    if spec.hyperpod_cluster is not None and check_cluster_name(spec.hyperpod_cluster):
        fail(f"--hyperpod-cluster {shown(spec.hyperpod_cluster)}: {check_cluster_name(spec.hyperpod_cluster)}")
    _check_count("--max-restarts", spec.max_restarts, 0)
    _check_count("--spare-nodes", spec.spare_nodes, 0)
    _check_count("--restarts-in-allocation", spec.restarts_in_allocation, 0)
    if spec.after_job is not None and not re.fullmatch(r"[0-9]{1,10}(_[0-9]{1,10})?", spec.after_job):
        fail(f"after_job must be a Slurm job id, got {shown(spec.after_job)}")
    for entry in spec.after:
        if not AFTER_FORM.fullmatch(entry):
            fail(f"--after {shown(entry)}: expected a Slurm job id, JOB:ok or JOB:any (e.g. 42, 42:ok, 42_3:any)")
    _validate_signal(spec)
    for arg in spec.trainer_args:
        if "\x00" in arg:
            fail(f"trainer argument {arg!r} contains NUL")
    check_text("torchrun", spec.torchrun, allow_newlines=True)
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", spec.trainer_module):
        fail(f"trainer module {spec.trainer_module!r} is not a Python module name")


def _validate_trackers(spec: JobSpec) -> None:
    for name in spec.tracker:
        if name not in TRACKERS:
            fail(f"--tracker {shown(name)} is not a tracker; choose from: {', '.join(TRACKERS)}")
    if len(set(spec.tracker)) != len(spec.tracker):
        fail(f"--tracker names {', '.join(spec.tracker)}: give each tracker once")
    if spec.tensorboard_dir is not None and TENSORBOARD not in spec.tracker:
        fail("--tensorboard-dir is for --tracker tensorboard, which is not on")
    _check_path("--tensorboard-dir", spec.tensorboard_dir)
    if spec.mlflow_uri is not None and MLFLOW not in spec.tracker:
        fail("--mlflow-uri is for --tracker mlflow, which is not on")
    if MLFLOW in spec.tracker:
        uri = spec.mlflow_uri or ""
        if not uri:
            fail("--tracker mlflow needs the tracking server: --mlflow-uri http://HOST:5000 (or MLFLOW_TRACKING_URI)")
        check_text("--mlflow-uri", uri)
        if any(c.isspace() for c in uri):
            fail(f"--mlflow-uri must not contain spaces: {shown(uri)}")
    for key, _ in spec.env:
        for name in spec.tracker:
            if key in NAMES_CHOSEN.get(name, ()):
                fail(f"--env {key} is refused with --tracker {name}: hyperlaunch sets it to the training's one run")
    for name in ("tracker_run_id", "mlflow_run_id", "mlflow_experiment_id"):
        value = getattr(spec, name)
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value):
            fail(f"{name} must be letters, digits, _ or - (at most 64), got {shown(value)}")


def _validate_model(spec: JobSpec) -> None:
    from hyperlaunch.core import checkpoints
    from hyperlaunch.core.models import PRESETS, did_you_mean_preset

    check_text("model", spec.model)
    if not spec.model:
        fail(f"no model given: pass --model (presets: {', '.join(PRESETS)}, or an absolute model directory), or --script for your own")
    if checkpoints.is_model_directory(spec.model):
        if not os.path.isabs(spec.model):
            fail(f"model directory {shown(spec.model)} must be an absolute path")
        _check_path("model directory", spec.model)
    elif spec.model not in PRESETS:
        fail(f"unknown model {shown(spec.model)}{did_you_mean_preset(spec.model)}; presets: {', '.join(PRESETS)} (or an absolute model directory)")
    if spec.name is not None:
        fail("--name names a --script or --module job's run; the bundled trainer's checkpoints go by the model (or `-- --model-name NAME`)")


_MODULE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
_RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""A run name is a file name's start (`<name>-latest`); no leading '.' (hidden names are
hyperlaunch's own, hyperlaunch.core.checkpoints.is_own_entry)."""


def default_run_name(script: str | None, module: str | None) -> str:
    """A script job's name when --name is not given: the script's stem, the module's last part,
    with what a file name should not hold replaced by '_'."""
    base = os.path.splitext(os.path.basename(script))[0] if script else (module or "").rpartition(".")[2]
    return re.sub(r"^\.|[^A-Za-z0-9_.-]", "_", base) or "script"


def _validate_script_job(spec: JobSpec) -> None:
    if spec.script is not None and spec.module is not None:
        fail(f"--script {shown(spec.script)} and --module {shown(spec.module)}: give one of them")
    if spec.model:
        fail(f"--model {shown(spec.model)} is the bundled trainer's; a --script or --module job builds its own model (drop --model)")
    for flag_name, value in (("--max-steps", spec.max_steps), ("--data", spec.data)):
        if value is not None:
            fail(f"{flag_name} is the bundled trainer's; pass your script's own flag after `--`")
    _check_path("script", spec.script)
    if spec.module is not None and not _MODULE.fullmatch(spec.module):
        fail(f"--module {shown(spec.module)} is not a Python module name (like mypkg.train)")
    check_text("name", spec.name)
    if spec.name is not None and (not _RUN_NAME.fullmatch(spec.name) or len(spec.name.encode()) > NAME_MAX_BYTES - len("-latest")):
        fail(f"--name {shown(spec.name)}: use letters, digits, '_', '.', '-' (not first: '.'), at most {NAME_MAX_BYTES - len('-latest')} bytes")
    _check_count("--code-limit-mb", spec.code_limit_mb, 1, 1_000_000)
    _check_path("code_root", spec.code_root)
    _check_path("code_dir", spec.code_dir)


def _validate_time(time: str | None) -> None:
    if time is None or time.upper() in _UNLIMITED:
        return
    if not _SLURM_TIME.fullmatch(time):
        fail(f"--time {shown(time)} is not a Slurm time: use {_TIME_FORMS}")
    minutes = (_time_limit_seconds(time) or 0) // 60
    if minutes > _MAX_TIME_MINUTES:
        fail(f"--time {shown(time)} is too long: Slurm takes at most {_MAX_TIME_MINUTES} minutes, or UNLIMITED")


def _validate_paths(spec: JobSpec) -> None:
    for name in ("checkpoint_dir", "log_dir", "run_dir"):
        _check_path(name, getattr(spec, name))
    # log_dir lands in #SBATCH --output, a line sbatch parses itself; a backslash there also
    # switches off Slurm's %j expansion.
    check_text("log_dir", spec.log_dir)
    if "\\" in spec.log_dir:
        fail(f"log_dir must not contain a backslash: {shown(spec.log_dir)}")
    check_text("data", spec.data, allow_newlines=True)
    if spec.data is not None and os.path.isabs(spec.data):
        _check_path("data", spec.data)


def _validate_container(spec: JobSpec) -> None:
    container = spec.container
    if container is None:
        if spec.container_name is not None:
            fail(f"--container-name {shown(spec.container_name)} needs --container-image (it names the unpacked image)")
        return
    container.check(spec.mounted_paths)


def _validate_signal(spec: JobSpec) -> None:
    if not 1 <= spec.signal_seconds <= _SLURM_SIGNAL_MAX_SECONDS:
        fail(f"--signal-seconds must be between 1 and {_SLURM_SIGNAL_MAX_SECONDS}, got {shown(spec.signal_seconds, 40)}")
    if spec.time is None:
        return
    limit = _time_limit_seconds(spec.time)
    # slurmctld checks warning signals every 30 s and sends them up to that much early, so a
    # signal time within a minute of the limit can arrive as the job starts, every attempt.
    if limit is not None and spec.signal_seconds > limit - _SIGNAL_SLACK_SECONDS:
        fail(
            f"--signal-seconds {spec.signal_seconds} leaves no time to train within --time {spec.time} "
            f"({limit} s): Slurm may send the signal up to 30 s early, so use at most "
            f"{max(limit - _SIGNAL_SLACK_SECONDS, 0)} s, or a longer --time"
        )
