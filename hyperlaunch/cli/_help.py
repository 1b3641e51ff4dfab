"""How `--help` lays out a command: its own options first, then the job options in their
panels (Job, Cluster, Container, Recovery, Output: hyperlaunch.job.spec.PANELS), each option's
placeholder in one style (upper case: N, DIR, TYPE, PATH), never Click's `<int>` or `<str>`."""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand

_OWN = "Options"
_PANEL_ORDER = ("Job", "Cluster", "Container", "Recovery", "Output")
"""hyperlaunch.job.spec.PANELS, named here so `--help` imports nothing of the job layer."""
_WORDS = {"OUTPUT": "FILE"}
_NUMBERS = {"int", "float", "integer", "integer range", "float range"}


def placeholder(option: Any) -> str:
    """An option's placeholder when it declares none: N for a number (SECONDS for a duration in
    seconds), DIR for a folder, else the last word of its long name (`--instance-type` TYPE)."""
    longest = max(option.opts, key=len).lstrip("-")
    if getattr(option.type, "name", "") in _NUMBERS:
        return "SECONDS" if "seconds" in longest or longest == "interval" else "N"
    word = longest.rsplit("-", 1)[-1].upper()
    return "DIR" if word.endswith("DIR") else _WORDS.get(word, word)


class HelpCommand(TyperCommand):
    """A Typer command whose help groups its options by panel (`rich_help_panel`, which
    Typer's plain help ignores) with one placeholder style."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:  # before the usage line is made, which shows them too
            if param.metavar is not None:
                continue
            if param.param_type_name == "argument":
                param.metavar = (param.name or "").upper()
            elif not getattr(param, "is_flag", False) and not getattr(param, "count", False):
                param.metavar = placeholder(param)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                panels.setdefault(getattr(param, "rich_help_panel", None) or _OWN, []).append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        known = (_OWN, *_PANEL_ORDER)
        for panel in [*known, *sorted(set(panels) - set(known))]:
            if panel in panels:
                with formatter.section(panel if panel == _OWN else f"{panel} options"):
                    formatter.write_dl(panels[panel])
