"""The FSDP2 training entrypoint that runs on the compute nodes (`python -m hyperlaunch.train`)."""

import time

STARTED_AT = time.time()
"""When this process began importing the trainer: the origin of the start-up timings that
the `started`/`resumed` event reports (recovery benchmarks split restarts with them)."""
