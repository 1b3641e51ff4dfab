"""JobSpec -> sbatch script text. Pure: no files written, no environment read (beyond the
compiled-template cache of hyperlaunch.script.template_cache, which never changes the output).

Python computes every flag list, export and the launch command here; the Jinja templates in
`hyperlaunch.templates` only lay them out. StrictUndefined turns a missing variable into an
error, and each interpolated value passes through `q` (hyperlaunch.script.quoting.shell_quote), or
`sbatch_arg` (sbatch_quote) on `#SBATCH` lines, or `comment` (comment_text) in comments.

What the script does: the `#SBATCH` header, the EFA/NCCL preset and the user's environment,
then `exec python3` of the job's supervisor (hyperlaunch.supervisor, shipped next to the run by
hyperlaunch.script.supervisor_bundle) with the job's recovery settings, the flags of the srun
step and the launch command. The supervisor does the rest: the checkpoint lock, attempt
markers, rounds of trainers, spares and lost nodes, the save signal, requeues within the restart
budget (hyperlaunch.core.protocol).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields
from pathlib import Path

import jinja2

from hyperlaunch import __version__
from hyperlaunch.aws.hyperpod import HYPERPOD_MARKER_DIR
from hyperlaunch.core import trackers
from hyperlaunch.core.instances import get_instance
from hyperlaunch.core.protocol import SAVE_SIGNAL, checkpoint_lock_path
from hyperlaunch.core.script_env import TORCHRUN_SHUTDOWN_TIMEOUT_ENV, TORCHRUN_SIGNALS_ENV
from hyperlaunch.core.supervisor_options import SupervisorOptions
from hyperlaunch.job.containers import container_mounts
from hyperlaunch.job.sections import DEFAULT_TRAINER_MODULE
from hyperlaunch.job.spec import JobSpec, dependencies
from hyperlaunch.script import jinja_env, nccl_plugin, supervisor_bundle
from hyperlaunch.slurm.dependencies import dependency_value
from hyperlaunch.supervisor import PYTHON as SUPERVISOR_PYTHON

# Signals torchrun (>= 2.9) catches and passes to its workers: its own default list, pinned so
# that no inherited value adds the save signal. The step script sends that one to the trainers
# itself, with torchrun ignoring it, the same on every torch (older torchrun ignores the variable).
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"

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
    what: str
    """What the job trains (`model qwen3_0_6b`, `script train.py`), named in the script's first comment."""
    nodes: int
    """The training nodes (spares not counted), named in the script's first comment."""
    instance_type: str
    """The instance type, named in the script's first comment."""
    sbatch_flags: tuple[tuple[str, str | None], ...]
    """The `#SBATCH` header: (flag, value), or (flag, None) for a flag without a value."""
    env_groups: tuple[EnvGroup, ...]
    """Exported before anything runs, one commented block per origin (templates/partials/env.sh.j2)."""
    save_signal: str
    """Slurm's warning signal before the time limit, which the supervisor passes on to the trainers."""
    python: str
    """The batch host's interpreter that runs the supervisor."""
    supervisor: str
    """The supervisor's bundle, written into the run folder at submit (hyperlaunch.script.supervisor_bundle)."""
    supervisor_flags: tuple[tuple[str, ...], ...]
    """The supervisor's options, one line each (hyperlaunch.core.supervisor_options)."""
    launch_lines: tuple[tuple[str, ...], ...]
    """torchrun and the trainer's arguments (passed to the step script, which adds the
    rendezvous), a flag and its value to a line."""
    elements_file: str | None = None
    """A sweep's: the file each array task's supervisor reads its element's command line from
    (hyperlaunch.script.render_sweep), instead of supervisor_flags and launch_lines."""
    sweep_rows: tuple[str, ...] = ()
    """A sweep's elements as comment lines: index, name, options."""


def render_sbatch(spec: JobSpec) -> str:
    """The complete sbatch script for `spec`."""
    return render_values(script_values(spec))


def render_values(values: ScriptValues) -> str:
    """templates/sbatch.sh.j2 laid out with `values`."""
    # Shallow on purpose: dataclasses.asdict would deep-copy, and turn each EnvGroup into a dict.
    return _template().render({field.name: getattr(values, field.name) for field in fields(values)})


def script_values(spec: JobSpec) -> ScriptValues:
    """Everything the batch script is rendered with, computed from `spec` alone."""
    return ScriptValues(
        version=__version__,
        what=spec.what if spec.is_script_job else f"model {spec.job.model}",
        nodes=spec.job.nodes,
        instance_type=spec.cluster.instance_type,
        sbatch_flags=tuple(sbatch_flags(spec)),
        env_groups=tuple(env_groups(spec)),
        save_signal=SAVE_SIGNAL,
        python=SUPERVISOR_PYTHON,
        supervisor=supervisor_bundle.bundle_path(spec.output.run_dir),
        supervisor_flags=tuple(supervisor_flags(spec)),
        launch_lines=tuple(flag_lines(launch_command(spec))),
    )


