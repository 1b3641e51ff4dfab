"""Memory snapshots' cost: how long training is held per snapshot, and what a snapshot every N
steps adds to the time of a step, against the same training without snapshots.

    python -m hyperlaunch.bench snapshot [--layers 8] [--steps 40] [--every 1 5 10] [--runs 1] [--replicate]

The model is qwen3_0_6b's architecture cut to --layers decoder layers (8: 0.28B parameters,
3.4 GB of weights and AdamW state; the whole model's ranks and keepers do not fit beside each
other in a small machine's memory), random weights, as `bench checkpoint` builds it. 2 CPU ranks
as two nodes (rank 0 on node-a, rank 1 on node-b), each with its keeper on loopback holding one
whole step (--keep 1, which changes what is held, not what training waits for); with
--replicate each keeper also sends its snapshots to the other's, as a job's keepers do (on a
real node over the network, from the keeper's own core).

Held per snapshot: the interval between two step records that a snapshot falls in, less the
median interval without snapshots (what training waits for: starting the save, and the copy of
the state where the next optimizer update overtakes it). Cost: the mean interval with snapshots
every N steps against the mean without, which also counts the background work's share of the
machine (the write to node-local memory, the keepers' receiving and replicating: on 2 cores
that competes with the training itself)."""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hyperlaunch.bench.checkpoint_cost import make_model
from hyperlaunch.bench.report import header, spread
from hyperlaunch.bench.runs import parser, records, torchrun
from hyperlaunch.core.memory_snapshots import Layout, ring_peers
from hyperlaunch.core.script_env import SNAPSHOTS_ENV

TARGET_COST = 0.02
NODES = ("node-a", "node-b")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def keepers(replicate: bool) -> Iterator[dict[str, str]]:
    """A keeper for each of NODES on loopback, each replicating to the other where `replicate`:
    node -> HOST:PORT."""
    ports = {node: _free_port() for node in NODES}
    started: list[subprocess.Popen[bytes]] = []
    try:
        for node, peer in ring_peers(NODES).items():
            argv = [sys.executable, "-m", "hyperlaunch.supervisor.keeper", "--node", node, "--host", "127.0.0.1",
                    "--port", str(ports[node]), "--keep", "1", *(["--peer", f"127.0.0.1:{ports[peer]}"] if replicate else [])]
            process = subprocess.Popen(argv, stdout=subprocess.PIPE)
            started.append(process)
            if process.stdout is None or b"listening" not in process.stdout.readline():
                raise SystemExit(f"the keeper of {node} did not start")
        yield {node: f"127.0.0.1:{port}" for node, port in ports.items()}
    finally:
        for process in started:
            process.kill()
            process.wait()


def train(model_dir: Path, work: Path, steps: int, every: int, where: dict[str, str] | None) -> list[float]:
    """The intervals between consecutive step records of one training (snapshots every `every`
    steps into the keepers at `where`; none where None)."""
    layout = Layout({node: [rank] for rank, node in enumerate(NODES)}, where or {}, every)
    if where is not None:
        os.environ[SNAPSHOTS_ENV] = layout.to_json()
    try:
        torchrun(2, [
            "hyperlaunch.train", "--model", str(model_dir), "--model-name", "snapbench", "--tokenizer", "offline",
            "--max-steps", str(steps), "--seq-len", "64", "--micro-batch-size", "1", "--no-checkpoints", "--no-export",
            "--checkpoint-dir", str(work / "ckpt"), "--run-dir", str(work / "run"), "--val-fraction", "0.01", "--val-every", "0",
        ])
    finally:
        os.environ.pop(SNAPSHOTS_ENV, None)
    times = [float(r["time"]) for r in records(work / "run", "step")]
    return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]


def held_per_snapshot(intervals: list[float], every: int, plain: float) -> list[float]:
    """The extra time of each interval that follows a snapshot step (interval i runs from step
    i+1's record to step i+2's; the snapshot after step s delays step s+1)."""
    return [interval - plain for index, interval in enumerate(intervals, start=1) if index % every == 0]


def main(argv: list[str] | None = None) -> int:
    options = parser("snapshot", __doc__)
    options.add_argument("--layers", type=int, default=8)
    options.add_argument("--steps", type=int, default=40)
    options.add_argument("--every", type=int, nargs="+", default=[1, 5, 10])
    options.add_argument("--runs", type=int, default=1)
    options.add_argument("--replicate", action="store_true",
                         help="each keeper also sends its snapshots to the other's, as in a job (twice the keepers' memory: "
                              "more than a 24 GiB machine has beside 8 layers' training)")
    args = options.parse_args(argv)
    import torch  # noqa: F401 - for the machine line

    base = Path(tempfile.mkdtemp(prefix="hyperlaunch-bench-snapshot-"))
    params = make_model(base / "model", args.layers)
    header("Memory snapshot cost", f"qwen3_0_6b widths, {args.layers} layers ({params / 1e9:.2f}B parameters, "
           f"{12 * params / 2**30:.1f} GiB of fp32 weights + AdamW), 2 CPU ranks as 2 nodes with a keeper each on loopback"
           f"{', replicating to each other' if args.replicate else ''}, "
           f"{args.steps} steps a run, {args.runs} run(s) each")
    plain: list[float] = []
    for index in range(args.runs):
        plain += train(base / "model", base / f"plain{index}", args.steps, 0, None)[1:]  # the first step warms up
    step = statistics.median(plain)
    print(f"\n  step, no snapshots       {spread(plain, '.3f')} s (mean {statistics.mean(plain):.3f})")
    for every in args.every:
        held: list[float] = []
        intervals: list[float] = []
        for index in range(args.runs):
            with keepers(args.replicate) as where:
                run = train(base / "model", base / f"every{every}-{index}", args.steps, every, where)
            held += held_per_snapshot(run, every, step)
            intervals += run[1:]
        cost = statistics.mean(intervals) / statistics.mean(plain) - 1
        verdict = "met" if cost <= TARGET_COST else "missed"
        print(f"  every {every:>3}: held {spread(held, '.3f')} s per snapshot; step {statistics.mean(intervals):.3f} s on average, "
              f"cost {100 * cost:+.1f} % (target <= {100 * TARGET_COST:.0f} %: {verdict})", flush=True)
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
