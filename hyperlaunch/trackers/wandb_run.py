"""Weights & Biases: one run, id HYPERLAUNCH_TRACKER_RUN_ID, that every process resumes
(`resume="allow"`), logging with W&B's step = the trainer's step.

W&B ignores a step lower than the run's last one, so a process that starts at step k after the
lineage logged up to L >= k must rewind the run first: online, `resume_from="<id>?_step=<k-1>"`
(a W&B server feature; the rewound values are archived by W&B, not shown). Offline
(WANDB_MODE=offline) each process writes its own `wandb/offline-run-*` folder and nothing can be
rewound: the run records the stale range in its config (`hyperlaunch.stale_steps.<job>.<attempt>.<round>`)
and summary (`hyperlaunch/stale_from_step`); once synced in order, W&B keeps the first values
it got for steps k..L and drops the later attempt's (lower steps than the run's last)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hyperlaunch.core import trackers as names
from hyperlaunch.core.trackers import Ending
from hyperlaunch.trackers.lineage import Start, warn


class WandbRun:
    name = names.WANDB

    def __init__(self, run_id: str, folder: Path) -> None:
        self.run_id = run_id
        self.folder = Path(folder)
        self._run: Any = None
        self.rewound = False

    def open(self, start: Start, params: Mapping[str, Any]) -> str:
        import wandb

        if not self.run_id:
            raise RuntimeError(f"{names.TRACKER_RUN_ID_ENV} is not set: the job names no W&B run")
        self.folder.mkdir(parents=True, exist_ok=True)
        stale = start.stale_steps
        offline = os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun", "disabled")
        if stale is not None and not offline:
            self._run = self._rewind(wandb, start.first_step - 1)
        if self._run is None:
            self._run = wandb.init(id=self.run_id, resume="allow", dir=str(self.folder))
        if stale is not None and not self.rewound:
            self._run.config.update(
                {f"hyperlaunch.stale_steps.{start.job_id}.{start.attempt}.{start.round}": f"{stale[0]}-{stale[1]}"},
                allow_val_change=True,
            )
            self._run.summary["hyperlaunch/stale_from_step"] = stale[0]
        if params:
            self.params(params)
        return str(self._run.url) if self._run.url and not self._run.offline else str(self._run.settings.sync_dir)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._run.log(dict(values), step=step)

    def event(self, step: int, event: str, text: str) -> None:
        self._run.log({f"events/{event}": text}, step=step)

    def params(self, values: Mapping[str, Any]) -> None:
        """The run's config; a later attempt's values replace an earlier one's (`resume` may change them)."""
        self._run.config.update({str(key): _plain(value) for key, value in values.items()}, allow_val_change=True)

    def committed(self, step: int) -> None:
        self._run.summary["hyperlaunch/checkpoint_step"] = step

    def close(self, ending: Ending) -> None:
        """A requeued attempt's run ends as finished too: the next attempt resumes it."""
        self._run.finish(exit_code=1 if ending is Ending.FAILED else 0)

    def _rewind(self, wandb: Any, to_step: int) -> Any:
        """The run rewound to `to_step`, or None where the server refuses (rewinding is a
        W&B feature some servers lack): then the stale range is recorded instead."""
        try:
            with _without(names.WANDB_RESUME_ENV):  # W&B refuses `resume` together with `resume_from`
                run = wandb.init(resume_from=f"{self.run_id}?_step={max(to_step, 0)}", dir=str(self.folder))
        except Exception as error:  # noqa: BLE001 - whatever the server says, resuming still works
            warn(f"W&B could not rewind run {self.run_id} ({error}); resuming it instead")
            return None
        self.rewound = True
        return run


@contextmanager
def _without(name: str) -> Iterator[None]:
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


def _plain(value: object) -> object:
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
