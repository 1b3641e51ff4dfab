"""GPU: train/ on one CUDA GPU in bf16 - tokens/s per GPU, MFU in both conventions and peak
memory - plain, with activation checkpointing, with torch.compile, and with both; with
`--against torchtitan`, torchtitan on the same settings, alternated with it, in one table.

    python -m hyperlaunch.bench gpu [--model qwen3_0_6b] [--seq-len 4096]
        [--micro-batch-size 4] [--steps 30] [--warmup 10] [--variants plain,ac,compile,ac+compile]
        [--against torchtitan] [--rounds 1] [--trainer-args "--loss chunked"] [--label NAME]
        [--json FILE]

    # the 8B class with float8 (needs torchao and about 124 GiB: one H200)
    python -m hyperlaunch.bench gpu --model llama3_1_8b --variants ac+compile --micro-batch-size 2 \\
        --trainer-args "--float8" --label float8

Each run is a fresh single-process torchrun (`--device cuda --mixed-precision bf16` for
hyperlaunch); the figures are medians over steps warmup+1 .. warmup+steps (11-40 by default:
compilation and the first allocations fall before). With --against, each variant runs
hyperlaunch then torchtitan, round after round, so a drift of the GPU's clocks touches both.

MFU is named by its convention: "MFU" counts 6 x the non-embedding parameters plus attention
(the PaLM paper's), "MFU+out" also the output projection, 6 x vocabulary x hidden (torchtitan's);
both against the GPU's dense bf16 peak from the instance presets in env/ and computed the same
way for both trainers from their tokens/s. Peak memory is the most the CUDA caching allocator
had allocated (max_memory_allocated; torchtitan's max_active). Needs a GPU; prints why not
otherwise."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser, records, torchrun

VARIANTS = {
    "plain": [],
    "ac": ["--activation-checkpointing"],
    "compile": ["--compile"],
    "ac+compile": ["--activation-checkpointing", "--compile"],
}
AGAINST = ("torchtitan",)


@dataclass(frozen=True)
class Row:
    """One run's figures: medians over the measured steps."""

    variant: str
    trainer: str
    tokens_per_s: list[float]
    mfu: float | None
    mfu_with_output: float | None
    peak_gib: float
    extra: dict[str, Any]

    @property
    def median(self) -> float:
        return statistics.median(self.tokens_per_s)


def measured(rows: list[dict[str, Any]], warmup: int, steps: int) -> list[dict[str, Any]]:
    """The records of steps warmup+1 .. warmup+steps."""
    return [r for r in rows if warmup < int(r["step"]) <= warmup + steps]


def mfu_pair(tokens_per_s: float, model: str, seq_len: int, peak_flops: float | None) -> tuple[float | None, float | None]:
    """(MFU, MFU+out) of a tokens/s figure, as fractions."""
    from hyperlaunch.core.models import get_preset

    if not peak_flops:
        return None, None
    spec = get_preset(model)
    return (
        spec.flops_per_token(seq_len) * tokens_per_s / peak_flops,
        spec.flops_per_token_with_output(seq_len) * tokens_per_s / peak_flops,
    )


def hyperlaunch_row(args: argparse.Namespace, variant: str, work: Path, peak: float | None) -> Row:
    run_dir = work / "run"
    torchrun(1, [
        "hyperlaunch.train", "--model", args.model, "--device", "cuda", "--mixed-precision", "bf16",
        "--seq-len", str(args.seq_len), "--micro-batch-size", str(args.micro_batch_size),
        "--max-steps", str(args.warmup + args.steps), "--no-checkpoints",
        "--checkpoint-dir", str(work / "ckpt"), "--run-dir", str(run_dir), "--from-scratch",
        *VARIANTS[variant], *shlex.split(args.trainer_args),
    ])
    steps = measured(records(run_dir, "step"), args.warmup, args.steps)
    started = next((e for e in records(run_dir, "event") if e.get("event") == "started"), {})
    tokens = [float(r["tokens_per_s_per_device"]) for r in steps]
    mfu, mfu_out = mfu_pair(statistics.median(tokens), args.model, args.seq_len, peak)
    sharding = started.get("sharding", {})
    return Row(variant, args.label or "hyperlaunch", tokens, mfu, mfu_out,
               max(r["peak_memory_bytes"] for r in steps) / 2**30,
               {"loss": sharding.get("loss"), "fsdp_groups": sharding.get("fsdp_groups"),
                "reshard_after_forward": sharding.get("reshard_after_forward"), "final_loss": steps[-1]["loss"],
                "trainer_args": args.trainer_args})


def torchtitan_row(args: argparse.Namespace, variant: str, work: Path, peak: float | None) -> Row:
    from hyperlaunch.bench import torchtitan_run

    flags = VARIANTS[variant]
    settings = torchtitan_run.Settings(
        seq_len=args.seq_len, micro_batch=args.micro_batch_size, steps=args.warmup + args.steps,
        compile="--compile" in flags, activation_checkpointing="--activation-checkpointing" in flags,
    )
    steps = measured(torchtitan_run.run(settings, work), args.warmup, args.steps)
    tokens = [r["throughput(tps)"] for r in steps]
    mfu, mfu_out = mfu_pair(statistics.median(tokens), args.model, args.seq_len, peak)
    return Row(variant, f"torchtitan {torchtitan_run.installed_version()}", tokens, mfu, mfu_out,
               max(r["memory/max_active(GiB)"] for r in steps),
               {"own_mfu_percent": statistics.median(r.get("mfu(%)", 0.0) for r in steps),
                "final_loss": steps[-1].get("loss_metrics/global_avg_loss")})


