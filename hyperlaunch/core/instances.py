"""EFA/NCCL presets per instance type, read from the data files in `env/*.toml`.

Each file describes one instance family (GPU, EFA or not, environment exports) and lists the
instance types in it with their GPUs per node: `"g5.xlarge" = 1`, or a table for a size that
differs from its family (`"g5.8xlarge" = { gpus = 1, efa = true }`: the larger g5/g6 sizes have
EFA). `[efa_env]` is exported on top of `[env]` for the sizes with EFA. Data, not code, so a
new instance type is a TOML edit: a user's own files, in the same format, go in
`~/.hyperlaunch/instances/*.toml` (`$HYPERLAUNCH_HOME/instances`) and take precedence over the
shipped ones for the types they name. A type nobody described runs with `--gpus-per-node N`
(undescribed(): no EFA settings, no GPU model).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from importlib import resources
from pathlib import Path

from hyperlaunch.core.compat import tomllib
from hyperlaunch.core.errors import ConfigError, InvalidInput
from hyperlaunch.core.paths import hyperlaunch_home
from hyperlaunch.core.suggest import closest, did_you_mean

_FAMILY_KEYS = frozenset(
    {
        "description", "gpu", "gpu_memory_gib", "peak_bf16_tflops_per_gpu", "efa", "host_memory_gib",
        "instance_types", "env", "efa_env", "container_env",
    }
)
USER_INSTANCES_DIR = "instances"
"""Under the hyperlaunch home: the user's own instance presets, one family a .toml file."""
UNDESCRIBED_FAMILY = "undescribed"
TYPO_CUTOFF = 0.9
"""An unknown type this close to a known one (`p5.48xlarg`) is a typo, never a new type."""
_SIZE_KEYS = frozenset({"gpus", "efa", "host_memory_gib"})


@dataclass(frozen=True, kw_only=True)
class InstancePreset:
    """What rendering needs to know about one instance type."""

    name: str
    """Instance type, e.g. `p5.48xlarge`, or `cpu` for the dev cluster."""
    family: str
    """Name of the env/*.toml file it came from, e.g. `p5`."""
    description: str
    """One line for humans."""
    gpus_per_node: int
    """GPUs in one instance (0 for `cpu`)."""
    efa: bool
    """Whether the instance has EFA (NCCL reaches it through the aws-ofi-nccl plugin)."""
    gpu: str | None
    """The GPU model as CUDA names it (a part of torch.cuda.get_device_name), e.g. `H100`."""
    peak_bf16_tflops_per_gpu: float | None
    """Dense bf16 peak used for MFU; None where no reliable figure is published."""
    gpu_memory_gib: float | None
    """Memory of one GPU (NVIDIA's figure); sizes the recommended sequence length and micro-batch."""
    env: tuple[tuple[str, str], ...]
    """Environment exported on every node, in file order: `[env]`, then `[efa_env]` where it has EFA."""
    container_env: tuple[tuple[str, str], ...]
    """Overrides of `env` inside a Pyxis container."""
    host_memory_gib: float | None = None
    """Memory of one instance (AWS's figure), what memory snapshots are checked against at
    submit; None where not described."""


def _pairs(table: object, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ConfigError(f"{where} must be a table of strings")
    return tuple((str(k), v) for k, v in table.items())


def _family_presets(family: str, data: dict[str, object], where: str) -> list[InstancePreset]:
    unknown = sorted(set(data) - _FAMILY_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_FAMILY_KEYS))}")
    instance_types = data.get("instance_types")
    if not isinstance(instance_types, dict) or not instance_types:
        raise ConfigError(f"{where}: [instance_types] must map instance type names to GPU counts")
    peak = _number(data.get("peak_bf16_tflops_per_gpu"), f"{where}: peak_bf16_tflops_per_gpu")
    memory = _number(data.get("gpu_memory_gib"), f"{where}: gpu_memory_gib")
    family_host_memory = _number(data.get("host_memory_gib"), f"{where}: host_memory_gib")
    family_efa = _flag(data.get("efa", False), f"{where}: efa")
    env = _pairs(data.get("env", {}), f"{where} [env]")
    efa_env = _pairs(data.get("efa_env", {}), f"{where} [efa_env]")
    presets = []
    for name, size in instance_types.items():
        gpus, efa, host_memory = _size(size, family_efa, family_host_memory, f"{where} [instance_types] {name}")
        presets.append(
            InstancePreset(
                name=name,
                family=family,
                description=str(data.get("description", "")),
                gpus_per_node=gpus,
                efa=efa,
                gpu=str(data["gpu"]) if data.get("gpu") else None,
                peak_bf16_tflops_per_gpu=peak,
                gpu_memory_gib=memory,
                env=tuple({**dict(env), **(dict(efa_env) if efa else {})}.items()),
                container_env=_pairs(data.get("container_env", {}), f"{where} [container_env]"),
                host_memory_gib=host_memory,
            )
        )
    return presets


