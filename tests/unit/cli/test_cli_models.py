"""`hyperlaunch models`: every preset with its architecture and recommendations, as a table
and as one JSON document, without importing torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hyperlaunch.cli import app
from hyperlaunch.cli.models import format_params
from hyperlaunch.core.models import PRESETS, get_preset

runner = CliRunner()


def test_json_is_one_document_with_every_preset() -> None:
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [m["name"] for m in document["models"]] == list(PRESETS)
    qwen = next(m for m in document["models"] if m["name"] == "qwen3_0_6b")
    arch = qwen["architecture"]
    assert (arch["num_layers"], arch["hidden_size"], arch["num_heads"], arch["num_kv_heads"]) == (28, 1024, 16, 8)
    assert arch["head_dim"] == 128 and arch["vocab_size"] == 151936 and arch["tie_word_embeddings"] is True
    assert qwen["params"] == get_preset("qwen3_0_6b").num_params
    assert qwen["recommended"]["micro_batch_size"] == 4 and qwen["recommended"]["nodes"] == 1
    llama = next(m for m in document["models"] if m["name"] == "llama3_1_8b")
    assert llama["architecture"]["rope_scaling"]["rope_type"] == "llama3"
    assert llama["recommended"]["activation_checkpointing"] is True


def test_table_shows_architecture_and_recommendations() -> None:
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    for name in PRESETS:
        assert name in result.stdout
    for text in ("kv heads", "vocab", "151936", "596M", "8.03B", "micro-batch", "2 x 8"):
        assert text in result.stdout


def test_format_params_reads_like_a_model_card() -> None:
    assert format_params(596_049_920) == "596M"
    assert format_params(8_030_261_248) == "8.03B"
    assert format_params(3_160_000) == "3.16M"
    assert format_params(42_500_000) == "42.5M"
    assert format_params(999) == "999"


@pytest.mark.slow
def test_models_does_not_import_torch() -> None:
    code = (
        "import sys; sys.argv=['hyperlaunch','models','--json']\n"
        "try:\n from hyperlaunch.cli import main; main()\nexcept SystemExit: pass\n"
        "print('HEAVY', sorted(m for m in ('torch','transformers') if m in sys.modules), file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "HEAVY []" in result.stderr
    json.loads(result.stdout)