def _percent(value: float | None) -> str:
    return f"{value * 100:.1f} %" if value is not None else "n/a"


def _is_torchtitan(row: Row) -> bool:
    return row.trainer.startswith("torchtitan")


def table(rows: list[Row]) -> list[str]:
    """One line a run; a hyperlaunch run's ratio is to the torchtitan run of its round (the next
    run of the same variant by torchtitan), not to the last one, so each round's pair stands
    on its own."""
    lines = [f"  {'variant':<11} {'trainer':<18} {'tokens/s/GPU median [min - max]':<34} "
             f"{'MFU':>7} {'MFU+out':>8} {'peak GiB':>9}  vs torchtitan"]
    for index, row in enumerate(rows):
        baseline = None if _is_torchtitan(row) else next(
            (later for later in rows[index + 1:] if _is_torchtitan(later) and later.variant == row.variant), None)
        ratio = f"{row.median / baseline.median:.2f}x" if baseline else ""
        lines.append(
            f"  {row.variant:<11} {row.trainer:<18} {spread(row.tokens_per_s, ',.0f'):<34} "
            f"{_percent(row.mfu):>7} {_percent(row.mfu_with_output):>8} {row.peak_gib:>9.1f}  {ratio}"
        )
    return lines


def _value_joined(argv: list[str], flag: str) -> list[str]:
    """`FLAG VALUE` as `FLAG=VALUE`: argparse takes a lone value that looks like a flag
    (`--trainer-args --float8`) for an option of its own and refuses the command."""
    joined: list[str] = []
    rest = iter(argv)
    for arg in rest:
        value = next(rest, None) if arg == flag else None
        joined.append(arg if value is None else f"{flag}={value}")
    return joined


def main(argv: list[str] | None = None) -> int:
    argv = _value_joined(sys.argv[1:] if argv is None else argv, "--trainer-args")
    options = parser("gpu", __doc__)
    options.add_argument("--model", default="qwen3_0_6b")
    options.add_argument("--seq-len", type=int, default=4096)
    options.add_argument("--micro-batch-size", type=int, help="default: the preset's for GPUs (4 for qwen3_0_6b)")
    options.add_argument("--steps", type=int, default=30)
    options.add_argument("--warmup", type=int, default=10)
    options.add_argument("--variants", default=",".join(VARIANTS))
    options.add_argument("--against", choices=AGAINST, help="run this trainer too, alternated, on the same settings")
    options.add_argument("--rounds", type=int, default=1, help="how many times each run is repeated, alternated")
    options.add_argument("--trainer-args", default="", help="more hyperlaunch-train flags, one string (e.g. \"--loss chunked\")")
    options.add_argument("--label", default="", help="the hyperlaunch rows' name in the table (default: hyperlaunch)")
    options.add_argument("--json", type=Path, help="append each run's figures to this file as JSON lines")
    args = options.parse_args(argv)
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        options.error(f"--variants: {', '.join(unknown)} unknown; choose from {', '.join(VARIANTS)}")
    if args.against and args.model != "qwen3_0_6b":
        options.error("--against torchtitan compares qwen3_0_6b (torchtitan's qwen3 0.6B); drop --model")
    from hyperlaunch.core.errors import InvalidInput
    from hyperlaunch.core.models import get_preset

    try:
        preset = get_preset(args.model)
    except InvalidInput as err:
        options.error(err.one_line())
    if args.micro_batch_size is None:
        args.micro_batch_size = preset.micro_batch_size
    import torch

    from hyperlaunch.core.instances import peak_bf16_flops

    if not torch.cuda.is_available():
        print("bench gpu: no CUDA device visible to this torch build; run it on a GPU machine")
        return 2
    name = torch.cuda.get_device_name(0)
    peak = peak_bf16_flops(name)
    header("GPU", f"{name}, torch {torch.__version__}; {args.model}, bf16, seq {args.seq_len}, micro-batch "
           f"{args.micro_batch_size}, 1 GPU; median of steps {args.warmup + 1}-{args.warmup + args.steps}"
           + (f"; {args.rounds} round(s) alternating with {args.against}" if args.against else ""))
    rows: list[Row] = []
    runners = [hyperlaunch_row] + ([torchtitan_row] if args.against else [])
    for _ in range(args.rounds):
        for variant in variants:
            for runner in runners:
                with tempfile.TemporaryDirectory(prefix="hyperlaunch-bench-gpu-") as work:
                    row = runner(args, variant, Path(work), peak)
                rows.append(row)
                print(table([row])[1], flush=True)
                if args.json:
                    with args.json.open("a") as out:
                        out.write(json.dumps({**asdict(row), "median": row.median, "gpu": name, "seq_len": args.seq_len,
                                              "micro_batch": args.micro_batch_size}) + "\n")
    print("\n".join(table(rows)), flush=True)
    print("  MFU: 6 x non-embedding params + attention; MFU+out: also the output projection (torchtitan's); "
          f"peak {peak / 1e12:.0f} TFLOP/s" if peak else "  MFU n/a: this GPU is not in the peak table (env/*.toml)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
