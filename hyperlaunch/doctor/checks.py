"""Pre-flight checks of the cluster a job will run on: pass, warn or fail, each with a hint.

Every check is a small function of `Probes` (which binary is on PATH, what a command prints,
which files exist, the mount table), so unit tests hand in fakes and the real probes run
Slurm commands through hyperlaunch.slurm.runner only. Torch-free: doctor runs on a login node.
These checks look from the login node; hyperlaunch.doctor.node_probe looks from the compute nodes.
"""

from __future__ import annotations

import glob as globbing
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from hyperlaunch.aws.hyperpod import HYPERPOD_MARKER_DIR as HYPERPOD_MARKER
from hyperlaunch.core.errors import SlurmError
from hyperlaunch.core.mounts import LOCAL_FS_TYPES, is_shared, mount_of
from hyperlaunch.slurm import runner as slurm_runner

Status = Literal["pass", "warn", "fail"]

# Filesystem types every node can mount at the same path (FSx for Lustre is lustre; EFS and
# FSx for OpenZFS/ONTAP are nfs/nfs4).
_SLURM_COMMANDS = frozenset({"sbatch", "sacct", "sacctmgr", "scontrol", "srun", "sinfo", "squeue", "scancel"})
_NOT_RUN = -1
_TIMED_OUT = 124
_TIMEOUT_S = 10.0


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One line of the doctor's report."""

    name: str
    status: Status
    detail: str
    """What was found."""
    hint: str = ""
    """What to do about a warn or fail (empty when nothing is needed)."""


@dataclass(frozen=True)
class CommandOutput:
    """What a probed command printed; returncode -1: could not be run, 124: timed out."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def first_line(self) -> str:
        text = (self.stderr or self.stdout).strip()
        return text.splitlines()[0] if text else f"exit code {self.returncode}"


@dataclass(frozen=True, kw_only=True)
class Probes:
    """Everything doctor looks at. `system_probes()` gives the real ones."""

    which: Callable[[str], str | None]
    run: Callable[[Sequence[str]], CommandOutput]
    exists: Callable[[str], bool]
    glob: Callable[[str], list[str]]
    realpath: Callable[[str], str]
    mounts: Callable[[], str]
    """Text of /proc/self/mounts."""
    local_names: Callable[[], frozenset[str]]
    """This host's names and addresses (to recognise a one-machine dev cluster)."""


# ---------------------------------------------------------------- checks


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name=name, status="pass", detail=detail)


def warned(name: str, detail: str, hint: str) -> CheckResult:
    return CheckResult(name=name, status="warn", detail=detail, hint=hint)


def failed(name: str, detail: str, hint: str) -> CheckResult:
    return CheckResult(name=name, status="fail", detail=detail, hint=hint)


_LOGIN_NODE_HINT = "run doctor on a Slurm login node"


def check_sbatch(probes: Probes) -> CheckResult:
    if probes.which("sbatch") is None:
        return failed("sbatch", "sbatch is not on PATH", _LOGIN_NODE_HINT)
    version = probes.run(["sbatch", "--version"])
    if not version.ok:
        return failed(
            "sbatch",
            f"sbatch --version failed: {version.first_line()}",
            "check that SLURM_CONF (or /etc/slurm/slurm.conf) names a readable slurm.conf",
        )
    ping = probes.run(["scontrol", "ping"])
    if not (ping.ok and "UP" in ping.stdout):
        return failed(
            "sbatch",
            f"{version.stdout.strip()} is installed, but slurmctld does not answer: {ping.first_line()}",
            "check SLURM_CONF and that slurmctld runs (`scontrol ping`)",
        )
    return passed("sbatch", f"{version.stdout.strip()}; slurmctld answers")


def check_sacct(probes: Probes) -> CheckResult:
    hint = "submitit and `hyperlaunch status` poll sacct: run slurmdbd and set AccountingStorageType=accounting_storage/slurmdbd"
    if probes.which("sacct") is None:
        return failed("sacct", "sacct is not on PATH", hint)
    # A job id that no one asks about keeps the query tiny; sacct exits 0 even when it
    # cannot reach slurmdbd, so its stderr decides.
    out = probes.run(["sacct", "-n", "-X", "-P", "-o", "JobID", "-j", "1"])
    if not out.ok or "error" in out.stderr.lower():
        return failed("sacct", f"sacct does not answer: {out.first_line()}", hint)
    return passed("sacct", "sacct answers (slurmdbd reachable)")


