"""The record of a running dev cluster (cluster.json): its layout and the processes it started."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from hyperlaunch.devcluster.layout import ClusterLayout
from hyperlaunch.devcluster.procs import ProcessRecord


@dataclass
class ClusterState:
    """What `up` started; `down`, `kill-node` and `revive-node` act on exactly this."""

    layout: ClusterLayout
    daemons: dict[str, ProcessRecord] = field(default_factory=dict)
    killed_nodes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        lay = self.layout
        return {
            "root": str(lay.root),
            "nodes": lay.nodes,
            "cpus_per_node": lay.cpus_per_node,
            "memory_mb_per_node": lay.memory_mb_per_node,
            "base_port": lay.base_port,
            "hostname": lay.hostname,
            "gpu_nodes": lay.gpu_nodes,
            "daemons": {name: rec.to_json() for name, rec in self.daemons.items()},
            "killed_nodes": self.killed_nodes,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ClusterState:
        layout = ClusterLayout(
            root=Path(str(data["root"])),
            nodes=int(data["nodes"]),  # type: ignore[call-overload]
            cpus_per_node=int(data["cpus_per_node"]),  # type: ignore[call-overload]
            memory_mb_per_node=int(data["memory_mb_per_node"]),  # type: ignore[call-overload]
            base_port=int(data["base_port"]),  # type: ignore[call-overload]
            hostname=str(data["hostname"]),
            gpu_nodes=int(data.get("gpu_nodes", 0)),  # type: ignore[call-overload]  # records older than --gpu-nodes
        )
        daemons = {k: ProcessRecord.from_json(v) for k, v in dict(data["daemons"]).items()}  # type: ignore[call-overload]
        return cls(layout=layout, daemons=daemons, killed_nodes=list(data.get("killed_nodes", [])))  # type: ignore[call-overload]


def load(path: Path) -> ClusterState | None:
    try:
        return ClusterState.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # an unreadable record is treated as no record: nothing is signalled from it


def save(state: ClusterState, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
