"""The instance type from the cluster when no flag or config names one: this node's
resource_config.json, else the SageMaker API for --hyperpod-cluster (a local moto server),
each mapping the partition's Slurm nodes to their instance group; else cpu, with the reason.
Slurm is faked at hyperlaunch.slurm (nodes.partition_nodes, and runner.run for the GRES decision)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.job.plan import plan_job
from hyperlaunch.script.render import render_sbatch
from hyperlaunch.slurm import runner as slurm_runner
from tests.support.cli_runner import run_cli
from tests.support.hyperpod_cluster import (
    CONTROLLER,
    WORKERS,
    create_cluster,
    fake_partition,
    no_resource_config,
    resource_config,
    write_resource_config,
)
from tests.support.moto_aws import LocalAws

JOB = {"model": "qwen3_0_6b", "nodes": 2, "torchrun": "torchrun"}
NODES = ["ip-10-1-10-10", "ip-10-1-38-128", "ip-10-1-38-130"]
"""The default partition of a small HyperPod cluster: the controller and two p5 workers."""
G5 = ("worker-group-2", "ml.g5.48xlarge", {"10.1.40.1": "i-0g50000000000001", "10.1.40.2": "i-0g50000000000002", "10.1.40.3": "i-0g50000000000003"})
HYPERPOD_SLURM_CONFIG = "GresTypes               = (null)\n"


@pytest.fixture(autouse=True)
def _slurm_without_gpu_gres(monkeypatch: pytest.MonkeyPatch) -> None:
    """scontrol as on most HyperPod clusters (no GRES); sinfo's other calls answer nothing."""
    def run(args: Sequence[str], **_: object) -> slurm_runner.Result:
        out = HYPERPOD_SLURM_CONFIG if tuple(args[:3]) == ("scontrol", "show", "config") else ""
        return slurm_runner.Result(tuple(args), 0, out, "")

    monkeypatch.setattr(slurm_runner, "run", run)


def plan(tmp_path: Path, flags: dict[str, object] = JOB, *, config: Path | None = None, ask_slurm: bool = True):
    environ = {"SAGEMAKER_RESOURCE_CONFIG_PATH": str(config or tmp_path / "none.json")}
    return plan_job(
        flags, cwd=tmp_path, environ=environ, user_config=tmp_path / "user.toml",
        slurm_env=(lambda: {"PATH": "/usr/bin"}) if ask_slurm else None,
    )


def instance_decision(p) -> tuple[object, str, str]:
    [decision] = [d for d in p.decided if d.name == "instance_type"]
    return decision.value, decision.source, decision.warning


def test_the_instance_type_comes_from_this_nodes_resource_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_resource_config(tmp_path / "resource_config.json", monkeypatch, resource_config())
    partition = fake_partition(monkeypatch, NODES)
    p = plan(tmp_path, config=path)
    assert (p.spec.cluster.instance_type, p.spec.cluster.exclusive, p.spec.procs_per_node) == ("p5.48xlarge", True, 8)
    assert instance_decision(p) == (
        "p5.48xlarge",
        "resource_config.json, worker-group-1: 2 of the default partition's 3 node(s); not its ml.m5.xlarge (controller-machine)",
        "",
    )
    assert partition.calls == [None], "the default partition's nodes, asked once"
    script = render_sbatch(p.spec)
    assert "#SBATCH --exclusive\n" in script and "--nproc_per_node=8" in script and "FI_EFA_USE_HUGE_PAGE" in script
    # a partition of workers only
    fake_partition(monkeypatch, NODES[1:])
    p = plan(tmp_path, {**JOB, "partition": "gpu"}, config=path)
    assert instance_decision(p)[1] == "resource_config.json, worker-group-1: 2 of partition gpu's 2 node(s)"


def test_without_the_partitions_nodes_the_gpu_group_with_most_instances(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config())
    fake_partition(monkeypatch, None)  # sinfo fails
    p = plan(tmp_path, config=path)
    assert p.spec.cluster.instance_type == "p5.48xlarge"
    assert instance_decision(p)[1] == "rc.json, worker-group-1: the GPU group with the most instances (2; no Slurm cluster answered)"
    assert "no Slurm cluster asked" in instance_decision(plan(tmp_path, config=path, ask_slurm=False))[1]
    fake_partition(monkeypatch, ["node1", "node2"])  # names that are no HyperPod node's
    assert "none of the default partition's 2 node(s) is in the cluster" in instance_decision(plan(tmp_path, config=path))[1]


