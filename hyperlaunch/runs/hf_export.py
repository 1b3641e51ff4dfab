"""`hyperlaunch export`: which checkpoint, where to, and the exporter run in a Python that has
the trainer's libraries (the CLI itself may not: a login node without torch).

The export itself is the trainer's code (hyperlaunch.train.hf_export, the same that writes
`<model>-final`), started as a process of its own: the launcher imports nothing of the
trainer, and torch stays out of the CLI. It reports progress as JSON lines, which the CLI
turns into a bar with bytes/s."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core import hf_exports
from hyperlaunch.core.errors import EXIT_CODES, CheckpointError, HyperlaunchError, InvalidInput
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.spec import JobSpec

EXPORTER_MODULE = "hyperlaunch.train.hf_export"
TRAIN_EXTRA_HINT = "pip install 'hyperlaunch[train]' here, or --python PATH to a Python that has it (the job's venv)"


@dataclass(frozen=True)
class Target:
    """One export to make: the checkpoint, where it goes, and what an older checkpoint (one
    whose hyperlaunch.json does not record them) needs to be told. A deferred export (a Slurm
    job that waits for the training: `--after`) has no checkpoint yet: the exporter finds it
    in `ckpt_dir` when it starts (`step`, or `<name>-latest`), and its output beside it."""

    checkpoint: Path | None
    output: Path | None
    step: int | None
    ckpt_dir: Path
    name: str
    model: str | None = None
    model_name: str | None = None
    tokenizer: str | None = None


def choose(
    ckpt_dir: Path, name: str, *, step: int | None, output: str | None,
    model: str | None = None, model_name: str | None = None, tokenizer: str | None = None, deferred: bool = False,
) -> Target:
    """The checkpoint of `name` at `step` (None: the one `<name>-latest` names), complete, and
    the output folder (default: `<name>-<N>steps-hf` beside it); `deferred`: chosen when the
    export starts."""
    if deferred:
        chosen = Path(os.path.abspath(os.path.expanduser(output))) if output else None
        return Target(None, chosen, step, ckpt_dir, name, model=model, model_name=model_name, tokenizer=tokenizer)
    if step is None:
        pointed = rules.read_pointer(ckpt_dir, name)
        if pointed is None:
            # With complete steps but no pointer, one of them can still be named (--step N).
            steps = _complete_steps(ckpt_dir, name)
            said = f"{_listed(steps)}; pass --step N" if steps else f"no complete checkpoint of {name} there: nothing to export"
            raise CheckpointError(f"no {name}-latest in {ckpt_dir}", hint=said)
        checkpoint = ckpt_dir / pointed
        step = rules.parse_step(pointed, name)
        assert step is not None
    else:
        checkpoint = rules.checkpoint_path(ckpt_dir, name, step)
    if not checkpoint.is_dir():
        raise CheckpointError(f"no checkpoint {checkpoint.name} in {ckpt_dir}", hint=_steps_hint(ckpt_dir, name))
    if not (checkpoint / rules.METADATA_FILE).is_file():
        if rules.is_complete(checkpoint):
            # Complete, as `checkpoints` lists it, but torch.save or another format of the script's own.
            raise CheckpointError(
                f"cannot export {checkpoint}: a script's own format, not DCP",
                hint=_steps_hint(ckpt_dir, name, none="export reads DCP checkpoints of Hugging Face models (dcp.save of the model's state_dict)"),
            )
        raise CheckpointError(f"cannot export {checkpoint}: incomplete: no .metadata (a save that did not finish)", hint=_steps_hint(ckpt_dir, name))
    target = Path(os.path.abspath(os.path.expanduser(output))) if output else hf_exports.default_output(ckpt_dir, name, step)
    return Target(checkpoint, target, step, ckpt_dir, name, model=model, model_name=model_name, tokenizer=tokenizer)


def _complete_steps(ckpt_dir: Path, name: str) -> list[str]:
    return [str(info.step) for info in rules.list_checkpoints(ckpt_dir, name) if (info.path / rules.METADATA_FILE).is_file()]


STEPS_SHOWN = 10
"""At most this many steps in a hint: the first two and the newest, with how many in all (a
training that keeps every checkpoint listed 150 in one line)."""


def _listed(steps: list[str]) -> str:
    """`complete steps: 10, 20, ...`, at most STEPS_SHOWN of them."""
    if len(steps) > STEPS_SHOWN:
        steps = [*steps[:2], "...", *steps[2 - STEPS_SHOWN:], f"{len(steps)} in all"]
    return f"complete steps: {', '.join(steps)}"


def _steps_hint(ckpt_dir: Path, name: str, none: str = "") -> str:
    """The steps export can read (DCP's); `none` where there are none (else: that none is there)."""
    steps = _complete_steps(ckpt_dir, name)
    return _listed(steps) if steps else (none or f"no complete checkpoint of {name} there")


def from_job_record(spec: JobSpec) -> dict[str, str | None]:
    """What a recorded job says of its model and tokenizer (for checkpoints that do not)."""
    trainer_args = spec.job.trainer_args
    return {
        "model": spec.job.model or None,
        "model_name": targs.value_of(trainer_args, targs.MODEL_NAME),
        "tokenizer": targs.value_of(trainer_args, "--tokenizer"),
    }


def exporter_python(given: str | None, job_torchrun: str | None) -> str:
    """A Python with torch and transformers: --python, else this one when it has them, else
    the one beside the job's torchrun (its venv)."""
    if given:
        return given
    if importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None:
        return sys.executable
    beside = _beside(job_torchrun)
    if beside is not None and os.access(beside, os.X_OK):
        return beside
    raise InvalidInput("export needs torch and transformers (the train extra), which this Python lacks", hint=TRAIN_EXTRA_HINT)


def node_python(given: str | None, job_torchrun: str | None) -> str:
    """The Python a compute node runs the exporter with (`export --slurm`): --python, else
    the one beside the job's torchrun (its venv on shared storage), else this one."""
    return given or _beside(job_torchrun) or sys.executable


def _beside(job_torchrun: str | None) -> str | None:
    """The python of the venv a job's torchrun (an absolute path) lives in."""
    return os.path.join(os.path.dirname(job_torchrun), "python") if job_torchrun and os.path.isabs(job_torchrun) else None


def command(python: str, target: Target, *, dtype: str, overwrite: bool, progress: str = "json") -> list[str]:
    cmd = [python, "-m", EXPORTER_MODULE]
    if target.checkpoint is not None:
        cmd += ["--checkpoint", str(target.checkpoint)]
    else:
        cmd += ["--checkpoint-dir", str(target.ckpt_dir), "--name", target.name] + (["--step", str(target.step)] if target.step is not None else [])
    if target.output is not None:
        cmd += ["--output", str(target.output)]
    cmd += ["--dtype", dtype, "--progress", progress]
    if overwrite:
        cmd.append("--overwrite")
    for flag, value in (("--model", target.model), ("--model-name", target.model_name), ("--tokenizer", target.tokenizer)):
        if value:
            cmd += [flag, value]
    return cmd


class ExportFailed(HyperlaunchError):
    """The exporter ended with an error it named (its exit code is kept)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code if exit_code in EXIT_CODES else 1


def run(cmd: list[str], on_progress: Callable[[int, int], None] | None = None) -> dict[str, object]:
    """Run the exporter; its final document. Its one-line error becomes this process's."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    except OSError as err:
        raise InvalidInput(f"cannot run {cmd[0]}: {err.strerror}", hint=TRAIN_EXTRA_HINT) from None
    done: dict[str, object] | None = None
    error: dict[str, object] | None = None
    assert proc.stdout is not None and proc.stderr is not None
    try:
        for event in _events(proc.stdout):
            if event.get("event") == "progress" and on_progress is not None:
                on_progress(int(str(event["bytes"])), int(str(event["total"])))
            elif event.get("event") == "done":
                done = event
            elif event.get("event") == "error":
                error = event
        stderr = proc.stderr.read()
        code = proc.wait()
    except BaseException:
        proc.terminate()  # Ctrl-C reaches it too; the exporter removes its unfinished folder
        proc.wait()
        raise
    if error is not None:
        raise ExportFailed(str(error.get("message")), int(str(error.get("exit_code", 1))))
    if code != 0 or done is None:
        tail = " ".join(stderr.strip().splitlines()[-1:]) or f"exit {code}"
        if "No module named" in tail:
            raise InvalidInput(f"{cmd[0]} cannot run the exporter ({tail})", hint=TRAIN_EXTRA_HINT)
        raise ExportFailed(f"the export failed: {tail}", 1)
    return done


def _events(stream: object) -> Iterator[dict[str, object]]:
    for line in stream:  # type: ignore[attr-defined]
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event
