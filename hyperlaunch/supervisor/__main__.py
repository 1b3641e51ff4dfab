"""`python3 supervisor.pyz ARGS` (the batch script's last line) and `python -m hyperlaunch.supervisor`."""

import sys

if sys.version_info < (3, 8):  # noqa: UP036 - the nodes' python3 may be older than the CLI's
    sys.stderr.write("hyperlaunch: the job's supervisor needs python3 3.8 or later on the batch host; found %d.%d\n" % sys.version_info[:2])
    sys.exit(1)

from hyperlaunch.supervisor.attempt import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
