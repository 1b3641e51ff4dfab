"""The cluster's nodes and configuration as sinfo and scontrol report them (states, partitions,
GRES, features, whether the controller answers), and a command run once on each of some nodes
(srun)."""

from __future__ import annotations

import getpass
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.slurm import hostlist, runner


@dataclass(frozen=True)
class NodeInfo:
    """One node as sinfo reports it."""

    name: str
    state: str
    reason: str


def node_states(*, env: Mapping[str, str] | None = None) -> list[NodeInfo]:
    """Every node with its state (idle, alloc, down*, drain, ...) and reason."""
    out = runner.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], env=env, timeout=15).stdout
    nodes: dict[str, NodeInfo] = {}
    for line in out.splitlines():
        name, state, reason = (line.split("|", 2) + ["", ""])[:3]
        if name:
            nodes[name] = NodeInfo(name=name, state=state.strip(), reason=reason.strip())
    return [nodes[name] for name in sorted(nodes, key=_natural_key)]


def resume(names: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
    """Return drained nodes to service (`scontrol update State=RESUME`)."""
    runner.run(["scontrol", "update", f"NodeName={','.join(names)}", "State=RESUME"], env=env, timeout=15)


def config_values(*, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The running configuration (`scontrol show config`) as KEY -> value text.
    SlurmError when no controller answers."""
    out = runner.run(["scontrol", "show", "config"], env=env, timeout=15).stdout
    values: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            values.setdefault(key.strip(), value.strip())
    return values


def gres_types(*, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The generic resources slurm.conf declares (GresTypes of `scontrol show config`), e.g.
    ('gpu',); () when it declares none. SlurmError when no controller answers."""
    kinds = config_values(env=env).get("GresTypes", "")
    return () if kinds in ("", "(null)") else tuple(k.strip() for k in kinds.split(",") if k.strip())


def run_on_nodes(
    command: Sequence[str],
    *,
    nodes: Sequence[str],
    partition: str,
    env: Mapping[str, str] | None = None,
    start_within_s: int = 20,
    timeout_s: float = 90.0,
) -> runner.Result:
    """Run `command` once on each of `nodes` (one task per node) in a job of its own that never
    lingers: srun gives up when the nodes are not free within `start_within_s` (--immediate), the
    job's time limit is a minute, and when srun has not finished after `timeout_s` the job is
    cancelled (by its unique name) before SlurmError says so. A non-zero exit is returned."""
    name = f"hyperlaunch-probe-{uuid.uuid4().hex[:12]}"
    args = [
        "srun",
        f"--job-name={name}",
        f"--partition={partition}",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(nodes)}",
        "--ntasks-per-node=1",
        # The whole node, as a job gets it: no other job's step on it meanwhile.
        "--exclusive",
        "--time=1",
        f"--immediate={start_within_s}",
        "--quiet",
        *command,
    ]
    try:
        return runner.run(args, env=env, timeout=timeout_s, check=False)
    except SlurmError:
        try:
            runner.run(["scancel", f"--name={name}", f"--user={getpass.getuser()}"], env=env, timeout=15, check=False)
        except SlurmError:
            pass  # the error below is the one to report
        raise


@dataclass(frozen=True)
class PartitionNode:
    """One node of one partition, as sinfo lists it (a node in two partitions appears twice)."""

    name: str
    state: str = ""
    """sinfo's long state: idle, mixed, allocated, drained, down*, idle~ (powered down), ..."""
    partition: str = ""
    default: bool = False
    """The partition is the cluster's default (sinfo marks it with `*`)."""
    gres: str = "(null)"
    """As sinfo writes it (`gpu:8`), or `(null)`."""
    features: tuple[str, ...] = ()
    """The node's features (sinfo %f): where a cluster names the instance type there (AWS
    ParallelCluster: `dynamic,p5.48xlarge,...`), the job's presets can be chosen by it."""


def all_partition_nodes(*, env: Mapping[str, str] | None = None) -> list[PartitionNode]:
    """Every node of every partition with its state, GRES and features, in one sinfo call."""
    out = runner.run(["sinfo", "-h", "-N", "-o", "%N|%T|%P|%G|%f"], env=env, timeout=15).stdout
    rows = []
    for line in out.splitlines():
        fields = line.split("|", 4)
        if len(fields) < 3 or not fields[0].strip() or not fields[2].strip():
            continue
        names, state, partition = (field.strip() for field in fields[:3])
        gres = fields[3].strip() if len(fields) > 3 else "(null)"
        features = tuple(f for f in fields[4].strip().split(",") if f and f != "(null)") if len(fields) > 4 else ()
        for name in hostlist.expand(names):  # -N writes one name a line; a list expands too
            rows.append(PartitionNode(name, state, partition.rstrip("*"), partition.endswith("*"), gres, features))
    return sorted(rows, key=lambda row: (row.partition, _natural_key(row.name)))


def partition_nodes(partition: str | None, *, env: Mapping[str, str] | None = None) -> list[PartitionNode]:
    """The nodes of `partition` (None: the cluster's default one, sinfo's `*`), each once.
    Every partition is listed and filtered here, since `sinfo -p` cannot name the default."""
    nodes: dict[str, PartitionNode] = {}
    for row in all_partition_nodes(env=env):
        if (row.partition == partition) if partition else row.default:
            nodes.setdefault(row.name, row)
    return [nodes[name] for name in sorted(nodes, key=_natural_key)]


def controller_responds(*, env: Mapping[str, str] | None = None) -> bool:
    """True when slurmctld answers `scontrol ping`."""
    result = runner.run(["scontrol", "ping"], env=env, timeout=10, check=False)
    return result.returncode == 0 and "UP" in result.stdout


def _natural_key(name: str) -> tuple[str, int]:
    stem = name.rstrip("0123456789")
    digits = name[len(stem):]
    return (stem, int(digits) if digits else -1)
