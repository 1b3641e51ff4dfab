"""Which loss a run builds (--loss auto on GPU and CPU, a fused kernel's library missing) and
which layers --float8 converts: decided before anything is built, in one line when refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hyperlaunch.core.errors import InvalidInput, NodeProblem
from hyperlaunch.train import float8, losses
from hyperlaunch.train.config import LOSS_CHOICES

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    present: set[str] = set()
    monkeypatch.setattr(losses, "library_installed", lambda kind: kind in present)
    return present


def test_auto_is_the_plain_reference_on_cpu(installed: set[str]) -> None:
    installed.update({"liger", "cce"})
    assert losses.resolve("auto", CPU) == ("plain", None)


def test_auto_takes_the_measured_choice_on_a_gpu_where_installed(installed: set[str]) -> None:
    installed.add(losses.GPU_CHOICE)
    assert losses.resolve("auto", GPU) == (losses.GPU_CHOICE, None)


def test_auto_falls_back_to_chunked_on_a_gpu_without_the_library_and_says_so(installed: set[str]) -> None:
    kind, note = losses.resolve("auto", GPU)
    assert kind == "chunked"
    assert note is not None and f"pip install {losses.PIP_NAMES[losses.GPU_CHOICE]}" in note


@pytest.mark.parametrize("kind", ["liger", "cce"])
def test_a_named_fused_loss_needs_its_library_and_a_gpu(installed: set[str], kind: str) -> None:
    with pytest.raises(InvalidInput, match=f"pip install {losses.PIP_NAMES[kind]}"):
        losses.resolve(kind, GPU)
    installed.add(kind)
    assert losses.resolve(kind, GPU) == (kind, None)
    with pytest.raises(InvalidInput, match="needs a CUDA GPU"):
        losses.resolve(kind, CPU)


@pytest.mark.parametrize("kind", ["plain", "chunked"])
def test_the_pytorch_losses_run_anywhere(installed: set[str], kind: str) -> None:
    assert losses.resolve(kind, CPU) == (kind, None) == losses.resolve(kind, GPU)


def test_every_choice_the_flag_offers_is_resolvable() -> None:
    assert set(LOSS_CHOICES) == {"auto", "plain", "chunked", *losses.LIBRARIES}


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(64, 128)
        self.odd = nn.Linear(64, 10)  # 10 is not a multiple of 16
        self.norm = nn.LayerNorm(64)


def test_float8_converts_the_blocks_linear_layers_never_the_output_layer() -> None:
    model = nn.Module()
    model.block = _Block()
    model.lm_head = nn.Linear(64, 512)
    picked = [fqn for fqn, module in model.named_modules() if float8.converts(module, fqn)]
    assert picked == ["block.q_proj"]


def test_float8_refuses_a_device_without_float8_tensor_cores() -> None:
    with pytest.raises(InvalidInput, match="needs a CUDA GPU with float8 tensor cores"):
        float8.check_device(None, "")
    with pytest.raises(NodeProblem, match=r"this GPU, NVIDIA A100-SXM4-80GB, is 8\.0"):
        float8.check_device((8, 0), "NVIDIA A100-SXM4-80GB")
    float8.check_device((9, 0), "NVIDIA H200")


def test_float8_without_torchao_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_torchao(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("torchao"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_torchao)
    with pytest.raises(InvalidInput, match="pip install torchao"):
        float8.convert_to_float8(nn.Linear(16, 16))
