"""`hyperlaunch prepare-data --slurm`: the tokenizing as a batch job on the cluster's nodes, for
corpora too big for a login node. What the job runs is prepare-data itself, in a Python the nodes
have (this one unless --python says otherwise): on one node with every core, on several in the
three steps of hyperlaunch.data.prepare (plan, each node's share, one manifest). Checked here
before anything is submitted: the inputs (unless the job waits for another that may write them),
the output folder, the tokenizer's name, the nodes' Python."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.paths import hyperlaunch_home
from hyperlaunch.data.prepare import check_output, check_shard_mb, require_libraries
from hyperlaunch.data.sources import find_sources
from hyperlaunch.runs import tool_jobs
from hyperlaunch.runs.waits import refuse_unmet
from hyperlaunch.script.render_prepare import render_prepare
from hyperlaunch.slurm import submission as slurm_submission
from hyperlaunch.slurm.dependencies import dependency_value
from hyperlaunch.slurm.time_limit import slurm_time

PYTHON_HINT = "--python PATH to a Python with hyperlaunch[data] that the nodes can run (a venv on shared storage)"


@dataclass(frozen=True)
class PrepareJob:
    """A submitted preparation."""

    job_id: str
    output: str
    nodes: int
    log: str
    python: str
    tokenizer: str
    inputs: tuple[str, ...]
    after: tuple[str, ...]

    def document(self) -> dict[str, object]:
        """The --json document of `prepare-data --slurm`."""
        return {
            "job_id": self.job_id, "output": self.output, "nodes": self.nodes, "log": self.log, "python": self.python,
            "tokenizer": self.tokenizer, "inputs": list(self.inputs), "after": list(self.after),
        }


@dataclass(frozen=True)
class Options:
    """prepare-data's own options, passed on to the nodes as given."""

    text_field: str = "text"
    shard_mb: float = 32.0
    workers: int | None = None
    """Per node; default: every core the job holds there."""
    overwrite: bool = False


def submit_prepare(
    inputs: Sequence[Path],
    output: Path,
    tokenizer: str,
    options: Options,
    *,
    nodes: int,
    env: Mapping[str, str],
    waits: tuple[tuple[str, str], ...] = (),
    python: str | None = None,
    partition: str | None = None,
    time_limit: str | None = None,
) -> PrepareJob:
    """Check, render and submit the preparation; its job. Relative paths are the current
    folder's, made absolute for the job."""
    cwd = Path.cwd()
    check_shard_mb(options.shard_mb)
    paths = [_absolute(path, cwd) for path in inputs]
    if not waits:  # a job it waits for may be what writes them
        find_sources(list(inputs))  # its errors name the inputs as given
    folder = Path(_absolute(output, cwd))
    check_output(folder, options.overwrite)
    node_python = python or _this_python()
    command = [
        node_python, "-m", "hyperlaunch", "prepare-data", "--output", str(folder), "--tokenizer", _tokenizer(tokenizer, cwd),
        "--text-field", options.text_field, "--shard-mb", format(options.shard_mb, "g"),
        *(["--workers", str(options.workers)] if options.workers else []), *(["--overwrite"] if options.overwrite else []),
    ]
    job_name = f"prepare-data-{folder.name}"
    log = cwd / "logs" / f"{job_name}_%j.out"
    script = render_prepare(
        command=command, inputs=paths, output=str(folder), nodes=nodes, job_name=job_name, log=str(log),
        partition=partition, time=slurm_time(time_limit) if time_limit else None, dependency=dependency_value(waits),
    )
    refuse_unmet(waits, env=env)
    log.parent.mkdir(parents=True, exist_ok=True)
    job_id = slurm_submission.submit_script(script, hyperlaunch_home() / "prepare-data", env=env)
    job = PrepareJob(
        job_id, str(folder), nodes, str(log).replace("%j", job_id), node_python, command[command.index("--tokenizer") + 1],
        tuple(paths), tuple(job for job, _ in waits),
    )
    tool_jobs.save(tool_jobs.ToolJob(
        job_id=job_id, kind="prepare-data", what=f"{len(paths)} input(s) -> {folder} on {nodes} node(s)", output=str(folder),
        log=job.log, submitted_at=time.time(), waits=tuple(waits), slurm_conf=env.get("SLURM_CONF"),
    ))
    return job


def _absolute(path: Path | str, cwd: Path) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(str(path))))


def _this_python() -> str:
    """This Python, for nodes that share its installation: it must have the data extra."""
    try:
        require_libraries()
    except InvalidInput as err:
        raise InvalidInput(f"{err}: the nodes would run prepare-data in this Python", hint=PYTHON_HINT) from None
    return sys.executable


def _tokenizer(choice: str, cwd: Path) -> str:
    """A local tokenizer folder as an absolute path (the job may start elsewhere); a name as it is."""
    if choice.startswith((".", "/", "~")) or os.path.exists(os.path.join(cwd, choice)):
        path = _absolute(choice, cwd)
        if not os.path.isdir(path):
            raise InvalidInput(f"--tokenizer {choice}: no such directory")
        return path
    return choice
