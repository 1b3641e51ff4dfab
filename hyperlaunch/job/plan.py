"""The plan of one invocation: the validated JobSpec, built from the layered settings
(hyperlaunch.job.settings) over the model preset's recommendations, with every setting the
user left out decided here and said with its source.

Each decision is a function that returns what it decided (the settings it fills, and the
lines `submit` prints); `plan_job` applies them in order. The order matters: the instance
type drives whole nodes, the preset's nodes and GPUs, and the recommendations.
"""

from __future__ import annotations

import functools
import os
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.aws.hyperpod import check_cluster_name
from hyperlaunch.core import recommend, trackers
from hyperlaunch.core.checkpoints import is_model_directory
from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.instances import InstancePreset, canonical_instance_type, get_instance
from hyperlaunch.core.models import PRESETS, ModelSpec, get_preset, spec_from_model_directory
from hyperlaunch.core.paths import is_dir, is_file
from hyperlaunch.core.recommend import Setting
from hyperlaunch.job import checkpoint_room, code_snapshot, containers, detect, memory_room
from hyperlaunch.job import settings as layered
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.defaults import default_job_name, job_spec
from hyperlaunch.job.sections import TRAINER_ONLY
from hyperlaunch.job.settings import (
    DEFAULT_CHECKPOINT_DIR,
    FLAGS_LAYER,
    PATH_FIELDS,
    PROJECT_CONFIG_NAME,
    Layer,
    Settings,
    absolute,
    merge,
    read_layers,
    source,
)
from hyperlaunch.job.spec import JobSpec

Decided = tuple[Settings, tuple[detect.Decision, ...]]
"""What one decision fills in (JobSpec fields and values) and the lines it shows."""


@dataclass(frozen=True)
class Plan:
    """The JobSpec of an invocation and the training settings it runs with, each with where it
    came from (the model's recommendation for this hardware, or the user)."""

    spec: JobSpec
    settings: tuple[Setting, ...]
    decided: tuple[detect.Decision, ...] = ()
    """Job settings decided for the cluster (instance type, GPUs as GRES, whole nodes), with their sources."""
    configured: tuple[Setting, ...] = ()
    """The other job settings a config file or a HYPERLAUNCH_* variable gave, with which one."""


def build_spec(
    flags: Mapping[str, object],
    *,
    profile: str | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    user_config: Path | None = None,
) -> JobSpec:
    """The validated JobSpec for this invocation (see plan_job)."""
    return plan_job(flags, profile=profile, cwd=cwd, environ=environ, user_config=user_config).spec


def plan_job(
    flags: Mapping[str, object],
    *,
    profile: str | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    user_config: Path | None = None,
    slurm_env: Callable[[], Mapping[str, str]] | None = None,
) -> Plan:
    """The validated JobSpec for this invocation and its settings. `flags` holds JobSpec field
    names with the values the user typed (None or absent: not given); `env` may be a list of
    KEY=VALUE. Every training setting the user left out is written into the trainer's
    arguments as the model recommends it (hyperlaunch.core.recommend), and every job setting left
    to the cluster is decided here (hyperlaunch.job.detect, asking the Slurm cluster of
    `slurm_env()` when it must; None: no cluster to ask), so the job record says what the job
    runs with and `resume` renders the same job."""
    cwd = cwd or Path.cwd()
    environ = os.environ if environ is None else environ
    layers = read_layers(flags, profile=profile, cwd=cwd, environ=environ, user_config=user_config)
    cluster_env = None if slurm_env is None else functools.cache(slurm_env)  # asked once at most

    settings = _script_job(merge([values for _, values in layers]), layers, cwd)
    filled, instance = _instance_type(settings, layers, cluster_env, environ)
    settings = {**settings, **filled}
    filled, exclusive = _whole_nodes(settings, layers)
    settings = {**settings, **filled}
    settings = merge([_preset_defaults(settings), settings])
    settings = {**settings, **_resolved_model(settings, cwd)}
    filled, training = _recommended(settings, layers)
    settings = {**settings, **filled}
    filled, gpus = _gpus(settings, layers, cluster_env)
    settings = {**settings, **filled}
    filled, hyperpod = _hyperpod(settings, layers, environ)
    settings = {**settings, **filled}
    settings = {**settings, **_tracker_settings(settings, environ)}
    decided = instance + gpus + exclusive + hyperpod
    configured = _configured(layers, shown={s.name for s in training} | {d.name for d in decided})
    spec = _to_spec(settings, cwd)
    snapshot_memory_note(spec)  # refuses snapshots the nodes' memory cannot hold
    return Plan(spec=spec, settings=training, decided=decided, configured=configured)


