"""doctor on the compute nodes: one short srun step on a partition's idle nodes runs
templates/node_probe.sh.j2 on each (one JSON line per node), and each node's report is judged
here: GPUs, EFA, the NCCL network plugin, Pyxis and enroot, and the Python, hyperlaunch and
torch that a job's torchrun would run on - so a launcher venv that the nodes cannot see, or
that holds another hyperlaunch, is caught before a job fails on it - and the system python3
that the job's supervisor runs on (hyperlaunch.supervisor's PYTHON, MIN_PYTHON or later).

Parsing and judging are pure functions of the reports; only `probe_partition` asks Slurm,
through hyperlaunch.slurm.nodes. Torch-free."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hyperlaunch import __version__
from hyperlaunch.core.errors import SlurmError
from hyperlaunch.doctor.checks import CheckResult, Status, passed, warned
from hyperlaunch.slurm import nodes as slurm_nodes
from hyperlaunch.slurm.nodes import PartitionNode
from hyperlaunch.supervisor import MIN_PYTHON, PYTHON

PROBE_FORMAT = 1
"""The `probe` field of the script's lines; a line without it is not a report."""
START_WITHIN_S = 20
"""How long srun may wait for the idle nodes (--immediate) before giving up."""
TIMEOUT_S = 90.0
"""The probe step's wall-clock limit; after it the step is cancelled."""
AUTO_RESUME_TASK_PLUGIN = "task/none"
TRIES = 2
"""Probes of a busy partition: the idle nodes sinfo named can be taken before srun asks for them."""
NODES_TAKEN = "Requested nodes are busy"
"""srun's words when --immediate could not have the nodes it named."""
_SEVERITY: dict[Status, int] = {"pass": 0, "warn": 1, "fail": 2}


@dataclass(frozen=True, kw_only=True)
class NodeReport:
    """What the probe found on one node (one JSON line of node_probe.sh.j2)."""

    node: str
    hostname: str = ""
    gpus: int = 0
    gpu_source: str = ""
    """nvidia-smi, or /dev/nvidia (device files counted) where nvidia-smi is missing."""
    efa: str = ""
    """EFA devices (comma-separated), `fi_info -p efa` when only libfabric says so, or ''."""
    pyxis: str = ""
    """The plugstack files naming Pyxis, comma-separated, or ''."""
    enroot: str = ""
    nccl_net: str = ""
    """The aws-ofi-nccl plugin file found, or ''."""
    torchrun: str = ""
    """The job's torchrun as found on the node, '' when it is not there (or not looked for)."""
    python: str = ""
    """The interpreter torchrun runs on."""
    python_version: str = ""
    hyperlaunch: str = ""
    """hyperlaunch's version as that interpreter imports it, '' when it cannot."""
    torch: str = ""
    transformers: str = ""
    """Its version where that interpreter has it ('' also from a probe of an older version)."""
    python_error: str = ""
    """The interpreter's last line of output when it failed to run."""
    system_python: str = ""
    """The python3 on the node's PATH (the batch host's, that the supervisor runs on), '' when none."""
    system_python_version: str = ""
    """What it printed for its version, X.Y.Z; '' when it failed to run."""
    system_python_error: str = ""
    """Its last line of output (or that it timed out) when it failed to run."""
    hyperpod: bool = False


@dataclass(frozen=True)
class NodeVerdict:
    """One probed node, judged."""

    report: NodeReport
    status: Status
    findings: tuple[str, ...] = ()
    """Each problem found, with what to do about it."""


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    """What probing one partition gave."""

    partition: str | None
    """The partition probed (the cluster's default when none was named), None when unknown."""
    probed: tuple[str, ...] = ()
    """The idle nodes the step ran on."""
    verdicts: tuple[NodeVerdict, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    """(node, state) of the partition's nodes that were not idle."""
    error: str = ""
    """Why the step failed or did not run, '' when it ran."""

    @property
    def silent(self) -> list[str]:
        """Probed nodes that printed no report."""
        answered = {verdict.report.node for verdict in self.verdicts}
        return [node for node in self.probed if node not in answered]

    def to_json(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "nodes": [
                {**dataclasses.asdict(v.report), "status": v.status, "findings": list(v.findings)} for v in self.verdicts
            ],
            "silent": self.silent,
            "skipped": [{"node": node, "state": state} for node, state in self.skipped],
            "error": self.error,
        }


@dataclass(frozen=True, kw_only=True)
class JobSide:
    """What a job submitted from here would run with, to compare the nodes against."""

    torchrun: str
    """The torchrun command of the job ('' when it runs in a container image)."""
    container_image: str | None = None
    hyperlaunch_version: str = __version__
    """This login node's hyperlaunch."""
    local_names: frozenset[str] = field(default_factory=frozenset)
    """This host's names: a partition node named like it is the login node."""
    task_plugin: str | None = None
    """TaskPlugin of the cluster's configuration (HyperPod's auto-resume needs task/none)."""


# ---------------------------------------------------------------- pure: parse and judge


def parse_reports(stdout: str) -> list[NodeReport]:
    """The reports in the probe step's output, one per node (the last wins); lines that are
    not reports (srun's own messages) are skipped, and so are fields of the wrong type."""
    types = {f.name: type(f.default) for f in dataclasses.fields(NodeReport) if f.name != "node"}
    reports: dict[str, NodeReport] = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict) or data.get("probe") != PROBE_FORMAT or not isinstance(data.get("node"), str):
            continue
        # bool is an int in Python: a true/false gpus field is refused by the exact type check.
        values: dict[str, Any] = {k: v for k, v in data.items() if k in types and type(v) is types[k]}
        reports[data["node"]] = NodeReport(node=data["node"], **values)
    return list(reports.values())