def flag_lines(words: list[str]) -> list[tuple[str, ...]]:
    """`words` a line each, but a flag and the value after it share one (`--model qwen3_0_6b`,
    `-m mypkg.train`)."""
    lines: list[tuple[str, ...]] = []
    for word in words:
        last = lines[-1] if lines else ()
        if len(last) == 1 and (last[0].startswith("--") or last[0] == "-m") and "=" not in last[0] and not word.startswith("-"):
            lines[-1] = (last[0], word)
        else:
            lines.append((word,))
    return lines


def supervisor_options(spec: JobSpec) -> SupervisorOptions:
    """The supervisor's command line for `spec`: the job's recovery settings, the flags of every
    round's srun step and the launch command. The one place that reads the spec for it."""
    return SupervisorOptions(
        run_dir=spec.output.run_dir,
        checkpoint_dir=spec.output.checkpoint_dir,
        checkpoint_lock=str(checkpoint_lock_path(Path(spec.output.checkpoint_dir), spec.derived.checkpoint_name)),
        max_restarts=spec.recovery.max_restarts,
        launch_command=tuple(launch_command(spec)),
        checkpoint_name=spec.derived.checkpoint_name if spec.saves_checkpoints else "",
        restarts_in_allocation=spec.recovery.restarts_in_allocation,
        spare_nodes=spec.recovery.spare_nodes,
        # Never dropped from the job's excluded nodes when lost ones are added.
        exclude=spec.cluster.exclude,
        hyperpod=spec.cluster.hyperpod,
        # HyperPod is told from other clusters on the batch host, by this folder.
        hyperpod_dir=HYPERPOD_MARKER_DIR if spec.cluster.hyperpod == "auto" else "",
        # GPU jobs log which NCCL network plugin each node finds (templates/step.sh.j2); with
        # --require-efa a node without one ends the job.
        nccl_check=bool(spec.cluster.gpus_per_node),
        require_efa=bool(spec.cluster.gpus_per_node) and spec.cluster.require_efa,
        # The scripts get the HYPERLAUNCH_* variables and the runtime library on their path.
        script_name=spec.derived.checkpoint_name if spec.is_script_job else "",
        srun_flags=tuple(srun_flags(spec)),
        # The bundled trainer's memory snapshots need a keeper on each node.
        keepers=spec.procs_per_node if spec.recovery.memory_checkpoint_every else 0,
        snapshot_every=spec.recovery.memory_checkpoint_every,
        # A script job runs in the run's working folder, the snapshot mirrored in before each
        # round, and its framework's own checkpoints count (hyperlaunch.core.checkpoint_layouts).
        code_dir=spec.derived.code_dir or "",
        work_dir=spec.work_dir or "",
        checkpoint_layout=spec.job.checkpoint_layout if spec.is_script_job else "",
    )


def supervisor_flags(spec: JobSpec) -> tuple[tuple[str, ...], ...]:
    """The supervisor's command line but the launch command, one line of the script each."""
    return supervisor_options(spec).lines()


def sbatch_flags(spec: JobSpec) -> list[tuple[str, str | None]]:
    """(flag, value or None) for the #SBATCH header, in a stable order."""
    flags: list[tuple[str, str | None]] = [
        ("--job-name", spec.job.job_name),
        # Spares wait idle in the allocation until a node is lost (hyperlaunch.supervisor).
        ("--nodes", str(spec.job.nodes + spec.recovery.spare_nodes)),
        ("--ntasks-per-node", "1"),
    ]
    if spec.cluster.gpus_per_node and spec.cluster.gres_gpus == "on":
        # Without GRES the job takes whole nodes (--exclusive) and torchrun starts one
        # process per GPU by itself; see hyperlaunch.job.detect.gres_gpus.
        flags.append(("--gpus-per-node", str(spec.cluster.gpus_per_node)))
    for name in ("partition", "account", "qos", "time"):
        value = getattr(spec.cluster, name)
        if value is not None:
            flags.append((f"--{name}", value))
    if spec.cluster.exclusive:
        flags.append(("--exclusive", None))
    if spec.cluster.exclude:
        flags.append(("--exclude", ",".join(spec.cluster.exclude)))
    flags += dependency_flags(dependency_value(dependencies(spec)))
    # Requeued attempts append to the same log files instead of truncating them (Slurm's
    # --open-mode=append), so every attempt stays readable.
    log_stem = spec.output.log_dir.rstrip("/").replace("%", "%%") + "/%x_%j"
    flags += [
        ("--requeue", None),
        ("--signal", f"B:{SAVE_SIGNAL}@{spec.recovery.signal_seconds}"),
        ("--open-mode", "append"),
        ("--output", f"{log_stem}.out"),
        ("--error", f"{log_stem}.err"),
    ]
    return flags