def _configured(layers: list[Layer], shown: set[str]) -> tuple[Setting, ...]:
    """Each setting the command line left to a config file or a HYPERLAUNCH_* variable, with
    the layer that gave it (those `shown` already come with their source). `env` merges across
    layers: each layer's names, never a value (it may be a secret); a URI's user and password
    are hidden too."""
    rows = []
    for key in sorted({key for name, values in layers if name != FLAGS_LAYER for key in values} - shown):
        if key == "env":
            for name, values in layers:
                pairs = typing.cast("tuple[tuple[str, object], ...]", values.get("env", ()))
                if name != FLAGS_LAYER and pairs:
                    rows.append(Setting("env", " ".join(str(pair[0]) for pair in pairs), name))  # env is never a HYPERLAUNCH_* variable
            continue
        given = source(layers, key)
        if given is None or given.startswith("you ("):
            continue
        value = next(values[key] for _, values in reversed(layers) if key in values)
        text = " ".join(map(str, value)) if isinstance(value, (tuple, list)) else value
        shown_value = _URI_USER.sub("://***@", text) if isinstance(text, str) else typing.cast("int | bool | str", text)
        rows.append(Setting(key, shown_value, given))
    return tuple(rows)


_URI_USER = re.compile(r"://[^/@\s]+@")
"""The `user:password@` of a URI (`postgresql://u:p@host/db`), hidden where settings are shown."""


def checkpoint_room_warning(spec: JobSpec, trainings: int = 1) -> str | None:
    """A bundled-trainer job's checkpoints (a sweep's `trainings` each) against the free space
    of their folder (a warning: hyperlaunch.job.checkpoint_room); None for a script's job or
    when they fit."""
    model = spec.job.model
    if spec.is_script_job or not model or (model not in PRESETS and not is_model_directory(model)):
        return None
    return checkpoint_room.warning(spec, _model_spec(model)[0], trainings=trainings)


def snapshot_memory_note(spec: JobSpec) -> str | None:
    """What a bundled-trainer job's memory snapshots take of each node's host memory
    (hyperlaunch.job.memory_room; InvalidInput where they cannot fit); None for a job without
    them, or a script's (its state's size is its own)."""
    model = spec.job.model
    if spec.is_script_job or not model or (model not in PRESETS and not is_model_directory(model)):
        return None
    return memory_room.note(spec, _model_spec(model)[0], get_instance(spec.cluster.instance_type, gpus_per_node=spec.cluster.gpus_per_node))


