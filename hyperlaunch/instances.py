"""EFA/NCCL presets per instance type, read from the data files in `env/*.toml`.

Each file describes one instance family (GPU, EFA or not, environment exports) and lists the
instance types in it with their GPUs per node. Data, not code, so a new instance type is a
TOML edit.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from hyperlaunch.compat import tomllib
from hyperlaunch.errors import ConfigError, InvalidInput

_FAMILY_KEYS = frozenset(
    {"description", "gpu", "peak_bf16_tflops_per_gpu", "instance_types", "env", "container_env"}
)


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
    gpu: str | None
    """The GPU model as CUDA names it (a part of torch.cuda.get_device_name), e.g. `H100`."""
    peak_bf16_tflops_per_gpu: float | None
    """Dense bf16 peak used for MFU; None where no reliable figure is published."""
    env: tuple[tuple[str, str], ...]
    """Environment exported on every node, in file order."""
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
    return [
        InstancePreset(
            name=name,
            family=family,
            description=str(data.get("description", "")),
            gpus_per_node=int(gpus),
            gpu=str(data["gpu"]) if data.get("gpu") else None,
            peak_bf16_tflops_per_gpu=float(peak) if isinstance(peak, (int, float)) else None,
            env=_pairs(data.get("env", {}), f"{where} [env]"),
            container_env=_pairs(data.get("container_env", {}), f"{where} [container_env]"),
        )
        for name, gpus in instance_types.items()
    ]


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


def get_instance(name: str) -> InstancePreset:
    """The preset for an instance type; InvalidInput listing the known ones when it is unknown."""
    try:
        return all_presets()[name]
    except KeyError:
        raise InvalidInput(
            f"unknown instance type {name!r}; known: {', '.join(known_instance_types())}",
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
