"""Stop signals save and exit with the documented requeue code; bad input fails in one line
on stderr, non-zero, and touches nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints as ck
from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE
from tests.support.train_helpers import PYTHON, launch, tiny_args, train_env, tree_digest


@pytest.mark.parametrize("signum", [signal.SIGUSR2, signal.SIGTERM], ids=["SIGUSR2", "SIGTERM"])
def test_stop_signal_saves_and_exits_with_requeue_code(tmp_path: Path, signum: int) -> None:
    ckpt, run_dir = tmp_path / "ckpt", tmp_path / "run"
    cmd = [PYTHON, "-m", "hyperlaunch.train", *tiny_args(ckpt, "--checkpoint-every", "0", steps=100000), "--run-dir", str(run_dir)]
    proc = subprocess.Popen(cmd, env=train_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and '"type": "step"' in metrics.read_text():
            break
        time.sleep(0.2)
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == REQUEUE_EXIT_CODE, err[-2000:]
    events = [json.loads(line) for line in metrics.read_text().splitlines()]
    (exit_event,) = [e for e in events if e.get("event") == "exit"]
    assert exit_event["requeue"] and [e["signal"] for e in events if e.get("event") == "signal_received"] == [signal.Signals(signum).name]
    step = exit_event["step"]
    assert ck.read_pointer(ckpt, "qwen3_tiny") == f"qwen3_tiny-{step}steps"
    assert ck.is_complete(ckpt / f"qwen3_tiny-{step}steps")
    assert not ck.final_dir(ckpt, "qwen3_tiny").exists()  # stopped early: no export


def test_no_checkpoints_trains_to_the_end_saves_nothing_and_a_signal_asks_for_a_requeue(tmp_path: Path) -> None:
    ckpt, run_dir = tmp_path / "ckpt", tmp_path / "run"
    launch(tiny_args(ckpt, "--no-export", steps=2), run_dir=tmp_path / "other")  # another run's checkpoint
    others = ["qwen3_tiny-2steps", "qwen3_tiny-latest"]
    done = launch(tiny_args(ckpt, "--no-checkpoints", steps=4), run_dir=run_dir)
    assert sorted(done.steps()) == [1, 2, 3, 4] and not done.events("resumed"), "from scratch, not from the other run's"
    assert not done.events("checkpoint_saving") and not done.events("exported")
    assert ck.read_pointer(ckpt, "qwen3_tiny") == "qwen3_tiny-2steps" and sorted(p.name for p in ckpt.glob("qwen3_tiny-*")) == others

    cmd = [PYTHON, "-m", "hyperlaunch.train", *tiny_args(ckpt, "--no-checkpoints", steps=100000), "--run-dir", str(run_dir / "b")]
    proc = subprocess.Popen(cmd, env=train_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "b" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and '"type": "step"' in metrics.read_text():
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGUSR2)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == REQUEUE_EXIT_CODE, err[-2000:]
    events = [json.loads(line) for line in metrics.read_text().splitlines()]
    (said,) = [e for e in events if e.get("event") == "signal_received"]
    assert "nothing saved (--no-checkpoints)" in said["message"]
    assert not [e for e in events if e.get("event") == "checkpoint_saving"] and sorted(p.name for p in ckpt.glob("qwen3_tiny-*")) == others


def _bad_ckpt_dir(tmp_path: Path) -> Path:
    """A checkpoint folder with real content that bad input must leave alone."""
    ckpt = tmp_path / "ckpt"
    for model in ("qwen3_tiny", "llama_tiny"):
        path = ckpt / f"{model}-10steps"
        path.mkdir(parents=True)
        (path / ".metadata").write_bytes(b"meta")
        ck.write_info(path, {"model": model, "step": 10})
        ck.write_pointer(ckpt, model, path.name)
    return ckpt


BAD_INPUTS = {
    "unknown preset": (lambda c: ["--model", "gpt5"], "unknown model preset 'gpt5'; presets: qwen3_0_6b"),
    "missing data": (lambda c: ["--data", str(c / "nope.txt")], "no such file or directory"),
    "unwritable checkpoint dir": (lambda c: ["--checkpoint-dir", str(c / "qwen3_tiny-latest" / "sub")], "not writable"),
    "garbage pointer": (lambda c: [], "does not hold a checkpoint directory name"),
    "another model's checkpoint": (
        lambda c: ["--resume-from", str(c / "llama_tiny-10steps")], "belongs to model 'llama_tiny'"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_touches_nothing(tmp_path: Path, case: str) -> None:
    ckpt = _bad_ckpt_dir(tmp_path)
    if case == "garbage pointer":
        ck.pointer_path(ckpt, "qwen3_tiny").write_bytes(b"\x00\x01 not a name\n\x02")
    before = tree_digest(ckpt)
    extra, message = BAD_INPUTS[case]
    args = tiny_args(ckpt, steps=5)
    for flag_value in [extra(ckpt)]:
        for i in range(0, len(flag_value), 2):
            flag, value = flag_value[i], flag_value[i + 1]
            if flag in args:
                args[args.index(flag) + 1] = value
            else:
                args += [flag, value]
    run = launch(args, ranks=0, run_dir=tmp_path / "run", check=False)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode not in (0, REQUEUE_EXIT_CODE)
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("hyperlaunch.train: error:") and message in lines[0], lines[0]
    assert "Traceback" not in run.stderr + run.stdout
    assert tree_digest(ckpt) == before
    assert not (tmp_path / "run").exists()


def test_bad_input_under_torchrun_fails_fast_on_every_rank(tmp_path: Path) -> None:
    ckpt = _bad_ckpt_dir(tmp_path)
    ck.pointer_path(ckpt, "qwen3_tiny").write_text("llama_tiny-10steps\n")
    before = tree_digest(ckpt)
    started = time.monotonic()
    run = launch(tiny_args(ckpt, steps=5), run_dir=tmp_path / "run", check=False)
    assert run.returncode != 0 and time.monotonic() - started < 60
    ours = [line for line in run.stderr.splitlines() if line.startswith("hyperlaunch.train: error:")]
    assert len(ours) == 1 and "model 'llama_tiny', not 'qwen3_tiny'" in ours[0]
    assert tree_digest(ckpt) == before