def check_accounting(probes: Probes) -> CheckResult:
    out = probes.run(["scontrol", "show", "config"])
    if not out.ok:
        return failed(
            "accounting", f"cannot read the Slurm configuration: {out.first_line()}", "check SLURM_CONF and that slurmctld runs"
        )
    match = re.search(r"^AccountingStorageType\s*=\s*(\S+)", out.stdout, re.MULTILINE)
    storage = match.group(1) if match else "accounting_storage/none"
    if storage.endswith("/none"):
        return failed(
            "accounting",
            f"AccountingStorageType = {storage}: no job history, so restarts cannot be traced",
            "set AccountingStorageType=accounting_storage/slurmdbd in slurm.conf",
        )
    return passed("accounting", f"AccountingStorageType = {storage}")


def check_pyxis(probes: Probes) -> CheckResult:
    if probes.which("srun") is None:
        return failed("pyxis", "srun is not on PATH", _LOGIN_NODE_HINT)
    out = probes.run(["srun", "--help"])
    if "--container-image" in out.stdout + out.stderr:
        return passed("pyxis", "srun knows --container-image (Pyxis plugin loaded)")
    if not out.ok and not out.stdout:
        return warned("pyxis", f"cannot tell: srun --help failed: {out.first_line()}", "fix the Slurm checks above, then run doctor again")
    return warned(
        "pyxis",
        "srun does not know --container-image: Pyxis is not installed; --container-image jobs would fail",
        "install Pyxis (NVIDIA/pyxis) and enroot on every node, or run without --container-image",
    )


def check_enroot(probes: Probes) -> CheckResult:
    if probes.which("enroot") is None:
        return warned(
            "enroot",
            "enroot is not on PATH: no .sqsh images can be built here",
            "install enroot (NVIDIA/enroot) for setup-pyxis.sh and Pyxis; not needed without containers",
        )
    out = probes.run(["enroot", "version"])
    return passed("enroot", f"enroot {out.stdout.strip() if out.ok else 'present'}")


def check_shared_filesystem(probes: Probes, checkpoint_dir: Path) -> CheckResult:
    return _check_shared(
        probes, checkpoint_dir, name="shared filesystem", what="these checkpoints",
        hint="use --checkpoint-dir on FSx for Lustre, EFS or NFS (e.g. /fsx/checkpoints)",
    )


def check_data_filesystem(probes: Probes, data: Path) -> CheckResult:
    """Every rank reads --data (a raw file is prepared once into the checkpoint folder's cache,
    which the shared-filesystem check covers): it must be where every node sees it."""
    return _check_shared(
        probes, data, name="data filesystem", what="this --data",
        hint="put the data (or its prepare-data folder) on FSx for Lustre, EFS or NFS (e.g. /fsx/data)",
    )


def _check_shared(probes: Probes, path: Path, *, name: str, what: str, hint: str) -> CheckResult:
    existing = _nearest_existing(probes, path)
    where = str(path) if existing == str(path) else f"{path} (not created yet; its parent {existing})"
    fs_type = filesystem_type(probes.realpath(existing), probes.mounts())
    if is_shared(fs_type):
        return passed(name, f"{where} is on {fs_type}, shared by the nodes")
    kind = "local" if fs_type in LOCAL_FS_TYPES else "unknown"
    nodes = slurm_nodes(probes)
    if nodes and all(node.on_this_host(probes.local_names()) for node in nodes):
        return passed(name, f"{where} is on {kind} {fs_type}, but every Slurm node runs on this host (dev cluster)")
    return warned(name, f"{where} is on {kind} filesystem {fs_type}: nodes on other hosts cannot see {what}", hint)


def check_efa(probes: Probes) -> CheckResult:
    # EFA devices are named rdmapXsY on current instances; their driver link says efa.
    devices = [
        Path(device).name
        for device in probes.glob("/sys/class/infiniband/*")
        if "efa" in Path(device).name or probes.realpath(f"{device}/device/driver").endswith("/efa")
    ]
    if devices:
        return passed("efa", f"{len(devices)} EFA device(s): {', '.join(sorted(devices))}")
    if probes.which("fi_info") is not None and probes.run(["fi_info", "-p", "efa"]).ok:
        return passed("efa", "libfabric's efa provider answers (fi_info -p efa)")
    return warned(
        "efa",
        "no EFA devices here: NCCL would use TCP sockets between nodes",
        "expected on g5/g6/CPU nodes; on p4d/p5/p5en/p6 install the EFA driver and aws-ofi-nccl (EFA installer)",
    )