def _tracker_settings(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """Each tracker's own settings where it keeps them: MLflow's server from MLFLOW_TRACKING_URI
    when --mlflow-uri is not given; W&B's project, entity, mode and server forwarded by name
    from this environment (as `--env NAME`: the value is not written into the script)."""
    chosen = typing.cast("tuple[str, ...]", settings.get("tracker") or ())
    filled: Settings = {}
    if trackers.MLFLOW in chosen and not settings.get("mlflow_uri") and environ.get(trackers.MLFLOW_URI_ENV):
        filled["mlflow_uri"] = environ[trackers.MLFLOW_URI_ENV]
    if trackers.WANDB in chosen:
        env = list(typing.cast("tuple[tuple[str, str | None], ...]", settings.get("env") or ()))
        given = {name for name, _ in env}
        forwarded: list[tuple[str, str | None]] = [(name, None) for name in trackers.WANDB_SETTINGS_FORWARDED if environ.get(name) and name not in given]
        if forwarded:
            filled["env"] = tuple(env + forwarded)
    return filled


def _instance(settings: Settings) -> InstancePreset:
    """The instance preset of the type settled so far; a type nobody described is what the
    user's --gpus-per-node says (hyperlaunch.core.instances.undescribed)."""
    gpus = settings.get("gpus_per_node")
    return get_instance(str(settings.get("instance_type", "cpu")), gpus_per_node=gpus if isinstance(gpus, int) else None)


def _preset_defaults(settings: Settings) -> Settings:
    """Nodes and GPUs per node recommended by the model preset, within what the instance has;
    on whole nodes (--exclusive) every GPU of the instance, since no other job can use the rest."""
    model = settings.get("model")
    if not isinstance(model, str) or model not in PRESETS:
        return {}
    preset = get_preset(model)
    instance = _instance(settings)
    gpus = instance.gpus_per_node if settings.get("exclusive") else min(preset.gpus_per_node, instance.gpus_per_node)
    return {"nodes": preset.nodes, "gpus_per_node": gpus}


def _instance_type(
    settings: Settings, layers: list[Layer], slurm_env: Callable[[], Mapping[str, str]] | None, environ: Mapping[str, str]
) -> Decided:
    """The instance type: a layer's value wins; else the HyperPod cluster's (asked only then,
    see detect.instance_type); else cpu."""
    given = source(layers, "instance_type")
    if given is not None:
        name = canonical_instance_type(str(settings["instance_type"]))
        return {"instance_type": name}, (detect.Decision("instance_type", name, given),)
    cluster = settings.get("hyperpod_cluster")
    if isinstance(cluster, str):
        problem = check_cluster_name(cluster)
        if problem is not None:
            raise InvalidInput(f"--hyperpod-cluster {cluster[:80]!r}: {problem}")
    decision = detect.instance_type(
        partition=typing.cast("str | None", settings.get("partition")),
        hyperpod_cluster=typing.cast("str | None", cluster),
        slurm_env=slurm_env,
        environ=environ,
    )
    return {"instance_type": decision.value}, (decision,)


def _hyperpod(settings: Settings, layers: list[Layer], environ: Mapping[str, str]) -> Decided:
    """HyperPod auto-resume: a layer's on/off wins; else what this host and --hyperpod-cluster
    show (detect.hyperpod_mode)."""
    given = source(layers, "hyperpod")
    mode = str(settings.get("hyperpod", "auto"))
    if given is not None and mode != "auto":
        decision = detect.Decision("hyperpod", mode, given)
    else:
        cluster = settings.get("hyperpod_cluster")
        decision = detect.hyperpod_mode(hyperpod_cluster=cluster if isinstance(cluster, str) else None, environ=environ)
    filled: Settings = {"hyperpod": decision.value}
    if decision.value == "auto" and _instance(settings).gpus_per_node == 0:
        return filled, ()  # a CPU job nobody said anything about (the dev cluster): nothing worth a line
    return filled, (decision,)


def _whole_nodes(settings: Settings, layers: list[Layer]) -> Decided:
    """--exclusive for GPU instance types unless a layer sets it. AWS's reference scripts and
    the guide take whole nodes: without GRES nothing else keeps two GPU jobs off the same node.
    CPU jobs (the dev cluster) keep Slurm's default."""
    if _instance(settings).gpus_per_node == 0:
        return {}, ()
    given = source(layers, "exclusive")
    if given is None:
        return {"exclusive": True}, (detect.Decision("exclusive", True, "default for GPU instance types (whole nodes)"),)
    return {}, (detect.Decision("exclusive", bool(settings["exclusive"]), given),)


def _gpus(settings: Settings, layers: list[Layer], slurm_env: Callable[[], Mapping[str, str]] | None) -> Decided:
    """GPUs per node and whether Slurm sees them as GRES: a layer's value wins; else GRES
    where the cluster has it (asked only then)."""
    instance = _instance(settings)
    if instance.gpus_per_node == 0:
        return {}, ()
    gpus = settings.get("gpus_per_node", instance.gpus_per_node)
    gpus_source = source(layers, "gpus_per_node")
    if gpus_source is None:
        model = str(settings.get("model", ""))
        gpus_source = (
            f"whole nodes: every GPU of {instance.name}" if settings.get("exclusive")
            else f"preset {model}" if model in PRESETS else f"every GPU of {instance.name}"
        )
    per_node = detect.Decision("gpus_per_node", str(gpus), gpus_source)

    gres_source = source(layers, "gres_gpus")
    mode = str(settings.get("gres_gpus", "auto"))
    if gres_source is not None and mode != "auto":
        gres = detect.Decision("gres_gpus", mode, gres_source)
    else:
        gres = detect.gres_gpus(
            gpus=gpus if isinstance(gpus, int) else instance.gpus_per_node,
            partition=typing.cast("str | None", settings.get("partition")),
            slurm_env=None if slurm_env is None else slurm_env(),
        )
    return {"gres_gpus": gres.value}, (per_node, gres)


def _script_job(settings: Settings, layers: list[Layer], cwd: Path) -> Settings:
    """A --script or --module job: its script as an absolute path, which must be a file here;
    the bundled trainer's settings left out where a config file or variable set them (given
    as flags, JobSpec refuses them with the reason)."""
    if settings.get("script") is None and settings.get("module") is None:
        return settings
    typed = dict(layers).get(FLAGS_LAYER, {})
    settings = {key: value for key, value in settings.items() if key not in TRAINER_ONLY or key in typed}
    script = settings.get("script")
    if isinstance(script, str):
        path = absolute(script, cwd)
        if not is_file(path):
            raise InvalidInput(f"--script {script}: no such file" + (" (a folder)" if is_dir(path) else ""))
        settings["script"] = path
    return settings


def _resolved_model(settings: Settings, cwd: Path) -> Settings:
    """A model that is no preset but a folder here, as an absolute path."""
    if settings.get("script") is not None or settings.get("module") is not None:
        return {}
    if "model" not in settings:
        raise InvalidInput(
            f"no model given; pass --model or set model in {PROJECT_CONFIG_NAME}; presets: {', '.join(PRESETS)}"
        )
    model = str(settings["model"])
    if model not in PRESETS:
        local_model = absolute(model, cwd)
        if is_dir(local_model):
            return {"model": local_model}
        if is_model_directory(model):
            raise InvalidInput(f"--model {model}: no such model directory; presets: {', '.join(PRESETS)}")
    return {}


def _model_spec(model: str) -> tuple[ModelSpec, str]:
    """The model's numbers and where they come from: a preset, or the directory's config.json."""
    if model in PRESETS:
        return get_preset(model), f"preset {model}"
    return spec_from_model_directory(model, os.path.basename(model.rstrip("/"))), f"{model}/config.json"


def _recommended(settings: Settings, layers: list[Layer]) -> tuple[Settings, tuple[Setting, ...]]:
    """max_steps and the trainer arguments the user left out, as the model recommends them for
    the instance type's hardware; and every training setting with its source."""
    model = str(settings.get("model", ""))
    if not model or (model not in PRESETS and not is_model_directory(model)):
        return {}, ()  # an unknown name: JobSpec's validation says which models exist
    spec, origin = _model_spec(model)
    instance = _instance(settings)
    gpu = instance.gpus_per_node > 0
    user_args = tuple(typing.cast(tuple, settings.get("trainer_args", ())))
    from hyperlaunch.data.prepared_data import manifest_tokenizer  # its folder format, only when a job is planned

    own_tokenizer = model not in PRESETS and is_file(Path(model) / "tokenizer_config.json")
    given = recommend.given_names(user_args)
    gpus = settings.get("gpus_per_node", instance.gpus_per_node)
    chosen = recommend.recommended(
        spec, origin=origin, gpu=gpu, hardware=f"{'GPU' if gpu else 'CPU'} nodes ({instance.name})",
        data_given=settings.get("data") is not None, model_tokenizer=model if own_tokenizer else None,
        data_tokenizer=manifest_tokenizer(typing.cast("str | None", settings.get("data"))),
        gpu_memory_gib=instance.gpu_memory_gib,
        world=int(typing.cast(int, settings.get("nodes", 1))) * (gpus if isinstance(gpus, int) and gpus > 0 else 1),
        given=_given_sizes(user_args, given), checkpoints=targs.NO_CHECKPOINTS not in user_args,
    )
    filled: Settings = {}
    added: list[str] = []
    shown: list[Setting] = []
    for setting in chosen:
        if setting.name == "max_steps":
            if settings.get("max_steps") is None:
                filled["max_steps"] = setting.value
            else:
                setting = recommend.Setting("max_steps", int(str(settings["max_steps"])), source(layers, "max_steps") or "you")
        elif setting.name in given:
            setting = recommend.Setting(setting.name, _given_value(user_args, setting), "you (after --)")
        else:
            added += setting.as_args()
        shown.append(setting)
    filled["trainer_args"] = (*added, *user_args)
    return filled, tuple(shown)


def _given_sizes(args: tuple[str, ...], given: set[str]) -> dict[str, int | bool]:
    """The sizes and switches the user set after `--` that the GPU-memory fit must keep or count
    (a value that is not a number is left to the trainer's parser, which refuses it before
    anything is submitted)."""
    sizes: dict[str, int | bool] = {}
    for name in ("seq_len", "micro_batch_size", "grad_accum"):
        value = targs.count_of(args, "--" + name.replace("_", "-"))
        if value:
            sizes[name] = value
    for switch in ("activation_checkpointing", "cpu_offload"):
        if switch in given:
            sizes[switch] = "--" + switch.replace("_", "-") in args
    return sizes


def _given_value(args: tuple[str, ...], setting: Setting) -> int | bool | str:
    if isinstance(setting.value, bool):
        return setting.flag in args  # else its --no- form
    return targs.value_of(args, setting.flag) or ""


def _to_spec(settings: Settings, cwd: Path) -> JobSpec:
    """The JobSpec: defaults for the folders, every path absolute (the job runs elsewhere),
    the torchrun next to this Python, and the container's name derived from its image here."""
    settings = dict(settings)
    job_name = str(settings.get("job_name") or default_job_name(settings))
    settings.setdefault("checkpoint_dir", DEFAULT_CHECKPOINT_DIR)
    settings.setdefault("log_dir", "logs")
    settings.setdefault("run_dir", os.path.join("runs", job_name))
    for key in PATH_FIELDS:
        if settings.get(key) is not None:
            place = settings[key] = absolute(str(settings[key]), cwd)
            # Folders this machine writes or the nodes share: a file there fails render as it
            # fails submit (a container's workdir is the container's, not a path here).
            if key != "container_workdir" and os.path.lexists(place) and not os.path.isdir(place):
                flag = "--" + key.replace("_", "-")
                raise InvalidInput(f"{flag} {place[:200]}: a file is there, not a folder")
    data = settings.get("data")
    # The job runs elsewhere (another node, a container): a path that exists here, or is
    # spelled as one, goes absolute; anything else stays a name (a dataset on a hub).
    if isinstance(data, str) and (data.startswith((".", "~", "/")) or os.path.lexists(os.path.join(cwd, data))):
        settings["data"] = absolute(data, cwd)
    image = settings.get("container_image")
    if isinstance(image, str) and containers.is_image_file(image) and not os.path.isabs(image):
        settings["container_image"] = absolute(image, cwd)  # Pyxis reads `x.sqsh` as a registry image
    if "torchrun" not in settings and settings.get("container_image") is None:
        settings["torchrun"] = layered.default_torchrun()
    spec = job_spec(**settings)
    if spec.is_script_job:  # validated first: the snapshot reads the whole project
        spec = _with_snapshot(spec, cwd)
    return spec.settled()


def _with_snapshot(spec: JobSpec, cwd: Path) -> JobSpec:
    """The script job with where its code comes from and the snapshot it will run from: the
    project of the script (or, for --module, of the current folder), less the job's output
    folders, hashed now, so that the script names the copy `submit` writes
    (hyperlaunch.job.code_snapshot)."""
    script = spec.job.script
    snapshot = code_snapshot.take_for(spec, Path(os.path.dirname(script)) if script is not None else cwd)
    if script is not None:
        inside = os.path.relpath(os.path.realpath(script), os.path.realpath(snapshot.root)).replace(os.sep, "/")
        if inside not in {file.path for file in snapshot.files}:
            raise InvalidInput(f"--script {script} is not part of its project's snapshot ({snapshot.root}): is it ignored by .gitignore?")
        script = os.path.join(str(snapshot.root), inside)
    return spec.replace(script=script, code_root=str(snapshot.root), code_dir=code_snapshot.snapshot_dir(spec.output.run_dir, snapshot))