def choose_nodes(
    rows: Sequence[PartitionNode], partition: str | None
) -> tuple[str | None, list[str], list[tuple[str, str]]]:
    """(partition, its idle nodes, (node, state) of the others). No name: the default partition.
    Only plain `idle` counts: mixed or allocated nodes run jobs, and idle~, idle#, idle* are
    powered down, powering up or not responding."""
    if partition is None:
        partition = next((row.partition for row in rows if row.default), None)
    mine = [row for row in rows if row.partition == partition]
    idle = [row.name for row in mine if row.state == "idle"]
    return partition, idle, [(row.name, row.state) for row in mine if row.state != "idle"]


def judge(report: NodeReport, job: JobSide) -> NodeVerdict:
    """A node fails when a job could not start its supervisor or its trainer there, and warns
    where the job would run, but not as it should (another hyperlaunch, TCP instead of EFA, no
    auto-resume)."""
    problems: list[tuple[Status, str]] = _system_python_problems(report)
    if job.container_image is None:
        problems += _python_problems(report, job)
    if report.efa and not report.nccl_net:
        problems.append(
            ("warn", "EFA devices but no aws-ofi-nccl plugin: NCCL would use TCP sockets; install it (EFA installer)")
        )
    if report.pyxis and not report.enroot:
        problems.append(("warn", "Pyxis is configured but enroot is not on PATH: container jobs would fail; install enroot"))
    if report.hyperpod and job.task_plugin is not None and job.task_plugin != AUTO_RESUME_TASK_PLUGIN:
        problems.append(
            ("warn", f"TaskPlugin={job.task_plugin}: HyperPod auto-resume needs {AUTO_RESUME_TASK_PLUGIN} in slurm.conf")
        )
    if report.node in job.local_names:
        problems.append(
            ("warn", "this is the login node doctor runs on: jobs could land on it; --exclude it or use another partition")
        )
    status: Status = max((s for s, _ in problems), key=_SEVERITY.__getitem__, default="pass")
    return NodeVerdict(report, status, tuple(text for _, text in problems))


def _system_python_problems(report: NodeReport) -> list[tuple[Status, str]]:
    """The batch host's python3, which the job's supervisor runs on outside any container (so a
    container job needs it too): missing, failing, or older than MIN_PYTHON fails the node."""
    minimum = ".".join(map(str, MIN_PYTHON))
    needs = f"the job's supervisor runs on the batch host's {PYTHON} ({minimum} or later)"
    if not report.system_python:
        return [("fail", f"no {PYTHON} on PATH: {needs}")]
    if report.system_python_error or not report.system_python_version:
        error = report.system_python_error or "no version printed"
        return [("fail", f"{report.system_python} fails here: {error}; {needs}")]
    version = _major_minor(report.system_python_version)
    if version is None:
        return [("fail", f"{report.system_python} printed {report.system_python_version!r}, not a version: {needs}")]
    if version < MIN_PYTHON:
        return [("fail", f"{PYTHON} {report.system_python_version} at {report.system_python} is too old: {needs}")]
    return []


def _major_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of an X.Y.Z version, None when it is not one."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.\d+", version.strip())
    return (int(match[1]), int(match[2])) if match else None


