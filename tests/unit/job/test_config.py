"""Layering: preset < user config < hyperlaunch.toml < HYPERLAUNCH_* < flags, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperlaunch.core.errors import ConfigError, InvalidInput
from hyperlaunch.job.plan import build_spec
from tests.support.model_configs import TINY_QWEN3_CONFIG


def build(tmp_path: Path, flags: dict[str, object] | None = None, environ: dict[str, str] | None = None, **kwargs: object):
    return build_spec(
        flags or {}, cwd=tmp_path, environ=environ or {}, user_config=tmp_path / "user.toml", **kwargs  # type: ignore[arg-type]
    )


def test_preset_recommendations_are_the_lowest_layer(tmp_path: Path) -> None:
    spec = build(tmp_path, {"model": "llama3_1_8b", "instance_type": "p5.48xlarge"})
    assert spec.job.nodes == 2 and spec.cluster.gpus_per_node == 8
    # The preset's GPU count never exceeds what the instance has; CPU nodes have none.
    assert build(tmp_path, {"model": "qwen3_0_6b", "instance_type": "g5.12xlarge"}).cluster.gpus_per_node == 4
    assert build(tmp_path, {"model": "qwen3_0_6b"}).cluster.gpus_per_node == 0


def test_each_layer_overrides_the_one_below(tmp_path: Path) -> None:
    (tmp_path / "user.toml").write_text('model = "qwen3_tiny"\nnodes = 2\npartition = "user"\nqos = "low"\n')
    (tmp_path / "hyperlaunch.toml").write_text('nodes = 3\npartition = "project"\n[env]\nA = "1"\nB = "2"\n')
    spec = build(tmp_path, {"partition": "flag", "env": ["B=3", "C=x=y"]}, {"HYPERLAUNCH_NODES": "4"})
    assert (spec.job.model, spec.job.nodes, spec.cluster.partition, spec.cluster.qos) == ("qwen3_tiny", 4, "flag", "low")
    assert spec.job.env == (("A", "1"), ("B", "3"), ("C", "x=y"))


def test_profiles_override_the_top_level_of_their_file(tmp_path: Path) -> None:
    (tmp_path / "hyperlaunch.toml").write_text(
        'model = "qwen3_tiny"\npartition = "dev"\n'
        '[profile.hyperpod]\ninstance-type = "p5.48xlarge"\npartition = "gpu"\nhyperpod = true\n'
    )
    assert build(tmp_path).cluster.partition == "dev"
    spec = build(tmp_path, profile="hyperpod")
    assert (spec.cluster.instance_type, spec.cluster.partition, spec.cluster.hyperpod) == ("p5.48xlarge", "gpu", "on")
    assert build(tmp_path, environ={"HYPERLAUNCH_PROFILE": "hyperpod"}).cluster.partition == "gpu"
    with pytest.raises(ConfigError, match="profile 'nope'"):
        build(tmp_path, profile="nope")


def test_unknown_keys_name_the_key_and_the_file(tmp_path: Path) -> None:
    config = tmp_path / "hyperlaunch.toml"
    config.write_text('model = "qwen3_tiny"\n[profile.p]\nnodez = 2\n')
    with pytest.raises(ConfigError, match=r"unknown key 'nodez' in .*hyperlaunch.toml \[profile.p\] \(did you mean nodes\?\); valid keys"):
        build(tmp_path)
    config.write_text("nodes = [")
    with pytest.raises(ConfigError, match="hyperlaunch.toml"):
        build(tmp_path)
    config.write_text('nodes = "two"\n')
    with pytest.raises(ConfigError, match='nodes = "two"'):
        build(tmp_path, {"model": "qwen3_tiny"})


def test_relative_paths_resolve_against_the_current_directory(tmp_path: Path) -> None:
    spec = build(tmp_path, {"model": "qwen3_tiny", "checkpoint_dir": "ck", "job_name": "j"})
    assert spec.output.checkpoint_dir == str(tmp_path / "ck")
    assert spec.output.log_dir == str(tmp_path / "logs") and spec.output.run_dir == str(tmp_path / "runs" / "j")


def test_a_local_model_directory_becomes_absolute(tmp_path: Path) -> None:
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(TINY_QWEN3_CONFIG))
    assert build(tmp_path, {"model": "my-model"}).job.model == str(tmp_path / "my-model")


def test_missing_model_and_bad_flags_are_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no model given"):
        build(tmp_path)
    with pytest.raises(InvalidInput, match="not KEY=VALUE"):
        build(tmp_path, {"model": "qwen3_tiny", "env": ["=NONAME"]})
    with pytest.raises(InvalidInput, match="--nodes must be between 1 and 2147483647"):
        build(tmp_path, {"model": "qwen3_tiny", "nodes": 0})


def test_environment_variables_reach_list_and_bool_fields(tmp_path: Path) -> None:
    spec = build(
        tmp_path,
        {"model": "qwen3_tiny"},
        {"HYPERLAUNCH_EXCLUSIVE": "yes", "HYPERLAUNCH_EXCLUDE": "node1,node2", "HYPERLAUNCH_HOME": "/ignored"},
    )
    assert spec.cluster.exclusive and spec.cluster.exclude == ("node1", "node2")


def test_data_that_exists_here_reaches_the_nodes_as_an_absolute_path(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text("{}\n")
    assert build(tmp_path, {"model": "qwen3_tiny", "data": "corpus.jsonl"}).job.data == str(tmp_path / "corpus.jsonl")
    assert build(tmp_path, {"model": "qwen3_tiny", "data": "org/dataset"}).job.data == "org/dataset"  # a name, not here


def test_an_empty_profile_name_is_refused_not_ignored(tmp_path: Path) -> None:
    (tmp_path / "hyperlaunch.toml").write_text('model = "qwen3_tiny"\n[profile.""]\nnodes = 3\n')
    with pytest.raises(InvalidInput, match="--profile must name a profile"):
        build(tmp_path, profile="")
    assert build(tmp_path, environ={"HYPERLAUNCH_PROFILE": ""}).job.nodes == 1


def test_trainer_args_written_as_one_string_split_as_a_command_line_and_values_are_shown_as_written(tmp_path: Path) -> None:
    config = tmp_path / "hyperlaunch.toml"
    config.write_text('model = "qwen3_tiny"\ntrainer_args = "--lr 3e-4 --note \'a b\'"\n')
    assert build(tmp_path).job.trainer_args[-4:] == ("--lr", "3e-4", "--note", "a b")
    config.write_text('model = "qwen3_tiny"\nspare_nodes = true\n')
    with pytest.raises(ConfigError, match=r"spare_nodes = true in .*hyperlaunch.toml: expected an integer"):
        build(tmp_path)
