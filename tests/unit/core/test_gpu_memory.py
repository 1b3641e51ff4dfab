"""Recommendations sized by the GPU's memory: the estimate (hyperlaunch.core.gpu_memory) against
the peaks measured on a GPU, and what a job gets on small and large GPUs, with the reason said."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core import gpu_memory
from hyperlaunch.core.instances import all_presets
from hyperlaunch.core.models import ModelSpec, get_preset
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.plan import plan_job

QWEN = get_preset("qwen3_0_6b")

# `python -m hyperlaunch.bench gpu`, qwen3_0_6b, seq 4096, one H200, the fused loss,
# torch.cuda.max_memory_allocated (docs/performance.md, 2026-11-26): the peaks the estimate answers to.
MEASURED_EAGER_GIB = 24.1  # micro-batch 2, no activation checkpointing, no compile
MEASURED_WITH_CHECKPOINTING_GIB = 9.5  # micro-batch 2, activation checkpointing (and compile)
MEASURED_MICRO_BATCH_4_GIB = 28.1  # micro-batch 4, compile


def _estimate(activation_checkpointing: bool, world: int = 1, micro_batch: int = 2) -> float:
    return gpu_memory.estimate_gib(
        QWEN, seq_len=4096, micro_batch=micro_batch, activation_checkpointing=activation_checkpointing, world=world
    )


@pytest.mark.parametrize(
    ("activation_checkpointing", "micro_batch", "measured"),
    [(False, 2, MEASURED_EAGER_GIB), (True, 2, MEASURED_WITH_CHECKPOINTING_GIB), (False, 4, MEASURED_MICRO_BATCH_4_GIB)],
)
def test_the_estimate_errs_on_the_safe_side_of_the_measured_peaks(activation_checkpointing: bool, micro_batch: int, measured: float) -> None:
    estimate = _estimate(activation_checkpointing, micro_batch=micro_batch)
    assert measured <= estimate <= measured * 1.75, estimate  # an upper bound, not a wild one


def test_sharding_divides_the_states() -> None:
    assert _estimate(False, world=8) < _estimate(False) - 7  # 8 ranks need less each than 1


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
    assert "--activation-checkpointing" in spec.job.trainer_args
    assert (targs.value_of(spec.job.trainer_args, "--seq-len"), targs.value_of(spec.job.trainer_args, "--micro-batch-size")) == ("4096", "4")
    why = settings["activation_checkpointing"].source
    assert "41.1 GiB a GPU as the preset has it" in why and "of 24 GiB (4 GPUs)" in why, why
    spec, settings = _training(tmp_path, "p5.48xlarge")
    assert "--no-activation-checkpointing" in spec.job.trainer_args
    assert targs.value_of(spec.job.trainer_args, "--micro-batch-size") == "4"
    assert "estimated 40.0 GiB a GPU of 80 GiB (8 GPUs)" in settings["activation_checkpointing"].source


def test_what_does_not_fit_is_said_and_what_the_user_set_is_kept(tmp_path: Path) -> None:
    spec, settings = _training(tmp_path, "g5.xlarge", model="qwen3_1_7b")
    assert targs.value_of(spec.job.trainer_args, "--micro-batch-size") == "1"
    assert settings["micro_batch_size"].source.endswith(
        "use more GPUs, a shorter --seq-len or --cpu-offload (9.3 GiB a GPU; the offloaded states take 25.6 GiB of host memory a GPU)"
    )
    assert "does not fit" in settings["activation_checkpointing"].source
    # What the user set stays; the fit works around it: without checkpointing, a micro-batch of 1.
    spec, settings = _training(tmp_path, "g5.12xlarge", trainer_args=("--no-activation-checkpointing",))
    assert settings["activation_checkpointing"].source == "you (after --)"
    assert targs.value_of(spec.job.trainer_args, "--micro-batch-size") == "1"
    assert "14.2 GiB so, of 24 GiB (4 GPUs)" in settings["micro_batch_size"].source


def test_cpu_nodes_keep_the_presets_cpu_sizes(tmp_path: Path) -> None:
    spec, settings = _training(tmp_path, "cpu")
    assert targs.value_of(spec.job.trainer_args, "--seq-len") == "64"
    assert "GiB" not in settings["activation_checkpointing"].source


LLAMA_8B = get_preset("llama3_1_8b")
H200_GIB = 140.4  # torch.cuda.get_device_properties(0).total_memory of the H200 bench gpu ran on


def test_one_gpu_keeps_its_gathered_parameters_only_where_they_fit() -> None:
    small = {"seq_len": 4096, "micro_batch": 4, "activation_checkpointing": False, "world": 1}
    assert not gpu_memory.layout(QWEN, **small, gpu_memory_gib=H200_GIB).reshard_after_forward
    # Llama 3.1 8B's states alone take 119.7 GiB: its 13 GiB of gathered bf16 blocks do not fit beside them.
    large = {"seq_len": 4096, "micro_batch": 1, "activation_checkpointing": True, "world": 1}
    assert gpu_memory.layout(LLAMA_8B, **large, gpu_memory_gib=H200_GIB).reshard_after_forward
    kept = gpu_memory.estimate_gib(LLAMA_8B, **large, reshard_after_forward=False, one_group=False)
    freed = gpu_memory.estimate_gib(LLAMA_8B, **large, reshard_after_forward=True)
    assert kept - freed == pytest.approx(2 * LLAMA_8B.non_embedding_params / gpu_memory.GIB)
    assert kept > H200_GIB > freed
    # Several ranks always reshard: the gathered copies hold the other ranks' shards.
    assert gpu_memory.layout(QWEN, **{**small, "world": 8}, gpu_memory_gib=H200_GIB).reshard_after_forward


def test_one_rank_takes_one_fsdp_group_where_its_reduction_at_the_end_of_backward_fits() -> None:
    small = {"seq_len": 4096, "micro_batch": 4, "activation_checkpointing": False, "world": 1}
    one, per_block = gpu_memory.Layout(False, True), gpu_memory.Layout(False, False)
    assert gpu_memory.layout(QWEN, **small, gpu_memory_gib=H200_GIB) == one
    assert gpu_memory.layout(QWEN, **small, gpu_memory_gib=None) == one  # a CPU process

    def estimate(spec: ModelSpec, group: bool, **shape: int | bool) -> float:
        return gpu_memory.estimate_gib(spec, **shape, reshard_after_forward=False, one_group=group)  # type: ignore[arg-type]

    # qwen3_0_6b's activations and loss at micro-batch 4 outweigh the 2.2 GiB fp32 buffer its
    # gradients are reduced through at the end of backward; a short sequence's do not.
    assert estimate(QWEN, True, **small) == estimate(QWEN, False, **small)
    short = {**small, "seq_len": 512, "micro_batch": 1, "activation_checkpointing": True}
    assert estimate(QWEN, True, **short) > estimate(QWEN, False, **short) + 0.5
    # Llama 3.1 8B's buffer is 30 GiB: on a 170 GiB GPU a group per block fits, one group does not.
    large = {"seq_len": 4096, "micro_batch": 1, "activation_checkpointing": True, "world": 1}
    assert estimate(LLAMA_8B, False, **large) < 170 * gpu_memory.HEADROOM < estimate(LLAMA_8B, True, **large)
    assert gpu_memory.layout(LLAMA_8B, **large, gpu_memory_gib=170) == per_block
    # CPU offload moves each block's gradients to the host as they come, --prefetch gathers
    # blocks ahead: a group per block.
    assert gpu_memory.layout(QWEN, **small, gpu_memory_gib=H200_GIB, cpu_offload=True) == per_block
    assert gpu_memory.layout(QWEN, **small, gpu_memory_gib=H200_GIB, prefetch=1) == per_block
    with pytest.raises(ValueError, match="does not reshard"):
        gpu_memory.layout(QWEN, **small, gpu_memory_gib=H200_GIB, one_group=True, reshard_after_forward=True)
    # What the user set stays; several ranks keep FSDP's default.
    assert gpu_memory.layout(QWEN, **small, gpu_memory_gib=H200_GIB, one_group=False) == per_block
    assert gpu_memory.layout(QWEN, **small, gpu_memory_gib=H200_GIB, reshard_after_forward=True) == gpu_memory.Layout(True, False)
    assert gpu_memory.layout(QWEN, **{**small, "world": 8}, gpu_memory_gib=H200_GIB) == gpu_memory.Layout(True, False)
    assert gpu_memory.layout(QWEN, **{**small, "world": 8}, gpu_memory_gib=H200_GIB, one_group=True) == one


def test_one_groups_reduction_counts_accumulated_gradients_and_unsharded_buffers() -> None:
    params = QWEN.num_params
    # A step's first micro-batch: the reduced buffer becomes the gradient; 4 bytes a parameter beside it.
    assert gpu_memory.reduced_at_once_bytes(QWEN, world=1) == 4 * params
    # --grad-accum 2: the gradient exists, and the reduced buffer is added into it from beside it.
    assert gpu_memory.reduced_at_once_bytes(QWEN, world=1, grad_accum=2) == 8 * params
    # On 8 ranks only the reduced buffer is sharded: the bf16 gradients and the fp32 copy are whole.
    assert gpu_memory.reduced_at_once_bytes(QWEN, world=8) == 6 * params - 4 * params / 8
    short = {"seq_len": 512, "micro_batch": 1, "activation_checkpointing": True, "world": 1}
    once = gpu_memory.estimate_gib(QWEN, **short)
    accumulating = gpu_memory.estimate_gib(QWEN, **short, grad_accum=2)
    assert accumulating - once == pytest.approx(4 * params / gpu_memory.GIB)


def test_a_fit_counts_the_gradient_accumulation_the_user_set(tmp_path: Path) -> None:
    _, once = _training(tmp_path, "g5.xlarge", trainer_args=("--micro-batch-size", "1", "--seq-len", "512"))
    _, accumulating = _training(
        tmp_path, "g5.xlarge", trainer_args=("--micro-batch-size", "1", "--seq-len", "512", "--grad-accum", "2"),
    )
    assert "estimated 13.3 GiB" in once["activation_checkpointing"].source, once["activation_checkpointing"].source
    assert "estimated 15.4 GiB" in accumulating["activation_checkpointing"].source, accumulating["activation_checkpointing"].source


def test_the_fit_counts_the_gathered_parameters_as_the_trainer_keeps_them() -> None:
    fitted = gpu_memory.fit(
        LLAMA_8B, seq_len=4096, micro_batch=1, gpu_memory_gib=H200_GIB, world=1, activation_checkpointing=True,
    )
    assert "does not fit" not in fitted.reason, fitted.reason  # resharding, it fits at a shorter sequence
    assert fitted.estimate_gib <= H200_GIB * gpu_memory.HEADROOM
    assert fitted.activation_checkpointing
    # Where they fit, one GPU's estimate still counts them.
    qwen = gpu_memory.fit(QWEN, seq_len=4096, micro_batch=4, gpu_memory_gib=H200_GIB, world=1)
    assert qwen.estimate_gib == pytest.approx(_estimate(False, micro_batch=4))
    assert qwen.estimate_gib - gpu_memory.estimate_gib(
        QWEN, seq_len=4096, micro_batch=4, activation_checkpointing=False, world=1, reshard_after_forward=True,
    ) == pytest.approx(2 * QWEN.non_embedding_params / gpu_memory.GIB)


def test_cpu_offload_leaves_only_what_passes_through_the_gpu() -> None:
    shape = {"seq_len": 4096, "micro_batch": 1, "activation_checkpointing": True, "world": 1, "reshard_after_forward": True}
    kept = gpu_memory.estimate_gib(LLAMA_8B, **shape)  # type: ignore[arg-type]
    offloaded = gpu_memory.estimate_gib(LLAMA_8B, **shape, cpu_offload=True)  # type: ignore[arg-type]
    # The 16 bytes a parameter of states go to the host; two blocks' shards and gradients and the
    # embedding's shard pass through.
    in_flight = gpu_memory.offload_in_flight_bytes(LLAMA_8B)
    assert kept - offloaded == pytest.approx((16 * LLAMA_8B.num_params - in_flight) / gpu_memory.GIB)
    assert offloaded < 24 * gpu_memory.HEADROOM < kept
    # On one GPU the gathered blocks kept until backward are counted as without offload.
    layout = gpu_memory.layout(LLAMA_8B, **{k: v for k, v in shape.items() if k != "reshard_after_forward"},  # type: ignore[arg-type]
                               gpu_memory_gib=24, cpu_offload=True)
    assert layout == gpu_memory.Layout(True, False)


def test_a_fit_counts_the_cpu_offload_the_user_set(tmp_path: Path) -> None:
    spec, settings = _training(tmp_path, "g5.xlarge", model="llama3_1_8b")
    assert "or --cpu-offload (10.4 GiB a GPU; the offloaded states take 59.8 GiB of host memory a GPU)" in settings["activation_checkpointing"].source
    spec, settings = _training(tmp_path, "g5.xlarge", model="llama3_1_8b", trainer_args=("--cpu-offload",))
    assert settings["cpu_offload"].source == "you (after --)"
    assert settings["activation_checkpointing"].source.endswith(
        "estimated 10.4 GiB a GPU of 24 GiB (2 GPUs); the offloaded states take 59.8 GiB of host memory a GPU"
    )
    # Without offload qwen3_1_7b does not fit a 24 GiB GPU even at a micro-batch of 1; with it,
    # the preset's micro-batch of 2 does.
    spec, _ = _training(tmp_path, "g5.xlarge", model="qwen3_1_7b", trainer_args=("--cpu-offload",))
    assert targs.value_of(spec.job.trainer_args, "--micro-batch-size") == "2"
    # Where even offload does not fit, it is not suggested (again, or at all).
    _, settings = _training(tmp_path, "g5.xlarge", model="llama3_1_8b", trainer_args=("--cpu-offload", "--seq-len", "131072"))
    assert "does not fit" in settings["activation_checkpointing"].source
    assert settings["activation_checkpointing"].source.endswith("of 24 GiB (2 GPUs); use more GPUs or a shorter --seq-len")
    _, settings = _training(tmp_path, "g5.xlarge", model="llama3_1_8b", trainer_args=("--seq-len", "131072"))
    assert settings["activation_checkpointing"].source.endswith("of 24 GiB (2 GPUs); use more GPUs or a shorter --seq-len")


def test_cpu_offload_never_needs_more_gpu_memory_than_keeping_the_states() -> None:
    # Its shards in flight are shards: over many ranks they shrink as the states would.
    for spec in (QWEN, LLAMA_8B):
        for world in (1, 8, 64):
            shape = {"seq_len": 4096, "micro_batch": 1, "activation_checkpointing": True, "world": world}
            kept = gpu_memory.estimate_gib(spec, **shape)  # type: ignore[arg-type]
            assert gpu_memory.estimate_gib(spec, **shape, cpu_offload=True) < kept, (spec.name, world)  # type: ignore[arg-type]
    assert gpu_memory.state_bytes(LLAMA_8B, world=8) == LLAMA_8B.num_params * 16 / 8