def _number(value: object, where: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false")
    return value


def _size(size: object, family_efa: bool, family_host_memory: float | None, where: str) -> tuple[int, bool, float | None]:
    """(GPUs, EFA, host memory) of one size: a GPU count, or a table {gpus = N, efa = bool,
    host_memory_gib = N}."""
    host_memory = family_host_memory
    if isinstance(size, dict):
        unknown = sorted(set(size) - _SIZE_KEYS)
        if unknown or "gpus" not in size:
            raise ConfigError(f"{where}: a size is {{gpus = N, efa = true|false, host_memory_gib = N}}, got keys {', '.join(sorted(size))}")
        gpus, efa = size["gpus"], _flag(size.get("efa", family_efa), f"{where}: efa")
        if "host_memory_gib" in size:
            host_memory = _number(size["host_memory_gib"], f"{where}: host_memory_gib")
    else:
        gpus, efa = size, family_efa
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise ConfigError(f"{where}: GPUs must be a whole number, got {gpus!r}")
    return gpus, efa, host_memory


@functools.cache
def shipped_presets() -> dict[str, InstancePreset]:
    """The instance types hyperlaunch ships, read once per process from env/*.toml."""
    presets: dict[str, InstancePreset] = {}
    for entry in sorted(resources.files("hyperlaunch.env").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        family = entry.name.removesuffix(".toml")
        data = tomllib.loads(entry.read_text(encoding="utf-8"))
        for preset in _family_presets(family, data, f"env/{family}.toml"):
            presets[preset.name] = preset
    return presets


def user_presets_dir() -> Path:
    return hyperlaunch_home() / USER_INSTANCES_DIR


def _user_presets(folder: Path) -> dict[str, InstancePreset]:
    """The presets of the user's files, read again only when a file changed."""
    try:
        files = sorted(path for path in folder.iterdir() if path.suffix == ".toml")
        stamps = tuple((path, path.stat().st_mtime_ns) for path in files)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as exc:
        raise ConfigError(f"{folder}: cannot list it ({exc.strerror})") from None
    return _read_user_presets(stamps)


@functools.cache
def _read_user_presets(stamps: tuple[tuple[Path, int], ...]) -> dict[str, InstancePreset]:
    presets: dict[str, InstancePreset] = {}
    for path, _ in stamps:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: not a readable TOML file ({exc})") from None
        for preset in _family_presets(path.stem, data, str(path)):
            presets[canonical_instance_type(preset.name)] = dataclass_replace(preset, name=canonical_instance_type(preset.name))
    return presets


def all_presets() -> dict[str, InstancePreset]:
    """Every known instance type: the shipped ones, and the user's (USER_INSTANCES_DIR) over them."""
    return {**shipped_presets(), **_user_presets(user_presets_dir())}


def undescribed(name: str, gpus_per_node: int) -> InstancePreset:
    """An instance type no preset describes, with the GPUs the user said it has: NCCL over the
    network NCCL finds itself, no EFA settings, no GPU model (so no MFU, and recommendations
    sized as for the preset's target GPU)."""
    return InstancePreset(
        name=canonical_instance_type(name),
        family=UNDESCRIBED_FAMILY,
        description=f"{gpus_per_node} GPUs a node, described by --gpus-per-node only (no EFA settings)",
        gpus_per_node=gpus_per_node,
        efa=False,
        gpu=None,
        peak_bf16_tflops_per_gpu=None,
        gpu_memory_gib=None,
        env=(("NCCL_SOCKET_IFNAME", "^docker,lo,veth"), ("HF_HUB_ETAG_TIMEOUT", "60")),
        container_env=(("NCCL_SOCKET_IFNAME", "^docker0,lo"),),
    )


def known_instance_types() -> list[str]:
    return list(all_presets())


SAGEMAKER_PREFIX = "ml."
"""SageMaker (HyperPod's console, API and resource_config.json) names instance types
`ml.p5.48xlarge`; EC2 and these presets name them `p5.48xlarge`."""


def canonical_instance_type(name: str) -> str:
    """`ml.p5.48xlarge`, `P5.48XLARGE` -> `p5.48xlarge`: AWS's names are lower case, and one
    typed from a console or a doc in capitals means the same type."""
    return name.lower().removeprefix(SAGEMAKER_PREFIX)


def get_instance(name: str, *, gpus_per_node: int | None = None) -> InstancePreset:
    """The preset for an instance type, by its EC2 or SageMaker (`ml.`) name in any case; for a
    type nobody described, the one `gpus_per_node` (the user's --gpus-per-node) describes, else
    InvalidInput listing the known ones, and the closest when one is close."""
    canonical = canonical_instance_type(name)
    presets = all_presets()
    if canonical in presets:
        return presets[canonical]
    if gpus_per_node is not None and gpus_per_node > 0 and closest(canonical, presets, cutoff=TYPO_CUTOFF) is None:
        return undescribed(canonical, gpus_per_node)
    suggestion = did_you_mean(canonical, list(presets))
    family = canonical.split(".")[0]
    file = family + ".toml" if re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,62}", family) else "<family>.toml"
    raise InvalidInput(
        f"unknown instance type {name!r}{suggestion}; known: {', '.join(presets)}",
        hint=f"describe it in {user_presets_dir() / file} (docs/hyperpod.md: Your own instance types), or give --gpus-per-node N",
    ) from None


def peak_bf16_flops(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s of a GPU by the name CUDA gives it (e.g. `NVIDIA H100 80GB HBM3`),
    from the instance presets; None for a GPU none of them names. The model must be a whole
    word of the name, so an L40S is never taken for an L4."""
    for preset in shipped_presets().values():
        if preset.gpu and preset.peak_bf16_tflops_per_gpu and re.search(rf"\b{re.escape(preset.gpu)}\b", device_name):
            return preset.peak_bf16_tflops_per_gpu * 1e12
    return None
