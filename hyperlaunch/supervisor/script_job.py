"""What a script job's trainers are told, for each round: where the job keeps checkpoints and
records, the run's name, the checkpoint `<name>-latest` names now (it moves during an
attempt), in variables and in their arguments' placeholders (hyperlaunch.core.script_args), and the runtime library on their path (this bundle holds it: a container image
without hyperlaunch installed imports it from here). A bundled-trainer job gets none of it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from hyperlaunch.core import checkpoints
from hyperlaunch.core.errors import HyperlaunchError
from hyperlaunch.core.script_args import fill
from hyperlaunch.core.script_env import CHECKPOINT_DIR_ENV, NAME_ENV, RESUME_FROM_ENV, RUN_DIR_ENV
from hyperlaunch.core.supervisor_options import SupervisorOptions


def library_root() -> str:
    """The folder (or zipapp) the `hyperlaunch` package is imported from: the bundle in a job."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def resume_from(checkpoint_dir: str, name: str) -> tuple[str, str | None]:
    """The complete checkpoint `<name>-latest` names ('' for none), and a warning when the
    pointer cannot be used (the runtime library's resume_path() then raises, with the reason)."""
    try:
        path = checkpoints.pointed_checkpoint(Path(checkpoint_dir), name)
    except HyperlaunchError as error:
        return "", f"hyperlaunch: {error}; {RESUME_FROM_ENV} is empty"
    return ("" if path is None else str(path)), None


def script_environment(run_dir: str, checkpoint_dir: str, name: str, environ: Mapping[str, str], resume: str) -> dict[str, str]:
    """The variables a round's scripts get on top of the job's own."""
    path = [library_root()] + ([environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else [])
    env: dict[str, str] = {}
    env[CHECKPOINT_DIR_ENV] = checkpoint_dir
    env[RUN_DIR_ENV] = run_dir
    env[NAME_ENV] = name
    env[RESUME_FROM_ENV] = resume
    env["PYTHONPATH"] = os.pathsep.join(path)  # the user's own (--env PYTHONPATH=...) after it
    return env


def launch_command(options: SupervisorOptions, resume: str, nodes: int) -> list[str]:
    """The round's launch command on `nodes` nodes, the placeholders of the script's arguments filled."""
    values = {"checkpoint_dir": options.checkpoint_dir, "run_dir": options.run_dir, "name": options.script_name, "nodes": str(nodes), "resume": resume}
    return fill(options.launch_command, values)
