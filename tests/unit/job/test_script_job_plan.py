"""A user's own script as a job, before it runs: the plan derives its name and snapshot, the
rules refuse what belongs to the bundled trainer, the script names the snapshot's copy, submit
writes the snapshot (and takes it back when Slurm refuses), resume runs the same code or, with
--refresh-code, new code; and what the supervisor tells each round's scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperlaunch.core import checkpoints
from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.script_env import CHECKPOINT_DIR_ENV, NAME_ENV, RESUME_FROM_ENV, RUN_DIR_ENV
from hyperlaunch.job import code_snapshot
from hyperlaunch.job.plan import build_spec
from hyperlaunch.runs import jobs, launch, submission
from hyperlaunch.script.render import launch_command, render_sbatch
from hyperlaunch.supervisor import script_job
from tests.support.cli_runner import run_cli


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text("print('training')\n")
    (project / "README.md").write_text("mine\n")
    return project


def _plan(tmp_path: Path, **flags: object) -> object:
    return build_spec(flags, cwd=tmp_path, environ={})


@pytest.mark.slow
def test_a_script_job_is_named_by_its_stem_and_runs_the_copy_in_its_snapshot(tmp_path: Path) -> None:
    project = _project(tmp_path)
    spec = build_spec({"script": "proj/src/train.py", "nodes": 2, "trainer_args": ["--lr", "3e-4"]}, cwd=tmp_path, environ={})
    assert spec.is_script_job and spec.job.model == "" and spec.job.name == "train" == spec.derived.checkpoint_name == spec.job.job_name
    assert spec.job.script == str(project / "src" / "train.py")
    assert spec.derived.code_root == str(project / "src")  # no git: the script's folder
    assert spec.output.run_dir == str(tmp_path / "runs" / "train")
    assert spec.derived.code_dir is not None and Path(spec.derived.code_dir).parent == tmp_path / "runs" / "train" / ".hyperlaunch"
    assert Path(spec.derived.code_dir).name.startswith("code-")
    command = launch_command(spec)
    assert command[-3:] == [os.path.join(spec.derived.code_dir, "train.py"), "--lr", "3e-4"]
    script = render_sbatch(spec)
    assert spec.work_dir == str(tmp_path / "runs" / "train" / "work")
    assert "--script-name train" in script and f"--srun-flag=--chdir={spec.work_dir}" in script
    assert f"--code-dir {spec.derived.code_dir}" in script and "--checkpoint-layout auto" in script
    assert not Path(spec.derived.code_dir).exists(), "planning writes nothing"


@pytest.mark.slow
def test_the_snapshot_is_the_scripts_folder_outside_git_and_the_work_tree_inside(tmp_path: Path) -> None:
    project = _project(tmp_path)
    alone = build_spec({"script": str(project / "src" / "train.py")}, cwd=tmp_path, environ={})
    assert alone.derived.code_root == str(project / "src")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    in_git = build_spec({"script": str(project / "src" / "train.py")}, cwd=tmp_path, environ={})
    assert in_git.derived.code_root == str(project)


@pytest.mark.slow
def test_a_module_job_snapshots_the_current_folder_and_runs_python_m(tmp_path: Path) -> None:
    project = _project(tmp_path)
    spec = build_spec({"module": "src.train", "name": "exp1"}, cwd=project, environ={})
    assert spec.job.name == "exp1" and spec.derived.code_root == str(project)
    assert launch_command(spec)[-2:] == ["-m", "src.train"]
    assert build_spec({"module": "pkg.sub.train"}, cwd=project, environ={}).job.name == "train"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"script": "proj/src/train.py", "model": "qwen3_tiny"}, "--model 'qwen3_tiny' is the bundled trainer's"),
        ({"script": "proj/src/train.py", "max_steps": 5}, "--max-steps is the bundled trainer's"),
        ({"script": "proj/src/train.py", "module": "a.b"}, "give one of them"),
        ({"script": "proj/src/missing.py"}, "--script proj/src/missing.py: no such file"),
        ({"script": "proj/src"}, "no such file (a folder)"),
        ({"script": "proj/src/train.py", "name": ".hidden"}, "--name '.hidden': use letters"),
        ({"module": "not a module"}, "is not a Python module name"),
        ({"model": "qwen3_tiny", "name": "x"}, "--name names a --script or --module job's run"),
        ({"script": "proj/src/train.py", "code_limit_mb": 0}, "--code-limit-mb must be between 1 and 1000000"),
        ({"script": "proj/src/train.py", "trainer_args": ("--out", "{checkpoint_dri}")}, "{checkpoint_dri} is no placeholder (did you mean {checkpoint_dir}?)"),
    ],
)
def test_what_a_script_job_refuses_is_one_line(tmp_path: Path, flags: dict[str, object], expected: str) -> None:
    _project(tmp_path)
    with pytest.raises(InvalidInput) as error:
        build_spec(flags, cwd=tmp_path, environ={})
    assert expected in str(error.value) and "\n" not in str(error.value)


@pytest.mark.slow
def test_a_model_from_a_config_file_gives_way_to_a_script(tmp_path: Path) -> None:
    _project(tmp_path)
    (tmp_path / "hyperlaunch.toml").write_text('model = "qwen3_tiny"\nmax_steps = 10\n')
    spec = build_spec({"script": "proj/src/train.py"}, cwd=tmp_path, environ={})
    assert spec.job.model == "" and spec.job.max_steps is None


@pytest.mark.slow
def test_a_script_that_gitignore_leaves_out_is_refused(tmp_path: Path) -> None:
    project = _project(tmp_path)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".gitignore").write_text("src/\n")
    with pytest.raises(InvalidInput, match="is not part of its project's snapshot"):
        build_spec({"script": str(project / "src" / "train.py")}, cwd=tmp_path, environ={})


@pytest.mark.parametrize("flags", [{}, {"checkpoint_dir": "out/ck", "log_dir": "out/logs", "run_dir": "out/run"}])
@pytest.mark.slow
def test_what_a_job_wrote_into_the_project_leaves_the_next_snapshot_as_it_was(tmp_path: Path, flags: dict[str, str]) -> None:
    """Submitted from its project, a job's checkpoints, logs and run folder (defaults, or named
    by flags) land inside it: the next submit of the same code plans the same snapshot, under
    the size limit, its clean work tree not dirty."""
    project = _project(tmp_path)
    git_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "a"]):
        subprocess.run(["git", "-C", str(project), *args], check=True, env=git_env)
    first = build_spec({"script": "src/train.py", **flags}, cwd=project, environ={})
    for folder in (first.output.checkpoint_dir, first.output.log_dir, first.output.run_dir):
        (Path(folder) / "step").mkdir(parents=True)
    with open(Path(first.output.checkpoint_dir) / "step" / "__0_0.distcp", "wb") as out:
        out.truncate(120_000_000)
    (Path(first.output.run_dir) / "metrics.jsonl").write_text("{}\n")

    second = build_spec({"script": "src/train.py", **flags}, cwd=project, environ={})

    assert second.derived.code_dir == first.derived.code_dir and second.derived.code_root == str(project)
    assert code_snapshot.take_for(second, project).dirty is False


@pytest.mark.slow
def test_submit_writes_the_snapshot_before_sbatch_and_takes_it_back_when_slurm_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(tmp_path)
    spec = build_spec({"script": "proj/src/train.py"}, cwd=tmp_path, environ={})
    assert spec.derived.code_dir is not None
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    seen: list[bool] = []

    def refuse(script: str, folder: Path, **kwargs: object) -> str:
        seen.append((Path(spec.derived.code_dir) / "train.py").is_file())
        raise RuntimeError("sbatch: error: Batch job submission failed")

    monkeypatch.setattr(submission.slurm_submission, "submit_script", refuse)
    with pytest.raises(RuntimeError):
        submission.submit(spec, render_sbatch(spec), env=dict(os.environ))
    assert seen == [True] and not Path(spec.derived.code_dir).exists()

    monkeypatch.setattr(submission.slurm_submission, "submit_script", lambda *args, **kwargs: "77")
    record = submission.submit(spec, render_sbatch(spec), env=dict(os.environ))
    info = code_snapshot.read_info(Path(spec.derived.code_dir))
    assert record.job_id == "77" and info is not None and info["files"] == 1
    assert jobs.recent(model="train")[0].job_id == "77", "resume --name finds script jobs"


@pytest.mark.slow
def test_resume_runs_the_same_code_and_refresh_code_takes_a_new_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path)
    spec = build_spec({"script": "proj/src/train.py", "trainer_args": ["--lr", "1"]}, cwd=tmp_path, environ={})
    ckpt = checkpoints.checkpoint_path(Path(spec.output.checkpoint_dir), "train", 5)
    ckpt.mkdir(parents=True)
    (ckpt / checkpoints.COMMITTED_FILE).write_text("step=5\n")
    record = jobs.JobRecord(job_id="9", spec=spec, submitted_at=0.0)
    (project / "src" / "train.py").write_text("print('edited')\n")
    same = launch.plan_resume(record)
    assert same.derived.code_dir == spec.derived.code_dir and same.job.trainer_args == ("--lr", "1")
    fresh = launch.plan_resume(record, refresh_code=True)
    assert fresh.derived.code_dir != spec.derived.code_dir and Path(fresh.derived.code_dir or "").parent == Path(spec.derived.code_dir or "").parent
    with pytest.raises(InvalidInput, match="no code snapshot"):
        trainer = build_spec({"model": "qwen3_tiny"}, cwd=tmp_path, environ={})
        launch.plan_resume(jobs.JobRecord(job_id="8", spec=trainer, submitted_at=0.0), refresh_code=True)


@pytest.mark.slow
def test_submit_dry_run_and_json_name_the_run_and_its_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = run_cli(["submit", "--script", "proj/src/train.py", "--nodes", "2", "--dry-run", "--", "--lr", "3e-4"], monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert "for script train.py on 2 x cpu" in result.stdout and "/.hyperlaunch/code-" in result.stdout
    assert "--lr 3e-4" in result.stdout


@pytest.mark.slow
def test_submit_dry_run_json_is_one_document_holding_the_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As `sweep --dry-run --json`: submit's --json keys, job_id and logs null (sbatch names
    them), the script under `script`; nothing written."""
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    text = run_cli(["submit", "--script", "proj/src/train.py", "--dry-run", "--", "--lr", "3e-4"], monkeypatch)
    result = run_cli(["submit", "--script", "proj/src/train.py", "--dry-run", "--json", "--", "--lr", "3e-4"], monkeypatch)

    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["script"] == text.stdout and doc["script"].startswith("#!/bin/bash")
    assert (doc["job_id"], doc["log"], doc["err"], doc["resumed_from"]) == (None, None, None, None)
    assert doc["name"] == "train" and doc["run_dir"] == str(tmp_path / "runs" / "train")
    assert doc["trains"] == "script train.py", "model is '' for a script: say what it runs"
    assert doc["code_dir"] is not None and f"--code-dir {doc['code_dir']}" in doc["script"]
    assert doc["work_dir"] == str(tmp_path / "runs" / "train" / "work") and f"--srun-flag=--chdir={doc['work_dir']}" in doc["script"]
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_each_round_of_scripts_is_told_where_things_are_and_gets_the_library_on_its_path(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    assert script_job.resume_from(str(ckpt), "exp") == ("", None)
    (ckpt / "exp-3steps").mkdir(parents=True)
    checkpoints.write_info(ckpt / "exp-3steps", {"step": 3})
    (ckpt / "exp-3steps" / checkpoints.COMMITTED_FILE).write_text("step=3\n")
    checkpoints.write_pointer(ckpt, "exp", "exp-3steps")
    assert script_job.resume_from(str(ckpt), "exp") == (str(ckpt / "exp-3steps"), None)
    (ckpt / "exp-latest").write_text("garbage\n")
    resume, warning = script_job.resume_from(str(ckpt), "exp")
    assert resume == "" and warning is not None and RESUME_FROM_ENV in warning

    env = script_job.script_environment("/r", str(ckpt), "exp", {"PYTHONPATH": "/mine"}, "/ck/exp-3steps")
    assert env[CHECKPOINT_DIR_ENV] == str(ckpt) and env[RUN_DIR_ENV] == "/r" and env[NAME_ENV] == "exp"
    assert env[RESUME_FROM_ENV] == "/ck/exp-3steps"
    first, rest = env["PYTHONPATH"].split(os.pathsep, 1)
    assert rest == "/mine"
    probe = "import hyperlaunch.runtime as r, json; print(json.dumps(r.__file__))"
    found = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {first!r}); {probe}"], capture_output=True, text=True, check=True)
    assert json.loads(found.stdout).startswith(first)


def test_status_calls_a_scripts_final_failure_a_script_error() -> None:
    from hyperlaunch.runs.restart_causes import Restart

    assert Restart(0, "trainer error", "--lr must be > 0", kind="script-error").describe() == "script error (--lr must be > 0)"
    assert Restart(0, "trainer error", "bad data", kind="invalid-data").describe() == "trainer error (bad data)"
