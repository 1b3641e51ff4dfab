"""Rendering: golden files per variant, bash -n + shellcheck, and the script's behaviour when
bash runs it with stub srun/scontrol/torchrun (tests/support/sbatch_harness.py).

Regenerate the golden files after an intended change with ONE command, then review the diff:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/script/test_render.py -k golden
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import jinja2.meta
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyperlaunch.core import checkpoints
from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE, parse_attempt_marker
from hyperlaunch.core.trainer_failures import (
    TRAINER_FAILURE_FILE_ENV,
    FailureKind,
    format_trainer_failure,
    trainer_failure_path,
)
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.script import render, supervisor_bundle
from hyperlaunch.script.render import ScriptValues, launch_command, render_sbatch
from hyperlaunch.supervisor.decisions import job_port
from tests.support.sbatch_harness import HEAD_NODE, JOB_ID, rendezvous_port, run_script, sbatch_directive_args

GOLDEN_DIR = Path(__file__).parents[1] / "golden"
PATHS = {"checkpoint_dir": "/fsx/checkpoints", "log_dir": "/fsx/logs", "run_dir": "/fsx/runs/demo"}

VARIANTS: dict[str, JobSpec] = {
    "plain": job_spec(model="qwen3_tiny", torchrun="torchrun", **PATHS),
    "efa_preset": job_spec(
        model="qwen3_0_6b", nodes=2, instance_type="p5.48xlarge", exclusive=True, gres_gpus="on", hyperpod="off",
        env=(("NCCL_DEBUG", "INFO"), ("HF_TOKEN", None)), **PATHS,
    ),
    "pyxis_container": job_spec(
        model="qwen3_0_6b", nodes=2, instance_type="p4d.24xlarge", gres_gpus="on", container_image="/fsx/images/train.sqsh",
        container_mounts=("/fsx/data:/data:ro",), data="/fsx/data/wikitext", hyperpod="off", **PATHS,
    ),
    # What users copy from ECR's console, a local model, a data file and a tokenizer folder:
    # each mounted read-only, and a container name derived from the image reference.
    "pyxis_ecr": job_spec(
        model="/fsx/models/Qwen3-0.6B", nodes=2, instance_type="p5.48xlarge", exclusive=True, gres_gpus="off",
        container_image="123456789012.dkr.ecr.us-west-2.amazonaws.com/hyperlaunch:v1", data="/fsx/data/corpus.jsonl",
        trainer_args=("--tokenizer", "/fsx/tokenizers/qwen3"), hyperpod="off", **PATHS,
    ),
    "hyperpod_auto_resume": job_spec(
        model="llama3_1_8b", nodes=4, instance_type="p5en.48xlarge", gres_gpus="on", hyperpod="on", time="2-00:00:00",
        max_restarts=5, signal_seconds=600, **PATHS,
    ),
    "multi_node": job_spec(
        model="qwen3_tiny", nodes=3, partition="dev", account="ml", qos="normal", time="30:00",
        exclude=("node4",), max_steps=40, job_name="tiny run", torchrun="/opt/venv/bin/torchrun",
        trainer_args=("--checkpoint-every", "10"), **PATHS,
    ),
    "single_node": job_spec(model="qwen3_1_7b", nodes=1, instance_type="g6.12xlarge", gres_gpus="on", max_steps=100, **PATHS),
    # A user's own script, run from its code snapshot (hyperlaunch.job.plan derives the code fields).
    "script_job": job_spec(
        script="/home/me/proj/train/main.py", name="exp1", nodes=2, code_root="/home/me/proj",
        code_dir="/fsx/runs/demo/.hyperlaunch/code-0123456789abcdef", trainer_args=("--lr", "3e-4"), torchrun="torchrun", **PATHS,
    ),
    "script_module_container": job_spec(
        module="mypkg.train", nodes=2, instance_type="p5.48xlarge", exclusive=True, gres_gpus="off", hyperpod="off",
        container_image="/fsx/images/train.sqsh", code_root="/home/me/proj",
        code_dir="/fsx/runs/demo/.hyperlaunch/code-0123456789abcdef", **PATHS,
    ),
    # Three trackers with the run ids a submit chose: one run for the training, whatever restarts it.
    "trackers": job_spec(
        model="qwen3_0_6b", nodes=2, tracker=("tensorboard", "mlflow", "wandb"), mlflow_uri="http://10.0.0.5:5000",
        tracker_run_id="0a1b2c3d4e5f", mlflow_run_id="5f2a0e0c9c2b4c1f8b8e3d6a7f9e1c2d", mlflow_experiment_id="1",
        env=(("WANDB_PROJECT", None), ("WANDB_API_KEY", None)), torchrun="torchrun", **PATHS,
    ),
    # HyperPod without GPU GRES: whole nodes, torchrun starts the 8 processes; SageMaker's name.
    "p5_without_gres": job_spec(
        model="qwen3_0_6b", nodes=2, instance_type="ml.p5.48xlarge", exclusive=True, gres_gpus="off",
        nccl_debug="info", **PATHS,
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden(variant: str) -> None:
    rendered = render_sbatch(VARIANTS[variant].settled())  # the container name, as a plan derives it
    # The bundle's name is the hash of the supervisor's code: kept out of the golden files, which
    # would otherwise change with every line of it (test_supervisor_bundle checks the name).
    rendered = rendered.replace(supervisor_bundle.bundle_name(), "supervisor-HASH.pyz")
    golden = GOLDEN_DIR / f"{variant}.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.exists(), f"missing {golden}; run: UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/script/test_render.py -k golden"
    assert rendered == golden.read_text(), f"{variant} changed; if intended: UPDATE_GOLDEN=1 .venv/bin/pytest {__file__} -k golden"


def test_the_script_values_are_exactly_the_names_the_templates_read() -> None:
    # StrictUndefined catches a missing name only in a branch a variant takes; this catches all,
    # and a field no template reads.
    environment = render._environment()
    read: set[str] = set()
    pending = ["sbatch.sh.j2"]
    while pending:
        tree = environment.parse(render._load_template(pending.pop()))
        read |= jinja2.meta.find_undeclared_variables(tree)
        pending += [name for name in jinja2.meta.find_referenced_templates(tree) if name is not None]
    assert read == {field.name for field in dataclasses.fields(ScriptValues)}


@pytest.mark.slow
def test_rendered_scripts_pass_bash_n_and_shellcheck(tmp_path: Path) -> None:
    paths = []
    for name, spec in VARIANTS.items():
        path = tmp_path / f"{name}.sbatch"
        path.write_text(render_sbatch(spec))
        paths.append(str(path))
        subprocess.run(["bash", "-n", str(path)], check=True)
    step = tmp_path / "step.sh"  # what the supervisor runs on every node (templates/step.sh.j2)
    step.write_text(supervisor_bundle.step_script())
    paths.append(str(step))
    subprocess.run(["bash", "-n", str(step)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    result = subprocess.run(["shellcheck", "--shell=bash", *paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_sbatch_header_has_what_issue_4_asks_for() -> None:
    args = sbatch_directive_args(render_sbatch(VARIANTS["hyperpod_auto_resume"]))
    for expected in (
        "--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8", "--time=2-00:00:00", "--requeue",
        "--signal=B:USR2@600", "--open-mode=append", "--output=/fsx/logs/%x_%j.out", "--error=/fsx/logs/%x_%j.err",
    ):
        assert expected in args
    cpu = sbatch_directive_args(render_sbatch(VARIANTS["plain"]))
    assert not any(a.startswith("--gpus-per-node") or a.startswith("--partition") for a in cpu)


def test_hyperpod_flag_is_static_when_forced_and_detected_in_auto_mode() -> None:
    assert "  --srun-flag=--auto-resume=1 \\\n" in render_sbatch(VARIANTS["hyperpod_auto_resume"])
    auto = render_sbatch(VARIANTS["plain"])
    assert "  --hyperpod auto --hyperpod-dir /opt/sagemaker_cluster \\\n" in auto and "--auto-resume=1" not in auto
    assert "auto-resume" not in render_sbatch(VARIANTS["efa_preset"])


@pytest.mark.slow
def test_a_completed_step_exits_zero_and_delivers_the_launch_command(tmp_path: Path) -> None:
    spec = VARIANTS["multi_node"].replace(
        checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun"
    )
    run = run_script(render_sbatch(spec), tmp_path, env={"SLURM_NTASKS": "2", "SLURM_NPROCS": "2"})
    assert run.returncode == 0, run.stderr
    assert run.trainer is not None and not run.requeued
    # torchrun's ranks, not Slurm's tasks (one a node): Lightning reads SLURM_NTASKS for its world.
    assert "SLURM_NTASKS" not in run.trainer["env"] and "SLURM_NPROCS" not in run.trainer["env"]
    # Rendezvous computed inside the step: the head node and this node's rank from the job's
    # node list (scontrol), the port from the job id and round.
    assert run.trainer["argv"][:4] == ["--nnodes=2", "--node_rank=1", f"--master_addr={HEAD_NODE}", f"--master_port={rendezvous_port(0)}"]
    assert run.trainer["argv"][4:] == launch_command(spec)[1:]
    assert run.trainer["env"]["OMP_NUM_THREADS"] == "1"
    assert (tmp_path / "ck").is_dir() and (tmp_path / "run").is_dir()
    markers = [m for m in map(parse_attempt_marker, run.stdout.splitlines()) if m]
    assert [m["event"] for m in markers] == ["start", "end"]
    assert markers[0]["restart"] == "0" and markers[0]["nodes"] == "node[1-2]"
    assert (markers[1]["cause"], markers[1]["action"], markers[1]["exit"]) == ("completed", "exit", "0")


@pytest.mark.parametrize(("step_node", "rank"), [("node7", "0"), ("node8", "1")])
@pytest.mark.slow
def test_each_node_takes_its_rank_in_the_static_rendezvous_from_the_node_list(tmp_path: Path, step_node: str, rank: str) -> None:
    spec = VARIANTS["multi_node"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun")
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_STEP_NODE": step_node})
    assert run.trainer is not None and run.trainer["argv"][1:3] == [f"--node_rank={rank}", f"--master_addr={HEAD_NODE}"]
    assert not any(arg.startswith("--rdzv") for arg in run.trainer["argv"])


@pytest.mark.slow
def test_a_node_that_cannot_find_itself_in_the_node_list_falls_back_to_the_c10d_rendezvous(tmp_path: Path) -> None:
    # As in a container without scontrol, or a node Slurm names otherwise: c10d ranks the nodes.
    spec = VARIANTS["multi_node"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun")
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_STEP_NODE": ""})
    assert run.trainer is not None and run.trainer["argv"][:4] == [
        "--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_id={JOB_ID}.0", f"--rdzv_endpoint={HEAD_NODE}:{rendezvous_port(0)}"
    ]


@pytest.mark.parametrize(
    ("exit_code", "restart_count", "cause", "action", "script_status"),
    [
        (1, "0", "crash", "requeue", 0),
        (REQUEUE_EXIT_CODE, "2", "requeue-requested", "requeue", 0),
        (1, "3", "crash", "exit", 1),  # max_restarts=3 reached: the job fails for real
        (REQUEUE_EXIT_CODE, "3", "requeue-requested", "exit", REQUEUE_EXIT_CODE),
    ],
)
@pytest.mark.slow
def test_requeue_is_bounded_by_max_restarts(
    tmp_path: Path, exit_code: int, restart_count: str, cause: str, action: str, script_status: int
) -> None:
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"))
    run = run_script(
        render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": str(exit_code), "SLURM_RESTART_COUNT": restart_count}
    )
    assert run.returncode == script_status, run.stderr
    assert run.requeued == (action == "requeue")
    end = [m for m in map(parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] == "end"]
    assert end[0]["cause"] == cause and end[0]["action"] == action and end[0]["restart"] == restart_count


@pytest.mark.slow
def test_the_warning_signal_reaches_the_trainers_from_the_step_script_and_requeues(tmp_path: Path) -> None:
    """torchrun < 2.9 dies of USR2 and >= 2.9 forwards it only when told to: the step script
    starts torchrun with it ignored and sends it to torchrun's children, the trainers, itself."""
    import signal

    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"))
    run = run_script(render_sbatch(spec), tmp_path, send_usr2=True)
    assert (tmp_path / "got-usr2").read_text() == "1", run.stdout + run.stderr
    assert (tmp_path / "torchrun-survived").exists(), "the save signal must not end torchrun"
    ignored = int((tmp_path / "torchrun.sigign").read_text().split()[1], 16)
    assert ignored & (1 << (signal.SIGUSR2 - 1)), "torchrun starts with the save signal ignored"
    assert run.returncode == 0 and run.requeued
    end = [m for m in map(parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] == "end"]
    assert end[0]["cause"] == "time-limit"
    assert run.trainer is not None
    assert "SIGUSR2" not in run.trainer["env"]["PET_SIGNALS_TO_HANDLE"], "no torch version forwards it too"


