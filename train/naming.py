"""What a local `--model` directory must hold, checked without importing torch. The checkpoint
name itself is decided by hyperlaunch.core.checkpoints.checkpoint_name, for the CLI as well."""

from __future__ import annotations

from pathlib import Path

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.errors import InvalidInput


def checked_checkpoint_name(model: str, model_name: str | None) -> str:
    """The model's checkpoint name, after checking that a model directory holds a Hugging Face
    config and safetensors weights (a preset needs no check)."""
    if rules.is_model_directory(model):
        directory = Path(model)
        if not (directory / "config.json").is_file():
            raise InvalidInput(f"--model {model}: not a preset and no config.json in that directory")
        if not any(directory.glob("*.safetensors")):
            raise InvalidInput(f"--model {model}: no *.safetensors weights in that directory")
    return rules.checkpoint_name(model, model_name)
