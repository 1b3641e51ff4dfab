"""What hyperlaunch decides about the cluster before anything is rendered, each decision with
where it came from: the decided value goes into the JobSpec (so the job record holds it and
`resume` renders the same job), the source is printed beside the training settings.

Rendering never asks Slurm; this module does, through hyperlaunch.slurm, and only when the
user left the decision to it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hyperlaunch import slurm
from hyperlaunch.errors import SlurmError

_GPU_GRES = re.compile(r"(?:^|,)gpu(?::|$|\()")


@dataclass(frozen=True)
class Decision:
    """One job setting hyperlaunch decided (or the user set), and why."""

    name: str
    """The JobSpec field."""
    value: str | bool
    source: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def gres_gpus(*, gpus: int, partition: str | None, slurm_env: Mapping[str, str] | None) -> Decision:
    """Whether to request the job's GPUs as GRES (`--gpus-per-node`), asked of the cluster: only
    where slurm.conf declares GPU GRES and the partition's nodes have it. Many HyperPod clusters
    declare none, and sbatch refuses a GPU request there ("Invalid generic resource
    specification"); whole nodes (--exclusive) and torchrun's process count do instead.
    No cluster to ask (`slurm_env` None, or none answers): no GRES."""
    def off(why: str) -> Decision:
        return Decision("gres_gpus", "off", why)

    if gpus == 0:
        return off("no GPUs to request")
    if slurm_env is None:
        return off("no Slurm cluster asked")
    try:
        kinds = slurm.gres_types(env=slurm_env)
        if "gpu" not in kinds:
            declared = ",".join(kinds) or "(null)"
            return off(f"the cluster declares no GPU GRES (scontrol show config: GresTypes = {declared})")
        rows = slurm.partition_gres(env=slurm_env)
    except SlurmError as err:
        where = "no Slurm here (scontrol not on PATH)" if "not found on PATH" in str(err) else "no Slurm cluster answered"
        return off(f"{where}; --gres-gpus requests GPUs as GRES anyway")
    rows = [row for row in rows if (row.partition == partition if partition else row.default)]
    where = f"partition {partition}" if partition else "the default partition"
    if not rows:
        return off(f"sinfo lists no {where}")
    with_gpus = [row.gres for row in rows if _GPU_GRES.search(row.gres)]
    if not with_gpus:
        return off(f"{where}'s nodes have no GPU GRES (sinfo: {', '.join(sorted({r.gres for r in rows}))})")
    # Some nodes with GPU GRES and some without (a login node in the partition): requesting
    # GRES keeps the job on the ones with GPUs.
    return Decision("gres_gpus", "on", f"{where}'s nodes have GPU GRES (sinfo: {', '.join(sorted(set(with_gpus)))})")
