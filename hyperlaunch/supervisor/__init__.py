"""What runs inside the job on the batch host: the supervisor of a job's attempts (the lock, rounds of
trainers, spares, lost nodes, the restart budget, requeues). Standard library only, Python 3.8 or
later: it runs on the compute nodes' system python3, shipped next to the job (see
hyperlaunch.script.supervisor_bundle), so a container job needs no hyperlaunch on the host."""

PYTHON = "python3"
"""The interpreter the batch script runs the supervisor with: the batch host's, from PATH."""
MIN_PYTHON = (3, 8)
"""The oldest Python the supervisor runs on (checked with vermin; `doctor` checks the nodes')."""