def _python_problems(report: NodeReport, job: JobSide) -> list[tuple[Status, str]]:
    shared = "put the launcher venv on storage every node mounts (/fsx) or set torchrun in hyperlaunch.toml"
    if not report.torchrun:
        return [("fail", f"no {job.torchrun or 'torchrun'} on this node: {shared}")]
    if report.python_error or not report.python_version:
        error = report.python_error or "no version printed"
        return [("fail", f"{report.torchrun} runs on {report.python or '?'}, which fails here: {error}")]
    problems: list[tuple[Status, str]] = []
    if not report.hyperlaunch:
        problems.append(("fail", f"{report.python} cannot import hyperlaunch: pip install hyperlaunch there, or {shared}"))
    elif report.hyperlaunch != job.hyperlaunch_version:
        problems.append(
            (
                "warn",
                f"hyperlaunch {report.hyperlaunch} on the node, {job.hyperlaunch_version} here: "
                "install the same version in both, or submit from the nodes' venv",
            )
        )
    if not report.torch:
        problems.append(("fail", f"{report.python} has no torch: the trainer cannot start"))
    elif not report.transformers:
        problems.append((
            "warn",
            f"{report.python} has no transformers: the bundled trainer cannot start (pip install 'hyperlaunch[train]'"
            " there); a --script job that does not import it runs",
        ))
    return problems


def summary(result: ProbeResult) -> CheckResult:
    """The probe as one line of doctor's report; a node's fail fails doctor."""
    name = "compute nodes"
    where = f"partition {result.partition}" if result.partition else "the default partition"
    busy = f"; skipped (not idle): {_listing(result.skipped)}" if result.skipped else ""
    if result.error and not result.verdicts:
        return warned(
            name,
            f"probe of {where} failed: {result.error}{busy}",
            "check `sinfo` and that srun can start a step there, or skip the probe with --no-probe",
        )
    if not result.probed:
        return warned(name, f"no idle node in {where} to probe{busy}", "run doctor again when a node is idle")
    counts = {s: sum(v.status == s for v in result.verdicts) for s in ("pass", "warn", "fail")}
    detail = f"{len(result.probed)} idle node(s) of {where} probed: " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n
    )
    if result.silent:
        detail += f"; no report from {', '.join(result.silent)}"
    detail += busy
    worst = max((v for v in result.verdicts), key=lambda v: _SEVERITY[v.status], default=None)
    if worst is not None and worst.status != "pass":
        hint = f"{worst.report.node}: {worst.findings[0]} (all findings in the node table)"
        return CheckResult(name=name, status=worst.status, detail=detail, hint=hint)
    if result.silent or result.error:
        why = result.error or "the probe printed nothing there"
        return warned(name, detail, f"{why}: look at those nodes (sinfo -R, slurmd's log)")
    return passed(name, detail)


def _listing(pairs: Sequence[tuple[str, str]], limit: int = 8) -> str:
    shown = ", ".join(f"{node} ({state})" for node, state in pairs[:limit])
    return shown + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")


# ---------------------------------------------------------------- the probe itself


def probe_partition(
    env: Mapping[str, str],
    *,
    partition: str | None,
    job: JobSide,
    progress: Callable[[str], None],
) -> ProbeResult:
    """Run the probe on the idle nodes of `partition` (the default one when None) and judge
    each node. Slurm's refusals come back as the result's error, never raised."""
    from hyperlaunch.script.render import render_node_probe

    command = ["bash", "-c", render_node_probe(), "hyperlaunch-probe", job.torchrun]
    for attempt in range(TRIES):
        try:
            partition, idle, skipped = choose_nodes(slurm_nodes.all_partition_nodes(env=env), partition)
        except SlurmError as err:
            return ProbeResult(partition=partition, error=err.one_line())
        if partition is None:
            return ProbeResult(partition=None, error="sinfo shows no default partition; name one with --partition")
        if not idle:
            return ProbeResult(partition=partition, skipped=tuple(skipped))
        progress(f"probing {len(idle)} idle node(s) in partition {partition} (at most {TIMEOUT_S:.0f} s)...")
        try:
            step = slurm_nodes.run_on_nodes(
                command, nodes=idle, partition=partition, env=env, start_within_s=START_WITHIN_S, timeout_s=TIMEOUT_S
            )
        except SlurmError as err:
            return ProbeResult(partition=partition, probed=tuple(idle), skipped=tuple(skipped), error=err.one_line())
        # Another job took some of the idle nodes between sinfo and srun: ask again which are idle.
        if step.returncode == 0 or NODES_TAKEN not in step.one_line_error() or attempt == TRIES - 1:
            break
        progress("some of those nodes were taken meanwhile; asking Slurm again which are idle")
    order = {node: index for index, node in enumerate(idle)}
    reports = sorted(parse_reports(step.stdout), key=lambda report: order.get(report.node, len(order)))
    if any(report.hyperpod for report in reports) and job.task_plugin is None:
        try:
            job = dataclasses.replace(job, task_plugin=slurm_nodes.config_values(env=env).get("TaskPlugin"))
        except SlurmError:
            pass  # the auto-resume check is skipped; the others stand
    return ProbeResult(
        partition=partition,
        probed=tuple(idle),
        verdicts=tuple(judge(report, job) for report in reports),
        skipped=tuple(skipped),
        error="" if step.returncode == 0 else f"srun exited {step.returncode}: {step.one_line_error()}",
    )