def test_several_gpu_types_pick_the_most_numerous_and_warn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config([CONTROLLER, WORKERS, G5]))
    fake_partition(monkeypatch, [*NODES, "ip-10-1-40-1", "ip-10-1-40-2", "ip-10-1-40-3"])
    value, source, warning = instance_decision(plan(tmp_path, config=path))
    assert value == "g5.48xlarge" and source.startswith("rc.json, worker-group-2: 3 of")
    assert "ml.g5.48xlarge x3 (worker-group-2), ml.p5.48xlarge x2 (worker-group-1)" in warning
    assert "pass --instance-type" in warning
    # only the p5 nodes in the partition: no doubt left
    fake_partition(monkeypatch, NODES)
    assert instance_decision(plan(tmp_path, config=path))[::2] == ("p5.48xlarge", "")
    # Slurm silent: the cluster's most numerous GPU group, with the warning
    fake_partition(monkeypatch, None)
    value, _, warning = instance_decision(plan(tmp_path, config=path))
    assert value == "g5.48xlarge" and "cluster demo has several accelerated instance types" in warning


def test_a_partition_of_cpu_nodes_only_is_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config())
    fake_partition(monkeypatch, ["ip-10-1-10-10"])
    p = plan(tmp_path, {**JOB, "partition": "login"}, config=path)
    assert p.spec.cluster.instance_type == "cpu" and p.spec.cluster.exclusive is False
    assert instance_decision(p)[1] == "rc.json: partition login's nodes are ml.m5.xlarge (controller-machine), none with GPUs"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "is a folder"),
        ("{not json", "is not a HyperPod resource config"),
        ('["a list"]', "is not a HyperPod resource config (not a JSON object)"),
        ('{"ClusterConfig": {}, "InstanceGroups": [{"Name": "g"}]}', "InstanceType missing"),
    ],
)
def test_a_resource_config_that_cannot_be_read_falls_back_to_cpu_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None, reason: str
) -> None:
    path = tmp_path / "resource_config.json"
    if content is None:
        path.mkdir()  # root reads any file, whatever its mode: a folder stands for "cannot read"
    else:
        path.write_text(content)
    fake_partition(monkeypatch, NODES)
    p = plan(tmp_path, config=path)
    value, source, _ = instance_decision(p)
    assert value == "cpu" and str(path) in source and reason in source and "no --hyperpod-cluster" in source


def test_a_layer_names_the_type_and_nothing_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config())
    partition = fake_partition(monkeypatch, NODES)
    p = plan(tmp_path, {**JOB, "instance_type": "ml.g5.48xlarge", "hyperpod_cluster": "nowhere"}, config=path)
    assert instance_decision(p) == ("g5.48xlarge", "you (--instance-type)", "")
    (tmp_path / "hyperlaunch.toml").write_text('instance-type = "ml.p4d.24xlarge"\n')
    assert instance_decision(plan(tmp_path, config=path))[:2] == ("p4d.24xlarge", str(tmp_path / "hyperlaunch.toml"))
    assert partition.calls == []


def test_cpu_when_nothing_says_otherwise_warns_about_gpu_gres(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_partition(monkeypatch, ["gpu1", "gpu2"], gres="gpu:h100:8(S:0-1)")
    value, source, warning = instance_decision(plan(tmp_path, {**JOB, "partition": "gpu"}))
    assert value == "cpu"
    assert source.startswith("default, nothing names another (no --instance-type; no ")
    assert "warning: partition gpu's nodes have GPU GRES (gpu:h100:8(S:0-1))" in source
    assert "pass --instance-type" in warning
    fake_partition(monkeypatch, ["cpu1"])
    assert instance_decision(plan(tmp_path))[2] == ""


def test_a_gpu_instance_type_in_the_nodes_features_is_taken_and_several_are_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As AWS ParallelCluster labels its nodes, no GPU GRES: the type comes from the features.
    fake_partition(monkeypatch, ["q1", "q2"], features=[("dynamic", "p5.48xlarge", "efa"), ("dynamic", "P5.48XLARGE")])
    value, source, warning = instance_decision(plan(tmp_path, {**JOB, "partition": "gpu"}))
    assert (value, warning) == ("p5.48xlarge", "")
    assert source == "the features of partition gpu's nodes name it (sinfo %f: p5.48xlarge on 2 node(s))"
    fake_partition(monkeypatch, ["a1", "a2", "b1"], features=[("p4d.24xlarge",), ("p4d.24xlarge",), ("ml.p5.48xlarge",)])
    value, source, warning = instance_decision(plan(tmp_path, {**JOB, "partition": "gpu"}))
    assert value == "p4d.24xlarge" and "also p5.48xlarge on 1" in source
    assert "several GPU types" in warning and "instance_type in hyperlaunch.toml" in warning
    # A CPU type, or a feature that is no instance type, names nothing: cpu as before.
    fake_partition(monkeypatch, ["c1"], features=[("c5.xlarge", "static")])
    assert instance_decision(plan(tmp_path))[:1] == ("cpu",)


def test_a_type_hyperlaunch_has_no_preset_for_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trn = ("trainium", "ml.trn1.32xlarge", {"10.1.50.1": "i-0t00000000000001"})
    path = write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config([CONTROLLER, trn]))
    fake_partition(monkeypatch, None)
    with pytest.raises(InvalidInput, match=r"instance type ml.trn1.32xlarge \(rc.json, trainium: .*\) has no preset"):
        plan(tmp_path, config=path)


