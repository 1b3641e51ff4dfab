"""The settings a user gives a job, layered, in rising priority:

1. the user config `$HYPERLAUNCH_HOME/config.toml` (default ~/.hyperlaunch/config.toml),
2. `hyperlaunch.toml` in the current directory,
3. environment variables `HYPERLAUNCH_<FIELD>` (e.g. HYPERLAUNCH_NODES, HYPERLAUNCH_PARTITION),
4. command-line flags.

The model preset's recommendations lie below all of them (hyperlaunch.job.plan). A TOML file
holds job setting names at the top level (`-` or `_` both accepted), an `[env]` table of
exports, and named profiles (`[profile.hyperpod]`) selected with `--profile` or
HYPERLAUNCH_PROFILE; within a file the profile overrides the top level. Lists replace the lower
layer's list, except `env`, which merges by variable name. Relative paths resolve against the
current directory. Every value is coerced to its setting's type here, and where each came
from is kept (`source`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.compat import tomllib
from hyperlaunch.core.errors import ConfigError, InvalidInput
from hyperlaunch.core.paths import hyperlaunch_home
from hyperlaunch.core.suggest import did_you_mean
from hyperlaunch.job.spec import user_settings
from hyperlaunch.job.text_checks import shown

PROJECT_CONFIG_NAME = "hyperlaunch.toml"
PROFILE_ENV_VAR = "HYPERLAUNCH_PROFILE"
ENV_PREFIX = "HYPERLAUNCH_"
DEFAULT_CHECKPOINT_DIR = "checkpoints"
"""Relative to the current directory, like every relative path in the layers."""

Settings = dict[str, object]
Layer = tuple[str, Settings]
"""Settings and where they come from (a file, with its profile; the environment; the command line)."""
FLAGS_LAYER = "the command line"
ENVIRONMENT_LAYER = "the environment"

FIELD_TYPES: dict[str, object] = {setting.key: setting.kind for setting in user_settings()}
"""Each setting a user gives, by key, with its type (hyperlaunch.job.sections declares them)."""
# Lists that cannot be written unambiguously in one environment variable are left to TOML/flags.
_NOT_FROM_ENVIRONMENT = frozenset({"env", "trainer_args"})
PATH_FIELDS = ("checkpoint_dir", "log_dir", "run_dir", "container_workdir", "tensorboard_dir")


@dataclass(frozen=True, kw_only=True)
class LaunchSettings:
    """What `doctor` checks the cluster and probes the compute nodes for: the settings a job
    here would get, layered as for `submit`, with no model needed."""

    partition: str | None
    container_image: str | None
    torchrun: str | None
    """None in a container (the image brings its own)."""
    instance_type: str | None
    """None when no layer sets it (submit then asks the HyperPod cluster, else takes cpu)."""
    instance_type_source: str | None
    hyperpod_cluster: str | None
    data: str | None


def read_layers(
    flags: Mapping[str, object],
    *,
    profile: str | None,
    cwd: Path,
    environ: Mapping[str, str],
    user_config: Path | None,
) -> list[Layer]:
    """Every layer with its name, lowest first, the command line's flags on top."""
    layers = _layers_below_flags(profile, cwd, environ, user_config)
    layers.append((FLAGS_LAYER, _from_flags(flags)))
    return layers


def user_config_path() -> Path:
    return hyperlaunch_home() / "config.toml"


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
    layers = read_layers({"checkpoint_dir": flag}, profile=profile, cwd=cwd, environ=environ, user_config=user_config)
    value = merge([settings for _, settings in layers]).get("checkpoint_dir") or DEFAULT_CHECKPOINT_DIR
    return Path(absolute(str(value), cwd))


def resolve_job_launch(
    partition: str | None = None,
    *,
    profile: str | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    user_config: Path | None = None,
) -> LaunchSettings:
    """The launch settings `build_spec` would layer (see LaunchSettings)."""
    cwd = cwd or Path.cwd()
    environ = os.environ if environ is None else environ
    layers = read_layers({"partition": partition}, profile=profile, cwd=cwd, environ=environ, user_config=user_config)
    merged = merge([settings for _, settings in layers])

    def text(key: str) -> str | None:
        value = merged.get(key)
        return None if value is None else str(value)

    image = text("container_image")
    return LaunchSettings(
        partition=text("partition"),
        container_image=image,
        torchrun=None if image is not None else str(merged.get("torchrun") or default_torchrun()),
        instance_type=text("instance_type"),
        instance_type_source=source(layers, "instance_type"),
        hyperpod_cluster=text("hyperpod_cluster"),
        data=text("data"),
    )


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
    defined: list[str] = []
    for path in files:
        top, profiles = _read_toml(path)
        layers.append((str(path), top))
        defined += [name for name in profiles if name not in defined]
        if profile is not None and profile in profiles:
            layers.append((f"{path} [profile.{profile}]", profiles[profile]))
    if profile is not None and profile not in defined:
        raise ConfigError(_unknown_profile(profile, defined, files))
    layers.append((ENVIRONMENT_LAYER, _from_environment(environ)))
    return layers


