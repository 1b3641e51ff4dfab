"""Help that teaches: every command shows examples, the job options come in panels, every
placeholder is written one way, and no help line chains commands a paste would run as a pipeline."""

from __future__ import annotations

import re

import pytest

from tests.support.cli_runner import run_cli


def _command_paths() -> list[list[str]]:
    import typer

    from hyperlaunch.cli import build_app

    root = typer.main.get_command(build_app())
    paths = []
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        subcommands = getattr(command, "commands", None)
        if subcommands:
            paths += [[name, sub] for sub in subcommands]
        else:
            paths.append([name])
    return paths


COMMANDS = _command_paths()
PLACEHOLDER = re.compile(r"^  (?:-\w, )?--[a-z-]+ (\S+)(?:  |$)")


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_command_teaches_by_example_with_one_placeholder_style(path: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    result = run_cli([*path, "--help"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.stdout
    examples = re.split(r"\n(?:Arguments|Options):\n", result.stdout.split("Examples:", 1)[1])[0]
    assert f"hyperlaunch {' '.join(path)}" in examples
    for line in result.stdout.splitlines():
        found = PLACEHOLDER.match(line)
        if found and not found.group(1).startswith(("/", "Show")):
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*(\[=[A-Z]+\])?", found.group(1)), line
        assert not re.search(r"hyperlaunch [^#\n]*\| *hyperlaunch", line), line
    assert not re.search(r"<(int|str|path|float)>", result.stdout)


def test_the_job_options_come_in_panels_after_the_commands_own(monkeypatch: pytest.MonkeyPatch) -> None:
    help_text = run_cli(["submit", "--help"], monkeypatch).stdout
    sections = [line.rstrip(":") for line in help_text.splitlines() if re.fullmatch(r"[A-Z][a-z]+( options)?:", line)]
    assert sections == ["Examples", "Arguments", "Options", "Job options", "Cluster options", "Container options",
                        "Recovery options", "Output options"] or sections == [
        "Arguments", "Options", "Job options", "Cluster options", "Container options", "Recovery options", "Output options"]
    cluster = help_text.split("Cluster options:", 1)[1].split("Container options:", 1)[0]
    assert "--instance-type TYPE" in cluster and "--partition PARTITION" in cluster and "--nodes" not in cluster
    assert "--spare-nodes N" in help_text.split("Recovery options:", 1)[1]
