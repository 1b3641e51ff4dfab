"""JobSpec -> sbatch script text. Pure: no files written, no environment read (beyond the
compiled-template cache of hyperlaunch.script.template_cache, which never changes the output).

Python computes every flag list, export and the launch command here; the Jinja templates in
`hyperlaunch.templates` only lay them out. StrictUndefined turns a missing variable into an
error, and each interpolated value passes through `q` (hyperlaunch.script.quoting.shell_quote), or
`sbatch_arg` (sbatch_quote) on `#SBATCH` lines, or `comment` (comment_text) in comments.

What the script does, in order: exports the EFA/NCCL preset and the user's environment,
takes the checkpoint lock of its folder and model, prints an attempt-start marker, runs one
srun step (one task per node, each `bash -c` running the step script that resolves the
rendezvous endpoint, starts torchrun and passes the save signal to the trainers) in the
background, forwards Slurm's USR2 warning to it, and when the step ends either requeues the job
(within the restart budget: max_restarts attempts in a row without a new checkpoint) or exits
with the step's status, after an attempt-end marker. A step whose trainer recorded a `final`
failure (hyperlaunch.core.protocol.TrainerFailure) is never requeued.
"""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from types import MappingProxyType

import jinja2

from hyperlaunch import __version__
from hyperlaunch.aws.hyperpod import HYPERPOD_MARKER_DIR
from hyperlaunch.core.instances import get_instance
from hyperlaunch.core.protocol import (
    ATTEMPT_MARKER_PRINTF,
    PROGRESS_PREFIX,
    REQUEUE_EXIT_CODE,
    REQUEUE_REQUEST_PREFIX,
    RESTART_CEILING,
    SAVE_SIGNAL,
    AttemptAction,
    RestartCause,
    checkpoint_lock_path,
)
from hyperlaunch.core.script_env import TORCHRUN_SHUTDOWN_TIMEOUT_ENV, TORCHRUN_SIGNALS_ENV
from hyperlaunch.core.trainer_failures import (
    TRAINER_FAILURE_FILE_ENV,
    TRAINER_FAILURE_PREFIX,
    FailureKind,
    FailureVerdict,
)
from hyperlaunch.job.containers import container_mounts
from hyperlaunch.job.spec import DEFAULT_TRAINER_MODULE, JobSpec
from hyperlaunch.script import nccl_plugin
from hyperlaunch.script.quoting import comment_text, sbatch_quote, shell_quote
from hyperlaunch.script.template_cache import template_cache
from hyperlaunch.slurm.states import ACTIVE_STATES
from hyperlaunch.supervisor import PYTHON as SUPERVISOR_PYTHON

# Signals torchrun (>= 2.9) catches and passes to its workers: its own default list, pinned so
# that no inherited value adds the save signal. The step script sends that one to the trainers
# itself, with torchrun ignoring it, the same on every torch (older torchrun ignores the variable).
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
LOCK_COMPLETING_WAIT_S = 120
"""How long an attempt waits for a COMPLETING job that holds its checkpoint lock (whose
trainers may still be saving) before it takes the lock as stale."""
PROBE_INTERVAL_S = 5
"""Seconds between probes of the step's nodes (templates/partials/supervise.sh.j2) while a
step whose rank recorded a failure still runs and every node answers. The first probe comes as
soon as the failure is recorded: it only asks each node's kernel for a TCP connection, which a
busy or stopped node still gives, and on healthy nodes the step ends by itself meanwhile."""


@dataclass(frozen=True)
class EnvGroup:
    """Exports that share one origin, rendered under one comment."""

    title: str
    exports: tuple[tuple[str, str | None], ...]
    """(NAME, VALUE) pairs; VALUE None exports NAME as the job received it."""


