"""The CLI runs where HyperPod's login nodes are: Python 3.10 (Ubuntu 22.04), and a venv
without the trainer's dependencies (`pip install hyperlaunch`, no `[train]` extra)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from hyperlaunch.core.compat import tomllib

ROOT = Path(__file__).resolve().parents[3]
OLDEST_PYTHON = "3.10"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()


def test_requires_python_allows_the_oldest_supported_version() -> None:
    assert SpecifierSet(PROJECT["requires-python"]).contains(f"{OLDEST_PYTHON}.12")


@pytest.mark.slow
def test_the_shipped_code_passes_a_python_310_compatibility_check() -> None:
    """vermin reads the source for every feature newer than the target: modules (tomllib),
    members (datetime.UTC, enum.StrEnum, typing.Self), syntax (except*, PEP 695) and, with
    --eval-annotations, annotations evaluated at run time (typing.get_type_hints, Typer).
    Branches under `sys.version_info >= (3, 11)` count for 3.11 only (hyperlaunch.core.compat)."""
    assert importlib.util.find_spec("vermin"), "vermin is not installed: `make setup` installs the test extra"
    args = [f"-t={OLDEST_PYTHON}-", "--no-tips", "--violations", "--eval-annotations", "hyperlaunch", "train"]
    result = subprocess.run(
        [sys.executable, "-c", "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_cli_runs_without_the_trainers_dependencies(tmp_path: Path) -> None:
    """Everything the `train` extra installs is unimportable, as on a login node with the CLI
    alone: rendering a job (the trainer's arguments parsed on the way) and the model list work."""
    blocked = sorted({_requirement_name(r) for r in PROJECT["optional-dependencies"]["train"]} | {"datasets"})
    assert "torch" in blocked and "transformers" in blocked
    code = (
        "import sys\n"
        "class NotInstalled:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.partition('.')[0] in {blocked!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (the train extra is not installed)')\n"
        "sys.meta_path.insert(0, NotInstalled())\n"
        "sys.argv = ['hyperlaunch', *sys.argv[1:]]\n"
        "from hyperlaunch.cli import main\n"
        "main()\n"
    )
    for args in (
        ["render", "--nodes", "2", "--model", "qwen3_0_6b", "--checkpoint-dir", str(tmp_path / "ckpt"), "--", "--lr", "3e-4"],
        ["models"],
    ):
        result = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True, check=False)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stdout, args