def dependency_flags(value: str | None) -> list[tuple[str, str | None]]:
    """#SBATCH lines for a --dependency value. A job whose afterok can no longer be met is
    cancelled rather than left pending forever (status names the job that failed it)."""
    if value is None:
        return []
    return [("--dependency", value), *([("--kill-on-invalid-dep", "yes")] if "afterok" in value else [])]


def env_groups(spec: JobSpec, *, with_trackers: bool = True) -> list[EnvGroup]:
    """Exports in the order they apply: instance preset, launcher settings, the trackers (unless
    not `with_trackers`: a sweep's elements each have their own), --nccl-debug, the user's --env.
    A forwarded name (`--env NAME`, value None) is exported by name only: its value arrives
    through sbatch --export, so the preset must not set it over the forwarded one."""
    instance = get_instance(spec.cluster.instance_type, gpus_per_node=spec.cluster.gpus_per_node)
    forwarded = tuple(name for name, value in spec.job.env if value is None)
    preset = dict(instance.env)
    if spec.container is not None:
        preset.update(instance.container_env)
    where = "inside a Pyxis container" if spec.container is not None else "on the host"
    launcher = (
        (TORCHRUN_SIGNALS_ENV, TORCHRUN_SIGNALS),
        # Let trainers use the whole warning window to save before torchrun kills them.
        (TORCHRUN_SHUTDOWN_TIMEOUT_ENV, str(spec.recovery.signal_seconds)),
    )
    groups = [
        EnvGroup(
            f"{instance.family} preset for {spec.cluster.instance_type} ({where}), from env/{instance.family}.toml",
            tuple((name, value) for name, value in preset.items() if name not in forwarded),
        ),
        EnvGroup("torchrun: the stop signals it passes to the trainers (the step script sends them the save signal)", launcher),
    ]
    if spec.is_script_job and not spec.cluster.gpus_per_node:
        # accelerate (under transformers' Trainer) makes a CPU process group only when told it
        # runs on CPUs: else each node trains a model of its own, silently.
        groups.append(EnvGroup("CPU nodes: accelerate (transformers' Trainer) trains one model across the job's processes", ((ACCELERATE_CPU_ENV, "true"),)))
    if spec.output.tracker and with_trackers:
        groups.append(EnvGroup("--tracker: every attempt, round and `resume` of this training logs into one run (`hyperlaunch status` says where)", tracker_exports(spec)))
    if spec.cluster.nccl_debug is not None:
        groups.append(EnvGroup("--nccl-debug: NCCL logs its setup (NET/OFI: EFA; NET/Socket: TCP)", (("NCCL_DEBUG", spec.cluster.nccl_debug),)))
    values = tuple((name, value) for name, value in spec.job.env if value is not None)
    if values:
        groups.append(EnvGroup("--env", values))
    if forwarded:
        title = "--env NAME: forwarded from the submitting environment (sbatch --export), values not written here"
        groups.append(EnvGroup(title, tuple((name, None) for name in forwarded)))
    return groups


def tracker_exports(spec: JobSpec) -> tuple[tuple[str, str], ...]:
    """The trackers, the training's run ids (chosen at submit: absent from `render` and
    --dry-run) and each tracker's folder or server, under the names the trackers' own libraries
    read (a script that logs to W&B or MLflow itself joins the same run)."""
    exports = [(trackers.TRACKERS_ENV, ",".join(spec.output.tracker))]
    if spec.derived.tracker_run_id:
        exports.append((trackers.TRACKER_RUN_ID_ENV, spec.derived.tracker_run_id))
    if spec.output.tensorboard_dir:
        exports.append((trackers.TENSORBOARD_DIR_ENV, spec.output.tensorboard_dir))
    if trackers.MLFLOW in spec.output.tracker and spec.output.mlflow_uri:
        exports.append((trackers.MLFLOW_URI_ENV, spec.output.mlflow_uri))
        if spec.derived.mlflow_run_id:
            exports.append((trackers.MLFLOW_RUN_ID_ENV, spec.derived.mlflow_run_id))
    if trackers.WANDB in spec.output.tracker:
        if spec.derived.tracker_run_id:
            exports += [(trackers.WANDB_RUN_ID_ENV, spec.derived.tracker_run_id), (trackers.WANDB_RESUME_ENV, "allow")]
        if trackers.WANDB_DIR_ENV not in {name for name, _ in spec.job.env}:
            exports.append((trackers.WANDB_DIR_ENV, spec.output.run_dir))  # its offline runs beside the metrics
    return tuple(exports)


