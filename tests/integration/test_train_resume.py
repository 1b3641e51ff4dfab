"""Crash-safe checkpoints and exact resume with real torchrun (2 gloo ranks on CPU):
SIGKILL after a checkpoint, SIGKILL in the middle of a save, resume on 1 and 4 ranks,
and the Hugging Face export at the end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from hyperlaunch.core import checkpoints as ck
from tests.support.train_helpers import Run, launch, tiny_args

MODEL = "qwen3_tiny"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("train_resume")


@pytest.fixture(scope="module")
def probe_batch(work: Path) -> Path:
    path = work / "probe.pt"
    torch.save(torch.randint(0, 500, (2, 24), generator=torch.Generator().manual_seed(7)), path)
    return path


@pytest.fixture(scope="module")
def uninterrupted(work: Path, probe_batch: Path) -> Run:
    """20 steps in one go, checkpoint every 10, exported at the end, probed at start and end."""
    return launch(
        tiny_args(work / "a-ckpt", "--checkpoint-every", "10"),
        run_dir=work / "a-run", env={"HYPERLAUNCH_TEST_PROBE": str(probe_batch)},
    )


def test_exact_resume_after_sigkill(work: Path, uninterrupted: Run) -> None:
    ckpt = work / "b-ckpt"
    killed = launch(
        tiny_args(ckpt, "--checkpoint-every", "10", "--no-export"), run_dir=work / "b-run",
        env={"HYPERLAUNCH_TEST_KILL_AFTER_CHECKPOINT": "10"}, check=False,
    )
    assert killed.returncode != 0
    assert ck.read_pointer(ckpt, MODEL) == "qwen3_tiny-10steps"
    assert max(killed.steps()) == 10
    resumed = launch(tiny_args(ckpt, "--checkpoint-every", "10", "--no-export"), run_dir=work / "b-run")
    assert [e["step"] for e in resumed.events("resumed")] == [10]
    want, got = uninterrupted.steps(), resumed.steps()
    for step in range(11, 21):
        assert got[step]["loss"] == pytest.approx(want[step]["loss"], rel=1e-6), step
        assert got[step]["lr"] == pytest.approx(want[step]["lr"], rel=1e-12), step
        assert got[step]["samples_consumed"] == want[step]["samples_consumed"]
    assert ck.read_pointer(ckpt, MODEL) == "qwen3_tiny-20steps"


def test_async_checkpoint_holds_the_state_of_its_step(work: Path, uninterrupted: Run) -> None:
    """The async copy runs in the background while the next step computes; the optimizer
    must wait for it, or the checkpoint would hold a later step's weights."""
    ckpt = work / "async-ckpt"
    killed = launch(
        tiny_args(ckpt, "--checkpoint-every", "10", "--async-checkpoint", "--no-export"), run_dir=work / "async-run",
        env={"HYPERLAUNCH_TEST_KILL_AFTER_CHECKPOINT": "10"}, check=False,
    )
    assert killed.returncode != 0 and max(killed.steps()) > 10  # training went on during the save
    (save,) = killed.events("checkpoint_completed")
    assert save["mode"] == "async" and save["bytes"] > 0 and save["blocked_s"] < save["seconds"]
    assert ck.read_pointer(ckpt, MODEL) == "qwen3_tiny-10steps"
    resumed = launch(tiny_args(ckpt, "--checkpoint-every", "10", "--no-export"), run_dir=work / "async-run")
    assert [e["step"] for e in resumed.events("resumed")] == [10]
    want, got = uninterrupted.steps(), resumed.steps()
    for step in range(11, 21):
        assert got[step]["loss"] == pytest.approx(want[step]["loss"], rel=1e-6), step


def test_killed_mid_save_keeps_pointer_on_previous_checkpoint(work: Path, uninterrupted: Run) -> None:
    ckpt = work / "c-ckpt"
    args = tiny_args(ckpt, "--checkpoint-every", "10", "--no-export")
    crashed = launch(args, run_dir=work / "c-run", env={"HYPERLAUNCH_TEST_KILL_DURING_SAVE": "20"}, check=False)
    assert crashed.returncode != 0
    assert ck.read_pointer(ckpt, MODEL) == "qwen3_tiny-10steps"
    half = ckpt / "qwen3_tiny-20steps"
    assert half.is_dir() and any(half.glob("*.distcp")) and not ck.is_complete(half)
    resumed = launch(args, run_dir=work / "c-run")
    assert [e["step"] for e in resumed.events("resumed")] == [10]
    assert resumed.steps()[20]["loss"] == pytest.approx(uninterrupted.steps()[20]["loss"], rel=1e-6)
    assert ck.is_complete(half) and ck.read_pointer(ckpt, MODEL) == "qwen3_tiny-20steps"


@pytest.mark.parametrize(("ranks", "micro_batch"), [(1, "4"), (4, "1")])
def test_elastic_resume_on_another_world_size(work: Path, uninterrupted: Run, ranks: int, micro_batch: str) -> None:
    """The 2-rank step-10 checkpoint resumes on 1 and on 4 ranks. With the same global batch
    (2 ranks x 2 = 1 x 4 = 4 x 1) the next step sees the same samples, so its loss matches the
    uninterrupted run up to reduction order: nothing skipped, nothing repeated."""
    ckpt = work / f"elastic-{ranks}"
    ckpt.mkdir()
    shutil.copytree(work / "a-ckpt" / "qwen3_tiny-10steps", ckpt / "qwen3_tiny-10steps")
    ck.write_pointer(ckpt, MODEL, "qwen3_tiny-10steps")
    args = tiny_args(ckpt, "--checkpoint-every", "0", "--no-export", steps=12)
    args[args.index("--micro-batch-size") + 1] = micro_batch
    run = launch(args, ranks=ranks, run_dir=work / f"elastic-{ranks}-run")
    (resumed,) = run.events("resumed")
    assert (resumed["step"], resumed["world_size"]) == (10, ranks)
    want, got = uninterrupted.steps(), run.steps()
    assert got[11]["loss"] == pytest.approx(want[11]["loss"], rel=1e-4)
    # Restored, not re-warmed: step 11 runs where this run's own, shorter schedule (12 steps) is
    # at step 10, as step 12 runs where it is at 11 (train/optim.follow_schedule); the data
    # position is still global.
    from hyperlaunch.train.optim import lr_factor

    assert got[11]["lr"] == pytest.approx(3e-3 * lr_factor(10, warmup=3, total=12, min_ratio=0.1), rel=1e-12)
    assert [got[s]["samples_consumed"] for s in (11, 12)] == [want[s]["samples_consumed"] for s in (11, 12)]
    assert ck.read_pointer(ckpt, MODEL) == "qwen3_tiny-12steps"


def test_export_loads_with_from_pretrained_and_matches_sharded_logits(work: Path, uninterrupted: Run, probe_batch: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = ck.final_dir(work / "a-ckpt", MODEL)
    model = AutoModelForCausalLM.from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    assert tokenizer("Ada sees a red cat")["input_ids"]
    probes = torch.load(str(probe_batch) + ".out.pt")
    assert probes["end"]["step"] == 20
    with torch.no_grad():
        logits = model(input_ids=torch.load(probe_batch)).logits
    torch.testing.assert_close(logits, probes["end"]["logits"], rtol=1e-4, atol=1e-5)
    # The export holds the trained weights, not the initial ones.
    assert not torch.allclose(logits, probes["start"]["logits"], atol=1e-3)
