"""A sweep -> its batch script and its elements file. Pure: text in, text out.

The script is a single job's (hyperlaunch.script.render) with `--array` in its header, the
exports every element shares, and one supervisor line that names the elements file. That file
holds, per element, the supervisor's command line exactly as a single job of that element
would run it (its run folder, checkpoint lock, trainer options) and the variables only it has
(its tracker run): an array task finds its own by SLURM_ARRAY_TASK_ID
(hyperlaunch.supervisor.sweep_element). The file is named by the hash of its text, so `resume`
of a sweep reuses it, and a requeued task reads the one it was submitted with."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass

from hyperlaunch.core.paths import job_files_dir
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.job.sweep import Sweep, element_spec
from hyperlaunch.script.render import (
    env_groups,
    render_values,
    script_values,
    supervisor_options,
    tracker_exports,
)
from hyperlaunch.supervisor.sweep_element import FORMAT


@dataclass(frozen=True)
class SweepScript:
    script: str
    elements_path: str
    """Where `sweep` writes elements_text before Slurm may start a task."""
    elements_text: str


def render_sweep(base: JobSpec, sweep: Sweep) -> SweepScript:
    """The batch script of the sweep's array job, and its elements file."""
    specs = [(element, element_spec(base, element)) for element in sweep.elements]
    document = {
        "elements": [
            {
                "index": element.index,
                "name": spec.derived.checkpoint_name,
                "env": dict(tracker_exports(spec)) if spec.output.tracker else {},
                "argv": supervisor_options(spec).argv(),
            }
            for element, spec in specs
        ],
    }
    # One element a line: a thousand elements stay a file people can grep.
    lines = ",\n".join(json.dumps(element, separators=(",", ":")) for element in document["elements"])
    text = f'{{"format":{FORMAT},"elements":[\n{lines}\n]}}\n'

    path = os.path.join(job_files_dir(base.output.run_dir), f"sweep-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json")
    values = script_values(base)
    flags = list(values.sbatch_flags)
    flags.insert(1, ("--array", sweep.array))  # after --job-name
    width = max(len(spec.derived.checkpoint_name) for _, spec in specs)
    rows = tuple(f"{element.index:>3}  {spec.derived.checkpoint_name.ljust(width)}  {' '.join(element.flags)}" for element, spec in specs)
    values = dataclasses.replace(
        values,
        what=f"a sweep of {len(specs)} x {values.what}",
        sbatch_flags=tuple(flags),
        env_groups=tuple(env_groups(base, with_trackers=False)),
        supervisor_flags=(),
        launch_lines=(),
        elements_file=path,
        sweep_rows=rows,
    )
    return SweepScript(script=render_values(values), elements_path=path, elements_text=text)