def check_hyperpod(probes: Probes) -> CheckResult:
    # Informational either way: outside HyperPod, Slurm's own requeue still restarts jobs.
    if probes.exists(HYPERPOD_MARKER):
        return passed("hyperpod", f"HyperPod detected ({HYPERPOD_MARKER}): srun gets --auto-resume=1")
    return passed("hyperpod", f"not HyperPod (no {HYPERPOD_MARKER}): restarts rely on Slurm requeue alone")


def check_gpus(probes: Probes) -> CheckResult:
    name = "gpus per node"
    nodes = slurm_nodes(probes)
    counts = [node.gpus for node in nodes]
    if any(counts):
        distinct = sorted(set(counts))
        if len(distinct) == 1:
            return passed(name, f"{distinct[0]} GPU(s) on each of {len(counts)} node(s) (Gres)")
        summary = ", ".join(f"{n}: {counts.count(n)} node(s)" for n in distinct)
        return warned(
            name,
            f"nodes differ in GPUs ({summary})",
            "pick a partition of one instance type, or set --gpus-per-node to the smallest",
        )
    local = _local_gpu_count(probes)
    if local:
        where = "Slurm advertises no gpu Gres, but" if nodes else "Slurm nodes unreadable;"
        return warned(
            name,
            f"{where} nvidia-smi sees {local} GPU(s) on this host",
            "set --gpus-per-node; add GresTypes=gpu and Gres=gpu:N to slurm.conf for --gpus-per-node scheduling",
        )
    slurm_view = f"{len(nodes)} Slurm node(s) without gpu Gres" if nodes else "Slurm nodes unreadable"
    return warned(
        name,
        f"no GPUs found ({slurm_view}, no nvidia-smi here)",
        "fine for the dev cluster: use --instance-type cpu (gloo); GPU jobs need GPU nodes",
    )


def check_instance_type(
    configured: str | None, configured_source: str | None, from_cluster: Callable[[], str]
) -> CheckResult:
    """Which instance type jobs render for, and what decided it: a flag or config layer, else
    the HyperPod cluster (`from_cluster`: hyperpod_lookup.describe_instance_source), else cpu."""
    name = "instance type"
    if configured is not None:
        return passed(name, f"{configured} (from {configured_source})")
    line = from_cluster()
    if line.startswith(("none from the cluster", "cannot tell")):
        return warned(name, line, "jobs render for cpu nodes: pass --instance-type (or --hyperpod-cluster) for GPU nodes")
    if "warning:" in line or "no preset" in line:
        return warned(name, line, "pass --instance-type to choose")
    return passed(name, line)


def run_checks(probes: Probes, *, checkpoint_dir: Path, data: Path | None = None) -> list[CheckResult]:
    """All checks in report order (the data's filesystem only when a --data is given).
    Commands are cached so `scontrol show nodes` runs once."""
    cached = _caching(probes)
    data_check = [check_data_filesystem(cached, data)] if data is not None else []
    return [
        check_sbatch(cached),
        check_sacct(cached),
        check_accounting(cached),
        check_pyxis(cached),
        check_enroot(cached),
        check_shared_filesystem(cached, checkpoint_dir),
        *data_check,
        check_efa(cached),
        check_hyperpod(cached),
        check_gpus(cached),
    ]


# ---------------------------------------------------------------- parsing helpers


@dataclass(frozen=True)
class SlurmNode:
    """The fields of `scontrol show nodes -o` that doctor needs."""

    name: str
    hostname: str
    address: str
    gpus: int

    def on_this_host(self, local_names: frozenset[str]) -> bool:
        return self.hostname in local_names or self.address in local_names


def slurm_nodes(probes: Probes) -> list[SlurmNode]:
    """Every node Slurm knows, or [] when scontrol cannot say."""
    out = probes.run(["scontrol", "show", "nodes", "-o"])
    return parse_nodes(out.stdout) if out.ok else []


