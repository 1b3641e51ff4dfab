"""Recommendations sized by the GPU's memory: the estimate (hyperlaunch.core.gpu_memory) against
the peaks measured on a GPU, and what a job gets on small and large GPUs, with the reason said."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core import gpu_memory
from hyperlaunch.core.instances import all_presets
from hyperlaunch.core.models import get_preset
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.plan import plan_job

QWEN = get_preset("qwen3_0_6b")

# `python -m hyperlaunch.bench gpu`, qwen3_0_6b, seq 4096, micro-batch 2, one GPU,
# torch.cuda.max_memory_allocated (docs/performance.md): the peaks the estimate answers to.
MEASURED_WITH_CHECKPOINTING_GIB = 21.4
MEASURED_WITHOUT_GIB = 36.3


def _estimate(activation_checkpointing: bool, world: int = 1) -> float:
    return gpu_memory.estimate_gib(QWEN, seq_len=4096, micro_batch=2, activation_checkpointing=activation_checkpointing, world=world)


def test_the_estimate_meets_the_measured_peaks_and_errs_on_the_safe_side() -> None:
    assert _estimate(True) == pytest.approx(MEASURED_WITH_CHECKPOINTING_GIB, abs=0.1)  # the fixed term is set here
    without = _estimate(False)
    assert MEASURED_WITHOUT_GIB <= without <= MEASURED_WITHOUT_GIB * 1.1  # checked, not fitted
    # Sharding divides the states: 8 ranks need less each than 1.
    assert _estimate(False, world=8) < without - 7


def test_every_gpu_preset_records_its_gpus_memory() -> None:
    for preset in all_presets().values():
        assert (preset.gpu_memory_gib is None) == (preset.gpus_per_node == 0), preset.name
    assert all_presets()["g5.12xlarge"].gpu_memory_gib == 24 and all_presets()["p5en.48xlarge"].gpu_memory_gib == 141


def _training(tmp_path: Path, instance_type: str, model: str = "qwen3_0_6b", trainer_args: tuple[str, ...] = ()):
    result = plan_job(
        {"model": model, "instance_type": instance_type, "trainer_args": list(trainer_args)},
        cwd=tmp_path, environ={}, user_config=tmp_path / "user.toml",
    )
    return result.spec, {setting.name: setting for setting in result.settings}


def test_a_24_gib_gpu_gets_activation_checkpointing_where_an_80_gib_one_does_not(tmp_path: Path) -> None:
    spec, settings = _training(tmp_path, "g5.12xlarge")
    assert "--activation-checkpointing" in spec.trainer_args
    assert (targs.value_of(spec.trainer_args, "--seq-len"), targs.value_of(spec.trainer_args, "--micro-batch-size")) == ("4096", "2")
    why = settings["activation_checkpointing"].source
    assert "28.3 GiB a GPU as the preset has it" in why and "of 24 GiB (4 GPUs)" in why, why
    spec, settings = _training(tmp_path, "p5.48xlarge")
    assert "--no-activation-checkpointing" in spec.trainer_args
    assert "estimated 26.6 GiB a GPU of 80 GiB (8 GPUs)" in settings["activation_checkpointing"].source


def test_what_does_not_fit_is_said_and_what_the_user_set_is_kept(tmp_path: Path) -> None:
    spec, settings = _training(tmp_path, "g5.xlarge", model="qwen3_1_7b")
    assert targs.value_of(spec.trainer_args, "--micro-batch-size") == "1"
    assert settings["micro_batch_size"].source.endswith("use more GPUs, a shorter --seq-len or --cpu-offload")
    assert "does not fit" in settings["activation_checkpointing"].source
    # What the user set stays; the fit works around it: without checkpointing, a micro-batch of 1.
    spec, settings = _training(tmp_path, "g5.12xlarge", trainer_args=("--no-activation-checkpointing",))
    assert settings["activation_checkpointing"].source == "you (after --)"
    assert targs.value_of(spec.trainer_args, "--micro-batch-size") == "1"
    assert "19.3 GiB so, of 24 GiB (4 GPUs)" in settings["micro_batch_size"].source


def test_cpu_nodes_keep_the_presets_cpu_sizes(tmp_path: Path) -> None:
    spec, settings = _training(tmp_path, "cpu")
    assert targs.value_of(spec.trainer_args, "--seq-len") == "64"
    assert "GiB" not in settings["activation_checkpointing"].source