def _unknown_profile(profile: str, defined: list[str], files: list[Path]) -> str:
    """One line: where profiles were looked for, the ones defined there, the closest to the
    name asked for."""
    return (
        f"profile {shown(profile)} is not defined in {' or '.join(str(f) for f in files)}"
        + did_you_mean(profile, defined, show=shown)
        + (f"; profiles there: {', '.join(shown(name, 40) for name in defined)}" if defined else "; no [profile.NAME] there")
    )


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
        if key not in FIELD_TYPES:
            raise ConfigError(
                f"unknown key {raw_key!r} in {where}{did_you_mean(key, FIELD_TYPES)}; valid keys: {', '.join(sorted(FIELD_TYPES))}, [profile.NAME]"
            )
        settings[key] = _coerce(key, value, where)
    return settings


def _from_environment(environ: Mapping[str, str]) -> Settings:
    settings: Settings = {}
    for key in FIELD_TYPES:
        if key in _NOT_FROM_ENVIRONMENT:
            continue
        value = environ.get(ENV_PREFIX + key.upper())
        if value is not None and value != "":
            settings[key] = _coerce(key, value, f"${ENV_PREFIX}{key.upper()}")
    return settings


def _from_flags(flags: Mapping[str, object]) -> Settings:
    settings: Settings = {}
    for key, value in flags.items():
        if key not in FIELD_TYPES:
            raise InvalidInput(f"internal: unknown flag field {key!r}")
        if value is None or (isinstance(value, (list, tuple)) and not value):
            continue  # not given on the command line
        settings[key] = _coerce(key, value, "the command line", error=InvalidInput)
    return settings


def merge(layers: list[Settings]) -> Settings:
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


def source(layers: list[Layer], key: str) -> str | None:
    """Where the value of `key` came from: the highest layer that sets it; None when none does."""
    for name, settings in reversed(layers):
        if key in settings:
            if name == FLAGS_LAYER:
                return "you (" + "--" + key.replace("_", "-") + ")"
            if name == ENVIRONMENT_LAYER:
                return f"${ENV_PREFIX}{key.upper()}"
            return name
    return None


def absolute(path: str, cwd: Path) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


def default_torchrun() -> str:
    """The torchrun next to this Python (its venv) when there is one: sbatch keeps PATH, but an
    explicit path also works when the venv is not activated. Plain `torchrun` otherwise."""
    sibling = Path(sys.executable).parent / "torchrun"
    return str(sibling) if sibling.is_file() else "torchrun"


def _coerce(key: str, value: object, where: str, *, error: type[Exception] = ConfigError) -> object:
    """Turns TOML, environment and flag values into the field's type, or says what is wrong."""
    kind = FIELD_TYPES[key]
    try:
        if key == "env":
            return _env_pairs(value)
        if key in ("hyperpod", "gres_gpus"):
            return _hyperpod_mode(value)
        if _is_tuple_of_str(kind):
            if isinstance(value, str):
                # `trainer_args = "--lr 3e-4"` means what it would after `--` on a command line.
                return tuple(item for item in value.split(",") if item) if key != "trainer_args" else _shell_words(value)
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
                raise ValueError("must not be empty" + (" (it would mean the current folder)" if key in PATH_FIELDS else ""))
            return str(value)
    except ValueError as err:
        raise error(f"{key} = {_as_written(value)} in {where}: {err}") from None
    return value


def _as_written(value: object) -> str:
    """A value as the user wrote it in TOML (`true`, `"x"`, `[1, 2]`), not as Python shows it."""
    import json

    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # a TOML date or time
        return str(value)


def _shell_words(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as err:  # an unclosed quote
        raise ValueError(f"cannot split it as a command line ({err}); write a list: [\"--lr\", \"3e-4\"]") from None


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

