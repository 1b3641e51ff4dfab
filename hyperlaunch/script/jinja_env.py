"""The Jinja environment of every template in `hyperlaunch.templates`: StrictUndefined, and the
filters that quote each interpolated value (hyperlaunch.script.quoting)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

import jinja2

from hyperlaunch.script.quoting import comment_text, sbatch_quote, shell_quote
from hyperlaunch.script.template_cache import template_cache


def load_template(name: str) -> str:
    return resources.files("hyperlaunch.templates").joinpath(*name.split("/")).read_text(encoding="utf-8")


def environment(loader: Callable[[str], str] = load_template) -> jinja2.Environment:
    # Not cached itself: clearing a caller's cache must give a fresh environment (tests do, to
    # change where compiled templates are kept).
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(loader),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        # Bash's ${#array[@]} would open a Jinja comment: the templates have none.
        comment_start_string="{##",
        comment_end_string="##}",
        bytecode_cache=template_cache(),
    )
    env.filters["q"] = shell_quote
    env.filters["sbatch_arg"] = sbatch_quote
    env.filters["comment"] = comment_text
    return env
