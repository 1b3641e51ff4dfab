"""`hyperlaunch doctor`: can this cluster run hyperlaunch jobs? One row per check."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hyperlaunch.cli._output import out
from hyperlaunch.core.errors import ChecksFailed

if TYPE_CHECKING:
    from rich.table import Table

    from hyperlaunch.doctor.checks import CheckResult
    from hyperlaunch.doctor.node_probe import ProbeResult
    from hyperlaunch.job.settings import LaunchSettings

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    checkpoint_dir: Annotated[
        str | None,
        typer.Option(
            "--checkpoint-dir",
            metavar="DIR",
            help="Checkpoint folder whose filesystem is checked [default: as submit resolves it, else ./checkpoints].",
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            metavar="PATH",
            help="Training data (a file, a folder, or a prepare-data folder) whose filesystem is checked [default: as submit resolves it; none: not checked].",
        ),
    ] = None,
    profile: Annotated[str | None, typer.Option("--profile", metavar="NAME", help="Profile from hyperlaunch.toml ([profile.NAME]).")] = None,
    partition: Annotated[
        str | None,
        typer.Option(
            "--partition", "-p", metavar="NAME", help="Partition whose idle nodes are probed [default: as submit resolves it, else the cluster's default]."
        ),
    ] = None,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe/--no-probe",
            help="Run a short step (at most a minute) on the partition's idle nodes to check them; only when slurmctld answers.",
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
) -> None:
    """Check the cluster before submitting: sbatch and slurmctld, sacct, accounting, the Pyxis
    plugin, enroot, whether the checkpoint folder is on a filesystem all nodes share, EFA
    devices, HyperPod, GPUs per node. Each check passes, warns or fails, with a hint.

    Then, when slurmctld answers, one short srun step on the partition's idle nodes reports
    per node: GPUs, EFA devices, the NCCL network plugin, Pyxis and enroot, the system python3
    the job's supervisor runs on (missing or too old fails), and the Python, hyperlaunch and
    torch that the job's torchrun would run (a launcher venv the nodes cannot see fails here,
    not in a job). Busy nodes are skipped and named.

    Run it on the login node you submit from. Exit code 0 when no check fails (warnings
    allowed), 8 when at least one fails; other codes: `hyperlaunch help exit-codes`.

    Examples:

    \b
      hyperlaunch doctor
      hyperlaunch doctor --checkpoint-dir /fsx/checkpoints --partition gpu
      hyperlaunch doctor --json | jq '.checks[] | select(.status != "pass")'
      hyperlaunch doctor --json | jq '.node_probe.nodes[] | {node, python, hyperlaunch}'
    """
    from hyperlaunch.cli._cluster import slurm_env
    from hyperlaunch.doctor.checks import run_checks, system_probes
    from hyperlaunch.job.settings import resolve_checkpoint_dir, resolve_job_launch

    root = resolve_checkpoint_dir(checkpoint_dir, profile=profile)
    launch = resolve_job_launch(partition, profile=profile)
    env = slurm_env()
    probes = system_probes(env)
    data_path = data if data is not None else launch.data
    results = run_checks(probes, checkpoint_dir=root, data=None if data_path is None else Path(data_path).absolute())
    answers = next(r.status == "pass" for r in results if r.name == "sbatch")
    results.append(_instance_type(launch, env, answers))
    probed = _probe_nodes(env, launch, probes.local_names()) if probe and answers else None
    if probed is not None:
        from hyperlaunch.doctor.node_probe import summary

        results.append(summary(probed))
    failed = [result.name for result in results if result.status == "fail"]
    if as_json:
        out.json(
            {
                "ok": not failed,
                "checkpoint_dir": str(root),
                "checks": [
                    {"name": r.name, "status": r.status, "detail": r.detail, "hint": r.hint} for r in results
                ],
                "node_probe": probed.to_json() if probed is not None else None,
            }
        )
    else:
        from rich.table import Table
        from rich.text import Text

        table = Table(title="hyperlaunch doctor", title_justify="left")
        for header in ("check", "status", "detail", "hint"):
            table.add_column(header)
        for r in results:
            table.add_row(r.name, Text(r.status, style=_STYLE[r.status]), r.detail, r.hint)
        out.table(table)
        if probed is not None and probed.verdicts:
            out.table(_node_table(probed))
    if failed:
        raise ChecksFailed(f"{len(failed)} of {len(results)} checks failed: {', '.join(failed)}")


def _instance_type(launch: LaunchSettings, env: dict[str, str], answers: bool) -> CheckResult:
    """The instance type jobs here render for, and its source, as submit decides it."""
    from hyperlaunch.aws.hyperpod_lookup import describe_instance_source
    from hyperlaunch.core.errors import SlurmError
    from hyperlaunch.doctor.checks import check_instance_type
    from hyperlaunch.slurm import nodes as slurm_nodes

    def from_cluster() -> str:
        partition = launch.partition
        where = f"partition {partition}" if partition else "the default partition"
        names = None
        if answers:
            try:
                names = [node.name for node in slurm_nodes.partition_nodes(partition, env=env)]
            except SlurmError:
                names = None
        return describe_instance_source(cluster=launch.hyperpod_cluster, partition_nodes=names, where=where)

    return check_instance_type(launch.instance_type, launch.instance_type_source, from_cluster)


def _probe_nodes(env: dict[str, str], launch: LaunchSettings, local_names: frozenset[str]) -> ProbeResult:
    from hyperlaunch.doctor.node_probe import JobSide, probe_partition

    job = JobSide(torchrun=launch.torchrun or "", container_image=launch.container_image, local_names=local_names)
    return probe_partition(env, partition=launch.partition, job=job, progress=out.note)


def _node_table(probed: ProbeResult) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"compute nodes (partition {probed.partition})", title_justify="left")
    headers = ("node", "status", "GPUs", "EFA", "NCCL net", "Pyxis", "enroot", "python3", "Python", "hyperlaunch", "torch", "findings")
    for header in headers:
        table.add_column(header)
    for verdict in probed.verdicts:
        r = verdict.report
        python = f"{r.python_version} {r.python}" if r.python_version else (r.python or r.torchrun or "-")
        system_python = f"{r.system_python_version} {r.system_python}" if r.system_python_version else (r.system_python or "-")
        table.add_row(
            r.node,
            Text(verdict.status, style=_STYLE[verdict.status]),
            f"{r.gpus} ({r.gpu_source})" if r.gpus else "0",
            r.efa or "-",
            r.nccl_net or "-",
            "yes" if r.pyxis else "-",
            r.enroot or "-",
            system_python,
            python,
            r.hyperlaunch or "-",
            r.torch or "-",
            "; ".join(verdict.findings),
        )
    return table
