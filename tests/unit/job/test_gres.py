"""GPUs as GRES or whole nodes, decided before rendering: the flag or a config, else the
cluster (scontrol show config's GresTypes, sinfo's %G), else no GRES; --exclusive on for GPU
instance types unless a layer says otherwise; SageMaker's `ml.` names. Slurm is faked at
hyperlaunch.slurm.runner.run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.job.plan import plan_job
from hyperlaunch.runs import jobs
from hyperlaunch.script.render import render_sbatch, sbatch_flags
from hyperlaunch.slurm import runner as slurm_runner
from tests.support.cli_runner import run_cli

P5 = {"model": "qwen3_0_6b", "instance_type": "p5.48xlarge", "nodes": 2, "torchrun": "torchrun"}
HYPERPOD_CONFIG = "GresTypes               = (null)\nSlurmctldPort           = 6817\n"
GPU_CONFIG = "AccountingStorageType   = accounting_storage/none\nGresTypes               = gpu\n"


class FakeSlurm:
    """scontrol and sinfo answering as a cluster with `config` and `sinfo` lines; every call kept."""

    def __init__(self, config: str | None, sinfo: str = "") -> None:
        self.config, self.sinfo, self.calls = config, sinfo, []

    def __call__(self, args: Sequence[str], **_: object) -> slurm_runner.Result:
        self.calls.append(tuple(args))
        if self.config is None:
            raise SlurmError("scontrol failed: slurm_load_ctl_conf error: Unable to contact slurm controller")
        out = self.config if tuple(args[:3]) == ("scontrol", "show", "config") else self.sinfo
        return slurm_runner.Result(tuple(args), 0, out, "")


def plan(tmp_path: Path, flags: dict[str, object], fake: FakeSlurm | None, **kwargs: object):
    return plan_job(
        flags, cwd=tmp_path, environ={}, user_config=tmp_path / "user.toml",
        slurm_env=None if fake is None else (lambda: {"PATH": "/usr/bin"}), **kwargs,  # type: ignore[arg-type]
    )


def decided(p) -> dict[str, tuple[object, str]]:
    return {d.name: (d.value, d.source) for d in p.decided}


def test_a_cluster_without_gpu_gres_gets_whole_nodes_and_no_gpu_request(tmp_path: Path, monkeypatch) -> None:
    fake = FakeSlurm(HYPERPOD_CONFIG)
    monkeypatch.setattr(slurm_runner, "run", fake)
    p = plan(tmp_path, P5, fake)
    assert (p.spec.cluster.gres_gpus, p.spec.cluster.exclusive, p.spec.procs_per_node) == ("off", True, 8)
    assert "GresTypes = (null)" in decided(p)["gres_gpus"][1]
    assert decided(p)["exclusive"] == (True, "default for GPU instance types (whole nodes)")
    flags = dict(sbatch_flags(p.spec))
    assert "--gpus-per-node" not in flags and "--exclusive" in flags
    assert "--nproc_per_node=8" in render_sbatch(p.spec)
    assert [c[:2] for c in fake.calls] == [("scontrol", "show")], "GresTypes without gpu: sinfo is not asked"


def test_a_partition_whose_nodes_have_gpu_gres_gets_them_requested(tmp_path: Path, monkeypatch) -> None:
    fake = FakeSlurm(GPU_CONFIG, "c1|idle|cpu*|(null)\ng1|idle|gpu|gpu:h100:8(S:0-1)\n")
    monkeypatch.setattr(slurm_runner, "run", fake)
    p = plan(tmp_path, {**P5, "partition": "gpu"}, fake)
    assert p.spec.cluster.gres_gpus == "on" and ("--gpus-per-node", "8") in sbatch_flags(p.spec)
    assert decided(p)["gres_gpus"] == ("on", "partition gpu's nodes have GPU GRES (sinfo: gpu:h100:8(S:0-1))")
    # the default partition (sinfo's `*`) when none is named: here one without GPUs
    assert plan(tmp_path, P5, fake).spec.cluster.gres_gpus == "off"
    assert plan(tmp_path, {**P5, "partition": "nope"}, fake).spec.cluster.gres_gpus == "off"


def test_a_partition_mixing_gpu_and_cpu_nodes_requests_gres_to_stay_on_the_gpu_ones(tmp_path: Path, monkeypatch) -> None:
    fake = FakeSlurm(GPU_CONFIG, "n1|idle|dev*|(null)\nn2|idle|dev*|gpu:8,shard:8\n")
    monkeypatch.setattr(slurm_runner, "run", fake)
    assert plan(tmp_path, P5, fake).spec.cluster.gres_gpus == "on"


def test_no_reachable_cluster_means_no_gres_unless_asked(tmp_path: Path, monkeypatch) -> None:
    fake = FakeSlurm(None)
    monkeypatch.setattr(slurm_runner, "run", fake)
    p = plan(tmp_path, P5, fake)
    assert p.spec.cluster.gres_gpus == "off" and "no Slurm cluster answered" in decided(p)["gres_gpus"][1]
    assert plan(tmp_path, P5, None).spec.cluster.gres_gpus == "off"
    forced = plan(tmp_path, {**P5, "gres_gpus": "on"}, fake)
    assert forced.spec.cluster.gres_gpus == "on" and decided(forced)["gres_gpus"] == ("on", "you (--gres-gpus)")
    assert ("--gpus-per-node", "8") in sbatch_flags(forced.spec)


def test_a_forced_choice_asks_no_cluster_and_cpu_jobs_named_so_ask_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(slurm_runner, "run", lambda *a, **k: pytest.fail("Slurm asked"))
    assert plan(tmp_path, {**P5, "gres_gpus": "off"}, FakeSlurm(GPU_CONFIG)).spec.cluster.gres_gpus == "off"
    cpu = plan(tmp_path, {"model": "qwen3_tiny", "instance_type": "cpu", "torchrun": "torchrun"}, FakeSlurm(GPU_CONFIG))
    assert decided(cpu) == {"instance_type": ("cpu", "you (--instance-type)")} and cpu.spec.cluster.exclusive is False


def test_config_files_win_over_the_defaults_and_flags_over_config(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(slurm_runner, "run", lambda *a, **k: pytest.fail("Slurm asked"))
    (tmp_path / "hyperlaunch.toml").write_text("exclusive = false\ngres-gpus = true\n")
    p = plan(tmp_path, P5, FakeSlurm(GPU_CONFIG))
    assert (p.spec.cluster.exclusive, p.spec.cluster.gres_gpus) == (False, "on")
    assert decided(p)["exclusive"] == (False, str(tmp_path / "hyperlaunch.toml"))
    p = plan(tmp_path, {**P5, "exclusive": True, "gres_gpus": "off"}, FakeSlurm(GPU_CONFIG))
    assert (p.spec.cluster.exclusive, p.spec.cluster.gres_gpus) == (True, "off")
    assert decided(p)["exclusive"] == (True, "you (--exclusive)")
    p = plan_job(P5, cwd=tmp_path, environ={"HYPERLAUNCH_GRES_GPUS": "off"}, user_config=tmp_path / "u.toml")
    assert p.spec.cluster.gres_gpus == "off" and decided(p)["gres_gpus"][1] == "$HYPERLAUNCH_GRES_GPUS"


def test_gres_auto_in_a_config_asks_the_cluster(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "hyperlaunch.toml").write_text('gres_gpus = "auto"\n')
    fake = FakeSlurm(GPU_CONFIG, "g1|idle|gpu*|gpu:8\n")
    monkeypatch.setattr(slurm_runner, "run", fake)
    assert plan(tmp_path, P5, fake).spec.cluster.gres_gpus == "on" and fake.calls


def test_sagemaker_instance_names_are_taken_everywhere(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(slurm_runner, "run", FakeSlurm(HYPERPOD_CONFIG))
    p = plan(tmp_path, {**P5, "instance_type": "ml.p5.48xlarge"}, FakeSlurm(HYPERPOD_CONFIG))
    assert p.spec.cluster.instance_type == "p5.48xlarge" and p.spec.cluster.gpus_per_node == 8 and p.spec.cluster.exclusive
    assert "FI_EFA_USE_HUGE_PAGE" in render_sbatch(p.spec)
    (tmp_path / "hyperlaunch.toml").write_text('instance-type = "ml.g5.12xlarge"\n')
    assert plan(tmp_path, {"model": "qwen3_0_6b"}, None).spec.cluster.instance_type == "g5.12xlarge"
    environ = {"HYPERLAUNCH_INSTANCE_TYPE": "ml.p4d.24xlarge"}
    assert plan_job({"model": "qwen3_0_6b"}, cwd=tmp_path, environ=environ, user_config=tmp_path / "u").spec.cluster.gpus_per_node == 8


def test_the_decision_is_kept_in_the_record_and_old_records_keep_their_gpu_request(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(slurm_runner, "run", FakeSlurm(HYPERPOD_CONFIG))
    spec = plan(tmp_path, P5, FakeSlurm(HYPERPOD_CONFIG)).spec
    record = jobs.JobRecord(job_id="5", spec=spec, submitted_at=1.0)
    again = jobs.JobRecord.from_json(record.to_json())
    assert again.spec == spec and render_sbatch(again.spec) == render_sbatch(spec)
    old = record.to_json()
    del old["spec"]["gres_gpus"]  # written before hyperlaunch decided GRES: every GPU job asked for it
    assert jobs.JobRecord.from_json(old).spec.cluster.gres_gpus == "on"


def test_render_prints_the_decisions_and_their_sources_on_stderr(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(slurm_runner, "run", FakeSlurm(HYPERPOD_CONFIG))
    result = run_cli(["render", "-m", "qwen3_0_6b", "-N", "2", "--instance-type", "ml.p5.48xlarge"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "#SBATCH --exclusive\n" in result.stdout and "--gpus-per-node" not in result.stdout
    assert "--nproc_per_node=8" in result.stdout
    assert "the job on p5.48xlarge nodes:" in result.stderr
    assert "--gres-gpus      off" in result.stderr and "GresTypes = (null)" in result.stderr
    assert "--exclusive      on" in result.stderr and "default for GPU instance types" in result.stderr
    forced = run_cli(["render", "-m", "qwen3_0_6b", "--instance-type", "p5.48xlarge", "--gres-gpus", "--no-exclusive"], monkeypatch)
    # sharing nodes: the preset's GPUs per node, requested as GRES
    assert "#SBATCH --gpus-per-node=4\n" in forced.stdout and "--exclusive" not in forced.stdout
    assert "you (--gres-gpus)" in forced.stderr and "--exclusive      off          you (--exclusive)" in forced.stderr


def test_nccl_debug_is_one_flag(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(slurm_runner, "run", FakeSlurm(HYPERPOD_CONFIG))
    result = run_cli(["render", "-m", "qwen3_0_6b", "--instance-type", "p5.48xlarge", "--nccl-debug", "info"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "export NCCL_DEBUG=INFO\n" in result.stdout
    bad = run_cli(["render", "-m", "qwen3_0_6b", "--nccl-debug", "LOUD"], monkeypatch)
    assert bad.exit_code == 2 and "VERSION, WARN, INFO, ABORT, TRACE" in bad.stderr
