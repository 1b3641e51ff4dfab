"""The preset registry: exact numbers for the guide's model, torch-free import, clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.models import PRESETS, ModelSpec, get_preset, preset_names


def test_every_issue_preset_is_registered() -> None:
    assert set(preset_names()) >= {
        "qwen3_0_6b", "qwen3_1_7b", "llama3_1_8b", "llama3_2_1b", "qwen3_tiny", "llama_tiny",
    }
    for name in PRESETS:
        spec = get_preset(name)
        assert isinstance(spec, ModelSpec)
        assert spec.name == name


def test_qwen3_0_6b_matches_the_published_config() -> None:
    spec = get_preset("qwen3_0_6b")
    assert (spec.kind, spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads) == (
        "qwen3", 1024, 28, 16, 8,
    )
    assert (spec.head_dim, spec.intermediate_size, spec.vocab_size) == (128, 3072, 151936)
    assert spec.tie_word_embeddings and spec.rope_theta == 1e6 and spec.rms_norm_eps == 1e-6
    # 0.6B counts the tied embedding once; the published figure is 0.60B (0.44B non-embedding).
    assert 590e6 < spec.num_params < 600e6
    assert 435e6 < spec.non_embedding_params < 445e6


def test_llama3_1_8b_matches_the_published_config() -> None:
    spec = get_preset("llama3_1_8b")
    assert (spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads) == (4096, 32, 32, 8)
    assert (spec.intermediate_size, spec.vocab_size, spec.rope_theta) == (14336, 128256, 5e5)
    assert not spec.tie_word_embeddings
    assert 8.0e9 < spec.num_params < 8.1e9
    assert dict(spec.rope_scaling or ())["rope_type"] == "llama3"


def test_tiny_presets_are_tiny_and_one_is_tied() -> None:
    assert get_preset("qwen3_tiny").tie_word_embeddings
    llama = get_preset("llama_tiny")
    assert not llama.tie_word_embeddings
    assert 1e6 < llama.num_params < 10e6


def test_unknown_preset_lists_every_preset() -> None:
    with pytest.raises(InvalidInput) as err:
        get_preset("gpt5")
    for name in PRESETS:
        assert name in err.value.one_line()


def test_hf_config_kwargs_carry_the_architecture() -> None:
    kwargs = get_preset("llama3_2_1b").hf_config_kwargs()
    assert kwargs["num_hidden_layers"] == 16 and kwargs["head_dim"] == 64
    assert kwargs["rope_scaling"] == {
        "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
    }


def test_specs_are_frozen() -> None:
    spec = get_preset("qwen3_tiny")
    with pytest.raises(AttributeError):
        spec.hidden_size = 1  # type: ignore[misc]


def test_flops_per_token_follows_the_6n_rule() -> None:
    spec = get_preset("qwen3_0_6b")
    attention = 6 * 28 * 16 * 128 * 2048 * 2
    assert spec.flops_per_token(2048) == 6 * spec.non_embedding_params + attention


def test_importing_models_does_not_import_torch() -> None:
    code = "import sys, hyperlaunch.core.models, hyperlaunch.core.checkpoints; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
