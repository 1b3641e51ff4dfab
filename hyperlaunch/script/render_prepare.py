"""The batch script of `hyperlaunch prepare-data --slurm` (templates/prepare_data.sh.j2): on one
node, prepare-data itself with every core; on several, its three steps (plan on the batch host,
each node's share through srun, the manifest), values shell-quoted. Pure: text in, text out."""

from __future__ import annotations

from collections.abc import Sequence

from hyperlaunch import __version__
from hyperlaunch.script import jinja_env
from hyperlaunch.script.render import dependency_flags

STEP_FLAG = "--step"
"""prepare-data's option (hidden from --help) that runs one step of a preparation across nodes."""
SHARE_SRUN = ("srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1")
"""One task a node (a step gets every CPU the job holds on it: Slurm >= 22.05 without --exact);
one failed share ends them all."""


def render_prepare(
    *, command: Sequence[str], inputs: Sequence[str], output: str, nodes: int, job_name: str, log: str,
    partition: str | None = None, time: str | None = None, dependency: str | None = None,
) -> str:
    """`command` is prepare-data as a node runs it (its Python and every option), `inputs` the
    paths it tokenizes (after `--`: a path is never read as an option)."""
    sbatch: list[tuple[str, str | None]] = [
        ("--job-name", job_name), ("--nodes", str(nodes)), ("--ntasks-per-node", "1"),
        # Every core of each node is the job's: the tokenizer's workers are as many as it has.
        ("--exclusive", None),
        # A lost node sends the job back to the queue; its next run continues from the shards done.
        ("--requeue", None),
        ("--output", log), ("--open-mode", "append"),
    ]
    for name, value in (("--partition", partition), ("--time", time)):
        if value is not None:
            sbatch.append((name, value))
    sbatch += dependency_flags(dependency)
    def step(name: str) -> list[str]:
        return [*command, STEP_FLAG, name, "--", *inputs]

    share_lines = [step("plan"), [*SHARE_SRUN, *step("share")], step("finish")] if nodes > 1 else []
    template = jinja_env.environment().get_template("prepare_data.sh.j2")
    return template.render(
        version=__version__, output=output, nodes=nodes, sbatch=sbatch, command=[*command, "--", *inputs], share_lines=share_lines,
    )
