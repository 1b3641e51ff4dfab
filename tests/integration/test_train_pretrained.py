"""Pretrained weights reach the sharded model intact: a tiny model saved with save_pretrained,
loaded by the trainer on 2 ranks, gives plain transformers' loss on a fixed batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.train_helpers import launch, save_tiny_model


@pytest.mark.parametrize("kind", ["qwen3", "llama"], ids=["tied", "untied"])
def test_pretrained_load_matches_plain_transformers(tmp_path: Path, kind: str) -> None:
    from transformers import AutoModelForCausalLM

    model_dir = tmp_path / f"tiny-{kind}"
    save_tiny_model(kind, model_dir)
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
