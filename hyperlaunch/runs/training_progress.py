"""The trainer's progress as a job's run folder shows it: the last step, its loss and throughput
from metrics.jsonl (the records tagged with this job's id: a run folder is shared by a job and
those that resume it), the checkpoint it last completed, the steps it resumed from, and why its
final export was not written where it was not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core import checkpoints
from hyperlaunch.core.metrics_reader import steps_and_events
from hyperlaunch.core.metrics_records import METRICS_FILE, EventRecord, StepRecord, TrainerEvent
from hyperlaunch.runs.jobs import JobRecord


@dataclass(frozen=True)
class Progress:
    """The trainer's progress as its metrics.jsonl and checkpoint folder show it."""

    last_step: int | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    checkpoint_step: int | None = None
    checkpoint: str | None = None
    resumed_from_steps: tuple[int, ...] = ()
    resumed_from_memory: tuple[bool, ...] = ()
    """For each resume: whether the trainers restored a memory snapshot (else a checkpoint)."""
    events: tuple[EventRecord, ...] = ()

    @property
    def export_error(self) -> str | None:
        """Why the trainer's final Hugging Face export was not written (a full disk), where its
        last export of the run failed; the training itself completed."""
        ends = [e for e in self.events if e.event in (TrainerEvent.EXPORTED.value, TrainerEvent.EXPORT_FAILED.value)]
        return ends[-1].message if ends and ends[-1].event == TrainerEvent.EXPORT_FAILED.value else None


def read_progress(record: JobRecord) -> tuple[Progress, list[StepRecord]]:
    all_steps, all_events = steps_and_events(Path(record.spec.output.run_dir) / METRICS_FILE)
    steps, events = list(all_steps), list(all_events)
    # A run dir is shared by a job and the jobs that resume it; the trainer tags each record
    # with its Slurm job id, so each job shows its own part (untagged files: all of it).
    tagged = any(step.job_id is not None for step in steps) or any(event.job_id is not None for event in events)
    if tagged:
        steps = [item for item in steps if item.job_id == record.job_id]
        events = [item for item in events if item.job_id == record.job_id]
    model = record.spec.derived.checkpoint_name
    saved = [e for e in events if e.event == TrainerEvent.CHECKPOINT_COMPLETED.value and e.details.get("path")] if tagged else []
    ckpt_name: str | None = None
    if saved:
        # The last checkpoint this job completed: the pointer may be a later job's by now (a
        # resume of this one, or the same training submitted again).
        ckpt_name = Path(str(saved[-1].details["path"])).name
    elif tagged and not steps and not events:
        pass  # it never trained (the folder's records are other jobs'): the pointer is theirs
    else:
        try:
            # A run that saves none has none of its own: a pointer there is another run's.
            ckpt_name = checkpoints.read_pointer(Path(record.spec.output.checkpoint_dir), model) if record.spec.saves_checkpoints else None
        except Exception:  # noqa: BLE001 - status shows what it can; `checkpoints` explains a bad pointer
            ckpt_name = None
    ckpt_step = checkpoints.parse_step(ckpt_name, model) if ckpt_name is not None else None
    if ckpt_step is None and saved and saved[-1].details.get("layout"):
        # A script framework's own checkpoint (out/checkpoint-40, last.ckpt), by its whole path:
        # it lies in the script's working folder, not in the checkpoint folder.
        ckpt_name, ckpt_step = str(saved[-1].details["path"]), saved[-1].step
    last = steps[-1] if steps else None
    resumes = [e for e in events if e.event == TrainerEvent.RESUMED.value]
    resumed = tuple(e.step or 0 for e in resumes)
    progress = Progress(
        last_step=last.step if last else None,
        last_loss=last.loss if last else None,
        tokens_per_s=last.tokens_per_s if last else None,
        checkpoint_step=ckpt_step,
        checkpoint=ckpt_name,
        resumed_from_steps=resumed,
        resumed_from_memory=tuple(e.details.get("source") == "memory" for e in resumes),
        events=tuple(events),
    )
    return progress, steps
