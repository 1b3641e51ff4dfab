"""The launch path of `submit` and `resume` (hyperlaunch.runs.launch), below submitit: a resumed
job's plan, and one render-submit-record route for both commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperlaunch.core.checkpoints import METADATA_FILE, checkpoint_path
from hyperlaunch.core.errors import CheckpointError
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs import jobs
from hyperlaunch.runs.launch import launch, plan_resume


def _record(tmp_path: Path, **changes: object) -> jobs.JobRecord:
    base: dict[str, object] = dict(
        model="qwen3_tiny",
        checkpoint_dir=str(tmp_path / "ckpt"),
        log_dir=str(tmp_path / "logs"),
        run_dir=str(tmp_path / "run"),
        exclude=("node9",),
        trainer_args=("--lr", "1", "--from-scratch", "--resume-from", "/c/x-5steps", "--resume-from=/y", "--seed", "3"),
    )
    base.update(changes)
    return jobs.JobRecord(job_id="41", spec=job_spec(**base), submitted_at=1.0)  # type: ignore[arg-type]


def _complete_checkpoint(record: jobs.JobRecord, step: int) -> None:
    path = checkpoint_path(Path(record.spec.output.checkpoint_dir), record.spec.derived.checkpoint_name, step)
    path.mkdir(parents=True)
    (path / METADATA_FILE).write_bytes(b"")


def test_resume_plan_drops_the_flags_that_would_not_resume_and_keeps_the_rest(tmp_path: Path) -> None:
    record = _record(tmp_path)
    _complete_checkpoint(record, 5)
    spec = plan_resume(record, nodes=3, max_steps=50)
    assert spec.job.trainer_args == ("--lr", "1", "--seed", "3")
    assert (spec.job.nodes, spec.job.max_steps, spec.cluster.exclude) == (3, 50, ("node9",))
    assert spec.derived.checkpoint_name == record.spec.derived.checkpoint_name == "qwen3_tiny"


def test_resume_is_refused_without_a_complete_checkpoint(tmp_path: Path) -> None:
    record = _record(tmp_path)
    (Path(record.spec.output.checkpoint_dir) / "qwen3_tiny-5steps").mkdir(parents=True)  # no .metadata
    with pytest.raises(CheckpointError, match="no complete checkpoint of qwen3_tiny"):
        plan_resume(record)
    unsaved = _record(tmp_path, trainer_args=("--no-checkpoints",))
    _complete_checkpoint(unsaved, 6)  # another run's, in the same folder
    with pytest.raises(CheckpointError, match="job 41 ran with --no-checkpoints, which keeps no checkpoint: nothing to resume"):
        plan_resume(unsaved, after_job="40")


def test_resume_finds_a_model_directorys_checkpoints_by_the_recorded_name(tmp_path: Path) -> None:
    model = tmp_path / "real-model"
    model.mkdir()
    link = tmp_path / "link"
    link.symlink_to(model)
    record = _record(tmp_path, model=str(link), trainer_args=())
    assert record.spec.derived.checkpoint_name == "real-model"
    _complete_checkpoint(record, 2)
    assert plan_resume(record).derived.checkpoint_name == "real-model"


@pytest.mark.slow
def test_submit_and_resume_share_one_route_and_dry_run_submits_nothing(tmp_path: Path) -> None:
    spec = _record(tmp_path, trainer_args=("--lr", "1")).spec
    calls: list[tuple[JobSpec, str, str | None]] = []

    def fake_submit(spec: JobSpec, script: str, *, env: dict[str, str], resumed_from: str | None, **_: object) -> jobs.JobRecord:
        calls.append((spec, script, resumed_from))
        return jobs.JobRecord(job_id="42", spec=spec, submitted_at=2.0, resumed_from=resumed_from)

    dry = launch(spec, env={}, dry_run=True, submit=fake_submit)
    assert dry.record is None and dry.script.startswith("#!/bin/bash") and calls == []
    done = launch(spec, env={}, resumed_from="41", submit=fake_submit)
    assert done.record is not None and done.record.resumed_from == "41"
    assert calls == [(spec, dry.script, "41")]


def test_resume_of_a_job_that_trained_all_its_steps_and_exported_is_refused(tmp_path: Path) -> None:
    from hyperlaunch.core import checkpoints, hf_exports
    from hyperlaunch.core.errors import InvalidInput

    record = _record(tmp_path, max_steps=40, trainer_args=())
    _complete_checkpoint(record, 40)
    checkpoints.write_pointer(Path(record.spec.output.checkpoint_dir), "qwen3_tiny", "qwen3_tiny-40steps")
    # Its -final export failed (a full disk, say): the resume writes it.
    assert plan_resume(record).job.max_steps == 40
    final = checkpoints.final_dir(Path(record.spec.output.checkpoint_dir), "qwen3_tiny")
    final.mkdir()
    (final / hf_exports.EXPORT_MARKER).write_text("{}")
    with pytest.raises(InvalidInput) as refused:
        plan_resume(record)
    assert refused.value.one_line() == (
        "job 41 has trained its 40 steps already (qwen3_tiny-40steps), and resuming it would train none "
        "(hyperlaunch resume 41 --max-steps N, with N above 40, trains further)"
    )
    assert plan_resume(record, max_steps=80).job.max_steps == 80
    assert plan_resume(record, after_job="40").job.max_steps == 40  # behind a job that may save more
    # -final is an older step's (the export of step 40 failed and left it): the resume writes it.
    (final / hf_exports.EXPORT_MARKER).write_text('{"checkpoint": "/elsewhere/qwen3_tiny-20steps"}')
    assert plan_resume(record).job.max_steps == 40


def test_a_new_job_over_an_existing_pointer_is_told_it_continues_from_it(tmp_path: Path) -> None:
    from hyperlaunch.core.checkpoints import write_pointer
    from hyperlaunch.runs.launch import continues_from

    fresh = _record(tmp_path, trainer_args=("--lr", "1")).spec
    assert continues_from(fresh) is None  # nothing there yet
    _complete_checkpoint(_record(tmp_path), 30)
    write_pointer(Path(fresh.output.checkpoint_dir), "qwen3_tiny", "qwen3_tiny-30steps")
    said = continues_from(fresh)
    assert said is not None and said.startswith(f"{tmp_path / 'ckpt'}/qwen3_tiny-latest names qwen3_tiny-30steps: this job continues from step 30")
    assert "--from-scratch" in said and "not past" not in said
    behind = continues_from(_record(tmp_path, trainer_args=("--lr", "1"), max_steps=30).spec)
    assert behind is not None and "; --max-steps 30 is not past step 30: it trains no further" in behind
    for told in (("--from-scratch",), ("--resume-from=/c/x-5steps",), ("--resume-from", "/c/x-5steps")):
        assert continues_from(_record(tmp_path, trainer_args=told).spec) is None, told


def test_a_new_script_job_over_an_existing_pointer_of_its_name_is_told_so_too(tmp_path: Path) -> None:
    """A script run before under the same name (its stem by default) left `<name>-latest`: the
    new job's script is handed it, and was not told (a new experiment went on from old weights)."""
    from hyperlaunch.core.checkpoints import COMMITTED_FILE, write_pointer
    from hyperlaunch.runs.launch import continues_from

    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    spec = job_spec(script=str(script), name="train", checkpoint_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"),
                   run_dir=str(tmp_path / "run"), trainer_args=("--from-scratch",))
    assert continues_from(spec) is None
    (tmp_path / "ckpt" / "train-10steps").mkdir(parents=True)
    (tmp_path / "ckpt" / "train-10steps" / COMMITTED_FILE).touch()  # runtime.commit_checkpoint's
    write_pointer(Path(spec.output.checkpoint_dir), "train", "train-10steps")
    said = continues_from(spec)  # a script's own flags mean nothing to hyperlaunch
    assert said is not None and said.startswith(f"{tmp_path / 'ckpt'}/train-latest names train-10steps: this job's script is handed it")
    assert "step 10" in said and "runtime.resume_path()" in said and "another --name" in said and "--from-scratch" not in said


