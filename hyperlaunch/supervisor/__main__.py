"""`python3 supervisor-<hash>.pyz ARGS` (the batch script's last line), or `python -m hyperlaunch.supervisor`.

Written for any Python 3 up to the version check: an older python3 on a batch host gets a line
that names what is needed, not a SyntaxError of a module further in."""

import sys

from hyperlaunch.supervisor import MIN_PYTHON, PYTHON

if sys.version_info < MIN_PYTHON:  # noqa: UP036 - the batch host's python3 is not the CLI's
    found = ".".join(str(part) for part in sys.version_info[:3])
    wanted = ".".join(str(part) for part in MIN_PYTHON)
    sys.stderr.write("hyperlaunch: the job's supervisor needs " + PYTHON + " " + wanted + " or later on the batch host; found " + found + "\n")
    sys.exit(1)

from hyperlaunch.supervisor.attempt import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
