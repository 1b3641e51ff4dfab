"""`hyperlaunch completion SHELL`, and the answers to the shell's requests it sets up.

The script a shell loads runs `_HYPERLAUNCH_COMPLETE=complete_bash hyperlaunch` (zsh, fish
likewise) with the words typed so far; main() hands that run to `answer`, which builds every
command (a normal run builds only the one it runs) and gives the options hyperlaunch knows
the values of a completer: model presets, instance types, profiles, recorded job ids. Each
reads only a few small files, since it runs at every TAB. Typer's own machinery (its scripts,
its reading of COMP_WORDS and _TYPER_COMPLETE_ARGS) does the rest: Typer's add_completion
would add it as --install-completion/--show-completion, which guess the shell and edit rc
files, where a command that prints the script says what it does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from hyperlaunch.cli import COMPLETE_VAR, PROG_NAME
from hyperlaunch.cli._output import out

_ALL_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")  # Typer's


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def completion(shell: Annotated[Shell, typer.Argument(metavar="SHELL", help="bash, zsh or fish.", show_default=False)]) -> None:
    """Print the shell completion script for SHELL: commands, options, model presets, instance
    types, profiles and your recorded job ids complete on TAB. Load it in this shell with eval,
    or save it where the shell looks for completions (then open a new shell):

    \b
    Examples:
      eval "$(hyperlaunch completion bash)"
      hyperlaunch completion bash > ~/.local/share/bash-completion/completions/hyperlaunch
      hyperlaunch completion zsh > ~/.zfunc/_hyperlaunch
      hyperlaunch completion fish > ~/.config/fish/completions/hyperlaunch.fish

    bash needs the bash-completion package for the saved file to load by itself (else source it
    from ~/.bashrc); zsh needs `fpath+=~/.zfunc; autoload -Uz compinit && compinit` in ~/.zshrc."""
    from typer.completion import get_completion_script

    out.text(get_completion_script(prog_name=PROG_NAME, complete_var=COMPLETE_VAR, shell=shell.value))


def answer(app: typer.Typer, instruction: str) -> int:
    """Print the completions the shell asked for (or its script); the exit status."""
    from typer.completion import completion_init, shell_complete
    from typer.main import get_command

    completion_init()  # registers Typer's bash/zsh/fish classes, which add_completion=False skips
    command = get_command(app)
    add_value_completers(command)
    return shell_complete(command, {}, PROG_NAME, COMPLETE_VAR, _typer_style(instruction))


def _typer_style(instruction: str) -> str:
    """Typer reads `complete_bash`, `source_zsh`; Click's documentation (and habit) writes
    `bash_complete`, `zsh_source`: both are answered."""
    first, _, rest = instruction.partition("_")
    return f"{rest}_{first}" if first in _ALL_SHELLS else instruction


def add_value_completers(command: Any) -> None:
    """Give each option or argument whose values hyperlaunch knows a completer, in every
    command under `command`. Set on the built Click parameters rather than declared with each
    option: the same names mean the same values in every command, said here once."""
    for param in getattr(command, "params", ()):
        completer = _completer_for(param)
        if completer is not None:
            param._custom_shell_complete = _quietly(completer)
    for sub in getattr(command, "commands", {}).values():
        add_value_completers(sub)


def _completer_for(param: Any) -> Callable[[str], Iterable[str]] | None:
    if param.param_type_name == "argument":
        return recorded_job_ids if param.name == "job_id" else None
    for option, completer in _OPTION_COMPLETERS.items():
        if option in param.opts:
            return completer
    return None


def _quietly(completer: Callable[[str], Iterable[str]]) -> Callable[[Any, Any, str], list[str]]:
    """Click's signature; whatever goes wrong (an unreadable config, a broken home) completes
    nothing rather than printing a traceback into the command line being typed."""

    def complete(ctx: Any, param: Any, incomplete: str) -> list[str]:
        try:
            return [value for value in completer(incomplete) if value.startswith(incomplete)]
        except Exception:  # noqa: BLE001 - see the docstring
            return []

    return complete


def _is_path(text: str) -> bool:
    return text.startswith((".", "/", "~")) or "/" in text


def model_presets(incomplete: str) -> list[str]:
    """Preset names; nothing for a path (--model takes a model folder too), so the shell
    completes file names there."""
    if _is_path(incomplete):
        return []
    from hyperlaunch.core.models import PRESETS

    return list(PRESETS)


def instance_types(incomplete: str) -> list[str]:
    """The presets' instance types, with SageMaker's `ml.` when the user typed it."""
    from hyperlaunch.core.instances import SAGEMAKER_PREFIX, known_instance_types

    prefix = SAGEMAKER_PREFIX if incomplete.startswith(SAGEMAKER_PREFIX) else ""
    return [prefix + name for name in known_instance_types()]


def profiles(incomplete: str) -> list[str]:
    """The [profile.NAME] tables of the files the settings read: the user config and the
    current directory's hyperlaunch.toml."""
    from hyperlaunch.core.compat import tomllib
    from hyperlaunch.job.settings import PROJECT_CONFIG_NAME, user_config_path

    names: list[str] = []
    for path in (user_config_path(), Path.cwd() / PROJECT_CONFIG_NAME):
        if path.is_file():
            table = tomllib.loads(path.read_text(encoding="utf-8")).get("profile", {})
            names += [name for name in table if name not in names] if isinstance(table, dict) else []
    return names


def recorded_job_ids(incomplete: str) -> list[str]:
    """The ids of the jobs recorded under the hyperlaunch home, newest (highest) first: the
    folders' names, no record read."""
    from hyperlaunch.runs.jobs import is_job_id, jobs_dir

    root = jobs_dir()
    ids = [entry.name for entry in root.iterdir() if is_job_id(entry.name)] if root.is_dir() else []
    return sorted(ids, key=lambda job_id: tuple(int(part) for part in job_id.split("_")), reverse=True)


_OPTION_COMPLETERS: dict[str, Callable[[str], Iterable[str]]] = {
    "--model": model_presets,
    "--instance-type": instance_types,
    "--profile": profiles,
}
