"""EFA/NCCL presets per instance type, read from the data files in `env/*.toml`.

Each file describes one instance family (GPU, EFA or not, environment exports) and lists the
instance types in it with their GPUs per node: `"g5.xlarge" = 1`, or a table for a size that
differs from its family (`"g5.8xlarge" = { gpus = 1, efa = true }`: the larger g5/g6 sizes have
EFA). `[efa_env]` is exported on top of `[env]` for the sizes with EFA. Data, not code, so a
new instance type is a TOML edit.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from hyperlaunch.core.compat import tomllib
from hyperlaunch.core.errors import ConfigError, InvalidInput
from hyperlaunch.core.suggest import did_you_mean

_FAMILY_KEYS = frozenset(
    {"description", "gpu", "peak_bf16_tflops_per_gpu", "efa", "instance_types", "env", "efa_env", "container_env"}
)
_SIZE_KEYS = frozenset({"gpus", "efa"})


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
    env: tuple[tuple[str, str], ...]
    """Environment exported on every node, in file order: `[env]`, then `[efa_env]` where it has EFA."""
    container_env: tuple[tuple[str, str], ...]
    """Overrides of `env` inside a Pyxis container."""


def _pairs(table: object, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ConfigError(f"{where} must be a table of strings")
    return tuple((str(k), v) for k, v in table.items())


def _family_presets(family: str, data: dict[str, object]) -> list[InstancePreset]:
    where = f"env/{family}.toml"
    unknown = sorted(set(data) - _FAMILY_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_FAMILY_KEYS))}")
    instance_types = data.get("instance_types")
    if not isinstance(instance_types, dict) or not instance_types:
        raise ConfigError(f"{where}: [instance_types] must map instance type names to GPU counts")
    peak = data.get("peak_bf16_tflops_per_gpu")
    family_efa = _flag(data.get("efa", False), f"{where}: efa")
    env = _pairs(data.get("env", {}), f"{where} [env]")
    efa_env = _pairs(data.get("efa_env", {}), f"{where} [efa_env]")
    presets = []
    for name, size in instance_types.items():
        gpus, efa = _size(size, family_efa, f"{where} [instance_types] {name}")
        presets.append(
            InstancePreset(
                name=name,
                family=family,
                description=str(data.get("description", "")),
                gpus_per_node=gpus,
                efa=efa,
                gpu=str(data["gpu"]) if data.get("gpu") else None,
                peak_bf16_tflops_per_gpu=float(peak) if isinstance(peak, (int, float)) else None,
                env=tuple({**dict(env), **(dict(efa_env) if efa else {})}.items()),
                container_env=_pairs(data.get("container_env", {}), f"{where} [container_env]"),
            )
        )
    return presets


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false")
    return value


def _size(size: object, family_efa: bool, where: str) -> tuple[int, bool]:
    """(GPUs, EFA) of one size: a GPU count, or a table {gpus = N, efa = bool}."""
    if isinstance(size, dict):
        unknown = sorted(set(size) - _SIZE_KEYS)
        if unknown or "gpus" not in size:
            raise ConfigError(f"{where}: a size is {{gpus = N, efa = true|false}}, got keys {', '.join(sorted(size))}")
        gpus, efa = size["gpus"], _flag(size.get("efa", family_efa), f"{where}: efa")
    else:
        gpus, efa = size, family_efa
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise ConfigError(f"{where}: GPUs must be a whole number, got {gpus!r}")
    return gpus, efa


@functools.cache
def all_presets() -> dict[str, InstancePreset]:
    """Every known instance type, read once per process from the shipped env/*.toml files."""
    presets: dict[str, InstancePreset] = {}
    for entry in sorted(resources.files("hyperlaunch.env").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        family = entry.name.removesuffix(".toml")
        for preset in _family_presets(family, tomllib.loads(entry.read_text(encoding="utf-8"))):
            presets[preset.name] = preset
    return presets


def known_instance_types() -> list[str]:
    return list(all_presets())


SAGEMAKER_PREFIX = "ml."
"""SageMaker (HyperPod's console, API and resource_config.json) names instance types
`ml.p5.48xlarge`; EC2 and these presets name them `p5.48xlarge`."""


def canonical_instance_type(name: str) -> str:
    """`ml.p5.48xlarge`, `P5.48XLARGE` -> `p5.48xlarge`: AWS's names are lower case, and one
    typed from a console or a doc in capitals means the same type."""
    return name.lower().removeprefix(SAGEMAKER_PREFIX)


def get_instance(name: str) -> InstancePreset:
    """The preset for an instance type, by its EC2 or SageMaker (`ml.`) name in any case;
    InvalidInput listing the known ones, and the closest when one is close, when it is unknown."""
    canonical = canonical_instance_type(name)
    try:
        return all_presets()[canonical]
    except KeyError:
        raise InvalidInput(
            f"unknown instance type {name!r}{did_you_mean(canonical, known_instance_types())}"
            + f"; known: {', '.join(known_instance_types())}",
            hint="add a file under env/ for a new one",
        ) from None


def peak_bf16_flops(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s of a GPU by the name CUDA gives it (e.g. `NVIDIA H100 80GB HBM3`),
    from the instance presets; None for a GPU none of them names. The model must be a whole
    word of the name, so an L40S is never taken for an L4."""
    for preset in all_presets().values():
        if preset.gpu and preset.peak_bf16_tflops_per_gpu and re.search(rf"\b{re.escape(preset.gpu)}\b", device_name):
            return preset.peak_bf16_tflops_per_gpu * 1e12
    return None
