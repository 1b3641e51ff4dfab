"""A job asking for more nodes than its partition holds (less --exclude) is refused before
sbatch, which would queue it to wait forever (PartitionNodeLimit). Slurm is faked at
hyperlaunch.slurm.runner.run; tests/integration/test_cli_jobs.py asks a real cluster."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from hyperlaunch.core.errors import InvalidInput, SlurmError
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.runs.partition_fit import refuse_more_nodes_than_partition
from hyperlaunch.slurm import runner as slurm_runner

SINFO = "node1|idle|dev*|(null)|\nnode2|idle|dev*|(null)|\nnode3|drained|dev*|(null)|\ng1|idle|gpu|gpu:8|\n"


def _answering(monkeypatch: pytest.MonkeyPatch, sinfo: str | None, config: str = "ResumeProgram = (null)\n") -> None:
    def run(args: Sequence[str], **_: object) -> slurm_runner.Result:
        if sinfo is None:
            raise SlurmError("sinfo: error: Unable to contact slurm controller")
        return slurm_runner.Result(tuple(args), 0, config if args[0] == "scontrol" else sinfo, "")

    monkeypatch.setattr(slurm_runner, "run", run)


def _spec(tmp_path: Path, **fields: object) -> JobSpec:
    return job_spec(model="qwen3_tiny", checkpoint_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"), run_dir=str(tmp_path / "run"), **fields)  # type: ignore[arg-type]


def test_a_job_that_fits_its_partition_passes_counting_nodes_in_any_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _answering(monkeypatch, SINFO)
    refuse_more_nodes_than_partition(_spec(tmp_path, nodes=3), env={})  # node3 is drained: it may come back
    refuse_more_nodes_than_partition(_spec(tmp_path, nodes=1, partition="gpu"), env={})


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"nodes": 4}, "asks for 4 node(s) but the default partition has 3 node(s)"),
        ({"nodes": 2, "spare_nodes": 2}, "asks for 2 node(s) + 2 spare but the default partition has 3 node(s)"),
        ({"nodes": 2, "partition": "gpu"}, "asks for 2 node(s) but partition gpu has 1 node(s)"),
        ({"nodes": 2, "exclude": ("node[1-2]",)}, "the default partition has 3 node(s), 2 of them excluded (--exclude)"),
    ],
)
def test_a_job_larger_than_its_partition_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fields: dict[str, object], said: str
) -> None:
    _answering(monkeypatch, SINFO)
    with pytest.raises(InvalidInput) as refused:
        refuse_more_nodes_than_partition(_spec(tmp_path, **fields), env={})
    text = str(refused.value)
    assert said in text and "never start it (PartitionNodeLimit)" in text and "\n" not in text, text


def test_no_answer_or_an_unknown_partition_is_left_to_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _answering(monkeypatch, None)
    refuse_more_nodes_than_partition(_spec(tmp_path, nodes=64), env={})
    _answering(monkeypatch, SINFO)
    refuse_more_nodes_than_partition(_spec(tmp_path, nodes=64, partition="nope"), env={})


def test_sbatchs_own_default_partition_is_the_one_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _answering(monkeypatch, SINFO + "b1|idle|big|(null)|\nb2|idle|big|(null)|\nb3|idle|big|(null)|\nb4|idle|big|(null)|\n")
    refuse_more_nodes_than_partition(_spec(tmp_path, nodes=4), env={"SBATCH_PARTITION": "big"})
    with pytest.raises(InvalidInput, match="partition big has 4 node"):
        refuse_more_nodes_than_partition(_spec(tmp_path, nodes=5), env={"SBATCH_PARTITION": "big"})


@pytest.mark.parametrize(
    ("sinfo", "config"),
    [
        (SINFO.replace("node3|drained", "node3|idle~"), "ResumeProgram = (null)\n"),  # a node powered down
        (SINFO, "ResumeProgram = /opt/slurm/resume.sh\n"),  # cloud nodes sinfo may not list while down
    ],
)
def test_a_cluster_that_starts_nodes_on_demand_is_left_to_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sinfo: str, config: str) -> None:
    _answering(monkeypatch, sinfo, config)
    refuse_more_nodes_than_partition(_spec(tmp_path, nodes=16), env={})