@dataclass(frozen=True, kw_only=True)
class ScriptValues:
    """What templates/sbatch.sh.j2 and its partials are rendered with, all computed in Python:
    the template only lays these out. Every name the template reads is a field (StrictUndefined)."""

    version: str
    """The hyperlaunch version, named in the script's first comment."""
    model: str
    """The model, named in the script's first comment."""
    nodes: int
    """The training nodes (spares not counted), named in the script's first comment."""
    instance_type: str
    """The instance type, named in the script's first comment."""
    sbatch_flags: tuple[tuple[str, str | None], ...]
    """The `#SBATCH` header: (flag, value), or (flag, None) for a flag without a value."""
    env_groups: tuple[EnvGroup, ...]
    """Exported before anything runs, one commented block per origin (templates/partials/env.sh.j2)."""
    make_dirs: tuple[str, ...]
    """Folders created (mkdir -p) before the lock is taken: the checkpoint folder and the run folder."""
    max_restarts: int
    """Attempts in a row without a new checkpoint after which the job ends instead of requeueing."""
    restart_ceiling: int
    """Restarts in all after which the job ends, whatever its progress."""
    requeue_exit_code: int
    """A step exit status that asks for a requeue (a trainer that saved and wants to go on)."""
    progress_prefix: str
    """Path of the progress records, less `<job>.<restart>`: an attempt's record means it completed a checkpoint."""
    requeue_request_prefix: str
    """Path of the requeue requests, less `<job>.<restart>`: rank 0 writes one after saving on a stop signal."""
    trainer_failure_env: str
    """The variable that tells the trainers where to write their failure record."""
    trainer_failure_prefix: str
    """Path of the failure records, less `<job>.<restart>`: read when a round fails, to decide on a restart."""
    attempt_marker_printf: str
    """printf format of the attempt start/end/restart lines that `hyperlaunch logs` and `status` parse."""
    cause: Mapping[str, str]
    """RestartCause's values by name: why an attempt ended, written into its end marker."""
    action: Mapping[str, str]
    """AttemptAction's values by name: what the script did next, written into the end marker."""
    verdict: Mapping[str, str]
    """FailureVerdict's values by name: a `final` failure record ends the job without a requeue."""
    hang_kind: str
    """The failure kind that makes a retried round's cause a hang rather than a crash."""
    checkpoint_lock: str
    """The lock file that keeps a second job from training into the same checkpoint folder and model."""
    lock_live_states: str
    """Slurm states (space-separated) of a lock holder that still counts: the lock is not taken from it."""
    lock_wait_seconds: int
    """How long a COMPLETING lock holder is waited for before its lock is taken as stale."""
    srun_flags: tuple[str, ...]
    """Flags of every round's srun step (the round's own node flags are added on the node)."""
    hyperpod_on: bool
    """HyperPod auto-resume is on: srun has --auto-resume=1 and the script probes no lost nodes itself."""
    hyperpod_auto: bool
    """HyperPod is detected on the batch host: auto-resume and no lost-node probes where its folder exists."""
    hyperpod_marker_dir: str
    """The folder whose presence on the batch host means a HyperPod cluster (`hyperpod_auto`)."""
    launch_command: tuple[str, ...]
    """torchrun and the trainer's arguments, passed to the step script, which adds the rendezvous."""
    save_signal: str
    """Slurm's warning signal before the time limit, passed to the step and on to the trainers to save."""
    nccl_check: bool
    """Each node logs which NCCL network plugin it finds before training (GPU jobs)."""
    nccl_plugin_dirs: tuple[str, ...]
    """Folders searched for the aws-ofi-nccl plugin after LD_LIBRARY_PATH's (hyperlaunch.script.nccl_plugin)."""
    nccl_plugin_names: tuple[str, ...]
    """File names the aws-ofi-nccl plugin goes by (hyperlaunch.script.nccl_plugin)."""
    spare_nodes: int
    """Allocated nodes that wait idle and take a lost node's place in the next round."""
    restarts_in_allocation: int
    """Rounds in a row without a new checkpoint restarted inside the allocation before a requeue."""
    user_excluded: str
    """The user's --exclude nodes (comma-separated), never dropped from the job's excluded nodes."""
    probe_interval_seconds: int
    """Seconds between probes of the round's nodes once a rank recorded a failure."""


def render_sbatch(spec: JobSpec) -> str:
    """The complete sbatch script for `spec`."""
    values = script_values(spec)
    # Shallow on purpose: dataclasses.asdict would deep-copy, and turn each EnvGroup into a dict.
    return _template().render({field.name: getattr(values, field.name) for field in fields(values)})


