"""sbatch through hyperlaunch.slurm.submission.submit_script (submitit underneath) with a fake sbatch:
the environment is passed, not swapped into this process, and a refusal leaves nothing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.slurm import runner as slurm_runner
from hyperlaunch.slurm import submission as slurm_submission


def _fake_sbatch(bin_dir: Path, body: str) -> dict[str, str]:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "sbatch"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    (bin_dir / "slurm.conf").touch()
    return {"PATH": str(bin_dir), "SLURM_CONF": str(bin_dir / "slurm.conf")}


@pytest.mark.slow
def test_sbatch_gets_the_given_environment_and_no_srun_is_needed(tmp_path: Path) -> None:
    env = _fake_sbatch(tmp_path / "bin", 'echo "conf=$SLURM_CONF" > "$0.seen"\necho "Submitted batch job 4242"\n')
    before = dict(os.environ)
    assert slurm_submission.submit_script("#!/bin/bash\n", tmp_path / "jobs", env=env) == "4242"
    assert (tmp_path / "bin" / "sbatch.seen").read_text() == f"conf={tmp_path / 'bin' / 'slurm.conf'}\n"
    assert dict(os.environ) == before, "this process's environment is never changed"


@pytest.mark.slow
def test_a_refusal_is_one_line_and_leaves_no_submission_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = _fake_sbatch(tmp_path / "bin", 'echo "sbatch: error: invalid partition specified: gpu" >&2\nexit 1\n')
    with pytest.raises(SlurmError, match="sbatch refused the job: sbatch: error: invalid partition specified: gpu"):
        slurm_submission.submit_script("#!/bin/bash\n# secret\n", tmp_path / "jobs", env=env)
    assert [p for p in (tmp_path / "jobs").rglob("*") if p.is_file()] == []
    assert capsys.readouterr().err == ""


def test_no_sbatch_on_the_path_says_so(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="sbatch not found on PATH"):
        slurm_submission.submit_script("#!/bin/bash\n", tmp_path / "jobs", env={"PATH": str(tmp_path)})


def test_a_slurm_conf_that_is_no_file_is_said_at_once(tmp_path: Path) -> None:
    # Slurm's own commands retry reading it for a minute before they say so.
    env = _fake_sbatch(tmp_path / "bin", 'echo "Submitted batch job 1"\n')
    env["SLURM_CONF"] = str(tmp_path / "slurm.confx")
    with pytest.raises(SlurmError) as err:
        slurm_runner.run(["sbatch", "--version"], env=env)
    assert err.value.one_line() == (
        f"SLURM_CONF={tmp_path / 'slurm.confx'} is no file (name your cluster's slurm.conf, or unset SLURM_CONF for the default one)"
    )