def test_a_module_not_in_the_folder_the_job_runs_it_from_is_said(tmp_path: Path) -> None:
    """`cd project/mypkg && submit --module mypkg.train` ran `python -m mypkg.train` in a copy of
    project/mypkg, where there is no mypkg/: submit said nothing and the job failed at its start."""
    from hyperlaunch.runs.launch import module_unseen

    (tmp_path / "mypkg" / "sub").mkdir(parents=True)
    (tmp_path / "mypkg" / "train.py").write_text("")

    def spec(module: str) -> JobSpec:
        return job_spec(module=module, name="train", checkpoint_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"),
                       run_dir=str(tmp_path / "run"), code_root=str(tmp_path), code_dir=str(tmp_path / "run" / ".hyperlaunch" / "code-1"))

    for found in ("mypkg.train", "mypkg", "mypkg.sub"):
        assert module_unseen(spec(found)) is None, found
    said = module_unseen(spec("mypkg.trian"))
    assert said is not None and said.startswith(f"--module mypkg.trian: no mypkg/trian.py or mypkg/trian/ in {tmp_path}")
    assert "unless the nodes' Python has mypkg installed" in said
    assert module_unseen(_record(tmp_path).spec) is None  # the bundled trainer


def test_a_wandb_job_with_no_way_to_log_in_is_warned_at_submit(tmp_path: Path) -> None:
    """Online W&B with no key: the run failed to open on the nodes and `status` looked healthy."""
    from hyperlaunch.runs.launch import wandb_unkeyed

    def spec(*env: tuple[str, str | None]) -> JobSpec:
        return _record(tmp_path, tracker=("wandb",), env=env).spec

    home = {"HOME": str(tmp_path)}
    said = wandb_unkeyed(spec(), home)
    assert said is not None and "--env WANDB_API_KEY" in said and "WANDB_MODE=offline" in said
    assert wandb_unkeyed(spec(("WANDB_API_KEY", None)), home) is None
    assert wandb_unkeyed(spec(("WANDB_MODE", "offline")), home) is None
    assert wandb_unkeyed(spec(("WANDB_MODE", None)), {**home, "WANDB_MODE": "disabled"}) is None  # forwarded by name
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    assert wandb_unkeyed(spec(), home) is None  # `wandb login` wrote it
    assert wandb_unkeyed(_record(tmp_path, tracker=("tensorboard",)).spec, home) is None


