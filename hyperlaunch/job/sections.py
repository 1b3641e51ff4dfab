"""The sections of a job, as `--help` groups its options (Job, Cluster, Container, Recovery,
Output), and what hyperlaunch decided for it itself (Derived): each a small frozen value that
checks its own fields when built, as torchtitan nests one config per component. Each option is
declared once, on its field (`flag`): the CLI's options, the config keys and the HYPERLAUNCH_*
variables all come from these fields (hyperlaunch.job.spec.SETTINGS).

Nothing here fills a default or reads a file: a value is built complete (hyperlaunch.job.defaults
decides what the user left out), so a section holds what it was given and refuses what it cannot
hold, with the valid values named."""

from __future__ import annotations

import os
import re
import typing
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from hyperlaunch.core.checkpoint_layouts import CHOICES as LAYOUT_CHOICES
from hyperlaunch.core.script_env import RESERVED_ENV_NAMES, RESERVED_ENV_RULE
from hyperlaunch.job.flags import CLUSTER_PANEL, CONTAINER_PANEL, JOB_PANEL, OUTPUT_PANEL, RECOVERY_PANEL, flag
from hyperlaunch.job.text_checks import check_text, fail, shown
from hyperlaunch.job.value_checks import NAME_MAX_BYTES, check_count, check_path, check_types

