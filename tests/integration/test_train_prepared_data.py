"""Training on prepared data with real torchrun (gloo ranks on CPU, no Slurm): exact resume
after a kill and after a change of world size (2 -> 1, 2 -> 4) with no sample skipped or
repeated; raw data prepared once, by one process, and reused by the next start; tokenizer
problems in one line."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hyperlaunch.core import checkpoints as ck
from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.data.prepare import prepare
from hyperlaunch.data.tokenizer import load_tokenizer
from tests.support.train_helpers import Run, launch, tiny_args

MODEL = "qwen3_tiny"
STEPS, EVERY = 8, 4


def _write_corpus(path: Path, documents: int, seed: int) -> Path:
    rng = random.Random(seed)
    words = "Ada Bo Cleo red blue green cat dog fox river tower bridge sees follows paints near the at dawn".split()
    with path.open("w") as handle:
        for _ in range(documents):
            handle.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(10, 60))) + "."}) + "\n")
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prepared_data")


@pytest.fixture(scope="module")
def prepared(work: Path) -> Path:
    """About 15,000 tokens in several shards: 450 sequences of 32, far more than 8 steps use."""
    corpus = _write_corpus(work / "corpus.jsonl", 300, seed=1)
    prepare([corpus], work / "prepared", load_tokenizer("offline"), workers=1, shard_mb=0.01)
    return work / "prepared"


def _args(ckpt: Path, prepared: Path, *extra: str, steps: int = STEPS) -> list[str]:
    return tiny_args(ckpt, "--data", str(prepared), "--checkpoint-every", str(EVERY), "--no-export", *extra, steps=steps)


def _samples(record: Path) -> dict[int, Counter[tuple[int, str]]]:
    """Per step (by samples consumed before it), the (sequence, token digest) pairs every rank
    trained on, the last attempt's where a step ran twice."""
    attempts: dict[tuple[int, int], list[tuple[int, str]]] = {}
    for path in sorted(record.parent.glob(record.name + ".*")):
        rank = int(path.suffix[1:])
        for line in path.read_text().splitlines():
            row = json.loads(line)
            attempts[(row["samples_consumed"], rank)] = list(zip(row["rows"], row["digests"], strict=False))
    steps: dict[int, Counter[tuple[int, str]]] = {}
    for (consumed, _rank), pairs in attempts.items():
        steps.setdefault(consumed, Counter()).update(pairs)
    return steps


@pytest.fixture(scope="module")
def uninterrupted(work: Path, prepared: Path) -> tuple[Run, dict[int, Counter[tuple[int, str]]]]:
    record = work / "a-samples"
    run = launch(_args(work / "a-ckpt", prepared), run_dir=work / "a-run", env={"HYPERLAUNCH_TEST_RECORD_SAMPLES": str(record)})
    return run, _samples(record)


def test_the_uninterrupted_run_sees_each_sequence_once(uninterrupted: tuple[Run, dict[int, Counter[tuple[int, str]]]]) -> None:
    run, samples = uninterrupted
    (started,) = run.events("started")
    assert started["data"]["prepared"] is False and started["data"]["folder"].endswith("prepared")
    assert sorted(samples) == [4 * step for step in range(STEPS)]  # global batch 2 ranks x 2
    seen = Counter(row for pairs in samples.values() for row, _digest in pairs)
    assert len(seen) == 4 * STEPS and set(seen.values()) == {1}


def test_exact_resume_after_a_kill(work: Path, prepared: Path, uninterrupted: tuple[Run, dict[int, Counter[tuple[int, str]]]]) -> None:
    want, want_samples = uninterrupted
    ckpt, record = work / "b-ckpt", work / "b-samples"
    killed = launch(
        _args(ckpt, prepared), run_dir=work / "b-run", check=False,
        env={"HYPERLAUNCH_TEST_KILL_AFTER_CHECKPOINT": str(EVERY), "HYPERLAUNCH_TEST_RECORD_SAMPLES": str(record)},
    )
    assert killed.returncode != 0 and ck.read_pointer(ckpt, MODEL) == f"{MODEL}-{EVERY}steps"
    resumed = launch(_args(ckpt, prepared), run_dir=work / "b-run", env={"HYPERLAUNCH_TEST_RECORD_SAMPLES": str(record)})
    assert [e["step"] for e in resumed.events("resumed")] == [EVERY]
    for step in range(EVERY + 1, STEPS + 1):
        assert resumed.steps()[step]["loss"] == pytest.approx(want.steps()[step]["loss"], rel=1e-6), step
    assert _samples(record) == want_samples


