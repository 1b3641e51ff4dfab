"""Whether the trainer reshards after forward when the user does not say (train/setup.py): on
several ranks always; on one GPU only where keeping every block's gathered parameters would not
fit its memory (hyperlaunch.core.gpu_memory), saying so; what the user set stays."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hyperlaunch.core.models import get_preset
from hyperlaunch.train import setup
from hyperlaunch.train.config import parse_config
from hyperlaunch.train.distributed import Dist

H200_BYTES = 143_771 * 1024**2


def _dist(world: int, device: str) -> Dist:
    return Dist(rank=0, world_size=world, local_rank=0, local_world_size=world, device=torch.device(device), checkpoint_group=None)


def _decide(monkeypatch: pytest.MonkeyPatch, model: str, flags: list[str], world: int = 1, device: str = "cuda") -> bool:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _device: SimpleNamespace(total_memory=H200_BYTES))
    cfg = parse_config(["--model", model, "--checkpoint-dir", "/c", *flags])
    seq_len, micro_batch = (4096, 1) if model == "llama3_1_8b" else (4096, 4)
    chosen = setup._fsdp_layout(cfg, get_preset(model), _dist(world, device), seq_len=seq_len, micro_batch=micro_batch)
    return chosen.reshard_after_forward


def test_one_gpu_reshards_only_the_model_whose_gathered_parameters_do_not_fit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _decide(monkeypatch, "qwen3_0_6b", []) is False
    assert capsys.readouterr().err == ""
    assert _decide(monkeypatch, "llama3_1_8b", ["--activation-checkpointing"]) is True
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "resharding after forward on one GPU" in line and "(13.0 GiB)" in line and "--no-reshard-after-forward" in line


def test_what_the_user_set_stays_and_cpu_and_several_ranks_keep_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _decide(monkeypatch, "llama3_1_8b", ["--activation-checkpointing", "--no-reshard-after-forward"]) is False
    assert _decide(monkeypatch, "qwen3_0_6b", ["--reshard-after-forward"]) is True
    assert _decide(monkeypatch, "llama3_1_8b", ["--activation-checkpointing"], device="cpu") is False
    assert _decide(monkeypatch, "qwen3_0_6b", [], world=2) is True


def test_fsdp_groups_one_never_reshards(monkeypatch: pytest.MonkeyPatch) -> None:
    # Even where a group per block would reshard by default: several ranks, or 8B on one H200.
    assert _decide(monkeypatch, "qwen3_0_6b", ["--fsdp-groups", "one"], world=2) is False
    assert _decide(monkeypatch, "llama3_1_8b", ["--activation-checkpointing", "--fsdp-groups", "one"]) is False
