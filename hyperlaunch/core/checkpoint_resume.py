"""Where a (re)started run resumes: the checkpoint `-latest` names, or else the newest complete
one, with a warning; the rules of names, completeness and the pointer are
hyperlaunch.core.checkpoints'.

Torch-free on purpose: `resume` and `hyperlaunch checkpoints` read it on a login node.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.checkpoints import (
    ANY_CHECKPOINT,
    METADATA_FILE,
    is_complete,
    newest_complete,
    parse_step,
    read_info,
    read_pointer,
)
from hyperlaunch.core.errors import CheckpointError


@dataclass(frozen=True)
class ResumeChoice:
    """Where a run starts: a checkpoint to load, or from scratch."""

    path: Path | None
    """Checkpoint directory to load; None means start from scratch."""
    step: int
    """Its step (0 from scratch)."""
    warning: str | None = None
    """Set when the choice is a fallback the user should know about."""


def choose_resume(
    ckpt_dir: Path,
    model: str,
    *,
    from_scratch: bool = False,
    resume_from: Path | None = None,
) -> ResumeChoice:
    """The checkpoint a (re)started run loads:

    - `resume_from` wins (it must be a complete checkpoint of this model);
    - `from_scratch` starts fresh (explicitly; existing checkpoints are left alone);
    - the `-latest` pointer, when it names a complete checkpoint;
    - otherwise the newest complete checkpoint, with a warning (pointer missing, names a
      missing or incomplete directory) - never silently from scratch while one exists;
    - a garbage pointer or one naming another model raises CheckpointError.
    """
    if resume_from is not None:
        return ResumeChoice(path=Path(resume_from), step=validate_checkpoint(resume_from, model))
    if from_scratch:
        return ResumeChoice(path=None, step=0)
    named = read_pointer(ckpt_dir, model)
    if named is not None and is_complete(Path(ckpt_dir) / named):
        path = Path(ckpt_dir) / named
        return ResumeChoice(path=path, step=validate_checkpoint(path, model))
    fallback = newest_complete(ckpt_dir, model)
    problem = pointer_problem(ckpt_dir, model, named)
    if fallback is not None:
        return ResumeChoice(
            path=fallback.path,
            step=validate_checkpoint(fallback.path, model),
            warning=f"{problem}: resuming from the newest complete checkpoint {fallback.path.name}",
        )
    if named is not None:
        return ResumeChoice(path=None, step=0, warning=f"{problem}, and no complete checkpoint exists: starting from scratch")
    return ResumeChoice(path=None, step=0)


def pointer_problem(ckpt_dir: Path, model: str, named: str | None) -> str | None:
    """Why a resume could not follow the model's `-latest` pointer (`named`, as read_pointer
    returned it), in words; None when the pointer names a complete checkpoint. choose_resume
    then falls back to the newest complete checkpoint; `hyperlaunch checkpoints` warns."""
    if named is None:
        return f"no {model}-latest pointer"
    path = Path(ckpt_dir) / named
    if not path.exists():
        return f"{model}-latest names {named}, which does not exist"
    if not is_complete(path):
        return f"{model}-latest names {named}, which is incomplete (no {METADATA_FILE})"
    return None


def validate_checkpoint(path: Path, model: str) -> int:
    """The step of a checkpoint directory that must be a complete one of `model`."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if not is_complete(path):
        raise CheckpointError(f"checkpoint {path} is incomplete (no {METADATA_FILE})")
    info = read_info(path) or {}
    recorded = info.get("model")
    if recorded is not None and recorded != model:
        raise CheckpointError(f"checkpoint {path} belongs to model {recorded!r}, not {model!r}")
    step = parse_step(path.name, model)
    if step is None:
        if recorded is None:
            other = ANY_CHECKPOINT.match(path.name)
            owner = f"model {other.group('model')!r}" if other else "no known model"
            raise CheckpointError(f"checkpoint {path} belongs to {owner}, not {model!r}")
        step = int(str(info.get("step", 0)))
    return step
