"""The scripts users copy (examples/) run under plain torchrun, two CPU processes on gloo, as a
job's round would: each saves, and a second run resumes where the first stopped. The FSDP2 one
loses nothing in a resume (its losses equal an undisturbed run's) and saves on the save signal;
the plain DDP one knows nothing of hyperlaunch. Both stay short enough to read in one go."""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints, protocol
from hyperlaunch.core.memory_snapshots import Layout, newest_restorable, restore_json
from hyperlaunch.core.metrics_records import METRICS_FILE, StepRecord, parse_metrics_line
from hyperlaunch.core.script_env import RESTORE_ENV, SNAPSHOTS_ENV
from hyperlaunch.supervisor.snapshot_persist import persist
from tests.support.keepers import held_by_live, running_keepers

pytestmark = pytest.mark.integration  # real torchrun, 10-30 s a test

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NAME = "lm"
_TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _command(script: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(EXAMPLES / script), *args]


def _environment(folder: Path, **extra: str) -> dict[str, str]:
    """The variables a script job's round gets, pointing into `folder`; hyperlaunch from this tree."""
    inherited = {
        name: value for name, value in os.environ.items()
        if name not in _TORCHRUN_VARIABLES and not name.startswith(("SLURM_", "PET_", "TORCHELASTIC_"))
        and (name == "HYPERLAUNCH_HOME" or not name.startswith("HYPERLAUNCH_"))
    }
    return {
        **inherited, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HYPERLAUNCH_NAME": NAME,
        "HYPERLAUNCH_CHECKPOINT_DIR": str(folder / "checkpoints"), "HYPERLAUNCH_RUN_DIR": str(folder / "run"), **extra,
    }