def script_values(spec: JobSpec) -> ScriptValues:
    """Everything the batch script is rendered with, computed from `spec` alone."""
    run_dir = spec.run_dir.rstrip("/")
    return ScriptValues(
        version=__version__,
        model=spec.model,
        nodes=spec.nodes,
        instance_type=spec.instance_type,
        sbatch_flags=tuple(sbatch_flags(spec)),
        env_groups=tuple(env_groups(spec)),
        make_dirs=(spec.checkpoint_dir, spec.run_dir),
        max_restarts=spec.max_restarts,
        restart_ceiling=RESTART_CEILING,
        requeue_exit_code=REQUEUE_EXIT_CODE,
        progress_prefix=f"{run_dir}/{PROGRESS_PREFIX}",
        requeue_request_prefix=f"{run_dir}/{REQUEUE_REQUEST_PREFIX}",
        trainer_failure_env=TRAINER_FAILURE_FILE_ENV,
        trainer_failure_prefix=f"{run_dir}/{TRAINER_FAILURE_PREFIX}",
        attempt_marker_printf=ATTEMPT_MARKER_PRINTF,
        cause=_values_by_name(RestartCause),
        action=_values_by_name(AttemptAction),
        verdict=_values_by_name(FailureVerdict),
        hang_kind=FailureKind.HANG.value,
        checkpoint_lock=str(checkpoint_lock_path(Path(spec.checkpoint_dir), spec.checkpoint_name)),
        lock_live_states=" ".join(sorted(ACTIVE_STATES - {"COMPLETING"})),
        lock_wait_seconds=LOCK_COMPLETING_WAIT_S,
        srun_flags=tuple(srun_flags(spec)),
        hyperpod_on=spec.hyperpod == "on",
        hyperpod_auto=spec.hyperpod == "auto",
        hyperpod_marker_dir=HYPERPOD_MARKER_DIR,
        launch_command=tuple(launch_command(spec)),
        save_signal=SAVE_SIGNAL,
        # GPU jobs log which NCCL network plugin each node finds (templates/partials/step.sh.j2).
        nccl_check=bool(spec.gpus_per_node),
        nccl_plugin_dirs=nccl_plugin.PLUGIN_DIRS,
        nccl_plugin_names=nccl_plugin.PLUGIN_NAMES,
        spare_nodes=spec.spare_nodes,
        restarts_in_allocation=spec.restarts_in_allocation,
        user_excluded=",".join(spec.exclude),
        probe_interval_seconds=PROBE_INTERVAL_S,
    )


def _values_by_name(members: type[enum.Enum]) -> Mapping[str, str]:
    """An enum's values by member name, read-only (`cause.CRASH` in the template)."""
    return MappingProxyType({member.name: member.value for member in members})


def sbatch_flags(spec: JobSpec) -> list[tuple[str, str | None]]:
    """(flag, value or None) for the #SBATCH header, in a stable order."""
    flags: list[tuple[str, str | None]] = [
        ("--job-name", spec.job_name),
        # Spares wait idle in the allocation until a node is lost (templates/partials/supervise.sh.j2).
        ("--nodes", str(spec.nodes + spec.spare_nodes)),
        ("--ntasks-per-node", "1"),
    ]
    if spec.gpus_per_node and spec.gres_gpus == "on":
        # Without GRES the job takes whole nodes (--exclusive) and torchrun starts one
        # process per GPU by itself; see hyperlaunch.job.detect.gres_gpus.
        flags.append(("--gpus-per-node", str(spec.gpus_per_node)))
    for name in ("partition", "account", "qos", "time"):
        value = getattr(spec, name)
        if value is not None:
            flags.append((f"--{name}", value))
    if spec.exclusive:
        flags.append(("--exclusive", None))
    if spec.exclude:
        flags.append(("--exclude", ",".join(spec.exclude)))
    if spec.after_job is not None:
        flags.append(("--dependency", f"afterany:{spec.after_job}"))
    # Requeued attempts append to the same log files instead of truncating them (Slurm's
    # --open-mode=append), so every attempt stays readable.
    log_stem = spec.log_dir.rstrip("/").replace("%", "%%") + "/%x_%j"
    flags += [
        ("--requeue", None),
        ("--signal", f"B:{SAVE_SIGNAL}@{spec.signal_seconds}"),
        ("--open-mode", "append"),
        ("--output", f"{log_stem}.out"),
        ("--error", f"{log_stem}.err"),
    ]
    return flags


def env_groups(spec: JobSpec) -> list[EnvGroup]:
    """Exports in the order they apply: instance preset, launcher settings, --nccl-debug, the user's --env.
    A forwarded name (`--env NAME`, value None) is exported by name only: its value arrives
    through sbatch --export, so the preset must not set it over the forwarded one."""
    instance = get_instance(spec.instance_type)
    forwarded = tuple(name for name, value in spec.env if value is None)
    preset = dict(instance.env)
    if spec.container_image is not None:
        preset.update(instance.container_env)
    where = "inside a Pyxis container" if spec.container_image is not None else "on the host"
    launcher = (
        (TORCHRUN_SIGNALS_ENV, TORCHRUN_SIGNALS),
        # Let trainers use the whole warning window to save before torchrun kills them.
        (TORCHRUN_SHUTDOWN_TIMEOUT_ENV, str(spec.signal_seconds)),
    )
    groups = [
        EnvGroup(
            f"{instance.family} preset for {spec.instance_type} ({where}), from env/{instance.family}.toml",
            tuple((name, value) for name, value in preset.items() if name not in forwarded),
        ),
        EnvGroup("torchrun: the stop signals it passes to the trainers (the step script sends them the save signal)", launcher),
    ]
    if spec.nccl_debug is not None:
        groups.append(EnvGroup("--nccl-debug: NCCL logs its setup (NET/OFI: EFA; NET/Socket: TCP)", (("NCCL_DEBUG", spec.nccl_debug),)))
    values = tuple((name, value) for name, value in spec.env if value is not None)
    if values:
        groups.append(EnvGroup("--env", values))
    if forwarded:
        title = "--env NAME: forwarded from the submitting environment (sbatch --export), values not written here"
        groups.append(EnvGroup(title, tuple((name, None) for name in forwarded)))
    return groups


