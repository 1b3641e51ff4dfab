"""The wheel carries train/, templates/ and env/ inside the hyperlaunch namespace, and the
installed tool works from any directory."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    return next(out.glob("hyperlaunch-*.whl"))


@pytest.mark.slow
def test_wheel_ships_trainer_templates_and_presets_under_hyperlaunch(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "hyperlaunch/train/__main__.py" in names
    assert "hyperlaunch/templates/sbatch.sh.j2" in names
    # The per-node step goes into the supervisor's bundle, rendered from the installed template.
    assert {"hyperlaunch/templates/partials/env.sh.j2", "hyperlaunch/templates/partials/nccl_net.sh.j2", "hyperlaunch/templates/step.sh.j2"} <= set(names)
    assert "hyperlaunch/supervisor/attempt.py" in names
    assert "hyperlaunch/runtime/__init__.py" in names  # what a script job's scripts import
    assert any(n.startswith("hyperlaunch/env/") and n.endswith(".toml") for n in names)
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"hyperlaunch"}, top_level


def test_wheel_ships_every_layer_package_and_the_offline_assets(wheel: Path) -> None:
    """The layer packages and the offline tokenizer and corpus (moved into data/ with the
    layers) reach an installed hyperlaunch: a missing one fails only where it is installed,
    never in a checkout."""
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {path.parent.relative_to(ROOT).as_posix() for path in (ROOT / "hyperlaunch").rglob("__init__.py")}
    missing = sorted(package for package in packages if f"{package}/__init__.py" not in names)
    assert missing == [], f"not in the wheel: {missing}; add them to pyproject's [tool.setuptools] packages"
    assert {"hyperlaunch/data/assets/tokenizer.json", "hyperlaunch/data/assets/corpus.txt"} <= names


@pytest.mark.slow
def test_installed_wheel_works_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import hyperlaunch, hyperlaunch.train, importlib.resources as r;"
        "assert hyperlaunch.__file__.startswith(sys.argv[1]), hyperlaunch.__file__;"
        "print(sorted(p.name for p in r.files('hyperlaunch.templates').iterdir() if p.name.endswith('.j2')))"
    )
    result = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert ".j2" in result.stdout
    cli = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(target)!r}); sys.argv=['hyperlaunch','dev-cluster','--help']; from hyperlaunch.cli import main; main()"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert cli.returncode == 0 and "kill-node" in cli.stdout, cli.stderr


@pytest.mark.slow
def test_the_trainer_module_runs_from_the_checkout_root_without_the_installed_package() -> None:
    """`python -m hyperlaunch.train` from the repository root imports the checkout's
    hyperlaunch/ (the working directory comes first), which must find train/ beside it as an
    installed one finds it inside. -S leaves site-packages (and an editable install's finder)
    out, as for a regular install shadowed by the checkout."""
    result = subprocess.run(
        [sys.executable, "-S", "-m", "hyperlaunch.train", "--help"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "--max-steps" in result.stdout


def test_the_trainer_console_script_is_declared() -> None:
    from hyperlaunch.core.compat import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["hyperlaunch-train"] == "hyperlaunch.train.train:entry"
    from hyperlaunch.script.render import TRAINER_PROGRAM

    assert TRAINER_PROGRAM in scripts


TRAINER_DEPENDENCIES = ("torch", "transformers", "safetensors", "tokenizers")


def test_the_cli_installs_without_the_trainers_dependencies(wheel: Path) -> None:
    """`pip install hyperlaunch` on a login node takes seconds: torch and the rest of what
    only the trainer imports come with the `train` extra, never unconditionally."""
    metadata = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    headers = zipfile.ZipFile(wheel).read(metadata).decode().partition("\n\n")[0].splitlines()
    requires = [line.removeprefix("Requires-Dist: ") for line in headers if line.startswith("Requires-Dist: ")]
    by_name: dict[str, list[str]] = {}  # a name may be in several extras (tokenizers: train and data)
    for r in requires:
        by_name.setdefault(re.split(r"[<>=!~;\[ (]", r, maxsplit=1)[0].lower(), []).append(r)
    unconditional = {name for name, rs in by_name.items() if any("extra ==" not in r for r in rs)}
    assert {"typer", "jinja2", "submitit"} <= unconditional, requires
    assert not unconditional & set(TRAINER_DEPENDENCIES), requires
    for name in TRAINER_DEPENDENCIES:
        assert any('extra == "train"' in r for r in by_name[name]), by_name.get(name)
    assert "Requires-Python: >=3.10" in headers
