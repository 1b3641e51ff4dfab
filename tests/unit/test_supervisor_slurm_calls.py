"""The supervisor's Slurm calls (hyperlaunch.supervisor.slurm_calls) run without the variables
of the user's shell, exported into the job, that change what a command selects or prints."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hyperlaunch.supervisor import slurm_calls


def test_the_users_squeue_sinfo_and_scancel_variables_do_not_reach_the_supervisors_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, answer in (("sinfo", "node2"), ("scancel", ""), ("squeue", "12.0")):
        program = tmp_path / name
        program.write_text(f'#!/bin/sh\nenv | sort > "{tmp_path}/{name}.env"\necho {answer}\n')
        program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    for name, value in (("SINFO_PARTITION", "other"), ("SCANCEL_STATE", "PENDING"), ("SQUEUE_STATES", "PENDING"),
                        ("SLURM_TIME_FORMAT", "relative"), ("SBATCH_ACCOUNT", "team")):
        monkeypatch.setenv(name, value)
    assert slurm_calls.down_nodes("node[1-2]") == ["node2"] and slurm_calls.job_steps("12") == ["12.0"]
    killer = slurm_calls.kill_step_in_background("12.0")
    assert killer is not None and killer.wait() == 0
    for name, dropped in (("sinfo", "SINFO_PARTITION"), ("scancel", "SCANCEL_STATE"), ("squeue", "SQUEUE_STATES")):
        env = (tmp_path / f"{name}.env").read_text()
        assert f"{dropped}=" not in env and "SLURM_TIME_FORMAT=standard" in env and "SBATCH_ACCOUNT=team" in env, name
