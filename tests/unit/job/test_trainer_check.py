"""Trainer arguments are checked before anything is submitted: the trainer's own parser
(torch-free) runs on the command line the job would start, flags the job owns are refused
after `--`, and no abbreviation passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_runner import run_cli


@pytest.mark.parametrize(
    ("trainer_args", "message"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--lrr", "3e-4"], "unrecognized arguments: --lrr 3e-4 (did you mean --lr?)"),  # a typo: the flag it meant
        (["--model-n", "x"], "unrecognized arguments: --model-n"),  # no abbreviation of --model-name
        (["--lr", "abc"], "argument --lr: invalid float value"),
        (["--seq-len", "0"], "--seq-len must be >= 1"),
        (["--sharding", "zero"], "argument --sharding: invalid choice"),
        (["--max-steps", "3"], "--max-steps after `--` is set by hyperlaunch"),
        (["--checkpoint-dir=/elsewhere"], "--checkpoint-dir after `--` is set by hyperlaunch"),
        (["--data", "x.jsonl"], "--data after `--` is set by hyperlaunch"),
        (["--model", "llama_tiny"], "--model after `--` is set by hyperlaunch"),
        (["--run-dir", "/r"], "--run-dir after `--` is set by hyperlaunch"),
        (["--help"], "--help after `--` is not a training argument"),
    ],
)
@pytest.mark.parametrize("command", ["render", "submit"])
@pytest.mark.slow
def test_bad_trainer_arguments_are_one_line_and_nothing_is_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, trainer_args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    submitted: list[object] = []
    monkeypatch.setattr("hyperlaunch.runs.submission.submit", lambda *a, **k: submitted.append(a))
    monkeypatch.setattr("hyperlaunch.cli._cluster.slurm_env", lambda *a, **k: {})
    result = run_cli([command, "--nodes", "2", "--model", "qwen3_tiny", "--", *trainer_args], monkeypatch)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("hyperlaunch: error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "training qwen3_tiny" not in result.stderr, "settings are printed only for a valid job"
    assert "Traceback" not in result.output and submitted == []
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_good_trainer_arguments_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli(["render", "--model", "qwen3_tiny", "--", "--lr=1e-3", "--model-name", "x", "--no-export"], monkeypatch)
    assert result.exit_code == 0, result.output
