"""The checkpoint name of a `--model` value, without importing torch."""

from __future__ import annotations

import re
from pathlib import Path

from hyperlaunch.errors import InvalidInput
from hyperlaunch.models import get_preset


def checkpoint_name(model: str, model_name: str | None, is_directory: bool) -> str:
    """A preset's own name, or for a local Hugging Face directory --model-name or the
    directory's name (characters a file name should not hold replaced by '_')."""
    if not is_directory:
        return get_preset(model).name
    directory = Path(model)
    if not (directory / "config.json").is_file():
        raise InvalidInput(f"--model {model}: not a preset and no config.json in that directory")
    if not any(directory.glob("*.safetensors")):
        raise InvalidInput(f"--model {model}: no *.safetensors weights in that directory")
    return model_name or re.sub(r"[^A-Za-z0-9_.-]", "_", directory.resolve().name)
