"""What the trainer does differently on a GPU, run on CPU: figures read a step late give the same
records as figures read at once, in the same order around validation and checkpoints; one rank
does not reshard after forward unless asked, and shards the whole model as one FSDP group, which
trains to the same losses as a group per block and whose checkpoints resume on two ranks; --compile with the chunked loss compiles its
elementwise work and trains to the same losses; GPU-only options fail in one line on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.train_helpers import launch, tiny_args

SAME = ("loss", "grad_norm", "lr", "tokens_seen", "samples_consumed", "peak_memory_bytes_per_rank")


def _order(records: list[dict]) -> list[str]:
    """The records as 'step N' and 'event@N', in file order."""
    return [f"step {r['step']}" if r["type"] == "step" else f"{r['event']}@{r.get('step')}" for r in records
            if r["type"] == "step" or r["event"] in ("validation", "checkpoint_saving", "checkpoint_completed")]


def test_figures_read_a_step_late_are_the_same_records_in_the_same_order(tmp_path: Path) -> None:
    args = ["--val-every", "5", "--checkpoint-every", "4", "--no-export", "--log-every", "1"]
    at_once = launch(tiny_args(tmp_path / "a", *args, steps=11), run_dir=tmp_path / "run-a")
    late = launch(tiny_args(tmp_path / "b", *args, steps=11), run_dir=tmp_path / "run-b",
                  env={"HYPERLAUNCH_TEST_READ_LATE": "1"})
    assert sorted(late.steps()) == list(range(1, 12))
    for step, want in at_once.steps().items():
        got = late.steps()[step]
        assert {k: got[k] for k in SAME if k != "peak_memory_bytes_per_rank"} == {
            k: want[k] for k in SAME if k != "peak_memory_bytes_per_rank"}, step
        assert len(got["peak_memory_bytes_per_rank"]) == 2 and got["step_time_s"] > 0
    assert _order(late.records()) == _order(at_once.records())
    # A step's record comes before that step's validation and checkpoint, whichever way it was read.
    order = _order(late.records())
    assert order.index("step 5") < order.index("validation@5") < order.index("step 6")
    assert order.index("step 8") < order.index("checkpoint_saving@8") < order.index("step 9")


@pytest.mark.parametrize(("flags", "resharded", "groups"), [([], False, 1), (["--reshard-after-forward"], True, 3)])
def test_one_rank_keeps_its_gathered_parameters_unless_asked(
    tmp_path: Path, flags: list[str], resharded: bool, groups: int,
) -> None:
    run = launch(tiny_args(tmp_path / "c", "--no-export", *flags, steps=2), ranks=1, run_dir=tmp_path / "run")
    (started,) = run.events("started")
    assert started["sharding"]["reshard_after_forward"] is resharded
    # Kept: one group for the whole model; resharded: one per block (qwen3_tiny has 2) and the root.
    assert started["sharding"]["fsdp_groups"] == groups


def test_one_group_trains_to_the_per_block_losses_and_resumes_on_two_ranks(tmp_path: Path) -> None:
    # As on a GPU: bf16 compute, and with accumulation and recomputation, which one group changes
    # most (the gradients reduced once a micro-batch, all at once; blocks recomputed under the root's gather).
    args = ["--no-export", "--checkpoint-every", "4", "--mixed-precision", "bf16", "--grad-accum", "2",
            "--activation-checkpointing"]
    one = launch(tiny_args(tmp_path / "one", *args, steps=4), ranks=1, run_dir=tmp_path / "run-one")
    per_block = launch(tiny_args(tmp_path / "blocks", *args, "--fsdp-groups", "per-block", steps=4),
                       ranks=1, run_dir=tmp_path / "run-blocks")
    assert one.events("started")[0]["sharding"]["fsdp_groups"] == 1
    assert per_block.events("started")[0]["sharding"]["fsdp_groups"] == 3
    for step in range(1, 5):  # the same casts and the same reductions, only fewer hooks
        assert one.steps()[step]["loss"] == per_block.steps()[step]["loss"], step
        assert one.steps()[step]["grad_norm"] == per_block.steps()[step]["grad_norm"], step
    # The one-group checkpoint has the per-block checkpoint's names and shapes: two ranks, a
    # group per block, go on from it.
    two = launch(tiny_args(tmp_path / "one", *args, steps=6), ranks=2, run_dir=tmp_path / "run-two")
    (resumed,) = two.events("resumed")
    assert (resumed["step"], resumed["world_size"], resumed["sharding"]["fsdp_groups"]) == (4, 2, 3)
    assert sorted(two.steps()) == [5, 6]


def test_compiled_chunked_loss_trains_to_the_eager_losses(tmp_path: Path) -> None:
    common = ["--no-export", "--loss", "chunked", "--overfit-batch"]
    eager = launch(tiny_args(tmp_path / "e", *common, steps=4), run_dir=tmp_path / "run-e")
    compiled = launch(tiny_args(tmp_path / "c", *common, "--compile", steps=4), run_dir=tmp_path / "run-c")
    (started,) = compiled.events("started")
    assert started["sharding"]["loss"] == "chunked" and started["sharding"]["compiled_blocks"] == 2
    for step in range(1, 5):
        assert compiled.steps()[step]["loss"] == pytest.approx(eager.steps()[step]["loss"], rel=1e-4), step


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--loss", "liger"], "--loss liger runs Triton kernels and needs a CUDA GPU"),
        (["--loss", "cce"], "--loss cce runs Triton kernels and needs a CUDA GPU"),
        (["--float8"], "--float8 needs a CUDA GPU with float8 tensor cores"),
    ],
)
def test_gpu_only_options_fail_in_one_line_on_cpu(tmp_path: Path, flags: list[str], message: str) -> None:
    run = launch(tiny_args(tmp_path / "x", *flags, steps=2), ranks=0, run_dir=tmp_path / "run", check=False)
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and message in errors[0], run.stderr
    assert not (tmp_path / "x" / "qwen3_tiny-latest").exists()
