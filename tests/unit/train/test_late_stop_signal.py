"""A save signal that arrives once the trainer is done must not kill it: Python gives every
signal it handles back to the default action while it shuts down, and USR2's default ends the
process, which turned a run that had trained, saved and exported into a failed step (seen in
CI: the time-limit warning came as the last step finished, and the job ran one more attempt)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from hyperlaunch.runtime.signals import STOP_SIGNALS, StopRequest
from hyperlaunch.train.train import main

# The trainer's handler is installed, signals keep coming (a shell sends USR2 as fast as it
# can), the run ends and the process exits through Python's shutdown.
_DONE_UNDER_FIRE = """
import subprocess, sys, time
from hyperlaunch.runtime.signals import StopRequest, ignore_stop_signals
stop = StopRequest()
stop.install()
sender = subprocess.Popen(["bash", "-c", "while kill -USR2 $0 2>/dev/null; do :; done", str(__import__("os").getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.time() + 10
while stop.signal_name is None and time.time() < deadline:
    time.sleep(0.01)
assert stop.signal_name == "SIGUSR2"
ignore_stop_signals()
"""


@pytest.fixture()
def restored_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.slow
def test_a_finished_run_survives_stop_signals_through_pythons_shutdown() -> None:
    for _ in range(3):
        result = subprocess.run([sys.executable, "-c", _DONE_UNDER_FIRE], capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, (result.returncode, result.stderr)


def test_the_trainer_ignores_stop_signals_once_its_run_is_over(restored_handlers: None) -> None:
    StopRequest().install()
    assert main(["--max-steps", "0"]) != 0  # any way out of the run
    assert all(signal.getsignal(sig) is signal.SIG_IGN for sig in STOP_SIGNALS)
