"""Doctor's checks against fake probes: each check's pass/warn/fail and hint, the parsers,
and the CLI's exit code and JSON. No Slurm, no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from hyperlaunch.doctor import checks as doctor
from hyperlaunch.doctor.checks import CommandOutput, Probes

THIS_HOST = frozenset({"login1", "10.0.0.5", "localhost", "127.0.0.1"})
NODES_REMOTE = (
    "NodeName=gpu1 Arch=x86_64 CoresPerSocket=48 Gres=gpu:h100:8(S:0-1) NodeAddr=10.0.1.1 NodeHostName=gpu1 "
    "OS=Linux 5.15.0 #1 SMP State=IDLE Reason=a b=c\n"
    "NodeName=gpu2 Gres=gpu:h100:8(S:0-1) NodeAddr=10.0.1.2 NodeHostName=gpu2 State=IDLE\n"
)
NODES_DEV = (
    "NodeName=node1 Gres=(null) NodeAddr=127.0.0.1 NodeHostName=login1 State=IDLE\n"
    "NodeName=node2 Gres=(null) NodeAddr=127.0.0.1 NodeHostName=login1 State=IDLE\n"
)
MOUNTS = (
    "/dev/root / ext4 rw 0 0\n"
    "tmpfs /tmp tmpfs rw 0 0\n"
    "10.0.0.9@tcp:/abc /fsx lustre rw 0 0\n"
    "fs-1.efs:/ /mnt/my\\040efs nfs4 rw 0 0\n"
)
HEALTHY: dict[tuple[str, ...], CommandOutput] = {
    ("sbatch", "--version"): CommandOutput(0, "slurm 23.11.4\n", ""),
    ("scontrol", "ping"): CommandOutput(0, "Slurmctld(primary) at head is UP\n", ""),
    ("sacct", "-n", "-X", "-P", "-o", "JobID", "-j", "1"): CommandOutput(0, "", ""),
    ("scontrol", "show", "config"): CommandOutput(0, "AccountingStorageType   = accounting_storage/slurmdbd\n", ""),
    ("srun", "--help"): CommandOutput(0, "Usage: srun\n      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n", ""),
    ("enroot", "version"): CommandOutput(0, "3.4.1\n", ""),
    ("scontrol", "show", "nodes", "-o"): CommandOutput(0, NODES_REMOTE, ""),
    ("nvidia-smi", "-L"): CommandOutput(0, "GPU 0: NVIDIA H100 (UUID: x)\nGPU 1: NVIDIA H100 (UUID: y)\n", ""),
}


@dataclass
class FakeMachine:
    """A login node described by data; probes() turns it into doctor's Probes."""

    binaries: set[str] = field(default_factory=lambda: {"sbatch", "sacct", "scontrol", "srun", "enroot"})
    outputs: dict[tuple[str, ...], CommandOutput] = field(default_factory=lambda: dict(HEALTHY))
    paths: set[str] = field(default_factory=lambda: {"/", "/fsx", "/fsx/ckpt", "/tmp", "/home"})
    links: dict[str, str] = field(default_factory=dict)
    infiniband: list[str] = field(default_factory=list)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, args: Sequence[str]) -> CommandOutput:
        self.calls.append(tuple(args))
        return self.outputs.get(tuple(args), CommandOutput(1, "", f"{args[0]}: error: unexpected call"))

    def probes(self) -> Probes:
        return Probes(
            which=lambda name: f"/usr/bin/{name}" if name in self.binaries else None,
            run=self.run,
            exists=lambda path: path in self.paths,
            glob=lambda pattern: list(self.infiniband) if pattern == "/sys/class/infiniband/*" else [],
            realpath=lambda path: self.links.get(path, path),
            mounts=lambda: MOUNTS,
            local_names=lambda: THIS_HOST,
        )


def by_name(machine: FakeMachine, checkpoint_dir: str = "/fsx/ckpt") -> dict[str, doctor.CheckResult]:
    return {r.name: r for r in doctor.run_checks(machine.probes(), checkpoint_dir=Path(checkpoint_dir))}


