"""The checks that read the code without running it: ruff, mypy and the import contract
(pyproject's [tool.importlinter]).

    python -m tests.lint                 all three (what `make lint` runs)
    python -m tests.lint mypy imports    some of them

mypy and import-linter both find a package's modules by walking its folder, and the source
tree is not laid out as installed: pyproject's package-dir puts train/ at hyperlaunch.train
(templates/ and env/ likewise). So both run on a copy laid out as the wheel installs it,
build/installed-tree, and mypy's paths are mapped back to the source files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
TREE = ROOT / "build" / "installed-tree"
_LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """pyproject's package-dir: installed package -> source folder, outermost package first."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return dict(sorted(mapping.items(), key=lambda item: item[0].count(".")))


def installed_tree(dest: Path, root: Path = ROOT) -> Path:
    """Copy root's sources to dest (replaced) laid out as installed; returns dest.

    copytree keeps modification times, so mypy's cache stays warm across copies."""
    shutil.rmtree(dest, ignore_errors=True)
    for package, folder in package_dirs(root).items():
        target = dest / package.replace(".", os.sep)
        shutil.copytree(root / folder, target, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    return dest


def lint_imports(tree: Path, config: Path = PYPROJECT) -> subprocess.CompletedProcess[str]:
    """lint-imports on tree's hyperlaunch (PYTHONPATH first, ahead of the editable install)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", _LINT_IMPORTS, str(config), "--no-cache"]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)


def _source_path(line: str) -> str:
    """A path in the installed tree, as the source file it was copied from."""
    for package, folder in reversed(package_dirs().items()):
        installed = package.replace(".", "/") + "/"
        if line.startswith(installed):
            return folder + "/" + line[len(installed) :]
    return line


def run_ruff() -> int:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, check=False).returncode


def run_mypy() -> int:
    tree = installed_tree(TREE)
    command = [sys.executable, "-m", "mypy", "--config-file", str(PYPROJECT), "--cache-dir", str(ROOT / ".mypy_cache")]
    result = subprocess.run([*command, "-p", "hyperlaunch"], cwd=tree, capture_output=True, text=True, check=False)
    sys.stdout.write("".join(_source_path(line) for line in result.stdout.splitlines(keepends=True)))
    sys.stderr.write(result.stderr)
    return result.returncode


def run_imports() -> int:
    result = lint_imports(installed_tree(TREE))
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


STEPS: dict[str, Callable[[], int]] = {"ruff": run_ruff, "mypy": run_mypy, "imports": run_imports}


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in STEPS]
    if unknown:
        print(f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(STEPS)}", file=sys.stderr)
        return 2
    failed = []
    for name in argv or list(STEPS):
        print(f"== {name}", flush=True)
        if STEPS[name]() != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
