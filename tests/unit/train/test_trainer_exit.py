"""After a run that ended as planned, the trainer's command line leaves the process without the
interpreter's teardown, where a gloo process group still referenced was destroyed with its
threads running and aborted a rank that had finished (SIGABRT, "terminate called without an
active exception"), once it has done what a normal exit does first."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE

# main() replaced by one that leaves work for the exit: a thread still running, an atexit
# handler, output not flushed, and an object only the interpreter's teardown finalizes.
_PROGRAM = """
import atexit, sys, threading, time
import hyperlaunch.train.train as train

class Finalized:
    def __del__(self):
        print("finalized", flush=True)

kept = Finalized()

def main(hooks=None):
    code = int(sys.argv[1])
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
    atexit.register(lambda: print("atexit ran", flush=True))
    sys.stdout.write("unflushed ")
    return code

train.main = main
{call}
"""


def _run(call: str, code: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROGRAM.format(call=call), str(code)], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("code", [0, REQUEUE_EXIT_CODE])
@pytest.mark.slow
def test_a_run_that_ended_as_planned_leaves_after_what_exit_runs_first_and_skips_the_teardown(code: int) -> None:
    result = _run("train.entry()", code)
    assert result.returncode == code, result.stderr
    assert "unflushed" in result.stdout and "thread done" in result.stdout and "atexit ran" in result.stdout
    assert "finalized" not in result.stdout


@pytest.mark.slow
def test_a_plain_exit_would_finalize_what_is_left() -> None:
    """The control: the same program through sys.exit reaches the teardown the trainer skips."""
    result = _run("sys.exit(train.main())", 0)
    assert result.returncode == 0 and "finalized" in result.stdout


@pytest.mark.slow
def test_an_error_leaves_through_pythons_exit() -> None:
    """Ranks fail at different moments and torchrun stops the rest once one has ended: a failed
    rank that left at once could cut rank 0 off before it printed the error."""
    result = _run("train.entry()", 6)
    assert result.returncode == 6 and "atexit ran" in result.stdout and "finalized" in result.stdout


_FLUSH_FAILS = """
import sys
import hyperlaunch.train.train as train

class Full:
    def write(self, text):
        return len(text)
    def flush(self):
        raise OSError(28, "No space left on device")

def main(hooks=None):
    sys.stdout = Full()
    return 0

train.main = main
train.entry()
"""


@pytest.mark.slow
def test_an_output_that_cannot_be_flushed_does_not_turn_a_finished_run_into_a_failure() -> None:
    result = subprocess.run([sys.executable, "-c", _FLUSH_FAILS], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0
    assert "hyperlaunch.train: warning: while exiting: OSError" in result.stderr and "Traceback" not in result.stderr