# Pieces a shell would act on if anything were interpolated unquoted. CANARY is replaced by a
# file path: the test fails if any of them ever runs.
_NASTY = ["'", '"', "$(touch CANARY)", "`touch CANARY`", "\n", " ", "\\", "$HOME", "${IFS}", "*", ";", "&", "|", "#",
          "!", "%", "~", "-", "=", ",", "é", "\t", "a", "--x"]
nasty_text = st.lists(st.sampled_from(_NASTY), min_size=1, max_size=6).map("".join)
one_line_text = st.lists(st.sampled_from([p for p in _NASTY if p not in ("\n", "\t")]), min_size=1, max_size=6).map("".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    job_name=one_line_text.filter(lambda s: "/" not in s),
    ckpt=nasty_text,
    run=nasty_text,
    data=nasty_text,
    log=one_line_text.filter(lambda s: "\\" not in s),
    env_value=nasty_text,
    extra=st.lists(nasty_text, max_size=4),
)
@pytest.mark.slow
def test_hostile_values_never_execute_and_arrive_unchanged(
    job_name: str, ckpt: str, run: str, data: str, log: str, env_value: str, extra: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        canary = base / "canary"

        def arm(text: str) -> str:
            return text.replace("CANARY", str(canary))

        def arm_relative(text: str) -> str:  # job names may not hold '/'; the script runs in `base`
            return text.replace("CANARY", canary.name)

        spec = job_spec(
            model="qwen3_tiny", job_name=arm_relative(job_name), checkpoint_dir=f"{base}/c{arm(ckpt)}",
            run_dir=f"{base}/r{arm(run)}", log_dir=f"{base}/l{arm(log)}", data=arm(data),
            env=(("HOSTILE", arm(env_value)),), trainer_args=tuple(arm(e) for e in extra), torchrun="torchrun",
        )
        script = render_sbatch(spec)
        for legacy in (False, True):  # sbatch reads the header itself; both parsers get the exact values
            args = sbatch_directive_args(script, legacy=legacy)
            assert f"--job-name={spec.job.job_name}" in args
            assert f"--output={spec.output.log_dir.replace('%', '%%')}/%x_%j.out" in args
        result = run_script(script, base)
        assert not canary.exists(), "an interpolated value was executed"
        assert result.returncode == 0, result.stderr
        assert result.trainer is not None
        assert result.trainer["argv"][4:] == launch_command(spec)[1:]
        assert result.trainer["env"]["HOSTILE"] == spec.job.env[0][1]
        assert Path(spec.output.checkpoint_dir).is_dir() and Path(spec.output.run_dir).is_dir()


@pytest.mark.slow
def test_a_saved_stop_is_told_from_a_crash_by_the_trainers_request_file(tmp_path: Path) -> None:
    from hyperlaunch.core.protocol import requeue_request_path

    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    requeue_request_path(tmp_path / "run", JOB_ID, 1).touch()
    # torchrun exits 1 whatever its workers returned; the file says they saved and stopped.
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": "1", "SLURM_RESTART_COUNT": "1"})
    end = [m for m in map(parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] == "end"]
    assert end[0]["cause"] == "requeue-requested" and run.requeued


@pytest.mark.slow
def test_an_attempt_past_the_restart_limit_fails_without_running(tmp_path: Path) -> None:
    # Slurm requeues node failures by itself; the script is what bounds them.
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), max_restarts=1)
    run = run_script(render_sbatch(spec), tmp_path, env={"SLURM_RESTART_COUNT": "2"})
    assert run.returncode == 1 and run.trainer is None and not run.requeued
    assert "restart limit reached" in run.stderr
    end = [m for m in map(parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] == "end"]
    assert end[0]["cause"] == "restart-limit"