def srun_flags(spec: JobSpec) -> list[str]:
    """Flags of the one training step. HyperPod's --auto-resume=1 is added by the supervisor
    itself in `auto` mode (hyperlaunch.supervisor.allocation), because only the compute node
    knows whether it is on HyperPod."""
    flags = [
        "--ntasks-per-node=1",
        # One crashed rank ends the step at once instead of leaving the others hanging in a collective.
        "--kill-on-bad-exit=1",
        "--label",
    ]
    if spec.cluster.hyperpod == "on":
        flags.append("--auto-resume=1")
    container = spec.container
    if spec.work_dir is not None and container is None:
        # A script job runs in the run's working folder, which mirrors its snapshot: `-m` finds
        # its module there, relative paths in its arguments mean the submitted copy, and what it
        # writes relative to it stays with the run (hyperlaunch.supervisor.work_dir).
        flags.append(f"--chdir={spec.work_dir}")
    if container is not None:
        flags += [
            f"--container-image={container.image}",
            f"--container-mounts={','.join(container_mounts(container, spec.mounted_paths))}",
            f"--container-workdir={container.workdir or spec.work_dir or spec.output.run_dir}",
            "--no-container-mount-home",
        ]
        if container.name is not None:
            # A named container outlives the step: a requeued attempt (or, with Pyxis's default
            # container_scope=global, a later job) on the same node skips the import and unpack.
            flags.append(f"--container-name={container.name}")
    return flags


ACCELERATE_CPU_ENV = "ACCELERATE_USE_CPU"
"""accelerate's switch to a gloo process group of CPU processes (its PartialState)."""

TRAINER_PROGRAM = "hyperlaunch-train"
"""The trainer's console script (pyproject.toml), installed beside torchrun."""


def launch_command(spec: JobSpec) -> list[str]:
    """torchrun and the trainer's arguments, minus what the step computes on the node
    (--nnodes and the rendezvous; see templates/step.sh.j2)."""
    command = [spec.job.torchrun, f"--nproc_per_node={spec.procs_per_node}"]
    if spec.is_script_job:
        return command + script_program(spec) + list(spec.job.trainer_args)
    return command + trainer_program(spec) + trainer_argv(spec)


def script_program(spec: JobSpec) -> list[str]:
    """How torchrun starts a script job's code: the copy of the script in its snapshot, or
    `-m MODULE` (found in the snapshot, the step's working folder)."""
    if spec.job.module is not None:
        return ["-m", spec.job.module]
    target = spec.script_in_snapshot
    assert target is not None, "a script job is planned with its snapshot (hyperlaunch.job.plan)"
    return [target]


def trainer_program(spec: JobSpec) -> list[str]:
    """How torchrun starts the trainer. The installed trainer runs as its console script, never
    `-m`: `python -m` puts the working directory first on sys.path, where a `hyperlaunch/`
    folder (the source checkout a job was submitted from) would shadow the installed package.
    The script is the one of torchrun's environment: beside it when torchrun is a path."""
    if spec.derived.trainer_module != DEFAULT_TRAINER_MODULE:
        return ["-m", spec.derived.trainer_module]
    folder = os.path.dirname(spec.job.torchrun) if os.path.isabs(spec.job.torchrun) else ""
    return ["--no-python", os.path.join(folder, TRAINER_PROGRAM) if folder else TRAINER_PROGRAM]


def trainer_argv(spec: JobSpec) -> list[str]:
    """The trainer's own command line: what the spec owns, then the trainer arguments."""
    argv = [
        "--model",
        spec.job.model,
        "--checkpoint-dir",
        spec.output.checkpoint_dir,
        "--run-dir",
        spec.output.run_dir,
    ]
    if spec.job.max_steps is not None:
        argv += ["--max-steps", str(spec.job.max_steps)]
    if spec.job.data is not None:
        argv += ["--data", spec.job.data]
    if spec.recovery.memory_checkpoint_every:
        argv += ["--memory-checkpoint-every", str(spec.recovery.memory_checkpoint_every)]
    return argv + list(spec.job.trainer_args)


def render_node_probe() -> str:
    """The script `doctor` runs on each compute node (templates/node_probe.sh.j2), with the
    same NCCL plugin search as the step script, and the interpreter the supervisor runs on."""
    return (
        _environment()
        .get_template("node_probe.sh.j2")
        .render(supervisor_python=SUPERVISOR_PYTHON, **nccl_plugin.template_values())
    )


@functools.cache
def _template() -> jinja2.Template:
    return _environment().get_template("sbatch.sh.j2")


def _load_template(name: str) -> str:
    return jinja_env.load_template(name)


def _environment() -> jinja2.Environment:
    # Looked up at each load, so that a test can swap _load_template.
    return jinja_env.environment(lambda name: _load_template(name))
