"""The trainer's command line leaves the process without the interpreter's teardown, where a
gloo process group still referenced was destroyed with its threads running and aborted a rank
that had finished (SIGABRT, "terminate called without an active exception"), after doing what a
normal exit does first."""

from __future__ import annotations

import subprocess
import sys

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
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
    atexit.register(lambda: print("atexit ran", flush=True))
    sys.stdout.write("unflushed ")
    return 3

train.main = main
{call}
"""


def _run(call: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROGRAM.format(call=call)], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_trainer_leaves_with_its_code_after_what_exit_runs_first_and_skips_the_teardown() -> None:
    result = _run("train.entry()")
    assert result.returncode == 3, result.stderr
    assert "unflushed" in result.stdout and "thread done" in result.stdout and "atexit ran" in result.stdout
    assert "finalized" not in result.stdout


def test_a_plain_exit_would_finalize_what_is_left() -> None:
    """The control: the same program through sys.exit reaches the teardown the trainer skips."""
    result = _run("sys.exit(train.main())")
    assert result.returncode == 3 and "finalized" in result.stdout
