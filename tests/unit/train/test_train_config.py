"""The trainer's command line is derived from TrainConfig's fields: one declaration per option."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.train.config import TrainConfig, build_parser, parse_config

REQUIRED = ["--model", "qwen3_tiny", "--checkpoint-dir", "/c"]


def test_every_field_is_an_option_of_the_parser_and_only_those() -> None:
    parser = build_parser()
    dests = {action.dest for action in parser._actions if action.dest != "help"}
    assert dests == {f.name for f in dataclasses.fields(TrainConfig)}
    help_text = parser.format_help()
    for f in dataclasses.fields(TrainConfig):
        flag = f.metadata["flag"] or "--" + f.name.replace("_", "-")
        assert flag in help_text and f.metadata["help"], f.name


def test_defaults_are_the_fields_defaults() -> None:
    cfg = parse_config(REQUIRED)
    for f in dataclasses.fields(TrainConfig):
        if f.default is not dataclasses.MISSING and f.name != "run_dir":
            assert getattr(cfg, f.name) == f.default, f.name
    assert cfg.run_dir == cfg.checkpoint_dir == Path("/c")


def test_each_kind_of_option_reaches_its_field() -> None:
    cfg = parse_config([
        *REQUIRED, "--model-name=x", "--data", "d.jsonl", "--seq-len", "64", "--lr", "1e-3", "--no-export",
        "--compile", "--sharding", "grad-op", "--run-dir", "/r", "--mixed-precision", "bf16", "--no-checkpoints",
    ])
    assert cfg.checkpoints is False
    assert (cfg.model_name, cfg.data, cfg.seq_len, cfg.lr, cfg.export, cfg.compile) == ("x", Path("d.jsonl"), 64, 1e-3, False, True)
    assert (cfg.sharding, cfg.run_dir, cfg.mixed_precision) == ("grad-op", Path("/r"), "bf16")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--checkpoint-dir", "/c", "--max-steps", "5"], "required: --model"),
        ([*REQUIRED, "--sharding", "zero9"], "invalid choice: 'zero9'"),
        ([*REQUIRED, "--seq-len", "many"], "invalid int value"),
        ([*REQUIRED, "--grad-accum", "0"], "--grad-accum must be >= 1"),
        ([*REQUIRED, "--from-scratch", "--resume-from", "/c/x"], "exclude each other"),
        ([*REQUIRED, "--fsdp-groups", "two"], "invalid choice: 'two'"),
        ([*REQUIRED, "--fsdp-groups", "one", "--reshard-after-forward"], "cannot be used with --reshard-after-forward"),
        ([*REQUIRED, "--fsdp-groups", "one", "--prefetch", "1"], "with --fsdp-groups one there are none"),
        ([*REQUIRED, "--no-checkpoints", "--checkpoint-every", "50"], "saves nothing, so --checkpoint-every 50 has nothing"),
        ([*REQUIRED, "--no-checkpoints", "--keep-last", "2"], "saves nothing, so --keep-last 2 has nothing"),
        ([*REQUIRED, "--no-checkpoints", "--export-every", "5"], "saves nothing, so --export-every 5 has nothing"),
        ([*REQUIRED, "--no-checkpoints", "--async-checkpoint"], "saves nothing, so --async-checkpoint has nothing"),
        ([*REQUIRED, "--export-every", "-1"], "--export-every must be >= 0"),
    ],
)
def test_bad_values_are_one_line_errors(args: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_config(args)
