"""Each sharding mode, one FSDP group, bf16, CPU offload, activation checkpointing, torch.compile,
explicit prefetch and async checkpoints train on a repeated batch with finite, falling loss, and the
sharded model really has the asked-for setup (read back from FSDP2's state, logged at start)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints as ck
from tests.support.train_helpers import launch, tiny_args

CASES = {
    # name: (flags, expected fields of the `sharding` description)
    "full-prefetch-async": (
        ["--sharding", "full", "--prefetch", "1", "--async-checkpoint", "--checkpoint-every", "3"],
        {"mesh_shape": [2], "reshard_after_forward": True, "forward_prefetch": 1, "param_dtype": "float32"},
    ),
    "grad-op-bf16": (
        ["--sharding", "grad-op", "--mixed-precision", "bf16"],
        {"mesh_shape": [2], "reshard_after_forward": False, "param_dtype": "bfloat16"},
    ),
    "hybrid-activation-checkpointing": (
        ["--sharding", "hybrid", "--hsdp-shard-size", "1", "--activation-checkpointing"],
        {"mesh_shape": [2, 1], "activation_checkpointed_blocks": 4, "reshard_after_forward": True},
    ),
    "one-group-bf16-activation-checkpointing": (
        ["--fsdp-groups", "one", "--mixed-precision", "bf16", "--activation-checkpointing"],
        {"mesh_shape": [2], "fsdp_groups": 1, "fsdp_blocks": 0, "reshard_after_forward": False,
         "param_dtype": "bfloat16", "activation_checkpointed_blocks": 4},
    ),
    "full-compile": (
        ["--sharding", "full", "--compile"],
        {"mesh_shape": [2], "compiled_blocks": 4, "activation_checkpointed_blocks": 0},
    ),
    "none-cpu-offload": (
        ["--sharding", "none", "--cpu-offload"],
        {"mesh_shape": [2, 1], "offload": "CPUOffloadPolicy", "reshard_after_forward": False},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_option_trains_and_takes_effect(tmp_path: Path, case: str) -> None:
    flags, expected = CASES[case]
    ckpt = tmp_path / "ckpt"
    run = launch(
        tiny_args(ckpt, "--overfit-batch", "--warmup-steps", "0", "--no-export", *flags, model="llama_tiny", steps=6),
        run_dir=tmp_path / "run",
    )
    (started,) = run.events("started")
    for key, value in expected.items():
        assert started["sharding"][key] == value, key
    assert started["sharding"]["fsdp_blocks"] == expected.get("fsdp_blocks", 4)
    losses = [run.steps()[s]["loss"] for s in range(1, 7)]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.5, losses
    assert ck.read_pointer(ckpt, "llama_tiny") == "llama_tiny-6steps"
    peaks = run.steps()[6]["peak_memory_bytes_per_rank"]
    assert len(peaks) == 2 and min(peaks) > 0 and run.steps()[6]["peak_memory_bytes"] == max(peaks)
    saves = run.events("checkpoint_completed")
    assert all(s["bytes"] > 0 and 0 < s["blocked_s"] <= s["seconds"] for s in saves)
    if "--async-checkpoint" in flags:
        assert [e["step"] for e in saves] == [3, 6]
        assert {s["mode"] for s in saves} == {"async"}