def _stub_sinfo(tmp_path: Path, body: str) -> None:
    """A stand-in sinfo running `body`, in the folder run_script puts first on the script's PATH."""
    (tmp_path / "bin").mkdir()
    sinfo = tmp_path / "bin" / "sinfo"
    sinfo.write_text(f"#!/bin/sh\n{body}\n")
    sinfo.chmod(0o755)


def _sinfo_lists_down(tmp_path: Path, node: str) -> None:
    """`node` is what `sinfo -t down,...,no_respond` lists; the partition has 8 nodes."""
    _stub_sinfo(tmp_path, f'case " $* " in *" -t "*) echo {node} ;; *) echo 8 ;; esac')


@pytest.mark.slow
def test_a_step_that_ended_with_a_node_slurm_lists_down_requeues_away_from_it(tmp_path: Path) -> None:
    # Slurm requeues the job itself only once it marks the node DOWN: never a drained node, nor
    # one that answers again first (a dead spare, revived). Left to Slurm, such a job ended FAILED.
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"))
    _sinfo_lists_down(tmp_path, "node8")
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": "1"})
    end = _end_marker(run)
    assert (end["cause"], end["nodes"], end["action"]) == ("node-failure", "node8", "requeue")
    assert run.returncode == 0 and run.requeued, run.stderr
    updates = (tmp_path / "scontrol.updates").read_text().splitlines()
    assert updates == [f"update JobId={JOB_ID} NodeList=node7", f"update JobId={JOB_ID} ExcNodeList=node8"]
    assert "attempt-end" in run.stderr, "markers go to both logs"


