"""How the trainer lays out FSDP when the user does not say (train/setup.py): on several ranks a
group per block, resharded after forward; on one GPU one group for the whole model, kept, where it
fits its memory (hyperlaunch.core.gpu_memory), else a group per block, kept, else resharded,
saying so; CPU offload and --prefetch keep a group per block; what the user set stays."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hyperlaunch.core import gpu_memory
from hyperlaunch.core.models import get_preset
from hyperlaunch.train import setup
from hyperlaunch.train.config import parse_config
from hyperlaunch.train.distributed import Dist

H200_BYTES = 143_771 * 1024**2


def _dist(world: int, device: str) -> Dist:
    return Dist(rank=0, world_size=world, local_rank=0, local_world_size=world, device=torch.device(device), checkpoint_group=None)


def _layout(
    monkeypatch: pytest.MonkeyPatch, model: str, flags: list[str], world: int = 1, device: str = "cuda",
    gpu_bytes: int = H200_BYTES,
) -> gpu_memory.Layout:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _device: SimpleNamespace(total_memory=gpu_bytes))
    cfg = parse_config(["--model", model, "--checkpoint-dir", "/c", *flags])
    seq_len, micro_batch = (4096, 1) if model == "llama3_1_8b" else (4096, 4)
    return setup._fsdp_layout(cfg, get_preset(model), _dist(world, device), seq_len=seq_len, micro_batch=micro_batch)


def _decide(monkeypatch: pytest.MonkeyPatch, model: str, flags: list[str], world: int = 1, device: str = "cuda") -> bool:
    return _layout(monkeypatch, model, flags, world, device).reshard_after_forward


def test_one_gpu_reshards_only_the_model_whose_gathered_parameters_do_not_fit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _decide(monkeypatch, "qwen3_0_6b", []) is False
    assert capsys.readouterr().err == ""
    assert _decide(monkeypatch, "llama3_1_8b", ["--activation-checkpointing"]) is True
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "resharding after forward on one GPU" in line and "(13.0 GiB)" in line and "--no-reshard-after-forward" in line
    # What does not fit is the whole run with them, not the 13 GiB alone (the line said "would not fit in 140 GiB").
    assert "the run would need about 140 GiB, more than the 90% of this GPU's 140 GiB" in line


def test_what_the_user_set_stays_and_cpu_and_several_ranks_keep_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _decide(monkeypatch, "llama3_1_8b", ["--activation-checkpointing", "--no-reshard-after-forward"]) is False
    assert _decide(monkeypatch, "qwen3_0_6b", ["--reshard-after-forward"]) is True
    assert _decide(monkeypatch, "llama3_1_8b", ["--activation-checkpointing"], device="cpu") is False
    assert _decide(monkeypatch, "qwen3_0_6b", [], world=2) is True


def test_fsdp_groups_one_never_reshards(monkeypatch: pytest.MonkeyPatch) -> None:
    # Even where a group per block would reshard by default: several ranks, or 8B on one H200.
    assert _decide(monkeypatch, "qwen3_0_6b", ["--fsdp-groups", "one"], world=2) is False
    assert _decide(monkeypatch, "llama3_1_8b", ["--activation-checkpointing", "--fsdp-groups", "one"]) is False


ONE, PER_BLOCK, RESHARDED = gpu_memory.Layout(False, True), gpu_memory.Layout(False, False), gpu_memory.Layout(True, False)


def test_one_gpu_takes_one_group_where_it_fits_and_says_when_it_does_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _layout(monkeypatch, "qwen3_0_6b", []) == ONE
    assert _layout(monkeypatch, "qwen3_0_6b", [], device="cpu") == ONE
    assert capsys.readouterr().err == ""
    # Llama 3.1 8B on a 170 GiB GPU: its blocks kept fit, its 30 GiB reduction at once does not.
    assert _layout(monkeypatch, "llama3_1_8b", ["--activation-checkpointing"], gpu_bytes=170 * 1024**3) == PER_BLOCK
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "an FSDP group per decoder block on one GPU" in line and "29.9 GiB" in line and "--fsdp-groups one" in line
    assert "the run would need about 166 GiB, more than the 90% of this GPU's 170 GiB" in line
    assert _layout(monkeypatch, "llama3_1_8b", ["--activation-checkpointing"]) == RESHARDED


def test_offload_prefetch_and_what_the_user_set_keep_their_groups(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _layout(monkeypatch, "qwen3_0_6b", ["--cpu-offload"]) == PER_BLOCK
    assert _layout(monkeypatch, "qwen3_0_6b", ["--prefetch", "1"]) == PER_BLOCK
    assert _layout(monkeypatch, "qwen3_0_6b", ["--fsdp-groups", "per-block"]) == PER_BLOCK
    assert _layout(monkeypatch, "qwen3_0_6b", ["--fsdp-groups", "one", "--cpu-offload"]) == ONE
    assert _layout(monkeypatch, "qwen3_0_6b", [], world=2) == RESHARDED
    assert _layout(monkeypatch, "qwen3_0_6b", ["--fsdp-groups", "one"], world=2) == ONE
    assert _layout(monkeypatch, "qwen3_0_6b", ["--reshard-after-forward"]) == RESHARDED
    assert _layout(monkeypatch, "qwen3_0_6b", ["--no-reshard-after-forward", "--cpu-offload"]) == PER_BLOCK
    assert capsys.readouterr().err == ""  # chosen, not squeezed: nothing to say
