"""One array task of a sweep finds its element: the batch script runs every task as

    python3 supervisor.pyz --elements FILE

and FILE (written beside the sweep's runs at submit, hyperlaunch.script.render_sweep) holds each
element's supervisor command line and the environment only it has (its tracker run). The task's
index is Slurm's SLURM_ARRAY_TASK_ID. Standard library only, Python 3.8+."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

ELEMENTS_FLAG = "--elements"
ARRAY_TASK_ENV = "SLURM_ARRAY_TASK_ID"
FORMAT = 1
"""The elements file's format, written into it."""


def resolve(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The supervisor's own command line and the variables to add to its environment: `argv`
    as given unless it names an elements file, else the element of this array task's."""
    if len(argv) < 1 or argv[0] != ELEMENTS_FLAG:
        return list(argv), {}
    if len(argv) != 2:
        raise SystemExit("hyperlaunch supervisor: --elements takes one file and nothing else")
    index_text = environ.get(ARRAY_TASK_ENV, "")
    if not index_text.isdigit():
        raise SystemExit("hyperlaunch supervisor: --elements runs inside a Slurm job array (no SLURM_ARRAY_TASK_ID)")
    try:
        with open(argv[1], encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError) as error:
        raise SystemExit("hyperlaunch supervisor: cannot read the sweep's elements " + argv[1] + ": " + str(error)) from None
    return pick(document, int(index_text), argv[1])


def pick(document: object, index: int, where: str) -> tuple[list[str], dict[str, str]]:
    """Element `index` of an elements document: (its argv, its environment)."""
    if not isinstance(document, dict) or document.get("format") != FORMAT or not isinstance(document.get("elements"), list):
        raise SystemExit("hyperlaunch supervisor: " + where + " is not a sweep elements file of format " + str(FORMAT))
    for element in document["elements"]:
        if isinstance(element, dict) and element.get("index") == index:
            argv = element.get("argv")
            env = element.get("env", {})
            if not isinstance(argv, list) or not all(isinstance(word, str) for word in argv):
                break
            if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
                break
            return list(argv), dict(env)
    raise SystemExit("hyperlaunch supervisor: " + where + " has no readable element " + str(index))