def srun_flags(spec: JobSpec) -> list[str]:
    """Flags of the one training step. HyperPod's --auto-resume=1 is added by the script itself
    in `auto` mode, because only the compute node knows whether it is on HyperPod."""
    flags = [
        "--ntasks-per-node=1",
        # One crashed rank ends the step at once instead of leaving the others hanging in a collective.
        "--kill-on-bad-exit=1",
        "--label",
    ]
    if spec.hyperpod == "on":
        flags.append("--auto-resume=1")
    container = spec.container
    if container is not None:
        flags += [
            f"--container-image={container.image}",
            f"--container-mounts={','.join(container_mounts(container, spec.mounted_paths))}",
            f"--container-workdir={container.workdir or spec.run_dir}",
            "--no-container-mount-home",
        ]
        if container.name is not None:
            # A named container outlives the step: a requeued attempt (or, with Pyxis's default
            # container_scope=global, a later job) on the same node skips the import and unpack.
            flags.append(f"--container-name={container.name}")
    return flags


TRAINER_PROGRAM = "hyperlaunch-train"
"""The trainer's console script (pyproject.toml), installed beside torchrun."""


def launch_command(spec: JobSpec) -> list[str]:
    """torchrun and the trainer's arguments, minus what the step computes on the node
    (--nnodes and the rendezvous; see templates/partials/step.sh.j2)."""
    command = [spec.torchrun, f"--nproc_per_node={spec.procs_per_node}"]
    return command + trainer_program(spec) + trainer_argv(spec)


def trainer_program(spec: JobSpec) -> list[str]:
    """How torchrun starts the trainer. The installed trainer runs as its console script, never
    `-m`: `python -m` puts the working directory first on sys.path, where a `hyperlaunch/`
    folder (the source checkout a job was submitted from) would shadow the installed package.
    The script is the one of torchrun's environment: beside it when torchrun is a path."""
    if spec.trainer_module != DEFAULT_TRAINER_MODULE:
        return ["-m", spec.trainer_module]
    folder = os.path.dirname(spec.torchrun) if os.path.isabs(spec.torchrun) else ""
    return ["--no-python", os.path.join(folder, TRAINER_PROGRAM) if folder else TRAINER_PROGRAM]


def trainer_argv(spec: JobSpec) -> list[str]:
    """The trainer's own command line: what the spec owns, then the trainer arguments."""
    argv = [
        "--model",
        spec.model,
        "--checkpoint-dir",
        spec.checkpoint_dir,
        "--run-dir",
        spec.run_dir,
    ]
    if spec.max_steps is not None:
        argv += ["--max-steps", str(spec.max_steps)]
    if spec.data is not None:
        argv += ["--data", spec.data]
    return argv + list(spec.trainer_args)


def _load_template(name: str) -> str:
    return resources.files("hyperlaunch.templates").joinpath(*name.split("/")).read_text(encoding="utf-8")


def render_node_probe() -> str:
    """The script `doctor` runs on each compute node (templates/node_probe.sh.j2), with the
    same NCCL plugin search as the batch script, and the interpreter the supervisor runs on."""
    return (
        _environment()
        .get_template("node_probe.sh.j2")
        .render(supervisor_python=SUPERVISOR_PYTHON, **nccl_plugin.template_values())
    )


@functools.cache
def _template() -> jinja2.Template:
    return _environment().get_template("sbatch.sh.j2")


def _environment() -> jinja2.Environment:
    # Not cached itself: clearing _template's cache must give a fresh environment (tests do,
    # to change where compiled templates are kept).
    environment = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        # Bash's ${#array[@]} would open a Jinja comment: the templates have none.
        comment_start_string="{##",
        comment_end_string="##}",
        bytecode_cache=template_cache(),
    )
    environment.filters["q"] = shell_quote
    environment.filters["sbatch_arg"] = sbatch_quote
    environment.filters["comment"] = comment_text
    return environment