DEFAULT_TRAINER_MODULE = "hyperlaunch.train"
HyperpodMode = Literal["auto", "on", "off"]
HYPERPOD_MODES: tuple[str, ...] = typing.get_args(HyperpodMode)
GresMode = Literal["auto", "on", "off"]
GRES_MODES: tuple[str, ...] = typing.get_args(GresMode)
NCCL_DEBUG_LEVELS: tuple[str, ...] = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
"""NCCL_DEBUG's levels (NCCL's environment-variable guide)."""
TRAINER_ONLY = ("model", "max_steps", "data")
"""Settings of the bundled trainer, which a --script or --module job does not take."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODULE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
_RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""A run name is a file name's start (`<name>-latest`); no leading '.' (hidden names are
hyperlaunch's own, hyperlaunch.core.checkpoints.is_own_entry)."""
# `<job name>_<job id>.out` must fit in one path component: room for an array job id.
_JOB_NAME_MAX_BYTES = NAME_MAX_BYTES - len("_4294967295_4294967295.out")
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

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
class Job:
    """What runs: the bundled trainer on a model, or the user's own script or module, on how
    many nodes, with which data, variables and arguments."""

    PANEL: ClassVar[str] = JOB_PANEL
    # Paths are absolute because the script runs on other machines (and maybe inside a container).
    # "" in a script job (script or module set): the script builds its own model.
    model: str = field(default="", metadata=flag("--model", "-m", help="Model preset (see `hyperlaunch models`) or a local HF model directory, for the bundled trainer; a --script or --module job builds its own model and takes no --model."))
    # Absolute, as submitted; the job runs the copy in code_dir.
    script: str | None = field(default=None, metadata=flag("--script", help="Your own training script instead of the bundled trainer: torchrun runs it on every node, with the arguments after `--`, "
        "from a snapshot of its project taken now (in git: tracked files and uncommitted changes; else its folder), so later edits change nothing. "
        "It finds its checkpoint folder and resume point in HYPERLAUNCH_* variables, through `from hyperlaunch import runtime`, or in its arguments: "
        "{checkpoint_dir}, {run_dir}, {name}, {nodes}, {resume} and '{resume?WORDS}' are filled at each start (docs/your-script.md).", metavar="FILE"))
    module: str | None = field(default=None, metadata=flag("--module", help="Your own training module, run as `torchrun -m MODULE` from a snapshot of the current folder's project (as --script).", metavar="MODULE"))
    name: str | None = field(default=None, metadata=flag("--name", help="A --script or --module job's run name: its checkpoints are <name>-<N>steps, its pointer <name>-latest, its job name this [default: the script's stem, or the module's last part].", metavar="NAME"))
    checkpoint_layout: str = field(default="auto", metadata=flag("--checkpoint-layout", help="Which of a --script job's own checkpoints count as progress and as its resume point, "
        "where it saves them as its framework does: auto (any below), transformers (checkpoint-N/ with trainer_state.json), lightning (*.ckpt, last.ckpt), "
        "dcp (step-N/ with .metadata: torchtitan), torch-save (one *.pt/*.pth file: nanoGPT's ckpt.pt), or off (only what it commits through the runtime library) [default: auto].", metavar="LAYOUT"))
    code_limit_mb: int = field(default=100, metadata=flag("--code-limit-mb", help="Largest code snapshot a --script or --module job may take, in MB (1 MB = 10^6 bytes) [default: 100]."))
    nodes: int = field(default=1, metadata=flag("--nodes", "-N", help="Number of nodes [default: the preset's recommendation]."))
    data: str | None = field(default=None, metadata=flag("--data", metavar="PATH", help="Training data path or dataset name, passed to the trainer."))
    max_steps: int | None = field(default=None, metadata=flag("--max-steps", help="Train to this many optimizer steps."))
    # (KEY, VALUE) after the instance preset's exports; VALUE None forwards KEY by name (sbatch --export).
    env: tuple[tuple[str, str | None], ...] = field(default=(), metadata=flag("--env", "-e", help=_ENV_HELP, metavar="KEY[=VALUE]"))
    job_name: str = field(metadata=flag("--job-name", "-J", help="Slurm job name [default: the model name]."))
    torchrun: str = field(default="torchrun", metadata=flag("--torchrun", metavar="PATH", help="torchrun command on the nodes [default: the one next to this Python, else torchrun]."))
    trainer_args: tuple[str, ...] = ()
    """Extra arguments appended to the trainer's command line, verbatim (after `--`)."""

    def __post_init__(self) -> None:
        check_types(self)
        if self.is_script_job:
            self._check_script_job()
        else:
            self._check_model()
        check_count("--nodes", self.nodes, 1)
        # job_name ends up in #SBATCH lines and in %x log names, so it cannot hold a newline or a slash.
        check_text("job name", self.job_name)
        if "/" in self.job_name:
            fail(f"job name must not contain '/': {shown(self.job_name)}")
        if len(self.job_name.encode("utf-8")) > _JOB_NAME_MAX_BYTES:
            fail(f"job name must be at most {_JOB_NAME_MAX_BYTES} bytes (it names the log files), got {shown(self.job_name)}")
        check_text("data", self.data, allow_newlines=True)
        if self.data is not None and os.path.isabs(self.data):
            check_path("data", self.data)
        check_count("--max-steps", self.max_steps, 1)
        for key, value in self.env:
            if not _ENV_NAME.fullmatch(key):
                fail(f"--env name {key!r} is not a valid variable name (letters, digits, _; not starting with a digit)")
            if key in RESERVED_ENV_NAMES:
                fail(f"--env {key} is refused: {RESERVED_ENV_RULE}")
            if value is not None and "\x00" in value:
                fail(f"--env {key} value must not contain NUL")
        for arg in self.trainer_args:
            if "\x00" in arg:
                fail(f"trainer argument {arg!r} contains NUL")
        check_text("torchrun", self.torchrun, allow_newlines=True)

    @property
    def is_script_job(self) -> bool:
        """The user's own script or module runs instead of the bundled trainer."""
        return self.script is not None or self.module is not None

    def _check_model(self) -> None:
        from hyperlaunch.core import checkpoints
        from hyperlaunch.core.models import PRESETS, did_you_mean_preset

        check_text("model", self.model)
        if not self.model:
            fail(f"no model given: pass --model (presets: {', '.join(PRESETS)}, or an absolute model directory), or --script for your own")
        if checkpoints.is_model_directory(self.model):
            if not os.path.isabs(self.model):
                fail(f"model directory {shown(self.model)} must be an absolute path")
            check_path("model directory", self.model)
        elif self.model not in PRESETS:
            fail(f"unknown model {shown(self.model)}{did_you_mean_preset(self.model)}; presets: {', '.join(PRESETS)} (or an absolute model directory)")
        if self.checkpoint_layout != "auto":
            fail("--checkpoint-layout is a --script or --module job's; the bundled trainer's checkpoints are its own")
        if self.name is not None:
            fail("--name names a --script or --module job's run; the bundled trainer's checkpoints go by the model (or `-- --model-name NAME`)")

    def _check_script_job(self) -> None:
        from hyperlaunch.core.script_args import unknown_placeholder

        if self.script is not None and self.module is not None:
            fail(f"--script {shown(self.script)} and --module {shown(self.module)}: give one of them")
        refused = unknown_placeholder(self.trainer_args)
        if refused:
            fail(refused)
        for key in TRAINER_ONLY:
            value = getattr(self, key)
            if key == "model" and value:
                fail(f"--model {shown(value)} is the bundled trainer's; a --script or --module job builds its own model (drop --model)")
            if key != "model" and value is not None:
                fail(f"--{key.replace('_', '-')} is the bundled trainer's; pass your script's own flag after `--`")
        check_path("script", self.script)
        if self.module is not None and not _MODULE.fullmatch(self.module):
            fail(f"--module {shown(self.module)} is not a Python module name (like mypkg.train)")
        check_text("name", self.name)
        if self.name is not None and (not _RUN_NAME.fullmatch(self.name) or len(self.name.encode()) > NAME_MAX_BYTES - len("-latest")):
            fail(f"--name {shown(self.name)}: use letters, digits, '_', '.', '-' (not first: '.'), at most {NAME_MAX_BYTES - len('-latest')} bytes")
        check_count("--code-limit-mb", self.code_limit_mb, 1, 1_000_000)
        if self.checkpoint_layout not in LAYOUT_CHOICES:
            fail(f"--checkpoint-layout {shown(self.checkpoint_layout)} is not one of: {', '.join(LAYOUT_CHOICES)}")


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Where it runs: the instance type and its GPUs, what Slurm is asked for, and the network."""

    PANEL: ClassVar[str] = CLUSTER_PANEL
    # GPUs = torchrun processes per node (0 on CPU nodes), decided by the plan when not given.
    gpus_per_node: int = field(metadata=flag("--gpus-per-node", help="GPUs (torchrun processes) per node [default: the preset's, at most the instance's]."))
    # The preset's name (env/*.toml): SageMaker's `ml.p5.48xlarge` is kept as `p5.48xlarge`; `cpu` on the dev cluster.
    instance_type: str = field(default="cpu", metadata=flag("--instance-type", help="Instance type whose EFA/NCCL preset is used (e.g. p5.48xlarge or ml.p5.48xlarge) [default: the HyperPod cluster's (see --hyperpod-cluster), else cpu]."))
    partition: str | None = field(default=None, metadata=flag("--partition", "-p", help="Slurm partition."))
    account: str | None = field(default=None, metadata=flag("--account", "-A", help="Slurm account."))
    qos: str | None = field(default=None, metadata=flag("--qos", help="Slurm QOS."))
    time: str | None = field(default=None, metadata=flag("--time", "-t", help="Time limit: Slurm's 4:00:00 or 2-00:00:00, or 4h, 90m, 2d, 1d12h (written to the script as D-HH:MM:SS)."))
    exclusive: bool = field(default=False, metadata=flag("--exclusive/--no-exclusive", help="Whole nodes only [default: on for GPU instance types]."))
    # `on`/`off`, decided before rendering (hyperlaunch.job.detect); `auto`, a choice nobody made, renders as off.
    gres_gpus: GresMode = field(default="auto", metadata=flag("--gres-gpus/--no-gres-gpus", help="Request the GPUs as Slurm GRES (--gpus-per-node) or not [default: where the partition's nodes have GPU GRES; none when no cluster answers]."))
    exclude: tuple[str, ...] = field(default=(), metadata=flag("--exclude", help="A node Slurm must not use (repeatable).", metavar="NODE"))
    after: tuple[str, ...] = field(default=(), metadata=flag("--after", metavar="JOB", help="Start only after Slurm job JOB ends: JOB or JOB:ok once it completed, JOB:any however it ended (repeatable; sbatch --dependency). A job whose JOB:ok can no longer be met is cancelled by Slurm, and status says which job failed it; one behind a job Slurm has forgotten (MinJobAge after it ended) is refused here when its accounting says JOB:ok can never be met."))
    nccl_debug: str | None = field(default=None, metadata=flag("--nccl-debug", help="Export NCCL_DEBUG=LEVEL (VERSION, WARN, INFO, ABORT, TRACE): INFO says whether NCCL uses EFA (NET/OFI) or TCP (NET/Socket).", metavar="LEVEL"))
    require_efa: bool = field(default=False, metadata=flag("--require-efa/--no-require-efa", help="End the job in its first seconds, for good, when a node's training step finds no aws-ofi-nccl plugin (NCCL's EFA network) instead of letting NCCL fall back to TCP sockets, many times slower between p4d/p5 nodes [default: log which network each node uses, and go on]."))
    # `auto`: decided on the node (/opt/sagemaker_cluster), unless the plan decided it.
    hyperpod: HyperpodMode = field(default="auto", metadata=flag("--hyperpod/--no-hyperpod", help="Force HyperPod auto-resume on or off [default: on where /opt/sagemaker_cluster exists]."))
    hyperpod_cluster: str | None = field(default=None, metadata=flag("--hyperpod-cluster", help=_HYPERPOD_CLUSTER_HELP, metavar="NAME"))

    def __post_init__(self) -> None:
        from hyperlaunch.aws.hyperpod import check_cluster_name
        from hyperlaunch.core.instances import get_instance
        from hyperlaunch.slurm.dependencies import after_error
        from hyperlaunch.slurm.time_limit import check_time_limit

        check_types(self)
        instance_gpus = get_instance(self.instance_type, gpus_per_node=self.gpus_per_node).gpus_per_node
        gpus = self.gpus_per_node
        if instance_gpus == 0 and gpus != 0:
            fail(f"instance type {self.instance_type!r} has no GPUs; --gpus-per-node must be 0, got {gpus}")
        if instance_gpus > 0 and not 1 <= gpus <= instance_gpus:
            fail(f"--gpus-per-node must be between 1 and {instance_gpus} on {self.instance_type}, got {gpus}")
        for name in ("partition", "account", "qos"):
            value = getattr(self, name)
            check_text(name, value)
            if value is not None and " " in value:
                fail(f"{name} must not contain spaces: {shown(value)}")
        for node in self.exclude:
            check_text("excluded node", node)
        check_time_limit(self.time, shown(self.time) if self.time is not None else "")
        if self.require_efa and not gpus:
            fail(f"--require-efa is for GPU jobs (EFA is NCCL's network); {self.instance_type} trains on CPU")
        if self.gres_gpus not in GRES_MODES:
            fail(f"gres_gpus must be one of: {', '.join(GRES_MODES)}; got {shown(self.gres_gpus)}")
        if self.nccl_debug is not None and self.nccl_debug not in NCCL_DEBUG_LEVELS:
            fail(f"--nccl-debug must be one of: {', '.join(NCCL_DEBUG_LEVELS)}; got {shown(self.nccl_debug)}")
        if self.hyperpod not in HYPERPOD_MODES:
            fail(f"hyperpod must be one of: {', '.join(HYPERPOD_MODES)}; got {self.hyperpod!r}")
        if self.hyperpod_cluster is not None and check_cluster_name(self.hyperpod_cluster):
            fail(f"--hyperpod-cluster {shown(self.hyperpod_cluster)}: {check_cluster_name(self.hyperpod_cluster)}")
        for entry in self.after:
            problem = after_error(entry, shown(entry))
            if problem is not None:
                fail(problem)


@dataclass(frozen=True, kw_only=True)
class Container:
    """How the trainers run in a Pyxis/enroot container; a job on the host has none."""

    PANEL: ClassVar[str] = CONTAINER_PANEL
    # As Pyxis reads it (containers.pyxis_image).
    image: str = field(metadata=flag("--container-image", help="Run the trainer in a Pyxis/enroot container: a .sqsh file on storage every node reads (see setup-pyxis.sh), "
        "or a registry image such as 123456789012.dkr.ecr.us-west-2.amazonaws.com/repo:tag (sent to Pyxis as REGISTRY#repo:tag; "
        "for ECR run `hyperlaunch ecr-login` first)."))
    mounts: tuple[str, ...] = field(default=(), metadata=flag("--container-mounts", help="Extra container mount SRC[:DST[:FLAGS]], FLAGS joined by '+' such as ro (repeatable). Already mounted at the same path: "
        "checkpoint, log and run dirs (read-write); a local --model dir, a --tokenizer dir after `--` and the --data folder (read-only).", metavar="MOUNT"))
    workdir: str | None = field(default=None, metadata=flag("--container-workdir", help="Working directory in the container [default: the run dir]."))
    # None or an `hl-` name is derived again where the job is planned (JobSpec.settled).
    name: str | None = field(default=None, metadata=flag("--container-name", help="Pyxis container name: a node that unpacked the image under this name before (a requeued attempt, a later job) "
        "reuses it instead of importing it again. [default: hl-<image>-<hash> of the image's identity: a .sqsh file's path, "
        "size and mtime, so a rebuilt file gets a new name; a registry image's reference, so a tag pushed again is NOT "
        "re-pulled where the old one is unpacked: use a digest (@sha256:...) or a new tag]. Letters, digits, _ . -", metavar="NAME"))

    def __post_init__(self) -> None:
        from hyperlaunch.job.containers import CONTAINER_NAME, CONTAINER_NAME_MAX, is_derived_name

        check_types(self)
        check_text("container image", self.image)
        check_text("container workdir", self.workdir)
        name = self.name
        if name is not None and not is_derived_name(name):
            if not CONTAINER_NAME.fullmatch(name) or len(name) > CONTAINER_NAME_MAX:
                fail(
                    f"--container-name {shown(name)}: use letters, digits, '_', '.', '-' (not first), "
                    f"at most {CONTAINER_NAME_MAX} characters"
                )

    def check_mounts(self, paths: typing.Iterable[tuple[str, bool]]) -> None:
        """What Pyxis could not read: a ',' or ':' in a path it mounts (Pyxis splits
        --container-mounts on ',' and each mount on ':')."""
        for path, _ in paths:
            check_text("mounted path", path)
            if "," in path or ":" in path:
                fail(f"a path mounted into the container must not contain ',' or ':': {path!r}")
        for mount in self.mounts:
            check_text("container mount", mount)
            if "," in mount:
                fail(f"container mount {mount!r} must not contain ','; pass one --container-mounts per mount")


@dataclass(frozen=True, kw_only=True)
class Recovery:
    """How the job survives: its restart budget, its spare nodes, its warning before the limit."""

    PANEL: ClassVar[str] = RECOVERY_PANEL
    # hyperlaunch.core.protocol.RESTART_CEILING bounds all requeues.
    max_restarts: int = field(default=3, metadata=flag("--max-restarts", help="Restart budget: how many attempts in a row may end without a new checkpoint (a crash, a lost node) and still be requeued; an attempt that saved resets it, so time-limit and preemption requeues after a save never use it (at most 1000 requeues in all) [default: 3]."))
    # Used by the supervisor's rounds (hyperlaunch.supervisor.allocation).
    spare_nodes: int = field(default=0, metadata=flag("--spare-nodes", help="Allocate this many extra nodes that wait idle: when a node dies, the trainers restart on a spare inside the same allocation from the latest checkpoint, without waiting in the queue [default: 0]."))
    restarts_in_allocation: int = field(default=2, metadata=flag("--restarts-in-allocation", help="After a crash or hang on nodes that are still healthy (a transient NCCL error), restart the trainers in the same allocation up to this many times in a row without a new checkpoint, before the job is requeued (--max-restarts); bad input, an unloadable model or data end the job at once [default: 2]."))
    memory_checkpoint_every: int = field(default=0, metadata=flag("--memory-checkpoint-every", help="Also snapshot the training state every N steps into host memory, held by a keeper the job runs on each node and copied to the next node's: "
        "a restart inside the allocation loads the newest snapshot from there instead of the last checkpoint, and before a requeue it is written to the checkpoint folder, so a failure loses at most N steps. "
        "The bundled trainer, and scripts that call runtime.snapshot() (docs/fault-tolerance.md) [default: 0: off].", metavar="N"))
    signal_seconds: int = field(default=120, metadata=flag("--signal-seconds", help="Send the save signal this many seconds before the time limit [default: 120]."))

    def __post_init__(self) -> None:
        from hyperlaunch.slurm.time_limit import SIGNAL_MAX_SECONDS

        check_types(self)
        check_count("--max-restarts", self.max_restarts, 0)
        check_count("--spare-nodes", self.spare_nodes, 0)
        check_count("--restarts-in-allocation", self.restarts_in_allocation, 0)
        check_count("--memory-checkpoint-every", self.memory_checkpoint_every, 0)
        if not 1 <= self.signal_seconds <= SIGNAL_MAX_SECONDS:
            fail(f"--signal-seconds must be between 1 and {SIGNAL_MAX_SECONDS}, got {shown(self.signal_seconds, 40)}")


@dataclass(frozen=True, kw_only=True)
class Output:
    """Where the job writes: checkpoints, logs, its run folder, and the experiment trackers."""

    PANEL: ClassVar[str] = OUTPUT_PANEL
    checkpoint_dir: str = field(metadata=flag("--checkpoint-dir", help="Checkpoint folder shared by all nodes [default: ./checkpoints]."))
    log_dir: str = field(metadata=flag("--log-dir", help="Folder for %x_%j.out/.err logs [default: ./logs]."))
    run_dir: str = field(metadata=flag("--run-dir", help="Folder for the run's metrics [default: ./runs/<job name>]."))
    tracker: tuple[str, ...] = field(default=(), metadata=flag("--tracker", help="Also log to an experiment tracker: tensorboard, mlflow or wandb (repeatable). One run for the whole training: "
        "requeues, restarts and `resume` log into it, and the steps a failed attempt logged past the checkpoint it restarted from are dropped or marked (docs/trackers.md). "
        "Needs `pip install \"hyperlaunch[trackers]\"` where the job runs; `status` shows where each run is.", metavar="NAME"))
    # Decided where the job is planned (hyperlaunch.job.defaults) for --tracker tensorboard.
    tensorboard_dir: str | None = field(default=None, metadata=flag("--tensorboard-dir", help="TensorBoard log folder of --tracker tensorboard, on storage every node writes [default: <run dir>/tensorboard]."))
    mlflow_uri: str | None = field(default=None, metadata=flag("--mlflow-uri", help="MLflow tracking server of --tracker mlflow, e.g. http://10.0.0.5:5000; the experiment is the job name [default: MLFLOW_TRACKING_URI]. Credentials: --env MLFLOW_TRACKING_TOKEN.", metavar="URI"))

    def __post_init__(self) -> None:
        from hyperlaunch.core.trackers import MLFLOW, TENSORBOARD, TRACKERS

        check_types(self)
        for name in ("checkpoint_dir", "log_dir", "run_dir"):
            check_path(name, getattr(self, name))
        # log_dir lands in #SBATCH --output, a line sbatch parses itself; a backslash there also
        # switches off Slurm's %j expansion.
        check_text("log_dir", self.log_dir)
        if "\\" in self.log_dir:
            fail(f"log_dir must not contain a backslash: {shown(self.log_dir)}")
        for name in self.tracker:
            if name not in TRACKERS:
                fail(f"--tracker {shown(name)} is not a tracker; choose from: {', '.join(TRACKERS)}")
        if len(set(self.tracker)) != len(self.tracker):
            fail(f"--tracker names {', '.join(self.tracker)}: give each tracker once")
        if self.tensorboard_dir is not None and TENSORBOARD not in self.tracker:
            fail("--tensorboard-dir is for --tracker tensorboard, which is not on")
        check_path("--tensorboard-dir", self.tensorboard_dir)
        if self.mlflow_uri is not None and MLFLOW not in self.tracker:
            fail("--mlflow-uri is for --tracker mlflow, which is not on")
        if MLFLOW in self.tracker:
            uri = self.mlflow_uri or ""
            if not uri:
                fail("--tracker mlflow needs the tracking server: --mlflow-uri http://HOST:5000 (or MLFLOW_TRACKING_URI)")
            check_text("--mlflow-uri", uri)
            if any(c.isspace() for c in uri):
                fail(f"--mlflow-uri must not contain spaces: {shown(uri)}")


@dataclass(frozen=True, kw_only=True)
class Derived:
    """What hyperlaunch decided for the job itself, never a flag, a config key or a variable:
    the name its checkpoints go by and its code snapshot (the plan), its tracker runs (submit),
    the job a resume waits for (`resume --after-end`)."""

    checkpoint_name: str
    """The name the model's checkpoints go by, decided by hyperlaunch.core.checkpoints.checkpoint_name
    from the model and a `--model-name` trainer flag (a script job's: its name)."""
    code_root: str | None = None
    """A script job's project folder, which its snapshot copies (the git work tree's top level,
    else the script's folder or, for --module, the current one)."""
    code_dir: str | None = None
    """The snapshot a script job runs from, `<run_dir>/.hyperlaunch/code-<hash>`
    (hyperlaunch.job.code_snapshot), written at submit; requeues and `resume` run the same one."""
    tracker_run_id: str | None = None
    """Chosen at submit for a job with trackers (hyperlaunch.runs.tracker_runs), kept by requeues
    and `resume`: the training's run id (W&B's run id, the MLflow run's `hyperlaunch.run_id`
    tag). None until then (`render` and `--dry-run` show a placeholder)."""
    mlflow_run_id: str | None = None
    """Chosen with tracker_run_id for --tracker mlflow: the MLflow run created at submit that
    every attempt's run nests under (MLFLOW_RUN_ID in the job)."""
    mlflow_experiment_id: str | None = None
    """That run's experiment (its page in the MLflow UI)."""
    after_job: str | None = None
    """A Slurm job this one starts after, however it ends (`--dependency=afterany:<id>`): set by
    `resume --after-end` while the resumed job still runs."""
    trainer_module: str = DEFAULT_TRAINER_MODULE
    """The Python module torchrun runs on every node (the default one through its console script,
    see render.trainer_program). Tests run the trainer through an entry module of their own that
    injects faults."""

    def __post_init__(self) -> None:
        from hyperlaunch.slurm.dependencies import JOB_ID

        check_types(self)
        for name in ("tracker_run_id", "mlflow_run_id", "mlflow_experiment_id"):
            value = getattr(self, name)
            if value is not None and not _RUN_ID.fullmatch(value):
                fail(f"{name} must be letters, digits, _ or - (at most 64), got {shown(value)}")
        if self.after_job is not None and not JOB_ID.fullmatch(self.after_job):
            fail(f"after_job must be a Slurm job id, got {shown(self.after_job)}")
        check_path("code_root", self.code_root)
        check_path("code_dir", self.code_dir)
        if not _MODULE.fullmatch(self.trainer_module):
            fail(f"trainer module {self.trainer_module!r} is not a Python module name")
