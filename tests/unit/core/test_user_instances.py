"""Instance types a user describes (~/.hyperlaunch/instances/*.toml, the format of env/*.toml)
and types nobody described, run with --gpus-per-node."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_runner import one_error_line, run_cli

MINE = """
description = "4x L40S on our own nodes, TCP only"
gpu = "L40S"
gpu_memory_gib = 48
[instance_types]
"lab.l40s" = 4
[env]
NCCL_SOCKET_IFNAME = "ens5"
"""


def _render(monkeypatch: pytest.MonkeyPatch, *args: str):
    return run_cli(["render", "--model", "qwen3_0_6b", *args], monkeypatch)


@pytest.mark.slow
def test_a_users_instance_file_adds_a_type_with_its_gpus_memory_and_exports(
    _isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (_isolated_home / "instances").mkdir()
    (_isolated_home / "instances" / "lab.toml").write_text(MINE)
    result = _render(monkeypatch, "--instance-type", "LAB.L40S")
    assert result.exit_code == 0, result.output
    assert "export NCCL_SOCKET_IFNAME=ens5" in result.stdout
    assert "--nproc-per-node=4" in result.stdout or "--nproc_per_node=4" in result.stdout
    assert "of 48 GiB (4 GPUs)" in result.stderr
    # Over a shipped type of the same name, the user's wins.
    (_isolated_home / "instances" / "g5.toml").write_text(MINE.replace('"lab.l40s"', '"g5.12xlarge"'))
    assert "export NCCL_SOCKET_IFNAME=ens5" in _render(monkeypatch, "--instance-type", "g5.12xlarge").stdout


def test_a_broken_instance_file_is_one_line_naming_it(_isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (_isolated_home / "instances").mkdir()
    (_isolated_home / "instances" / "bad.toml").write_text(MINE.replace("gpu_memory_gib = 48", "gpu_memory = 48"))
    one_error_line(_render(monkeypatch, "--instance-type", "lab.l40s"), 3, "bad.toml", "unknown key(s) gpu_memory")
    (_isolated_home / "instances" / "bad.toml").write_text("[instance_types\n")
    one_error_line(_render(monkeypatch, "--instance-type", "lab.l40s"), 3, "bad.toml", "not a readable TOML file")


@pytest.mark.slow
def test_a_type_nobody_described_runs_with_gpus_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = one_error_line(_render(monkeypatch, "--instance-type", "x9.48xlarge"), 2, "unknown instance type 'x9.48xlarge'")
    assert "--gpus-per-node" in refused and "instances/x9.toml" in refused
    result = _render(monkeypatch, "--instance-type", "x9.48xlarge", "--gpus-per-node", "8")
    assert result.exit_code == 0, result.output
    assert "export NCCL_SOCKET_IFNAME='^docker,lo,veth'" in result.stdout and "FI_EFA" not in result.stdout
    # A typo of a known type is not taken for a new one.
    one_error_line(_render(monkeypatch, "--instance-type", "p5.48xlarg", "--gpus-per-node", "8"), 2, "did you mean p5.48xlarge?")