def test_the_installed_trainer_starts_as_its_console_script_beside_torchrun(tmp_path: Path) -> None:
    """Never `-m hyperlaunch.train`: python -m puts the job's working directory first on
    sys.path, where a source checkout's hyperlaunch/ shadows the installed trainer."""
    from hyperlaunch.script.render import launch_command, trainer_program

    base = job_spec(model="qwen3_tiny", checkpoint_dir="/c", log_dir="/l", run_dir="/r")
    assert trainer_program(base) == ["--no-python", "hyperlaunch-train"]
    venv = base.replace(torchrun="/opt/venv/bin/torchrun")
    assert trainer_program(venv) == ["--no-python", "/opt/venv/bin/hyperlaunch-train"]
    assert "-m" not in launch_command(venv)
    tests_entry = base.replace(trainer_module="tests.support.fault_entry")
    assert trainer_program(tests_entry) == ["-m", "tests.support.fault_entry"]


def _end_marker(run: object) -> dict[str, str]:
    ends = [m for m in map(parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] == "end"]  # type: ignore[attr-defined]
    assert len(ends) == 1, run.stdout  # type: ignore[attr-defined]
    return ends[0]


@pytest.mark.parametrize(
    ("kind", "cause", "requeued", "script_status"),
    [
        (FailureKind.INVALID_DATA, "trainer-error", False, 1),
        (FailureKind.CHECKPOINT_UNUSABLE, "trainer-error", False, 1),
        (FailureKind.DISK_FULL, "trainer-error", False, 1),
        (FailureKind.NODE_PROBLEM, "crash", True, 0),
        (FailureKind.UNEXPECTED, "crash", True, 0),
        (FailureKind.HANG, "hang", True, 0),
    ],
)
@pytest.mark.slow
def test_a_final_trainer_failure_ends_the_job_and_a_retry_one_requeues_it(
    tmp_path: Path, kind: FailureKind, cause: str, requeued: bool, script_status: int
) -> None:
    spec = VARIANTS["plain"].replace(
        checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), max_restarts=3, restarts_in_allocation=0
    )
    record = format_trainer_failure(kind, "--data /x/bad.jsonl:2: not valid JSON", 1)
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_FAILURE_RECORD": record})
    assert run.trainer is not None
    assert run.trainer["env"][TRAINER_FAILURE_FILE_ENV] == str(trainer_failure_path(tmp_path / "run", JOB_ID, 0))
    assert run.returncode == script_status, run.stderr
    assert run.requeued == requeued, "a final failure is never requeued, whatever max_restarts allows"
    end = _end_marker(run)
    assert end["cause"] == cause and end["action"] == ("requeue" if requeued else "exit")
    if not requeued:
        assert end["kind"] == kind.value and "not requeued" in run.stderr


