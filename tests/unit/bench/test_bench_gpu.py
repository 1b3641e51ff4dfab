"""`bench gpu --against torchtitan` without a GPU: the table (both MFU conventions, the ratio to
torchtitan), the measured steps, torchtitan's command line in each release's terms (checked by
that release's own parser where it is installed), and the entry that copies torchtitan's step
figures to a file (against a stand-in torchtitan package)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hyperlaunch.bench import gpu, torchtitan_run
from hyperlaunch.core.models import get_preset


def _row(trainer: str, tokens: list[float], variant: str = "compile") -> gpu.Row:
    return gpu.Row(variant, trainer, tokens, 0.4, 0.5, 21.0, {})


def test_the_table_names_both_mfu_conventions_and_the_ratio_to_torchtitan() -> None:
    lines = gpu.table([_row("hyperlaunch", [80_000, 81_000, 79_000]), _row("torchtitan 0.2.2", [72_000, 73_000])])
    assert "MFU" in lines[0] and "MFU+out" in lines[0] and "vs torchtitan" in lines[0]
    assert "80,000 [79,000 - 81,000]" in lines[1] and lines[1].rstrip().endswith(f"{80_000 / 72_500:.2f}x")
    assert "40.0 %" in lines[1] and "50.0 %" in lines[1]
    assert not lines[2].rstrip().endswith("x")  # torchtitan's own row has no ratio



def test_each_round_is_compared_with_its_own_torchtitan_run() -> None:
    # Two rounds on an H200 gave torchtitan 74,816 then 70,523: the first hyperlaunch run's
    # ratio is to the first, not to the last torchtitan run.
    lines = gpu.table([_row("hyperlaunch", [78_000]), _row("torchtitan 0.2.2", [75_000]),
                       _row("hyperlaunch", [78_000]), _row("torchtitan 0.2.2", [70_000])])
    assert lines[1].rstrip().endswith(f"{78_000 / 75_000:.2f}x")
    assert lines[3].rstrip().endswith(f"{78_000 / 70_000:.2f}x")

def test_only_the_steps_after_warmup_count() -> None:
    rows = [{"step": s} for s in range(1, 45)]
    assert [r["step"] for r in gpu.measured(rows, warmup=10, steps=30)] == list(range(11, 41))


def test_mfu_conventions_differ_by_the_output_projection() -> None:
    spec = get_preset("qwen3_0_6b")
    ours, with_output = gpu.mfu_pair(80_000, "qwen3_0_6b", 4096, 989e12)
    assert ours == pytest.approx(spec.flops_per_token(4096) * 80_000 / 989e12)
    assert with_output - ours == pytest.approx(6 * spec.vocab_size * spec.hidden_size * 80_000 / 989e12)
    assert gpu.mfu_pair(80_000, "qwen3_0_6b", 4096, None) == (None, None)


SETTINGS = torchtitan_run.Settings(seq_len=4096, micro_batch=2, steps=40, compile=True, activation_checkpointing=False)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.2.2", ["--model.name", "qwen3", "--model.flavor", "0.6B", "--activation_checkpoint.mode", "none",
                   "--training.dataset", "c4_test", "--compile.enable"]),
        ("0.3.0", ["--module", "qwen3", "--config", "qwen3_0_6b", "--dataloader.dataset", "c4_test",
                   "--compile.enable", "activation-checkpoint:none"]),
    ],
)
def test_torchtitan_gets_the_variant_in_its_release_terms(tmp_path: Path, version: str, expected: list[str]) -> None:
    args = torchtitan_run.arguments(version, SETTINGS, tmp_path / "a", tmp_path / "d", tmp_path / "o")
    joined = " ".join(args)
    for part in expected:
        assert part in args, part
    assert "--training.local_batch_size 2" in joined and "--training.seq_len 4096" in joined
    assert "--training.steps 40" in joined and "--metrics.log_freq 1" in joined
    with_ac = torchtitan_run.Settings(4096, 2, 40, compile=False, activation_checkpointing=True)
    ac_args = torchtitan_run.arguments(version, with_ac, tmp_path / "a", tmp_path / "d", tmp_path / "o")
    assert "--compile.no-enable" in ac_args and ("full" in ac_args or "activation-checkpoint:full" in ac_args)


def test_torchtitan_inputs_are_the_shipped_tokenizer_and_corpus(tmp_path: Path) -> None:
    assets, data = torchtitan_run.prepare_inputs(tmp_path)
    assert json.loads((assets / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    assert len(rows) > 100 and all(row["text"].strip() for row in rows)


def test_torchtitan_arguments_parse_with_the_installed_release(tmp_path: Path) -> None:
    version = torchtitan_run.installed_version()
    if version is None:
        pytest.skip("torchtitan is not installed here")
    from torchtitan.config import ConfigManager

    assets, data = torchtitan_run.prepare_inputs(tmp_path)
    config = ConfigManager().parse_args(torchtitan_run.arguments(version, SETTINGS, assets, data, tmp_path / "o"))
    assert config.training.local_batch_size == 2 and config.compile.enable


@pytest.mark.slow
def test_the_entry_copies_torchtitans_step_figures_to_a_file(tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "torchtitan"
    (fake / "components").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "components" / "__init__.py").write_text("")
    (fake / "components" / "metrics.py").write_text(textwrap.dedent("""
        class BaseLogger:
            def log(self, metrics, step):
                pass
        class LoggerContainer(BaseLogger):
            def log(self, metrics, step):
                pass
    """))
    (fake / "train.py").write_text(textwrap.dedent("""
        import sys
        from torchtitan.components import metrics
        class Trainer: pass
        def main(trainer_class):
            assert sys.argv[1:] == ["--training.steps", "2"], sys.argv
            for step in (1, 2):
                metrics.BaseLogger().log({"throughput(tps)": 1000.0 * step, "memory/max_active(GiB)": 20}, step)
    """))
    records = tmp_path / "records.jsonl"
    env = {"PYTHONPATH": f"{fake.parent}:{Path(__file__).parents[3]}", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "hyperlaunch.bench.torchtitan_entry", str(records), "--", "--training.steps", "2"],
        capture_output=True, text=True, check=False, env=env,
    )
    assert result.returncode == 0, result.stderr
    assert [r["throughput(tps)"] for r in torchtitan_run.read_records(records)] == [1000.0, 2000.0]


def test_a_lone_trainer_flag_reaches_the_trainer_which_saves_no_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    # `--trainer-args --float8` was refused by argparse (a value that looks like a flag), and
    # the trainer's final save of llama3_1_8b (90 GiB) ended the run on the GPU machine's disk.
    import torch

    launched: list[list[str]] = []
    steps = [{"step": s, "tokens_per_s_per_device": 7000.0, "peak_memory_bytes": 2**30, "loss": 1.0} for s in range(1, 41)]
    monkeypatch.setattr(gpu, "torchrun", lambda ranks, args: launched.append(args))
    monkeypatch.setattr(gpu, "records", lambda run_dir, kind: steps if kind == "step" else [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    assert gpu.main(["--variants", "compile", "--trainer-args", "--float8"]) == 0
    (args,) = launched
    assert args[-1] == "--float8" and "--no-checkpoints" in args and "--checkpoint-every" not in args
    from hyperlaunch.train.config import parse_config

    cfg = parse_config(args[1:])  # the trainer takes the command as built
    assert cfg.float8 and not cfg.checkpoints and cfg.compile