def _torchrun(folder: Path, script: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run `script` to its end in `folder`; its stdout (rank 0's lines)."""
    folder.mkdir(exist_ok=True)
    result = subprocess.run(
        _command(script, *args), cwd=folder, env=_environment(folder, **(env or {})), capture_output=True, text=True, timeout=90, check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result.stdout


def _losses(run_dir: Path) -> dict[int, float]:
    records = [parse_metrics_line(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]
    return {record.step: record.loss for record in records if isinstance(record, StepRecord)}


def test_the_fsdp2_example_resumes_from_its_last_save_and_trains_on_as_if_never_stopped(tmp_path: Path) -> None:
    undisturbed = _torchrun(tmp_path, "fsdp2_dcp.py", "--steps", "9", "--save-every", "3")
    ckpt = tmp_path / "checkpoints"
    assert [line.split(" |")[0] for line in undisturbed.splitlines()] == [f"step {step}" for step in range(1, 10)]
    assert checkpoints.read_pointer(ckpt, NAME) == f"{NAME}-9steps"
    assert all(checkpoints.is_complete(ckpt / f"{NAME}-{step}steps") for step in (3, 6, 9))
    expected = _losses(tmp_path / "run")

    # The same run, had it been stopped between its saves at steps 6 and 9 (a torchrun run costs
    # seconds of CPU: rewinding this one is cheaper than training a second one to step 6).
    shutil.rmtree(ckpt / f"{NAME}-9steps")
    checkpoints.write_pointer(ckpt, NAME, f"{NAME}-6steps")
    (tmp_path / "run" / METRICS_FILE).unlink()
    resumed = _torchrun(tmp_path, "fsdp2_dcp.py", "--steps", "9", "--save-every", "3")
    assert resumed.splitlines()[0] == f"resumed from {ckpt / NAME}-6steps (step 6)"
    assert [line.split(" |")[0] for line in resumed.splitlines()[1:]] == ["step 7", "step 8", "step 9"]
    assert checkpoints.read_pointer(ckpt, NAME) == f"{NAME}-9steps"
    losses = _losses(tmp_path / "run")
    assert sorted(losses) == [7, 8, 9]
    assert losses == pytest.approx({step: expected[step] for step in (7, 8, 9)}, abs=1e-6), "the same state and batches"


def test_the_fsdp2_example_restores_a_memory_snapshot_from_the_keepers_and_trains_on_as_if_never_stopped(tmp_path: Path) -> None:
    """The runtime library's snapshots in a script: every 2 steps each rank's shards go to its
    node's keeper (rank 0 on node-a, rank 1 on node-b, two real keepers on loopback) and on to
    the peer's; with node-b's keeper lost, a restarted round loads step 6 from node-a's replica,
    and a snapshot persisted before a requeue is a checkpoint the script resumes from."""
    _torchrun(tmp_path / "undisturbed", "fsdp2_dcp.py", "--steps", "9")
    expected = _losses(tmp_path / "undisturbed" / "run")
    with running_keepers(["node-a", "node-b"]) as keepers:
        layout = Layout({"node-a": [0], "node-b": [1]}, {node: keeper.where for node, keeper in keepers.items()}, every=2)
        _torchrun(tmp_path / "first", "fsdp2_dcp.py", "--steps", "7", "--save-every", "100", env={SNAPSHOTS_ENV: layout.to_json()})
        assert held_by_live(keepers)["node-a"] == {"node-a": {4: [0], 6: [0]}, "node-b": {4: [1], 6: [1]}}
        keepers["node-b"].kill()
        restore = newest_restorable(held_by_live(keepers), layout.ranks_of)
        assert restore is not None and restore.step == 6

        told = {SNAPSHOTS_ENV: layout.to_json(), RESTORE_ENV: restore_json(restore, layout)}
        restored = _torchrun(tmp_path / "restored", "fsdp2_dcp.py", "--steps", "9", "--save-every", "100", env=told)
        assert restored.splitlines()[:2] == ["[hyperlaunch] resumed from step 6 (the memory snapshot)", "resumed from the memory snapshot (step 6)"]
        assert _losses(tmp_path / "restored" / "run") == pytest.approx({step: expected[step] for step in (7, 8, 9)}, abs=1e-6)
        events = [json.loads(line) for line in (tmp_path / "restored" / "run" / METRICS_FILE).read_text().splitlines()]
        assert [(e["step"], e["source"]) for e in events if e.get("event") == "resumed"] == [(6, "memory")]

        persisted = tmp_path / "persisted"
        (persisted / "run").mkdir(parents=True)  # the job's run folder, there before any round
        path = persist(6, restore.addresses(layout), layout, persisted / "checkpoints", NAME, run_dir=persisted / "run", job="7", restart=0)
        assert path is not None and checkpoints.is_complete(path)
    resumed = _torchrun(persisted, "fsdp2_dcp.py", "--steps", "9", "--save-every", "100")
    assert resumed.splitlines()[0] == f"resumed from {path} (step 6)", resumed
    assert _losses(persisted / "run") == pytest.approx({step: expected[step] for step in (7, 8, 9)}, abs=1e-6)


def _workers(torchrun: subprocess.Popen[str]) -> list[int]:
    """torchrun's children, read as the job's step script reads them (from any of its threads)."""
    return [int(pid) for children in Path(f"/proc/{torchrun.pid}/task").glob("*/children") for pid in children.read_text().split()]


def test_the_fsdp2_example_saves_on_the_save_signal_and_asks_to_be_requeued(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = _environment(tmp_path, SLURM_JOB_ID="7", SLURM_RESTART_COUNT="1")
    command = _command("fsdp2_dcp.py", "--steps", "500", "--save-every", "1000", "--step-seconds", "0.2")
    torchrun = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (run_dir / METRICS_FILE).exists() or len(_losses(run_dir)) < 2:
            assert torchrun.poll() is None and time.monotonic() < deadline, "no step logged"
            time.sleep(0.1)
        for pid in _workers(torchrun):  # as the job's step script passes Slurm's warning on
            os.kill(pid, signal.SIGUSR2)
        _, stderr = torchrun.communicate(timeout=60)
    finally:
        if torchrun.poll() is None:  # the test failed: take its workers down with it
            os.killpg(torchrun.pid, signal.SIGKILL)
            torchrun.wait()
    assert "exitcode  : 75" in stderr, stderr[-4000:]
    saved = max(_losses(run_dir))
    assert 2 <= saved < 500
    assert checkpoints.read_pointer(tmp_path / "checkpoints", NAME) == f"{NAME}-{saved}steps"
    assert protocol.progress_step(run_dir, "7", 1) == saved
    assert protocol.requeue_request_path(run_dir, "7", 1).exists(), "a save, not a crash: no restart budget used"


def test_the_plain_ddp_example_resumes_from_its_own_newest_checkpoint(tmp_path: Path) -> None:
    first = _torchrun(tmp_path, "plain_ddp.py", "--steps", "6", "--save-every", "3")
    assert [line.split()[1] for line in first.splitlines()] == ["1", "2", "3", "4", "5", "6"]
    assert all((tmp_path / "checkpoints" / f"{NAME}-{step}steps" / "state.pt").is_file() for step in (3, 6))
    second = _torchrun(tmp_path, "plain_ddp.py", "--steps", "9", "--save-every", "3")
    assert second.splitlines()[0] == "resumed from step 6"
    assert [line.split()[1] for line in second.splitlines()[1:]] == ["7", "8", "9"]
    assert not (tmp_path / "checkpoints" / f"{NAME}-latest").exists(), "it knows no pointer"


@pytest.mark.parametrize("script", ["fsdp2_dcp.py", "plain_ddp.py"])
def test_each_example_reads_in_one_go(script: str) -> None:
    assert len((EXAMPLES / script).read_text().splitlines()) < 130


def test_the_plain_example_imports_nothing_of_hyperlaunch() -> None:
    source = (EXAMPLES / "plain_ddp.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert not any(name.split(".")[0] == "hyperlaunch" for name in imported), imported
    assert "import hyperlaunch" not in source and "from hyperlaunch" not in source
