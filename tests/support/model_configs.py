"""Hugging Face model configs small enough for a test: a model directory's config.json."""

from __future__ import annotations

TINY_QWEN3_CONFIG = {
    "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512,
    "max_position_embeddings": 256, "tie_word_embeddings": True,
}