def parse_nodes(text: str) -> list[SlurmNode]:
    nodes = []
    for line in text.splitlines():
        # Values of the keys read here never hold spaces (Reason= and OS= may; they are skipped).
        fields = dict(re.findall(r"(?:^|\s)(NodeName|NodeHostName|NodeAddr|Gres)=(\S*)", line))
        if "NodeName" in fields:
            nodes.append(
                SlurmNode(
                    name=fields["NodeName"],
                    hostname=fields.get("NodeHostName", ""),
                    address=fields.get("NodeAddr", ""),
                    gpus=gpus_in_gres(fields.get("Gres", "")),
                )
            )
    return nodes


def gpus_in_gres(gres: str) -> int:
    """gpu:8, gpu:h100:8(S:0-1), gpu:a100:4,gpu:v100:2 -> 8, 8, 6; (null) -> 0."""
    total = 0
    for item in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = item.strip().split(":")
        if parts[0] == "gpu":
            total += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return total


def filesystem_type(path: str, mounts_text: str) -> str:
    """The type of the mount holding `path`: the longest mount point that contains it."""
    found = mount_of(path, mounts_text)
    return found[1] if found else "unknown"


def _nearest_existing(probes: Probes, path: Path) -> str:
    current = Path(os.path.abspath(path))
    while not probes.exists(str(current)) and current.parent != current:
        current = current.parent
    return str(current)


def _local_gpu_count(probes: Probes) -> int:
    if probes.which("nvidia-smi") is None:
        return 0
    out = probes.run(["nvidia-smi", "-L"])
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.ok else 0


def _caching(probes: Probes) -> Probes:
    """Runs each command once; after one Slurm command timed out the others are not tried,
    so a cluster that does not answer costs one timeout, not one per check."""
    seen: dict[tuple[str, ...], CommandOutput] = {}
    slurm_timeout: list[CommandOutput] = []

    def run(args: Sequence[str]) -> CommandOutput:
        key = tuple(args)
        if key in seen:
            return seen[key]
        if args[0] in _SLURM_COMMANDS and slurm_timeout:
            return CommandOutput(_TIMED_OUT, "", f"not tried: {slurm_timeout[0].first_line()}")
        seen[key] = probes.run(args)
        if args[0] in _SLURM_COMMANDS and seen[key].returncode == _TIMED_OUT:
            slurm_timeout.append(seen[key])
        return seen[key]

    names = probes.local_names()
    return replace(probes, run=run, local_names=lambda: names)


# ---------------------------------------------------------------- the real probes


def system_probes(env: Mapping[str, str]) -> Probes:
    """Probes of this machine; Slurm commands see `env` (its SLURM_CONF picks the cluster)."""

    def which(name: str) -> str | None:
        return shutil.which(name, path=env.get("PATH"))

    def run(args: Sequence[str]) -> CommandOutput:
        if which(args[0]) is None:
            return CommandOutput(_NOT_RUN, "", f"{args[0]} not found on PATH")
        if args[0] in _SLURM_COMMANDS:
            try:
                result = slurm_runner.run(args, env=env, timeout=_TIMEOUT_S, check=False)
            except SlurmError as err:  # with check=False only a timeout, or a SLURM_CONF that is no file
                return CommandOutput(_TIMED_OUT, "", err.one_line())
            return CommandOutput(result.returncode, result.stdout, result.stderr)
        try:
            proc = subprocess.run(list(args), env=dict(env), capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as err:
            return CommandOutput(_TIMED_OUT, "", str(err))
        except OSError as err:
            return CommandOutput(_NOT_RUN, "", str(err))
        return CommandOutput(proc.returncode, proc.stdout, proc.stderr)

    def mounts() -> str:
        try:
            return Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    return Probes(
        which=which,
        run=run,
        exists=os.path.exists,
        glob=globbing.glob,
        realpath=os.path.realpath,
        mounts=mounts,
        local_names=_local_names,
    )


def _local_names() -> frozenset[str]:
    hostname = socket.gethostname()
    names = {hostname, hostname.split(".")[0], socket.getfqdn(), "localhost", "127.0.0.1", "::1"}
    try:
        names.update(socket.gethostbyname_ex(hostname)[2])
    except OSError:
        pass  # a hostname that does not resolve still matches by name
    return frozenset(names)
