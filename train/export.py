"""The end of training: the full model as Hugging Face safetensors plus the tokenizer in
`<ckpt_dir>/<model>-final/`, loadable by `AutoModelForCausalLM.from_pretrained`."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.data.tokenizer import LoadedTokenizer

from .modeling import build_meta_model, fix_rotary_buffers


def export_final(model: nn.Module, hf_config: object, tokenizer: LoadedTokenizer, ckpt_dir: Path, name: str, is_main: bool) -> Path:
    """Gathers the full weights to rank 0 (collective: every rank calls this) and writes them
    to a temporary directory renamed into place, so a crash never leaves half an export."""
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    target = rules.final_dir(ckpt_dir, name)
    if is_main:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        plain = build_meta_model(hf_config)
        plain.load_state_dict(full, assign=True)
        if getattr(hf_config, "tie_word_embeddings", False):
            plain.tie_weights()
        # Non-persistent buffers are not in the state dict: give them real values.
        fix_rotary_buffers(plain)
        staging = Path(tempfile.mkdtemp(dir=ckpt_dir, prefix=f".{target.name}."))
        plain.save_pretrained(str(staging), safe_serialization=True)
        tokenizer.save(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    dist.barrier()
    return target