def test_a_healthy_gpu_cluster_passes_everything_it_can() -> None:
    machine = FakeMachine(infiniband=["/sys/class/infiniband/rdmap16s27"])
    machine.links["/sys/class/infiniband/rdmap16s27/device/driver"] = "/sys/bus/pci/drivers/efa"
    machine.paths.add("/opt/sagemaker_cluster")
    results = by_name(machine)
    assert {name: r.status for name, r in results.items()} == {
        "sbatch": "pass",
        "sacct": "pass",
        "accounting": "pass",
        "pyxis": "pass",
        "enroot": "pass",
        "shared filesystem": "pass",
        "efa": "pass",
        "hyperpod": "pass",
        "gpus per node": "pass",
    }
    assert "lustre" in results["shared filesystem"].detail
    assert "8 GPU(s) on each of 2 node(s)" in results["gpus per node"].detail
    assert "rdmap16s27" in results["efa"].detail and "auto-resume" in results["hyperpod"].detail
    assert machine.calls.count(("scontrol", "show", "nodes", "-o")) == 1  # cached across checks


def test_missing_slurm_fails_with_hints() -> None:
    machine = FakeMachine(binaries=set())
    results = by_name(machine)
    for name in ("sbatch", "sacct", "pyxis"):
        assert results[name].status == "fail" and "not on PATH" in results[name].detail and results[name].hint


def test_controller_down_fails_sbatch() -> None:
    machine = FakeMachine()
    machine.outputs[("scontrol", "ping")] = CommandOutput(1, "Slurmctld(primary) at head is DOWN\n", "")
    result = doctor.check_sbatch(machine.probes())
    assert result.status == "fail" and "does not answer" in result.detail and "SLURM_CONF" in result.hint


def test_sacct_errors_on_stderr_fail_even_with_exit_code_zero() -> None:
    machine = FakeMachine()
    machine.outputs[("sacct", "-n", "-X", "-P", "-o", "JobID", "-j", "1")] = CommandOutput(
        0, "", "sacct: error: Problem talking to the database: Connection refused\n"
    )
    result = doctor.check_sacct(machine.probes())
    assert result.status == "fail" and "Connection refused" in result.detail and "slurmdbd" in result.hint


def test_accounting_none_fails() -> None:
    machine = FakeMachine()
    machine.outputs[("scontrol", "show", "config")] = CommandOutput(0, "AccountingStorageType   = accounting_storage/none\n", "")
    result = doctor.check_accounting(machine.probes())
    assert result.status == "fail" and "accounting_storage/slurmdbd" in result.hint


def test_pyxis_missing_warns_with_an_install_hint() -> None:
    machine = FakeMachine()
    machine.outputs[("srun", "--help")] = CommandOutput(0, "Usage: srun\n      --container=path  OCI bundle\n", "")
    result = doctor.check_pyxis(machine.probes())
    assert result.status == "warn" and "Pyxis" in result.detail and "pyxis" in result.hint.lower()


def test_enroot_missing_warns() -> None:
    machine = FakeMachine(binaries={"sbatch", "sacct", "scontrol", "srun"})
    result = doctor.check_enroot(machine.probes())
    assert result.status == "warn" and "setup-pyxis.sh" in result.hint


def test_local_checkpoint_dir_warns_on_a_multi_host_cluster() -> None:
    result = doctor.check_shared_filesystem(FakeMachine().probes(), Path("/home/me/ckpt"))
    assert result.status == "warn" and "ext4" in result.detail and "/fsx" in result.hint
    assert "not created yet" in result.detail and "/home" in result.detail


def test_local_data_warns_on_a_multi_host_cluster_and_is_checked_only_when_given() -> None:
    result = doctor.check_data_filesystem(FakeMachine().probes(), Path("/home/me/corpus.jsonl"))
    assert (result.name, result.status) == ("data filesystem", "warn")
    assert "--data" in result.detail and "/fsx" in result.hint
    names = [r.name for r in doctor.run_checks(FakeMachine().probes(), checkpoint_dir=Path("/fsx/ckpt"))]
    assert "data filesystem" not in names
    names = [r.name for r in doctor.run_checks(FakeMachine().probes(), checkpoint_dir=Path("/fsx/ckpt"), data=Path("/home/me/d"))]
    assert names.index("data filesystem") == names.index("shared filesystem") + 1


def test_local_checkpoint_dir_passes_when_every_node_is_this_host() -> None:
    machine = FakeMachine()
    machine.outputs[("scontrol", "show", "nodes", "-o")] = CommandOutput(0, NODES_DEV, "")
    result = doctor.check_shared_filesystem(machine.probes(), Path("/tmp"))
    assert result.status == "pass" and "tmpfs" in result.detail and "this host" in result.detail


