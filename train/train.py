"""Wiring only: check inputs, build, resume, train, export, close.

Exit codes: 0 done; 75 (hyperlaunch.core.protocol.REQUEUE_EXIT_CODE) a stop signal arrived and a
checkpoint was saved (none with --no-checkpoints: the requeued run starts over), please requeue; 2 invalid input (flags, data, model); 6 checkpoint
problem; 9 this node lacks what the job needs (one line on stderr); 124
(watchdog.HANG_EXIT_CODE) no step finished within the hang limit (--hang-timeout): the
rank's Python stacks are on stderr; 1 any other error, or faulthandler's backstop for a hang
that held the GIL. Under a hyperlaunch job the failing rank also leaves a failure record for
the supervisor (hyperlaunch.core.trainer_failures.TrainerFailure).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.checkpoint_resume import ResumeChoice, choose_resume
from hyperlaunch.core.errors import CheckpointTorn, DataError, HyperlaunchError, InvalidInput
from hyperlaunch.core.protocol import REQUEUE_EXIT_CODE
from hyperlaunch.core.trackers import Ending
from hyperlaunch.core.trainer_failures import TRAINER_ERROR_PREFIX, failure_kind, write_trainer_failure
from hyperlaunch.runtime.records import trackers_missing
from hyperlaunch.runtime.signals import ignore_stop_signals

from .config import TrainConfig, parse_config
from .hooks import NO_HOOKS, TrainerHooks


def _preflight(cfg: TrainConfig) -> ResumeChoice:
    """Every check that needs neither torch.distributed nor the model: fail in one line,
    before any rank waits on another and before anything is written."""
    name = _model_name(cfg)
    missing = trackers_missing()
    if missing:  # final: no attempt would find the library
        raise InvalidInput(missing)
    if cfg.data is not None and not cfg.data.exists():
        raise DataError(f"--data {cfg.data}: no such file or directory")
    # A run that keeps no checkpoint follows none either (a pointer there is another run's),
    # so a requeue starts over as said; --resume-from still loads the one it names.
    resume = choose_resume(
        cfg.checkpoint_dir, name, from_scratch=cfg.from_scratch or not cfg.checkpoints, resume_from=cfg.resume_from
    )
    # Only now create anything: every read-only check above has passed.
    rules.check_writable(cfg.checkpoint_dir)
    rules.check_writable(cfg.run_dir)
    return resume


def _model_name(cfg: TrainConfig) -> str:
    # Torch-free on purpose: bad input must fail in a second, not after importing torch.
    from .naming import checked_checkpoint_name

    return checked_checkpoint_name(cfg.model, cfg.model_name)


def run(cfg: TrainConfig, hooks: TrainerHooks = NO_HOOKS) -> int:
    from .distributed import env_rank

    resume = _preflight(cfg)
    from . import setup

    job = setup.build(cfg, resume, is_main=env_rank() == 0, hooks=hooks)
    try:
        code = job.trainer.run(job.state)
        if code == 0 and cfg.export and cfg.checkpoints:
            job.export()
        job.ending = ending_of(code)
        return code
    except Exception as err:
        # Before close(): closing the process group fails the other ranks' collectives, and
        # their errors must not be recorded ahead of this one, the cause.
        done = getattr(job.state, "step", None)  # the handler must not fail on its own
        _record_failure(err, step=done + 1 if isinstance(done, int) else None)
        raise
    finally:
        job.close()
        # The process group is destroyed, but the sharded model and its mesh still hold it, in
        # reference cycles: left to the interpreter's exit, gloo's threads can end the process
        # with "terminate called without an active exception" after its work is done (seen in
        # CI; pytorch/pytorch#190489). Collected here, while the interpreter is whole.
        del job
        gc.collect()


def main(argv: list[str] | None = None, hooks: TrainerHooks = NO_HOOKS) -> int:
    """The trainer's command line. `hooks` lets another entry module (the integration tests'
    fault injection) act at the hook points; `python -m hyperlaunch.train` passes none."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return run(parse_config(argv), hooks)
    except HyperlaunchError as err:
        _record_failure(err)
        if _env_rank() == 0:
            print(f"{TRAINER_ERROR_PREFIX}{err.one_line()}", file=sys.stderr, flush=True)
        return err.exit_code
    except Exception as err:
        _record_failure(err)
        raise  # the traceback is what explains an unexpected error, in the log
    finally:
        ignore_stop_signals()


def ending_of(code: int) -> Ending:
    """How a run that returned `code` ended: 0 finished, 75 stopped and saved for a requeue
    (hyperlaunch.core.protocol.REQUEUE_EXIT_CODE), anything else failed."""
    if code == 0:
        return Ending.FINISHED
    return Ending.REQUEUED if code == REQUEUE_EXIT_CODE else Ending.FAILED


def entry(hooks: TrainerHooks = NO_HOOKS) -> NoReturn:
    """The command line as processes run it (`python -m hyperlaunch.train`, `hyperlaunch-train`):
    main(), then out of the process without the interpreter's teardown. What a normal exit does
    first still happens: other threads are waited for, the atexit handlers run (the trackers'
    services, logging, multiprocessing's children) and the output is flushed. What is skipped is
    finalizing whatever is left, where a gloo process group that a cache or compiled graph still
    references is destroyed while its threads run: a rank that had finished and saved aborted
    there ("terminate called without an active exception", SIGABRT; seen in CI), and torchrun
    reported a finished run as a failed step. Only a run that ended as planned leaves so: done
    (0), or saved for a requeue (75), where every rank ends together. An error leaves through
    Python's exit as before: ranks fail at different moments, and torchrun stops the others once
    one has ended, so a rank that ended at once could cut rank 0 off before it printed the error.
    What runs after the program (`python -m cProfile -m hyperlaunch.train` writing its profile)
    does not run: profile with torch.profiler or py-spy instead."""
    code = main(hooks=hooks)
    if ending_of(code) is Ending.FAILED:
        sys.exit(code)
    try:
        shutdown_threads = getattr(threading, "_shutdown", None)  # what Python's exit calls first
        if shutdown_threads is not None:
            shutdown_threads()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except BaseException as err:  # Python's exit reports these too, and the run's code stands
        print(f"hyperlaunch.train: warning: while exiting: {type(err).__name__}: {err}", file=sys.__stderr__, flush=True)
    finally:
        os._exit(code)


def _record_failure(err: Exception, step: int | None = None) -> None:
    """Tell the supervisor and `status` why this rank stops (a no-op outside a hyperlaunch
    job, and once this or another rank has). Every rank tries; the first record stays. `step`:
    the step in progress, once training has started (the supervisor ends a job whose retried
    failure comes back at the same step)."""
    rank = _env_rank()
    if isinstance(err, HyperlaunchError):
        message = err.one_line()
    else:
        message = f"{type(err).__name__}: {err} (rank {rank})"
    write_trainer_failure(failure_kind(err), message, rank, checkpoint=err.checkpoint if isinstance(err, CheckpointTorn) else "", step=step)


def _env_rank() -> int:
    # distributed.env_rank without importing torch: the error may be torch failing to import.
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0
