"""Every model preset is a complete, runnable recommendation: a job named by its model alone
trains with the preset's steps, intervals, sharding, activation checkpointing and offload,
with sequence length and micro-batch for the instance type's hardware, and the trainer
applies the same recommendation when it is started without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core import recommend
from hyperlaunch.core.models import PRESETS, get_preset
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.plan import plan_job
from tests.support.cli_runner import run_cli
from tests.support.model_configs import TINY_QWEN3_CONFIG


def plan(tmp_path: Path, flags: dict[str, object]):
    return plan_job(flags, cwd=tmp_path, environ={}, user_config=tmp_path / "user.toml")


def arg(spec, flag: str) -> str | None:
    return targs.value_of(spec.job.trainer_args, flag)


def test_the_missions_command_gets_the_guides_settings_sized_for_cpu_nodes(tmp_path: Path) -> None:
    spec = plan(tmp_path, {"model": "qwen3_0_6b", "nodes": 2}).spec
    assert spec.job.max_steps == 100
    assert (arg(spec, "--checkpoint-every"), arg(spec, "--val-every")) == ("50", "100")
    assert (arg(spec, "--seq-len"), arg(spec, "--micro-batch-size")) == ("64", "1")
    assert arg(spec, "--sharding") == "full"
    assert {"--no-activation-checkpointing", "--no-cpu-offload"} <= set(spec.job.trainer_args)
    assert arg(spec, "--tokenizer") == "offline"  # no --data: the built-in corpus, no network


def test_gpu_instances_get_the_gpu_sizes_and_the_presets_tokenizer_with_data(tmp_path: Path) -> None:
    # p4d's 40 GB A100s: the 8B model needs activation checkpointing (on 80 GB H100s it fits
    # without: test_gpu_memory.py).
    spec = plan(tmp_path, {"model": "llama3_1_8b", "instance_type": "p4d.24xlarge", "data": "/d/x.jsonl"}).spec
    assert (arg(spec, "--seq-len"), arg(spec, "--micro-batch-size")) == ("4096", "1")
    assert "--activation-checkpointing" in spec.job.trainer_args
    assert arg(spec, "--tokenizer") == "meta-llama/Llama-3.1-8B"


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_renders_every_setting_once_and_the_trainer_accepts_them(tmp_path: Path, name: str) -> None:
    from hyperlaunch.runs.launch import check_trainer_command

    result = plan(tmp_path, {"model": name})
    flags = [a for a in result.spec.job.trainer_args if a.startswith("--")]
    assert len(flags) == len(set(flags)) == len(result.settings) - 1  # max_steps is the spec's own
    assert result.spec.job.max_steps == get_preset(name).max_steps
    check_trainer_command(result.spec)


def test_what_the_user_gives_wins_is_not_repeated_and_is_said_to_be_theirs(tmp_path: Path) -> None:
    result = plan(tmp_path, {"model": "qwen3_0_6b", "max_steps": 7, "trainer_args": ["--seq-len=32", "--activation-checkpointing"]})
    spec = result.spec
    assert spec.job.max_steps == 7
    assert arg(spec, "--seq-len") == "32" and spec.job.trainer_args.count("--seq-len") == 0
    assert "--no-activation-checkpointing" not in spec.job.trainer_args
    sources = {s.name: (s.value, s.source) for s in result.settings}
    assert sources["max_steps"] == (7, "you (--max-steps)")
    assert sources["seq_len"] == ("32", "you (after --)")
    assert sources["activation_checkpointing"] == (True, "you (after --)")
    assert sources["micro_batch_size"][1].startswith("preset qwen3_0_6b")


def test_max_steps_from_a_config_file_or_the_environment_is_said_to_come_from_there(tmp_path: Path) -> None:
    (tmp_path / "hyperlaunch.toml").write_text("max_steps = 9\n")
    from_file = {s.name: (s.value, s.source) for s in plan(tmp_path, {"model": "qwen3_0_6b"}).settings}
    assert from_file["max_steps"][0] == 9 and "hyperlaunch.toml" in from_file["max_steps"][1]
    from_env = plan_job({"model": "qwen3_0_6b"}, cwd=tmp_path / "none", environ={"HYPERLAUNCH_MAX_STEPS": "11"}, user_config=tmp_path / "user.toml")
    assert {s.name: (s.value, s.source) for s in from_env.settings}["max_steps"] == (11, "$HYPERLAUNCH_MAX_STEPS")


def test_a_model_directory_takes_its_config_json_and_never_outgrows_its_positions(tmp_path: Path) -> None:
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_QWEN3_CONFIG))  # 256 positions
    cpu = plan(tmp_path, {"model": str(model)}).spec
    assert arg(cpu, "--seq-len") == "64"
    gpu = plan(tmp_path, {"model": str(model), "instance_type": "p5.48xlarge"})
    assert arg(gpu.spec, "--seq-len") == "256"
    seq = {s.name: s for s in gpu.settings}["seq_len"]
    assert "max_position_embeddings" in seq.source and str(model / "config.json") in seq.source
    (model / "tokenizer_config.json").write_text("{}")
    with_data = plan(tmp_path, {"model": str(model), "data": "/d/x.jsonl"}).spec
    assert arg(with_data, "--tokenizer") == str(model)


@pytest.mark.slow
def test_a_broken_config_json_is_one_line_at_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "broken"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    result = run_cli(["render", "--model", str(model)], monkeypatch)
    assert result.exit_code == 2
    assert "config.json is not valid JSON" in result.stderr and "Traceback" not in result.output


@pytest.mark.slow
def test_the_settings_printout_goes_to_stderr_with_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli(["render", "--nodes", "2", "--model", "qwen3_0_6b"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("#!/bin/bash")
    assert "--seq-len" in result.stderr and "preset qwen3_0_6b, for CPU nodes (cpu)" in result.stderr
    assert "built-in corpus" in result.stderr


def test_the_trainer_fills_what_it_was_not_given_from_the_same_recommendation() -> None:
    from hyperlaunch.train.config import parse_config
    from hyperlaunch.train.modeling import resolve_model
    from hyperlaunch.train.setup import with_recommended

    cfg = parse_config(["--model", "llama3_1_8b", "--checkpoint-dir", "/c", "--device", "cpu", "--data", "/d"])
    filled = with_recommended(cfg, resolve_model("llama3_1_8b", None))
    assert filled.activation_checkpointing is True and filled.cpu_offload is False
    assert (filled.max_steps, filled.checkpoint_every, filled.val_every) == (1000, 200, 200)
    assert (filled.seq_len, filled.micro_batch_size, filled.tokenizer) == (64, 1, "meta-llama/Llama-3.1-8B")
    mine = parse_config(["--model", "llama3_1_8b", "--checkpoint-dir", "/c", "--device", "cpu", "--no-activation-checkpointing"])
    assert with_recommended(mine, resolve_model("llama3_1_8b", None)).activation_checkpointing is False
    assert with_recommended(mine, resolve_model("llama3_1_8b", None)).tokenizer == recommend.BUILT_IN_CORPUS_TOKENIZER


def test_a_run_without_checkpoints_gets_no_checkpoint_cadence_at_submit_or_in_the_trainer(tmp_path: Path) -> None:
    # submit wrote the preset's --checkpoint-every beside --no-checkpoints, which the trainer refuses.
    from hyperlaunch.runs.launch import check_trainer_command
    from hyperlaunch.train.config import parse_config
    from hyperlaunch.train.modeling import resolve_model
    from hyperlaunch.train.setup import with_recommended

    result = plan(tmp_path, {"model": "qwen3_tiny", "trainer_args": ["--no-checkpoints"]})
    assert "--checkpoint-every" not in result.spec.job.trainer_args and "checkpoint_every" not in {s.name for s in result.settings}
    check_trainer_command(result.spec)
    cfg = parse_config(["--model", "qwen3_tiny", "--checkpoint-dir", "/c", "--device", "cpu", "--no-checkpoints"])
    assert with_recommended(cfg, resolve_model("qwen3_tiny", None)).checkpoint_every is None


def test_the_trainer_on_a_gpu_counts_its_cpu_offload_in_the_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import torch

    from hyperlaunch.train.config import parse_config
    from hyperlaunch.train.modeling import resolve_model
    from hyperlaunch.train.setup import with_recommended

    # A 24 GiB GPU, as the trainer reads it (no GPU here): qwen3_1_7b does not fit it even at a
    # micro-batch of 1, but with its states offloaded the preset's 2 does.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _: types.SimpleNamespace(total_memory=24 * 1024**3))
    monkeypatch.setenv("WORLD_SIZE", "1")
    base = ["--model", "qwen3_1_7b", "--checkpoint-dir", "/c", "--device", "cuda"]
    assert with_recommended(parse_config(base), resolve_model("qwen3_1_7b", None)).micro_batch_size == 1
    offloaded = with_recommended(parse_config([*base, "--cpu-offload"]), resolve_model("qwen3_1_7b", None))
    assert (offloaded.micro_batch_size, offloaded.cpu_offload) == (2, True)


def test_a_sequence_longer_than_the_model_is_warned_about() -> None:
    spec = get_preset("qwen3_tiny")
    assert recommend.sequence_warning(spec, spec.max_position_embeddings) is None
    assert "max_position_embeddings" in (recommend.sequence_warning(spec, spec.max_position_embeddings + 1) or "")