def test_the_sagemaker_api_names_the_type_for_hyperpod_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws: LocalAws) -> None:
    create_cluster(aws, [("controller-machine", "ml.m5.xlarge", 1), ("worker-group-1", "ml.p5.48xlarge", 2)])
    fake_partition(monkeypatch, NODES)
    p = plan(tmp_path, {**JOB, "hyperpod_cluster": "demo"})
    assert (p.spec.cluster.instance_type, p.spec.cluster.hyperpod_cluster, p.spec.procs_per_node) == ("p5.48xlarge", "demo", 8)
    assert instance_decision(p) == ("p5.48xlarge", "cluster demo (SageMaker API), worker-group-1: the GPU group with the most instances (2)", "")
    # this node's resource config is another cluster's: the named one is asked
    other = write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config([CONTROLLER, G5], name="other"))
    assert plan(tmp_path, {**JOB, "hyperpod_cluster": "demo"}, config=other).spec.cluster.instance_type == "p5.48xlarge"
    fake_partition(monkeypatch, ["ip-10-1-10-10", "ip-10-1-40-1"])
    assert plan(tmp_path, config=other).spec.cluster.instance_type == "g5.48xlarge"


def test_several_gpu_groups_in_the_api_map_the_partitions_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws: LocalAws) -> None:
    create_cluster(aws, [("controller-machine", "ml.m5.xlarge", 1), ("worker-group-1", "ml.p5.48xlarge", 2), ("small", "ml.g5.48xlarge", 1)])
    fake_partition(monkeypatch, NODES)
    value, source, warning = instance_decision(plan(tmp_path, {**JOB, "hyperpod_cluster": "demo"}))
    # moto's describe_cluster_node gives no PrivatePrimaryIp, so no node maps: the groups decide
    assert value == "p5.48xlarge" and "none of the default partition's 3 node(s) is in the cluster" in source
    assert "ml.p5.48xlarge x2 (worker-group-1), ml.g5.48xlarge x1 (small)" in warning