def _markers(run: object, event: str) -> list[dict[str, str]]:
    return [m for m in map(parse_attempt_marker, run.stdout.splitlines()) if m and m["event"] == event]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("kind", "cause"), [(FailureKind.UNEXPECTED, "crash"), (FailureKind.HANG, "hang")])
@pytest.mark.slow
def test_a_crash_or_hang_on_healthy_nodes_restarts_inside_the_allocation_then_requeues(
    tmp_path: Path, kind: FailureKind, cause: str
) -> None:
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), restarts_in_allocation=2)
    record = format_trainer_failure(kind, "m", 1)
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_FAILURE_RECORD": record})
    assert (tmp_path / "rounds").read_text().split() == ["0", "1", "2"]
    restarts = _markers(run, "restart")
    assert [(m["round"], m["cause"], m["action"]) for m in restarts] == [
        ("1", cause, "restart-in-allocation"), ("2", cause, "restart-in-allocation")
    ]
    assert len(_markers(run, "start")) == 1, "rounds are one Slurm attempt"
    end = _end_marker(run)
    assert (end["cause"], end["action"], end["round"]) == (cause, "requeue", "2") and run.requeued
    # Each round rendezvous anew and leaves its own failure record.
    assert run.trainer is not None and f"--master_port={rendezvous_port(2)}" in run.trainer["argv"]
    assert run.trainer["env"][TRAINER_FAILURE_FILE_ENV] == str(trainer_failure_path(tmp_path / "run", JOB_ID, 0, 2))
    for round_ in range(3):
        assert trainer_failure_path(tmp_path / "run", JOB_ID, 0, round_).exists()


