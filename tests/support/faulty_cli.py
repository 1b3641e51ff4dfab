"""`hyperlaunch` as the fault tests run it: `python -m tests.support.faulty_cli submit ...`
is the real CLI, except that the jobs it launches (a sweep's elements too) run the trainer through
tests.support.fault_entry (JobSpec.trainer_module is internal: no flag, config key or
variable sets it, so this test-only entry point does). The module is recorded with the job,
so a plain `hyperlaunch resume` of such a job runs it again."""

from __future__ import annotations

import sys

from hyperlaunch.cli import main
from hyperlaunch.runs import launch as launch_module
from hyperlaunch.runs import sweeps as sweeps_module
from tests.support import fault_entry

_launch = launch_module.launch
_launch_sweep = sweeps_module.launch_sweep


def _launch_with_faults(spec, **options):  # type: ignore[no-untyped-def]
    return _launch(spec.replace(trainer_module=fault_entry.MODULE), **options)


def _launch_sweep_with_faults(base, sweep, **options):  # type: ignore[no-untyped-def]
    return _launch_sweep(base.replace(trainer_module=fault_entry.MODULE), sweep, **options)


if __name__ == "__main__":
    launch_module.launch = _launch_with_faults
    sweeps_module.launch_sweep = _launch_sweep_with_faults
    sys.exit(main())