def test_efa_found_by_fi_info_or_missing() -> None:
    machine = FakeMachine(binaries={"fi_info"})
    machine.outputs[("fi_info", "-p", "efa")] = CommandOutput(0, "provider: efa\n", "")
    assert doctor.check_efa(machine.probes()).status == "pass"
    missing = doctor.check_efa(FakeMachine().probes())
    assert missing.status == "warn" and "aws-ofi-nccl" in missing.hint


def test_no_hyperpod_is_not_a_problem() -> None:
    result = doctor.check_hyperpod(FakeMachine().probes())
    assert result.status == "pass" and "not HyperPod" in result.detail


def test_gpus_differ_or_are_missing() -> None:
    machine = FakeMachine()
    mixed = NODES_REMOTE.replace("NodeName=gpu2 Gres=gpu:h100:8(S:0-1)", "NodeName=gpu2 Gres=gpu:4")
    machine.outputs[("scontrol", "show", "nodes", "-o")] = CommandOutput(0, mixed, "")
    result = doctor.check_gpus(machine.probes())
    assert result.status == "warn" and "differ" in result.detail and "--gpus-per-node" in result.hint
    dev = FakeMachine()
    dev.outputs[("scontrol", "show", "nodes", "-o")] = CommandOutput(0, NODES_DEV, "")
    result = doctor.check_gpus(dev.probes())
    assert result.status == "warn" and "--instance-type cpu" in result.hint
    dev.binaries.add("nvidia-smi")
    result = doctor.check_gpus(dev.probes())
    assert result.status == "warn" and "nvidia-smi sees 2 GPU(s)" in result.detail and "Gres" in result.hint


def test_a_slurm_timeout_is_paid_once() -> None:
    machine = FakeMachine()
    machine.outputs[("sbatch", "--version")] = CommandOutput(124, "", "sbatch --version did not answer within 10 s")
    results = by_name(machine)
    assert results["sbatch"].status == "fail" and results["accounting"].status == "fail"
    assert results["pyxis"].status == "warn" and "cannot tell" in results["pyxis"].detail
    assert [call[0] for call in machine.calls if call[0] in ("sbatch", "sacct", "scontrol", "srun")] == ["sbatch"]


def test_parsers() -> None:
    assert doctor.gpus_in_gres("gpu:8") == 8
    assert doctor.gpus_in_gres("gpu:h100:8(S:0-1)") == 8
    assert doctor.gpus_in_gres("gpu:a100:4,gpu:v100:2(S:0,1),fpga:1") == 6
    assert doctor.gpus_in_gres("(null)") == 0
    nodes = doctor.parse_nodes(NODES_REMOTE)
    assert [(n.name, n.hostname, n.address, n.gpus) for n in nodes] == [
        ("gpu1", "gpu1", "10.0.1.1", 8),
        ("gpu2", "gpu2", "10.0.1.2", 8),
    ]
    assert doctor.filesystem_type("/fsx/ckpt/a", MOUNTS) == "lustre"
    assert doctor.filesystem_type("/fsxother", MOUNTS) == "ext4"
    assert doctor.filesystem_type("/mnt/my efs/ck", MOUNTS) == "nfs4"
    assert doctor.filesystem_type("/tmp", MOUNTS) == "tmpfs"


def test_probes_are_replaceable_field_by_field() -> None:
    probes = replace(FakeMachine().probes(), mounts=lambda: "server:/x / nfs4 rw 0 0\n")
    assert doctor.check_shared_filesystem(probes, Path("/home/me")).status == "pass"


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hyperlaunch", "doctor", *args], capture_output=True, text=True, env=env, check=False)


@pytest.mark.slow
def test_cli_without_slurm_exits_8_with_one_line_and_one_json_document(tmp_path: Path) -> None:
    # A PATH with only this Python's directory: no Slurm binaries, so every Slurm check fails fast.
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path), "HYPERLAUNCH_HOME": str(tmp_path), "SLURM_CONF": "/nonexistent"}
    result = _cli("--json", "--checkpoint-dir", str(tmp_path), env=env)
    assert result.returncode == 8
    document = json.loads(result.stdout)
    statuses = {c["name"]: c["status"] for c in document["checks"]}
    assert document["ok"] is False and statuses["sbatch"] == "fail" and statuses["sacct"] == "fail"
    assert all(c["hint"] for c in document["checks"] if c["status"] != "pass")
    assert result.stderr.strip().splitlines()[-1].startswith("hyperlaunch: error: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("module", ["hyperlaunch.doctor.checks", "hyperlaunch.cli.doctor"])
@pytest.mark.slow
def test_doctor_does_not_import_torch(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
