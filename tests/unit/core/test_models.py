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


def test_flops_per_token_of_qwen3_0_6b_by_hand_with_and_without_the_output_projection() -> None:
    spec = get_preset("qwen3_0_6b")
    # Per block: q,o 1024 x 16 x 128 each; k,v 1024 x 8 x 128 each; q/k norms 2 x 128;
    # MLP 3 x 1024 x 3072; 2 norms of 1024. 28 blocks and the final norm.
    block = 2 * 1024 * 16 * 128 + 2 * 1024 * 8 * 128 + 2 * 128 + 3 * 1024 * 3072 + 2 * 1024
    assert block == 15_730_944
    assert spec.non_embedding_params == 28 * block + 1024 == 440_467_456
    attention = 12 * 28 * 16 * 128 * 4096  # forward + backward of QK^T and AV at 4,096 tokens
    assert spec.flops_per_token(4096) == 6 * 440_467_456 + attention == 5_461_377_024
    output = 6 * 151_936 * 1024  # the output projection, tied or not
    assert output == 933_494_784
    assert spec.flops_per_token_with_output(4096) == 5_461_377_024 + output == 6_394_871_808


def test_mfu_with_the_output_projection_in_the_step_record_and_log_line() -> None:
    from hyperlaunch.core.metrics_records import StepRecord, metrics_line, parse_metrics_line

    record = StepRecord(step=1, loss=2.0, mfu=0.25, mfu_with_output=0.3)
    assert parse_metrics_line(metrics_line(record)) == record
    older = parse_metrics_line('{"type": "step", "step": 1, "loss": 2.0, "mfu": 0.25}')
    assert older == StepRecord(step=1, loss=2.0, mfu=0.25) and older.mfu_with_output is None
    from hyperlaunch.train.metrics import format_step

    assert "| MFU 25.0% (with output 30.0%) |" in format_step(record)


@pytest.mark.slow
def test_importing_models_does_not_import_torch() -> None:
    code = "import sys, hyperlaunch.core.models, hyperlaunch.core.checkpoints; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
