"""The batch script's NCCL network line: GPU jobs look for the aws-ofi-nccl plugin inside the
training step (the container's environment when there is one) and say on each node which
network NCCL will use; the job goes on either way. CPU jobs skip it. Run with bash through
tests/support/sbatch_harness.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core.trainer_failures import read_trainer_failure
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.script import nccl_plugin, supervisor_bundle
from hyperlaunch.script.render import render_sbatch
from tests.support.sbatch_harness import run_script

PATHS = {"checkpoint_dir": "/fsx/checkpoints", "log_dir": "/fsx/logs", "run_dir": "/fsx/runs/demo"}
P5 = job_spec(model="qwen3_0_6b", nodes=2, instance_type="p5.48xlarge", exclusive=True, gres_gpus="off", **PATHS)
CPU = job_spec(model="qwen3_tiny", torchrun="torchrun", **PATHS)
TCP_LINE = "hyperlaunch: NCCL network: no aws-ofi-nccl plugin found; NCCL will use TCP sockets (slow on p4d/p5)"
# What srun does with a container: the step's environment is the image's, not the batch host's.
STEP_ENV_SRUN = """#!/bin/bash
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
export LD_LIBRARY_PATH="$HL_STEP_LD_LIBRARY_PATH"
exec "$@"
"""


def _step_sees(tmp_path: Path, step_library_path: str, spec: JobSpec = P5) -> tuple[int, str, bool]:
    """Run the script with an srun that gives the step `step_library_path` as LD_LIBRARY_PATH
    (the batch host has none); returns the exit code, stdout, and whether the trainer ran."""
    stub = tmp_path / "step-bin"
    stub.mkdir()
    (stub / "srun").write_text(STEP_ENV_SRUN)
    (stub / "srun").chmod(0o755)
    env = {"PATH": f"{stub}:{tmp_path / 'bin'}:/usr/bin:/bin", "HL_STEP_LD_LIBRARY_PATH": step_library_path}
    run = run_script(render_sbatch(spec), tmp_path, env=env)
    return run.returncode, run.stdout, run.trainer is not None


@pytest.mark.slow
def test_a_plugin_inside_the_step_is_named_once_per_node(tmp_path: Path) -> None:
    plugin_dir = tmp_path / "ofi" / "lib"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "libnccl-net-ofi.so").write_bytes(b"")
    code, stdout, trained = _step_sees(tmp_path, f"/nonexistent:{plugin_dir}")
    assert f"hyperlaunch: NCCL network: aws-ofi-nccl ({plugin_dir}/libnccl-net-ofi.so) -> EFA\n" in stdout
    assert stdout.count("NCCL network:") == 1  # the stub srun is one node
    assert code == 0 and trained


@pytest.mark.slow
def test_no_plugin_says_tcp_and_the_job_still_trains(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libnccl.so").write_bytes(b"")  # NCCL itself is not its network plugin
    code, stdout, trained = _step_sees(tmp_path, str(tmp_path / "lib"))
    assert TCP_LINE + "\n" in stdout and "-> EFA" not in stdout
    assert code == 0 and trained


@pytest.mark.slow
def test_the_batch_hosts_library_path_does_not_count(tmp_path: Path) -> None:
    # The plugin on the batch host only: the step (the container) would not load it.
    host_dir = tmp_path / "host-lib"
    host_dir.mkdir()
    (host_dir / "libnccl-net.so").write_bytes(b"")
    stub = tmp_path / "step-bin"
    stub.mkdir()
    (stub / "srun").write_text(STEP_ENV_SRUN)
    (stub / "srun").chmod(0o755)
    env = {"PATH": f"{stub}:{tmp_path / 'bin'}:/usr/bin:/bin", "LD_LIBRARY_PATH": str(host_dir), "HL_STEP_LD_LIBRARY_PATH": ""}
    run = run_script(render_sbatch(P5), tmp_path, env=env)
    assert TCP_LINE in run.stdout and run.returncode == 0


def test_every_known_place_and_name_is_searched_and_quoted() -> None:
    script = render_sbatch(P5)
    step = supervisor_bundle.step_script()
    for place in (*nccl_plugin.PLUGIN_DIRS, *nccl_plugin.PLUGIN_NAMES):
        assert f" {place}" in step, place
    assert "NCCL network" not in script and "  --nccl-check \\\n" in script, "the check belongs to the step"


@pytest.mark.slow
def test_cpu_jobs_skip_it(tmp_path: Path) -> None:
    assert "NCCL network" not in render_sbatch(CPU) and "nccl" not in render_sbatch(CPU)
    run = run_script(render_sbatch(CPU), tmp_path)
    assert "NCCL network" not in run.stdout and run.returncode == 0


@pytest.mark.slow
def test_require_efa_ends_the_job_for_good_in_its_first_seconds_when_a_node_has_no_plugin(tmp_path: Path) -> None:

    run_dir = tmp_path / "run"
    required = P5.replace(require_efa=True, run_dir=str(run_dir), checkpoint_dir=str(tmp_path / "ckpt"))
    assert "  --nccl-check --require-efa \\\n" in render_sbatch(required)
    (tmp_path / "lib").mkdir()
    code, stdout, trained = _step_sees(tmp_path, str(tmp_path / "lib"), required)
    assert code != 0 and not trained, "the trainer never starts"
    assert TCP_LINE not in stdout
    ended = [line for line in stdout.splitlines() if line.startswith("### hyperlaunch attempt-end")]
    assert len(ended) == 1 and "cause=trainer-error" in ended[0] and "action=exit" in ended[0], stdout
    (record,) = run_dir.glob("trainer-failure-*")
    failure = read_trainer_failure(record)
    assert failure is not None and failure.final and failure.kind == "efa-plugin-missing"
    assert failure.message.startswith("--require-efa: no aws-ofi-nccl plugin on ")


@pytest.mark.slow
def test_require_efa_with_the_plugin_trains_and_on_cpu_is_refused(tmp_path: Path) -> None:

    import pytest

    from hyperlaunch.core.errors import InvalidInput

    plugin_dir = tmp_path / "ofi"
    plugin_dir.mkdir()
    (plugin_dir / "libnccl-net.so").write_bytes(b"")
    code, stdout, trained = _step_sees(tmp_path, str(plugin_dir), P5.replace(require_efa=True))
    assert code == 0 and trained and "-> EFA" in stdout
    with pytest.raises(InvalidInput, match="--require-efa is for GPU jobs"):
        CPU.replace(require_efa=True)
