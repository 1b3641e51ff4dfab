"""One torchtitan training with the settings of a `bench gpu` variant: its qwen3 0.6B (the same
architecture as hyperlaunch's qwen3_0_6b: 28 layers, hidden 1,024, tied embeddings, SDPA),
the same sequence length, micro-batch, compile and activation checkpointing, on the same text.

torchtitan's configuration changed between releases: 0.2.x takes `--model.name qwen3
--model.flavor 0.6B` and TOML-style sections; 0.3 takes `--module qwen3 --config qwen3_0_6b`
(its registered config) and needs torch >= 2.12. The arguments here follow the release
installed. Beyond the variant's settings, torchtitan runs as its qwen3_0_6b config has it
(AdamW at 3e-4, chunked compiled loss in 0.3, no checkpoints); the only files it is given are a
tokenizer folder (hyperlaunch's shipped tokenizer) and the built-in corpus as a .jsonl dataset,
so no hub is reached."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from hyperlaunch.data.offline_assets import CORPUS_FILE, TOKENIZER_FILE


@dataclass(frozen=True)
class Settings:
    seq_len: int
    micro_batch: int
    steps: int
    compile: bool
    activation_checkpointing: bool


def installed_version() -> str | None:
    try:
        return metadata.version("torchtitan")
    except metadata.PackageNotFoundError:
        return None


def _is_0_2(version: str) -> bool:
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) < (0, 3)


def prepare_inputs(work: Path) -> tuple[Path, Path]:
    """A tokenizer folder and a one-file .jsonl dataset from the built-in corpus."""
    assets = work / "tt-assets"
    assets.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TOKENIZER_FILE, assets / "tokenizer.json")
    (assets / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": False, "add_eos_token": False}))
    data = work / "tt-data"
    data.mkdir(parents=True, exist_ok=True)
    paragraphs = [p.strip() for p in CORPUS_FILE.read_text().split("\n\n") if p.strip()]
    with (data / "train.jsonl").open("w") as out:
        for paragraph in paragraphs:
            out.write(json.dumps({"text": paragraph}) + "\n")
    return assets, data


def arguments(version: str, settings: Settings, assets: Path, data: Path, out: Path) -> list[str]:
    """torchtitan's command line for these settings, in the installed release's terms."""
    common = [
        "--training.local_batch_size", str(settings.micro_batch),
        "--training.seq_len", str(settings.seq_len),
        "--training.steps", str(settings.steps),
        "--metrics.log_freq", "1",
        "--compile.enable" if settings.compile else "--compile.no-enable",
    ]
    mode = "full" if settings.activation_checkpointing else "none"
    if _is_0_2(version):
        return [
            "--model.name", "qwen3", "--model.flavor", "0.6B", "--model.hf_assets_path", str(assets),
            "--training.dataset", "c4_test", "--training.dataset_path", str(data),
            "--optimizer.lr", "3e-4", "--lr_scheduler.warmup_steps", "2",
            "--job.dump_folder", str(out), "--activation_checkpoint.mode", mode, *common,
        ]
    return [
        "--module", "qwen3", "--config", "qwen3_0_6b", "--hf_assets_path", str(assets),
        "--dataloader.dataset", "c4_test", "--dataloader.dataset_path", str(data),
        "--dump_folder", str(out), *common, f"activation-checkpoint:{mode}",
    ]


def run(settings: Settings, work: Path) -> list[dict[str, Any]]:
    """Train once under torchrun; torchtitan's step records (hyperlaunch.bench.torchtitan_entry)."""
    version = installed_version()
    if version is None:
        raise SystemExit("bench gpu --against torchtitan: torchtitan is not installed here (pip install torchtitan)")
    assets, data = prepare_inputs(work)
    records = work / "torchtitan-records.jsonl"
    records.unlink(missing_ok=True)
    launcher = Path(sys.executable).with_name("torchrun")
    argv = [
        str(launcher), "--standalone", "--nproc-per-node=1", "-m", "hyperlaunch.bench.torchtitan_entry",
        str(records), "--", *arguments(version, settings, assets, data, work / "tt-out"),
    ]
    # Local files only: the datasets library and the hub client must not look for a network.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0 or not records.exists():
        raise SystemExit(f"torchtitan {version} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return read_records(records)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The last record of each step, in step order."""
    by_step: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        by_step[int(row["step"])] = row
    return [by_step[step] for step in sorted(by_step)]
