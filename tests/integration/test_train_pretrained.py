"""Pretrained weights reach the sharded model intact: a tiny model saved with save_pretrained,
loaded by the trainer on 2 ranks, gives plain transformers' loss on a fixed batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .train_helpers import launch


def _save_tiny(kind: str, directory: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    common = dict(
        hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
        intermediate_size=96, vocab_size=512, max_position_embeddings=256,
    )
    config = (
        Qwen3Config(**common, tie_word_embeddings=True, rope_theta=10000.0)
        if kind == "qwen3"
        else LlamaConfig(**common, tie_word_embeddings=False, rope_theta=500000.0)
    )
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:  # not ones, so a skipped load cannot pass for the default init
                param.uniform_(0.5, 1.5)
            elif "embed" in name or "lm_head" in name:  # confident logits: loss depends on weights
                param.normal_(0.0, 1.0)
    model.save_pretrained(directory)


@pytest.mark.parametrize("kind", ["qwen3", "llama"], ids=["tied", "untied"])
def test_pretrained_load_matches_plain_transformers(tmp_path: Path, kind: str) -> None:
    from transformers import AutoModelForCausalLM

    model_dir = tmp_path / f"tiny-{kind}"
    _save_tiny(kind, model_dir)
    batch = torch.randint(0, 512, (2, 40), generator=torch.Generator().manual_seed(11))
    probe = tmp_path / "probe.pt"
    torch.save(batch, probe)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa")
    assert reference.config.tie_word_embeddings == (kind == "qwen3")
    with torch.no_grad():
        want = float(reference(input_ids=batch, labels=batch).loss)

    run = launch(
        ["--model", str(model_dir), "--checkpoint-dir", str(tmp_path / "ckpt"), "--max-steps", "1",
         "--tokenizer", "offline", "--seq-len", "32", "--micro-batch-size", "1", "--no-export", "--device", "cpu"],
        run_dir=tmp_path / "run", env={"HYPERLAUNCH_TEST_PROBE": str(probe)},
    )
    assert run.events("pretrained_loaded")
    got = torch.load(str(probe) + ".out.pt")["start"]["loss"]
    assert got == pytest.approx(want, rel=1e-5)
    # Checkpoints of a local model are named after its directory.
    assert (tmp_path / "ckpt" / f"tiny-{kind}-latest").read_text().strip() == f"tiny-{kind}-1steps"
