"""The benchmark entry point: it lists what it has, refuses unknown names, and the GPU
benchmark says why it cannot run on a machine without one. (The benchmarks themselves are
commands that print figures; no test runs or times them.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from hyperlaunch.bench.__main__ import BENCHMARKS
from hyperlaunch.bench.report import machine, spread


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hyperlaunch.bench", *args], capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_lists_every_benchmark_and_refuses_unknown_names() -> None:
    listed = _bench()
    assert listed.returncode == 0
    for name in ("cli", "trainer", "memory", "checkpoint", "recovery", "gpu"):
        assert name in BENCHMARKS and f"  {name} " in listed.stdout
    assert _bench("nope").returncode == 2


@pytest.mark.parametrize("name", list(BENCHMARKS))
@pytest.mark.slow
def test_each_benchmark_documents_its_options(name: str) -> None:
    result = _bench(name, "--help")
    assert result.returncode == 0 and "python -m hyperlaunch.bench" in result.stdout, result.stderr


@pytest.mark.slow
def test_gpu_benchmark_says_why_not_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = _bench("gpu")
    assert result.returncode == 2 and "no CUDA device" in result.stdout


def test_figures_are_median_and_range_with_the_machine() -> None:
    assert spread([3.0, 1.0, 2.0], ".1f") == "2.0 [1.0 - 3.0]"
    assert machine().startswith("machine: ") and "cores" in machine()


def test_a_snapshots_held_time_is_the_interval_after_its_step_less_a_plain_one() -> None:
    from hyperlaunch.bench.snapshot_cost import held_per_snapshot

    # Records of steps 1-5; snapshots after steps 2 and 4 delay the records of steps 3 and 5.
    intervals = [1.0, 1.5, 1.0, 1.25]
    assert held_per_snapshot(intervals, 2, 1.0) == [0.5, 0.25]
    assert held_per_snapshot(intervals, 1, 1.0) == [0.0, 0.5, 0.0, 0.25]
