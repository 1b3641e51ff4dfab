"""The supervisor's Slurm calls (hyperlaunch.supervisor.slurm_calls) run without the variables
of the user's shell, exported into the job, that change what a command selects or prints."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hyperlaunch.supervisor import slurm_calls


@pytest.mark.slow
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


def test_a_sweeps_element_names_itself_as_its_task_so_a_requeue_never_reaches_the_others() -> None:
    from hyperlaunch.supervisor.decisions import slurm_job

    # The last task to start runs under the array's own id (45): `scontrol requeue 45` would
    # requeue every element.
    assert slurm_job({"SLURM_JOB_ID": "45", "SLURM_ARRAY_JOB_ID": "45", "SLURM_ARRAY_TASK_ID": "1"}, sweep_element=True) == "45_1"
    assert slurm_job({"SLURM_JOB_ID": "46", "SLURM_ARRAY_JOB_ID": "45", "SLURM_ARRAY_TASK_ID": "0"}, sweep_element=True) == "45_0"
    assert slurm_job({"SLURM_JOB_ID": "12"}, sweep_element=False) == "12"
    # A job submitted from inside another array's task inherits its SLURM_ARRAY_*: not its own.
    assert slurm_job({"SLURM_JOB_ID": "91", "SLURM_ARRAY_JOB_ID": "90", "SLURM_ARRAY_TASK_ID": "2"}, sweep_element=False) == "91"


@pytest.mark.slow
def test_the_state_of_an_arrays_own_id_is_its_own_tasks_not_the_first_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program = tmp_path / "squeue"
    # squeue -j 45 lists every task of array 45: 45_0 runs as job 46, 45_1 (job 45) has ended.
    program.write_text('#!/bin/sh\nprintf "46|RUNNING\\n45|COMPLETING\\n"\n')
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert slurm_calls.job_state("45") == "COMPLETING"
    # 47 no longer listed (it ended): the others' rows say nothing of it.
    assert slurm_calls.job_state("47") == "ENDED"


@pytest.mark.slow
def test_the_excluded_nodes_are_set_again_when_the_requeues_sigterm_killed_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the dev cluster, the scontrol update run right after `scontrol requeue` exited 143:
    the requeue's SIGTERM reaches every process of the job. The next try, in COMPLETING, takes."""
    program = tmp_path / "scontrol"
    calls = tmp_path / "calls"
    # Killed by the SIGTERM on the first call, accepted on the second.
    program.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n[ "$(wc -l < "{calls}")" -ge 2 ] || exit 143\n')
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(slurm_calls, "EXCLUDE_PAUSE_S", 0.0)
    assert slurm_calls.exclude_nodes("12", ["node2", "node3"])
    assert calls.read_text().splitlines() == ["update JobId=12 ExcNodeList=node2,node3"] * 2
    calls.write_text("")
    program.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\nexit 1\n')  # refused every time: a bounded number of tries
    assert not slurm_calls.exclude_nodes("12", ["node2"])
    assert len(calls.read_text().splitlines()) == slurm_calls.EXCLUDE_TRIES


@pytest.mark.slow
def test_the_keepers_step_is_no_rounds_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round that lost a node has its steps ended; the keepers' step must outlive it."""
    program = tmp_path / "squeue"
    program.write_text(f"#!/bin/sh\nprintf '12.0 bash\\n12.1 {slurm_calls.KEEPERS_STEP}\\n12.batch batch\\n12.extern extern\\n'\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert slurm_calls.job_steps("12") == ["12.0"]