@pytest.mark.slow
def test_a_round_that_fails_once_is_restarted_and_the_job_completes_without_a_requeue(tmp_path: Path) -> None:
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"))
    record = format_trainer_failure(FailureKind.UNEXPECTED, "NCCL error", 0)
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT_ONCE": "1", "HL_TEST_FAILURE_RECORD": record})
    assert run.returncode == 0 and not run.requeued, run.stderr
    assert (_end_marker(run)["cause"], _end_marker(run)["round"]) == ("completed", "1")


@pytest.mark.slow
def test_a_final_failure_is_never_restarted_inside_the_allocation(tmp_path: Path) -> None:
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), restarts_in_allocation=5)
    record = format_trainer_failure(FailureKind.INVALID_DATA, "bad", 0)
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_FAILURE_RECORD": record})
    assert (tmp_path / "rounds").read_text().split() == ["0"] and not _markers(run, "restart")
    assert _end_marker(run)["cause"] == "trainer-error" and not run.requeued


@pytest.mark.slow
def test_spare_nodes_are_allocated_and_wait_while_the_round_trains_on_the_others(tmp_path: Path) -> None:
    spec = VARIANTS["multi_node"].replace(
        checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun", spare_nodes=1
    )
    script = render_sbatch(spec)
    assert f"--nodes={spec.job.nodes + 1}" in sbatch_directive_args(script)
    run = run_script(script, tmp_path, env={"HL_TEST_NODES": "node7 node8 node9"})
    assert run.returncode == 0, run.stderr
    srun_argv = (tmp_path / "srun.argv").read_bytes().decode().split("\0")
    assert "--nodes=2" in srun_argv and "--ntasks=2" in srun_argv and "--nodelist=node7,node8" in srun_argv
    assert run.trainer is not None and run.trainer["env"]["HYPERLAUNCH_STEP_NODES"] == "node7 node8"
    assert run.trainer["argv"][:4] == ["--nnodes=2", "--node_rank=1", "--master_addr=node7", f"--master_port={rendezvous_port(0)}"]
    assert _markers(run, "start")[0]["spares"] == "node9"