def test_render_against_a_hyperpod_cluster_gets_p5_processes_efa_and_whole_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws: LocalAws
) -> None:
    monkeypatch.chdir(tmp_path)
    no_resource_config(tmp_path, monkeypatch)
    create_cluster(aws, [("controller-machine", "ml.m5.xlarge", 1), ("worker-group-1", "ml.p5.48xlarge", 2)])
    fake_partition(monkeypatch, NODES)
    result = run_cli(["render", "--nodes", "2", "--model", "qwen3_0_6b", "--hyperpod-cluster", "demo"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "--nproc_per_node=8" in result.stdout and "#SBATCH --exclusive\n" in result.stdout
    assert "export FI_EFA_USE_HUGE_PAGE=0\n" in result.stdout
    assert "--instance-type  p5.48xlarge  cluster demo (SageMaker API), worker-group-1" in result.stderr
    # the same from the environment and from hyperlaunch.toml
    monkeypatch.setenv("HYPERLAUNCH_HYPERPOD_CLUSTER", "demo")
    assert "--nproc_per_node=8" in run_cli(["render", "-m", "qwen3_0_6b"], monkeypatch).stdout
    monkeypatch.delenv("HYPERLAUNCH_HYPERPOD_CLUSTER")
    (tmp_path / "hyperlaunch.toml").write_text('[profile.hp]\nhyperpod-cluster = "demo"\n')
    assert "--nproc_per_node=8" in run_cli(["render", "-m", "qwen3_0_6b", "--profile", "hp"], monkeypatch).stdout


def test_on_a_hyperpod_node_render_takes_the_type_from_the_resource_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_resource_config(tmp_path / "resource_config.json", monkeypatch, resource_config())
    fake_partition(monkeypatch, NODES)
    result = run_cli(["render", "--nodes", "2", "--model", "qwen3_0_6b"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "--nproc_per_node=8" in result.stdout and "#SBATCH --exclusive\n" in result.stdout
    assert "the job on p5.48xlarge nodes:" in result.stderr and "resource_config.json, worker-group-1" in result.stderr


def test_a_mixed_partition_warns_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config([CONTROLLER, WORKERS, G5]))
    fake_partition(monkeypatch, None)
    result = run_cli(["render", "--model", "qwen3_0_6b"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "hyperlaunch: warning: cluster demo has several accelerated instance types" in result.stderr


def test_aws_failures_for_a_named_cluster_are_one_line_and_exit_10(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws: LocalAws) -> None:
    monkeypatch.chdir(tmp_path)
    no_resource_config(tmp_path, monkeypatch)
    fake_partition(monkeypatch, NODES)
    missing = run_cli(["render", "-m", "qwen3_0_6b", "--hyperpod-cluster", "nope"], monkeypatch)
    assert missing.exit_code == 10 and missing.stdout == ""
    assert missing.stderr.splitlines() == ["hyperlaunch: error: hyperpod cluster 'nope': ValidationException: Could not find cluster 'nope'."]
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    uncredentialed = run_cli(["render", "-m", "qwen3_0_6b", "--hyperpod-cluster", "demo"], monkeypatch)
    assert uncredentialed.exit_code == 10 and len(uncredentialed.stderr.splitlines()) == 1
    assert uncredentialed.stderr.startswith("hyperlaunch: error: hyperpod cluster 'demo': no AWS credentials found (")


def test_a_cluster_name_aws_would_refuse_is_refused_before_asking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    no_resource_config(tmp_path, monkeypatch)
    result = run_cli(["render", "-m", "qwen3_0_6b", "--hyperpod-cluster", "no such/cluster"], monkeypatch)
    assert result.exit_code == 2 and "a cluster name is letters, digits and hyphens" in result.stderr


def test_render_without_a_reachable_cluster_is_cpu_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    no_resource_config(tmp_path, monkeypatch)
    fake_partition(monkeypatch, None)
    result = run_cli(["render", "-m", "qwen3_tiny"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "--nproc_per_node=1" in result.stdout
    assert "--instance-type  cpu       default, nothing names another (no --instance-type; no " in result.stderr


def test_hyperpod_auto_resume_is_decided_before_rendering_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--hyperpod-cluster, or a resource_config.json on this host, turns auto-resume on in the
    spec (so the record and resume hold it); nothing seen leaves it to the node; a flag wins."""
    from hyperlaunch.job import detect

    assert detect.hyperpod_mode(hyperpod_cluster="demo", environ={}).value == "on"
    config = write_resource_config(tmp_path / "rc.json", monkeypatch, resource_config())
    on = detect.hyperpod_mode(hyperpod_cluster=None, environ={"SAGEMAKER_RESOURCE_CONFIG_PATH": str(config)}, marker=str(tmp_path / "none"))
    assert on.value == "on" and "rc.json" in on.source
    marker = tmp_path / "sagemaker_cluster"
    marker.mkdir()
    assert detect.hyperpod_mode(hyperpod_cluster=None, environ={"SAGEMAKER_RESOURCE_CONFIG_PATH": str(tmp_path / "no")}, marker=str(marker)).value == "on"
    left = detect.hyperpod_mode(hyperpod_cluster=None, environ={"SAGEMAKER_RESOURCE_CONFIG_PATH": str(tmp_path / "no")}, marker=str(tmp_path / "none"))
    assert left.value == "auto" and "when the job starts" in left.source

    p = plan(tmp_path, {**JOB, "instance_type": "p5.48xlarge"}, config=config)  # this host's resource_config.json
    assert p.spec.cluster.hyperpod == "on" and dict((d.name, d.value) for d in p.decided)["hyperpod"] == "on"
    forced = plan(tmp_path, {**JOB, "instance_type": "p5.48xlarge", "hyperpod": "off"})
    assert forced.spec.cluster.hyperpod == "off" and dict((d.name, d.source) for d in forced.decided)["hyperpod"].startswith("you")
