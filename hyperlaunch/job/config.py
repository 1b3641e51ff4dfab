"""Builds the one JobSpec of an invocation from layered settings, in rising priority:

1. the model preset's recommended settings (nodes, GPUs per node; hyperlaunch.core.models),
2. the user config `$HYPERLAUNCH_HOME/config.toml` (default ~/.hyperlaunch/config.toml),
3. `hyperlaunch.toml` in the current directory,
4. environment variables `HYPERLAUNCH_<FIELD>` (e.g. HYPERLAUNCH_NODES, HYPERLAUNCH_PARTITION),
5. command-line flags.

A TOML file holds JobSpec field names at the top level (`-` or `_` both accepted), an `[env]`
table of exports, and named profiles (`[profile.hyperpod]`) selected with `--profile` or
HYPERLAUNCH_PROFILE; within a file the profile overrides the top level. Lists replace the
lower layer's list, except `env`, which merges by variable name. Relative paths resolve
against the current directory.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.job import containers
from hyperlaunch.job import detect
from hyperlaunch.core import recommend
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.core.checkpoints import is_model_directory
from hyperlaunch.core.compat import tomllib
from hyperlaunch.core.errors import ConfigError, InvalidInput
from hyperlaunch.aws.hyperpod import check_cluster_name
from hyperlaunch.core.instances import canonical_instance_type, get_instance
from hyperlaunch.core.models import PRESETS, ModelSpec, get_preset, spec_from_model_directory
from hyperlaunch.core.recommend import Setting
from hyperlaunch.core.paths import hyperlaunch_home, is_dir, is_file
from hyperlaunch.job.spec import JobSpec

PROJECT_CONFIG_NAME = "hyperlaunch.toml"
PROFILE_ENV_VAR = "HYPERLAUNCH_PROFILE"
ENV_PREFIX = "HYPERLAUNCH_"
DEFAULT_CHECKPOINT_DIR = "checkpoints"
"""Relative to the current directory, like every relative path in the layers."""

Settings = dict[str, object]
Layer = tuple[str, Settings]
"""Settings and where they come from (a file, with its profile; the environment; the command line)."""
_FLAGS_LAYER = "the command line"
_ENVIRONMENT_LAYER = "the environment"

# Fields hyperlaunch decides itself: no config key, HYPERLAUNCH_* variable or flag sets them.
_INTERNAL_FIELDS = frozenset({"checkpoint_name", "trainer_module", "after_job"})
_FIELD_TYPES: dict[str, object] = {
    name: kind for name, kind in typing.get_type_hints(JobSpec).items() if name not in _INTERNAL_FIELDS
}
# Lists that cannot be written unambiguously in one environment variable are left to TOML/flags.
_NOT_FROM_ENVIRONMENT = frozenset({"env", "trainer_args"})
_PATH_FIELDS = ("checkpoint_dir", "log_dir", "run_dir", "container_workdir")


def user_config_path() -> Path:
    return hyperlaunch_home() / "config.toml"


@dataclass(frozen=True)
class Plan:
    """The JobSpec of an invocation and the training settings it runs with, each with where it
    came from (the model's recommendation for this hardware, or the user)."""

    spec: JobSpec
    settings: tuple[Setting, ...]
    decided: tuple[detect.Decision, ...] = ()
    """Job settings decided for the cluster (instance type, GPUs as GRES, whole nodes), with their sources."""


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
    layers = _layers_below_flags(profile, cwd, environ, user_config)
    layers.append((_FLAGS_LAYER, _from_flags(flags)))

    merged = _merge([settings for _, settings in layers])
    cluster_env = None if slurm_env is None else functools.cache(slurm_env)  # asked once at most
    instance = _decide_instance_type(merged, layers, cluster_env, environ)
    exclusive = _decide_whole_nodes(merged, layers)
    merged = _merge([_preset_defaults(merged), merged])
    _resolve_model(merged, cwd)
    settings = _recommend(merged, layers)
    decided = instance + _decide_gpus(merged, layers, cluster_env) + exclusive + _decide_hyperpod(merged, layers, environ)
    return Plan(spec=_to_spec(merged, cwd), settings=settings, decided=decided)


def resolve_checkpoint_dir(
    flag: str | None = None,
    *,
    profile: str | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    user_config: Path | None = None,
) -> Path:
    """The checkpoint folder `build_spec` would use, with the same layering but no model
    needed: `checkpoints` and `doctor` look at checkpoints without describing a job."""
    cwd = cwd or Path.cwd()
    environ = os.environ if environ is None else environ
    layers = _layers_below_flags(profile, cwd, environ, user_config)
    layers.append((_FLAGS_LAYER, _from_flags({"checkpoint_dir": flag})))
    value = _merge([settings for _, settings in layers]).get("checkpoint_dir") or DEFAULT_CHECKPOINT_DIR
    return Path(_absolute(str(value), cwd))


def resolve_job_launch(
    partition: str | None = None,
    *,
    profile: str | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    user_config: Path | None = None,
) -> dict[str, str | None]:
    """partition, container_image, torchrun, instance_type and hyperpod_cluster as `build_spec`
    would layer them, with no model needed: what `doctor` checks the cluster and probes the
    compute nodes for. torchrun is None in a container; instance_type None when no layer sets it."""
    cwd = cwd or Path.cwd()
    environ = os.environ if environ is None else environ
    layers = _layers_below_flags(profile, cwd, environ, user_config)
    layers.append((_FLAGS_LAYER, _from_flags({"partition": partition})))
    merged = _merge([settings for _, settings in layers])
    image = merged.get("container_image")
    torchrun = None if image is not None else str(merged.get("torchrun") or _default_torchrun())
    def text(key: str) -> str | None:
        value = merged.get(key)
        return None if value is None else str(value)

    return {
        "partition": text("partition"),
        "container_image": text("container_image"),
        "torchrun": torchrun,
        "instance_type": text("instance_type"),
        "instance_type_source": _source(layers, "instance_type"),
        "hyperpod_cluster": text("hyperpod_cluster"),
        "data": text("data"),
    }


def _layers_below_flags(
    profile: str | None, cwd: Path, environ: Mapping[str, str], user_config: Path | None
) -> list[Layer]:
    """User config, hyperlaunch.toml (each with the chosen profile on top), then HYPERLAUNCH_*."""
    if profile is None:
        profile = environ.get(PROFILE_ENV_VAR) or None  # empty, like every HYPERLAUNCH_* variable: not set
    elif profile == "":
        raise InvalidInput("--profile must name a profile ([profile.NAME] in a config file), not be empty")
    files = [user_config or user_config_path(), cwd / PROJECT_CONFIG_NAME]
    layers: list[Layer] = []
    profile_found = profile is None
    for path in files:
        top, profiles = _read_toml(path)
        layers.append((str(path), top))
        if profile is not None and profile in profiles:
            layers.append((f"{path} [profile.{profile}]", profiles[profile]))
            profile_found = True
    if not profile_found:
        raise ConfigError(f"profile {profile!r} is not defined in {' or '.join(str(f) for f in files)}")
    layers.append((_ENVIRONMENT_LAYER, _from_environment(environ)))
    return layers


def _read_toml(path: Path) -> tuple[Settings, dict[str, Settings]]:
    """Top-level settings and profiles of one file; ({}, {}) when there is none. Something
    else under its name (a folder, a symlink to nothing, a FIFO) is an error, not "no file":
    the user meant a config there."""
    if not os.path.lexists(path):
        return {}, {}
    _check_regular_file(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: {getattr(err, 'strerror', None) or err}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read") from None
    raw_profiles = data.pop("profile", {})
    if not isinstance(raw_profiles, dict):
        raise ConfigError(f"{path}: 'profile' must be tables like [profile.NAME]")
    profiles = {}
    for name, table in raw_profiles.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [profile.{name}] must be a table")
        profiles[name] = _from_table(table, f"{path} [profile.{name}]")
    return _from_table(data, str(path)), profiles


def _check_regular_file(path: Path) -> None:
    try:
        if path.is_file():
            return
        if path.is_symlink() and not path.exists():
            raise ConfigError(f"{path} is a symlink to {os.readlink(path)}, which does not exist")
        kind = "a folder" if path.is_dir() else "not a regular file"
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror or err}") from None
    raise ConfigError(f"{path} is {kind}; a config file must be a TOML file")


def _from_table(table: Mapping[str, object], where: str) -> Settings:
    settings: Settings = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        if key not in _FIELD_TYPES:
            raise ConfigError(
                f"unknown key {raw_key!r} in {where}; valid keys: {', '.join(sorted(_FIELD_TYPES))}, [profile.NAME]"
            )
        settings[key] = _coerce(key, value, where)
    return settings


def _from_environment(environ: Mapping[str, str]) -> Settings:
    settings: Settings = {}
    for key in _FIELD_TYPES:
        if key in _NOT_FROM_ENVIRONMENT:
            continue
        value = environ.get(ENV_PREFIX + key.upper())
        if value is not None and value != "":
            settings[key] = _coerce(key, value, f"${ENV_PREFIX}{key.upper()}")
    return settings


def _from_flags(flags: Mapping[str, object]) -> Settings:
    settings: Settings = {}
    for key, value in flags.items():
        if key not in _FIELD_TYPES:
            raise InvalidInput(f"internal: unknown flag field {key!r}")
        if value is None or (isinstance(value, (list, tuple)) and not value):
            continue  # not given on the command line
        settings[key] = _coerce(key, value, "the command line", error=InvalidInput)
    return settings


def _merge(layers: list[Settings]) -> Settings:
    merged: Settings = {}
    for layer in layers:
        for key, value in layer.items():
            if key == "env" and "env" in merged:
                combined = dict(typing.cast(tuple, merged["env"]))
                combined.update(dict(typing.cast(tuple, value)))
                merged["env"] = tuple(combined.items())
            else:
                merged[key] = value
    return merged


def _preset_defaults(settings: Settings) -> Settings:
    """Nodes and GPUs per node recommended by the model preset, within what the instance has;
    on whole nodes (--exclusive) every GPU of the instance, since no other job can use the rest."""
    model = settings.get("model")
    if not isinstance(model, str) or model not in PRESETS:
        return {}
    preset = get_preset(model)
    instance = get_instance(str(settings.get("instance_type", "cpu")))
    gpus = instance.gpus_per_node if settings.get("exclusive") else min(preset.gpus_per_node, instance.gpus_per_node)
    return {"nodes": preset.nodes, "gpus_per_node": gpus}


def _source(layers: list[Layer], key: str) -> str | None:
    """Where the value of `key` came from: the highest layer that sets it; None when none does."""
    for name, settings in reversed(layers):
        if key in settings:
            if name == _FLAGS_LAYER:
                return "you (" + "--" + key.replace("_", "-") + ")"
            if name == _ENVIRONMENT_LAYER:
                return f"${ENV_PREFIX}{key.upper()}"
            return name
    return None


def _decide_instance_type(
    settings: Settings, layers: list[Layer], slurm_env: Callable[[], Mapping[str, str]] | None, environ: Mapping[str, str]
) -> tuple[detect.Decision, ...]:
    """The instance type, set in `settings` with its source: a layer's value wins; else the
    HyperPod cluster's (asked only then, see detect.instance_type); else cpu. First of the
    decisions, since it drives whole nodes, GPUs per node and the recommendations."""
    source = _source(layers, "instance_type")
    if source is not None:
        settings["instance_type"] = canonical_instance_type(str(settings["instance_type"]))
        return (detect.Decision("instance_type", str(settings["instance_type"]), source),)
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
    settings["instance_type"] = decision.value
    return (decision,)


def _decide_hyperpod(settings: Settings, layers: list[Layer], environ: Mapping[str, str]) -> tuple[detect.Decision, ...]:
    """HyperPod auto-resume, set in `settings` with its source: a layer's on/off wins; else
    what this host and --hyperpod-cluster show (detect.hyperpod_mode)."""
    source = _source(layers, "hyperpod")
    mode = str(settings.get("hyperpod", "auto"))
    if source is not None and mode != "auto":
        decision = detect.Decision("hyperpod", mode, source)
    else:
        cluster = settings.get("hyperpod_cluster")
        decision = detect.hyperpod_mode(hyperpod_cluster=cluster if isinstance(cluster, str) else None, environ=environ)
    settings["hyperpod"] = decision.value
    if decision.value == "auto" and get_instance(str(settings.get("instance_type", "cpu"))).gpus_per_node == 0:
        return ()  # a CPU job nobody said anything about (the dev cluster): nothing worth a line
    return (decision,)


def _decide_whole_nodes(settings: Settings, layers: list[Layer]) -> tuple[detect.Decision, ...]:
    """--exclusive for GPU instance types unless a layer sets it (set in `settings`, with its
    source). AWS's reference scripts and the guide take whole nodes: without GRES nothing else
    keeps two GPU jobs off the same node. CPU jobs (the dev cluster) keep Slurm's default."""
    if get_instance(str(settings.get("instance_type", "cpu"))).gpus_per_node == 0:
        return ()
    source = _source(layers, "exclusive")
    if source is None:
        settings["exclusive"] = True
        source = "default for GPU instance types (whole nodes)"
    return (detect.Decision("exclusive", bool(settings["exclusive"]), source),)


def _decide_gpus(
    settings: Settings, layers: list[Layer], slurm_env: Callable[[], Mapping[str, str]] | None
) -> tuple[detect.Decision, ...]:
    """GPUs per node and whether Slurm sees them as GRES, set in `settings` with their sources:
    a layer's value wins; else GRES where the cluster has it (asked only then)."""
    instance = get_instance(str(settings.get("instance_type", "cpu")))
    if instance.gpus_per_node == 0:
        return ()
    gpus = settings.get("gpus_per_node", instance.gpus_per_node)
    gpus_source = _source(layers, "gpus_per_node")
    if gpus_source is None:
        model = str(settings["model"])
        gpus_source = (
            f"whole nodes: every GPU of {instance.name}" if settings.get("exclusive")
            else f"preset {model}" if model in PRESETS else f"every GPU of {instance.name}"
        )
    per_node = detect.Decision("gpus_per_node", str(gpus), gpus_source)

    gres_source = _source(layers, "gres_gpus")
    mode = str(settings.get("gres_gpus", "auto"))
    if gres_source is not None and mode != "auto":
        gres = detect.Decision("gres_gpus", mode, gres_source)
    else:
        gres = detect.gres_gpus(
            gpus=gpus if isinstance(gpus, int) else instance.gpus_per_node,
            partition=typing.cast("str | None", settings.get("partition")),
            slurm_env=None if slurm_env is None else slurm_env(),
        )
    settings["gres_gpus"] = gres.value
    return (per_node, gres)


def _resolve_model(settings: Settings, cwd: Path) -> None:
    if "model" not in settings:
        raise InvalidInput(
            f"no model given; pass --model or set model in {PROJECT_CONFIG_NAME}; presets: {', '.join(PRESETS)}"
        )
    model = str(settings["model"])
    if model not in PRESETS:
        local_model = _absolute(model, cwd)
        if is_dir(local_model):
            settings["model"] = local_model
        elif is_model_directory(model):
            raise InvalidInput(f"--model {model}: no such model directory; presets: {', '.join(PRESETS)}")


def _model_spec(model: str) -> tuple[ModelSpec, str]:
    """The model's numbers and where they come from: a preset, or the directory's config.json."""
    if model in PRESETS:
        return get_preset(model), f"preset {model}"
    return spec_from_model_directory(model, os.path.basename(model.rstrip("/"))), f"{model}/config.json"


def _recommend(settings: Settings, layers: list[Layer]) -> tuple[Setting, ...]:
    """Fill max_steps and the trainer arguments the user left out with the model's
    recommendation for the instance type's hardware; return every setting with its source."""
    model = str(settings["model"])
    if model not in PRESETS and not is_model_directory(model):
        return ()  # an unknown name: JobSpec's validation says which models exist
    spec, origin = _model_spec(model)
    instance_type = str(settings.get("instance_type", "cpu"))
    gpu = get_instance(instance_type).gpus_per_node > 0
    user_args = tuple(typing.cast(tuple, settings.get("trainer_args", ())))
    own_tokenizer = model not in PRESETS and is_file(Path(model) / "tokenizer_config.json")
    chosen = recommend.recommended(
        spec, origin=origin, gpu=gpu, hardware=f"{'GPU' if gpu else 'CPU'} nodes ({instance_type})",
        data_given=settings.get("data") is not None, model_tokenizer=model if own_tokenizer else None,
        data_tokenizer=recommend.prepared_data_tokenizer(typing.cast("str | None", settings.get("data"))),
    )
    given = recommend.given_names(user_args)
    added: list[str] = []
    shown: list[Setting] = []
    for setting in chosen:
        if setting.name == "max_steps":
            if settings.get("max_steps") is None:
                settings["max_steps"] = setting.value
            else:
                source = _source(layers, "max_steps") or "you"
                setting = recommend.Setting("max_steps", int(str(settings["max_steps"])), source)
        elif setting.name in given:
            setting = recommend.Setting(setting.name, _given_value(user_args, setting), "you (after --)")
        else:
            added += setting.as_args()
        shown.append(setting)
    settings["trainer_args"] = (*added, *user_args)
    return tuple(shown)


def _given_value(args: tuple[str, ...], setting: Setting) -> int | bool | str:
    if isinstance(setting.value, bool):
        return setting.flag in args  # else its --no- form
    return targs.value_of(args, setting.flag) or ""


def _to_spec(settings: Settings, cwd: Path) -> JobSpec:
    job_name = str(settings.get("job_name") or os.path.basename(str(settings["model"]).rstrip("/")))
    settings.setdefault("checkpoint_dir", DEFAULT_CHECKPOINT_DIR)
    settings.setdefault("log_dir", "logs")
    settings.setdefault("run_dir", os.path.join("runs", job_name))
    for key in _PATH_FIELDS:
        if settings.get(key) is not None:
            settings[key] = _absolute(str(settings[key]), cwd)
    data = settings.get("data")
    # The job runs elsewhere (another node, a container): a path that exists here, or is
    # spelled as one, goes absolute; anything else stays a name (a dataset on a hub).
    if isinstance(data, str) and (data.startswith((".", "~", "/")) or os.path.lexists(os.path.join(cwd, data))):
        settings["data"] = _absolute(data, cwd)
    image = settings.get("container_image")
    if isinstance(image, str) and containers.is_image_file(image) and not os.path.isabs(image):
        settings["container_image"] = _absolute(image, cwd)  # Pyxis reads `x.sqsh` as a registry image
    if "torchrun" not in settings and settings.get("container_image") is None:
        settings["torchrun"] = _default_torchrun()
    return JobSpec(**settings)  # type: ignore[arg-type]


def _absolute(path: str, cwd: Path) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


def _default_torchrun() -> str:
    """The torchrun next to this Python (its venv) when there is one: sbatch keeps PATH, but an
    explicit path also works when the venv is not activated. Plain `torchrun` otherwise."""
    sibling = Path(sys.executable).parent / "torchrun"
    return str(sibling) if sibling.is_file() else "torchrun"


def _coerce(key: str, value: object, where: str, *, error: type[Exception] = ConfigError) -> object:
    """Turns TOML, environment and flag values into the field's type, or says what is wrong."""
    kind = _FIELD_TYPES[key]
    try:
        if key == "env":
            return _env_pairs(value)
        if key in ("hyperpod", "gres_gpus"):
            return _hyperpod_mode(value)
        if _is_tuple_of_str(kind):
            if isinstance(value, str):
                return tuple(item for item in value.split(",") if item) if key != "trainer_args" else (value,)
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                return tuple(value)
            raise ValueError("expected a list of strings")
        base = _base_type(kind)
        if base is bool:
            return _boolean(value)
        if base is int:
            return _integer(value)
        if base is str:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError("expected a string")
            if str(value) == "":
                raise ValueError("must not be empty" + (" (it would mean the current folder)" if key in _PATH_FIELDS else ""))
            return str(value)
    except ValueError as err:
        raise error(f"{key} = {value!r} in {where}: {err}") from None
    return value


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _integer(value: object) -> int:
    """An int from TOML or text: ASCII digits only (int() also reads other scripts' digits,
    `1_000` and surrounding spaces); its range is JobSpec's to check."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    raise ValueError("expected an integer (digits 0-9)")


def _base_type(kind: object) -> object:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return args[0] if len(args) == 1 else kind
    return kind


def _is_tuple_of_str(kind: object) -> bool:
    return typing.get_origin(kind) is tuple and typing.get_args(kind) == (str, ...)


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _hyperpod_mode(value: object) -> str:
    """auto/on/off, from those words, a TOML boolean or yes/no/1/0."""
    if isinstance(value, bool):
        return "on" if value else "off"
    text = str(value).strip().lower()
    aliases = {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}
    return aliases.get(text, text)


def _env_pairs(value: object) -> tuple[tuple[str, str | None], ...]:
    """An [env] table, or a list of KEY=VALUE strings, as ordered (KEY, VALUE) pairs; a bare
    KEY in the list is (KEY, None): forwarded from the submitting environment, value unwritten."""
    if isinstance(value, dict):
        if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value.values()):
            raise ValueError("env values must be strings or numbers")
        return tuple((str(k), str(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        pairs: list[tuple[str, str | None]] = []
        for item in value:
            if isinstance(item, tuple) and len(item) == 2:
                pairs.append((str(item[0]), None if item[1] is None else str(item[1])))
                continue
            name, sep, text = str(item).partition("=")
            if not name:
                raise ValueError(f"{item!r} is not KEY=VALUE or KEY")
            pairs.append((name, text if sep else None))
        return tuple(pairs)
    raise ValueError("expected a table or a list of KEY=VALUE")


# Keep the field list honest: every JobSpec field must have a type the coercion understands.
assert {f.name for f in dataclasses.fields(JobSpec)} == set(_FIELD_TYPES) | _INTERNAL_FIELDS