@pytest.mark.slow
def test_without_spares_the_round_runs_on_the_whole_allocation(tmp_path: Path) -> None:
    spec = VARIANTS["multi_node"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun")
    run = run_script(render_sbatch(spec), tmp_path)
    srun_argv = (tmp_path / "srun.argv").read_bytes().decode().split("\0")
    assert not any(a.startswith("--nodelist") for a in srun_argv)
    assert run.trainer is not None and "HYPERLAUNCH_STEP_NODES" not in run.trainer["env"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _job_with_its_port_held() -> tuple[str, socket.socket]:
    """A job id of this test's own, and a socket listening on its first round's rendezvous port
    on every address, as another job's store would be (each test its own: under xdist another
    test's socket could free a shared port mid-run)."""
    for job in random.sample(range(10_000, 1_000_000), 200):
        family, address = (socket.AF_INET6, "::") if socket.has_ipv6 else (socket.AF_INET, "0.0.0.0")
        sock = socket.socket(family)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        try:
            sock.bind((address, job_port(str(job), 0)))
            sock.listen()
        except OSError:
            sock.close()
            continue
        return str(job), sock
    raise AssertionError("no rendezvous port free to hold")


@pytest.mark.slow
def test_a_rendezvous_port_in_use_on_the_batch_host_moves_the_round_to_a_free_one(tmp_path: Path) -> None:
    # Another job (its id 625 x k away) or a service holds the job's port on the head node, which
    # is the batch host: the store would fail to bind, or the other nodes join the wrong one.
    spec = VARIANTS["multi_node"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun")
    job, held = _job_with_its_port_held()
    with held:
        run = run_script(render_sbatch(spec), tmp_path, env={"SLURM_JOB_ID": job, "SLURMD_NODENAME": HEAD_NODE})
    assert run.returncode == 0 and run.trainer is not None, run.stderr
    port = int(run.trainer["argv"][3].removeprefix("--master_port="))
    assert port != job_port(job, 0) and 20000 <= port < 30000
    assert f"rendezvous port {job_port(job, 0)} is in use on {HEAD_NODE}; the trainers rendezvous on {port}" in run.stderr


@pytest.mark.slow
def test_a_port_another_round_has_just_claimed_is_stepped_over_and_the_claim_released(tmp_path: Path) -> None:
    # Job 1000's round chose 26000 on this host a moment ago; its store does not listen yet.
    spec = VARIANTS["multi_node"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun")
    job, held = _job_with_its_port_held()
    held.close()  # nothing listens: only the claim says the port is taken
    claims = tmp_path / "tmp"
    claims.mkdir()
    (claims / f"hyperlaunch-rendezvous-{job_port(job, 0)}").write_text("1000.0")
    run = run_script(render_sbatch(spec), tmp_path, env={"SLURM_JOB_ID": job, "SLURMD_NODENAME": HEAD_NODE, "TMPDIR": str(claims)})
    assert run.returncode == 0 and run.trainer is not None, run.stderr
    port = int(run.trainer["argv"][3].removeprefix("--master_port="))
    assert port != job_port(job, 0) and f"rendezvous port {job_port(job, 0)} is in use on {HEAD_NODE}" in run.stderr
    assert sorted(path.name for path in claims.iterdir()) == [f"hyperlaunch-rendezvous-{job_port(job, 0)}"]  # its own released


@pytest.mark.slow
def test_a_head_node_other_than_the_batch_host_keeps_the_jobs_port(tmp_path: Path) -> None:
    # Its ports are not seen from the batch host: a port held here says nothing about it.
    spec = VARIANTS["multi_node"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun")
    job, held = _job_with_its_port_held()
    with held:
        run = run_script(render_sbatch(spec), tmp_path, env={"SLURM_JOB_ID": job, "SLURMD_NODENAME": "node8"})
    assert run.returncode == 0 and run.trainer is not None, run.stderr
    assert run.trainer["argv"][3] == f"--master_port={job_port(job, 0)}"
    assert "rendezvous port" not in run.stderr


@pytest.mark.slow
def test_a_lost_node_is_given_back_and_the_job_requeued_without_waiting_for_scancel(tmp_path: Path) -> None:
    # node8's slurmd refuses connections and the step never ends by itself (srun waits for
    # Slurm to notice): the script ends the step, gives node8 back, requeues away from it. The
    # step's scancel answers after Slurm's MessageTimeout on a dead node: not waited for.
    spec = VARIANTS["multi_node"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun")
    _stub_sinfo(tmp_path, 'case "$*" in *%D*) echo 4 ;; esac')
    record = format_trainer_failure(FailureKind.UNEXPECTED, "Connection reset by peer", 0)
    started = time.monotonic()
    run = run_script(render_sbatch(spec), tmp_path, env={
        "SLURMD_NODENAME": "node7", "HL_TEST_LOST_NODE": "node8", "HL_TEST_LOST_PORT": str(_closed_port()),
        "HL_TEST_FAILURE_RECORD": record, "HL_TEST_STEP_STUCK": "60", "HL_TEST_SCANCEL_SECONDS": "60",
    })
    took = time.monotonic() - started
    assert run.returncode == 0 and run.requeued, run.stderr
    assert "node(s) node8 stopped answering" in run.stderr
    end = _end_marker(run)
    assert (end["cause"], end["nodes"], end["action"]) == ("node-failure", "node8", "requeue")
    calls = tmp_path / "scancel.calls"
    deadline = time.monotonic() + 10
    while not calls.exists() and time.monotonic() < deadline:  # it runs in the background
        time.sleep(0.05)
    assert calls.read_text().split() == ["-s", "KILL", f"{JOB_ID}.0"]
    # Cancelled while srun still runs: the live nodes report their tasks' end to it at once,
    # instead of retrying for seconds while the job stays COMPLETING.
    assert (tmp_path / "scancel.srun").read_text().strip() == "running"
    updates = (tmp_path / "scontrol.updates").read_text().splitlines()
    assert updates == [f"update JobId={JOB_ID} NodeList=node7", f"update JobId={JOB_ID} ExcNodeList=node8"]
    assert took < 30, "the script waited for scancel (60 s) or the step (60 s)"


@pytest.mark.slow
def test_a_lost_node_is_found_from_srun_saying_a_task_failed_without_a_failure_record(tmp_path: Path) -> None:
    # A script's rank that lost its peer exits on gloo's `Connection reset` and records nothing:
    # srun's line for its task's end is enough to probe the nodes, not Slurm's node timeout.
    spec = VARIANTS["multi_node"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), torchrun="torchrun")
    _stub_sinfo(tmp_path, 'case "$*" in *%D*) echo 4 ;; esac')
    run = run_script(render_sbatch(spec), tmp_path, stderr_file=True, env={
        "SLURMD_NODENAME": "node7", "HL_TEST_LOST_NODE": "node8", "HL_TEST_LOST_PORT": str(_closed_port()),
        "HL_TEST_STDERR": "0: RuntimeError: Connection reset by peer\nsrun: error: node7: task 0: Exited with exit code 1",
        "HL_TEST_STEP_STUCK": "20",
    })
    assert run.returncode == 0 and run.requeued, run.stderr
    assert "node(s) node8 stopped answering" in run.stderr
    end = _end_marker(run)
    assert (end["cause"], end["nodes"], end["action"]) == ("node-failure", "node8", "requeue")


@pytest.mark.slow
def test_a_down_node_comes_before_a_final_trainer_failure(tmp_path: Path) -> None:
    # The lost node may have caused the failure: the job goes on away from it, and meets the
    # error again on healthy nodes if it is the input's.
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"))
    _sinfo_lists_down(tmp_path, "node8")
    record = format_trainer_failure(FailureKind.INVALID_DATA, "m", 0)
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": "1", "HL_TEST_FAILURE_RECORD": record})
    end = _end_marker(run)
    assert (end["cause"], end["nodes"], end["action"]) == ("node-failure", "node8", "requeue") and run.requeued


@pytest.mark.slow
def test_a_node_given_back_earlier_is_not_lost_again(tmp_path: Path) -> None:
    # SLURM_JOB_NODELIST (node[1-2] here) still names the nodes a job gave back (a spare replaced
    # them); the supervisor asks Slurm about the allocation as it holds it now (scontrol's
    # node7,node8 here), so a node it gave back is never lost a second time.
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"))
    _stub_sinfo(tmp_path, 'echo "$*" >> "$HL_TEST_DIR/sinfo.calls"')  # lists nothing
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": "1"})
    assert _end_marker(run)["cause"] == "crash"
    asked = [line for line in (tmp_path / "sinfo.calls").read_text().splitlines() if " -t " in f" {line} "]
    assert asked and all(" -n node7,node8 " in f" {line} " for line in asked), asked


@pytest.mark.slow
def test_a_failure_record_left_by_an_earlier_job_of_the_same_id_decides_nothing(tmp_path: Path) -> None:
    spec = VARIANTS["plain"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    stale = trainer_failure_path(tmp_path / "run", JOB_ID, 0)
    stale.write_text(format_trainer_failure(FailureKind.INVALID_DATA, "old", 0))
    run = run_script(render_sbatch(spec), tmp_path, env={"HL_TEST_EXIT": "1"})
    assert _end_marker(run)["cause"] == "crash" and run.requeued
    assert not stale.exists()


@pytest.mark.slow
def test_a_script_jobs_placeholders_are_filled_each_round_and_the_resume_form_only_where_one_is(tmp_path: Path) -> None:
    """`-- --out {checkpoint_dir} '{resume?--resume_from {resume}}'`: the round's torchrun gets
    the job's folders, and the resume flag only once `<name>-latest` names a checkpoint."""
    args = ("--out", "{checkpoint_dir}/hf", "--run={run_dir}", "{resume?--resume_from {resume}}", "--cfg", '{"a": {"b": 1}}', "--num_nodes", "{nodes}")
    spec = VARIANTS["script_job"].replace(checkpoint_dir=str(tmp_path / "ck"), run_dir=str(tmp_path / "run"), trainer_args=args)
    (tmp_path / "first").mkdir()
    first = run_script(render_sbatch(spec), tmp_path / "first")
    assert first.trainer is not None, first.stderr
    assert first.trainer["argv"][-7:] == ["--out", f"{tmp_path}/ck/hf", f"--run={tmp_path}/run", "--cfg", '{"a": {"b": 1}}', "--num_nodes", str(spec.job.nodes)]
    assert "--resume_from" not in first.trainer["argv"]

    saved = tmp_path / "ck" / "exp1-3steps"
    saved.mkdir(parents=True)
    (saved / checkpoints.COMMITTED_FILE).write_text("step=3\n")
    checkpoints.write_pointer(tmp_path / "ck", "exp1", saved.name)
    (tmp_path / "again").mkdir()
    again = run_script(render_sbatch(spec), tmp_path / "again")
    assert again.trainer is not None
    assert again.trainer["argv"][-8:] == [f"{tmp_path}/ck/hf", f"--run={tmp_path}/run", "--resume_from", str(saved), "--cfg", '{"a": {"b": 1}}', "--num_nodes", str(spec.job.nodes)]