@pytest.mark.parametrize(("ranks", "micro_batch"), [(1, "4"), (4, "1")])
def test_a_new_world_size_neither_skips_nor_repeats_a_sample(
    work: Path, prepared: Path, uninterrupted: tuple[Run, dict[int, Counter[tuple[int, str]]]], ranks: int, micro_batch: str
) -> None:
    """The 2-rank checkpoint of step 4 resumes on 1 and 4 ranks with the same global batch:
    every later step trains on exactly the sequences (and tokens) of the uninterrupted run."""
    want, want_samples = uninterrupted
    ckpt, record = work / f"elastic-{ranks}", work / f"elastic-{ranks}-samples"
    ckpt.mkdir()
    shutil.copytree(work / "a-ckpt" / f"{MODEL}-{EVERY}steps", ckpt / f"{MODEL}-{EVERY}steps")
    ck.write_pointer(ckpt, MODEL, f"{MODEL}-{EVERY}steps")
    args = _args(ckpt, prepared)
    args[args.index("--micro-batch-size") + 1] = micro_batch
    run = launch(args, ranks=ranks, run_dir=work / f"elastic-{ranks}-run", env={"HYPERLAUNCH_TEST_RECORD_SAMPLES": str(record)})
    (resumed,) = run.events("resumed")
    assert (resumed["step"], resumed["world_size"]) == (EVERY, ranks)
    got = _samples(record)
    assert got == {consumed: pairs for consumed, pairs in want_samples.items() if consumed >= 4 * EVERY}
    for step in range(EVERY + 1, STEPS + 1):
        assert run.steps()[step]["loss"] == pytest.approx(want.steps()[step]["loss"], rel=1e-4), step


def test_raw_data_is_prepared_once_and_reused_by_the_next_start(work: Path) -> None:
    corpus = _write_corpus(work / "raw.jsonl", 200, seed=2)
    ckpt = work / "raw-ckpt"
    args = tiny_args(ckpt, "--data", str(corpus), "--checkpoint-every", "2", "--no-export", steps=2)
    first = launch(args, run_dir=work / "raw-run")
    assert first.events("started")[0]["data"]["prepared"] is True
    assert first.stderr.count("hyperlaunch.train: preparing ") == 1, "one process prepares; the other waits"
    (cache,) = ck.data_cache_dir(ckpt).iterdir()
    assert cache.name.startswith("raw.jsonl-") and fmt.is_prepared(cache)
    files = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.iterdir()}
    assert [info.step for info in ck.list_checkpoints(ckpt, MODEL)] == [2] and ck.list_models(ckpt) == [MODEL]

    args[args.index("--max-steps") + 1] = "4"
    second = launch(args, run_dir=work / "raw-run")
    (resumed,) = second.events("resumed")
    assert resumed["data"]["prepared"] is False and resumed["data"]["folder"] == str(cache)
    assert "preparing" not in second.stderr
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.iterdir()} == files, "nothing re-tokenized"
    assert list(ck.data_cache_dir(ckpt).iterdir()) == [cache]


def _swapped_tokenizer(folder: Path) -> Path:
    """The offline tokenizer with two token ids swapped: as large, but another tokenizer."""
    from transformers import PreTrainedTokenizerFast

    from hyperlaunch.data.offline_assets import TOKENIZER_FILE

    spec: dict[str, Any] = json.loads(TOKENIZER_FILE.read_text())
    vocab = spec["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.__getitem__)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    folder.mkdir()
    (folder / "raw.json").write_text(json.dumps(spec))
    PreTrainedTokenizerFast(tokenizer_file=str(folder / "raw.json"), eos_token="<|endoftext|>").save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("case", ["mismatch", "unreachable"])
def test_tokenizer_problems_are_one_line(work: Path, prepared: Path, tmp_path: Path, case: str) -> None:
    if case == "mismatch":
        tokenizer, message = str(_swapped_tokenizer(tmp_path / "tok")), f"--data {prepared} was prepared with tokenizer offline"
    else:
        tokenizer, message = "nobody/no-such-tokenizer", "--tokenizer nobody/no-such-tokenizer cannot be loaded"
    args = _args(tmp_path / "ckpt", prepared, "--tokenizer", tokenizer)
    run = launch(args, ranks=0, run_dir=tmp_path / "run", check=False)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert lines[0].startswith(f"hyperlaunch.train: error: {message}"), lines[0]