def test_a_missing_data_path_is_said_unless_a_job_it_waits_for_may_write_it(tmp_path: Path) -> None:
    from hyperlaunch.runs.launch import data_unseen

    missing = str(tmp_path / "corpus")
    assert data_unseen(_record(tmp_path, data=missing).spec) is not None
    assert data_unseen(_record(tmp_path, data=missing, after=("5:ok",)).spec) is None  # prepare-data --slurm writes it
    assert data_unseen(_record(tmp_path, data="allenai/c4").spec) is None  # a dataset's name, not a path


def test_a_new_training_whose_run_folder_holds_another_trainings_records_is_warned(tmp_path: Path) -> None:
    """The default run folder is runs/<job name> whatever the checkpoint folder: a training
    started in a new checkpoint folder under the same name wrote its metrics and TensorBoard
    files beside the first one's, and TensorBoard dropped the first curve's steps (a trial)."""
    from hyperlaunch.runs.launch import run_dir_shared

    first = _record(tmp_path)
    assert run_dir_shared(first.spec) is None  # nothing recorded yet
    jobs.save(first, "#!/bin/bash\n")
    assert run_dir_shared(first.spec) is None  # the same training again (a resume, a new submit)
    elsewhere = _record(tmp_path, checkpoint_dir=str(tmp_path / "other-ckpt")).spec
    said = run_dir_shared(elsewhere)
    assert said is not None
    assert said.startswith(f"the run folder {tmp_path / 'run'} holds the records of job 41, another training (qwen3_tiny in {tmp_path / 'ckpt'})")
    assert said.endswith("pass --run-dir for a folder of its own")
    assert run_dir_shared(_record(tmp_path, checkpoint_dir=str(tmp_path / "other-ckpt"), run_dir=str(tmp_path / "run2")).spec) is None
    assert run_dir_shared(_record(tmp_path, trainer_args=("--model-name", "mine")).spec) is not None  # another name, same folder
