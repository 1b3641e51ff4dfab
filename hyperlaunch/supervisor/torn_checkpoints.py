"""The checkpoint a round will load, kept whole: before each round the one `<name>-latest`
names is checked against its manifest, and after a round whose trainer found the checkpoint it
loaded torn (its `checkpoint-torn` record names it) that one is set aside too. Setting aside
renames the folder and moves the pointer to the checkpoint before it
(hyperlaunch.core.checkpoint_integrity); each is said in the job's log, one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hyperlaunch.core import checkpoint_integrity as integrity
from hyperlaunch.core.checkpoints import parse_step, read_pointer


class TornCheckpoints:
    """The job's checkpoints of one name, and what this attempt set aside."""

    def __init__(self, checkpoint_dir: str, name: str, job: str, say: Callable[[str], None]) -> None:
        self.dir = Path(checkpoint_dir)
        self.name = name
        self.job = job
        self.say = say

    def before_round(self) -> None:
        """Set aside the checkpoint the round would load when its manifest finds it torn."""
        if not self.name:
            return
        try:
            torn = integrity.torn_pointed(self.dir, self.name)
        except OSError:
            return  # the folder cannot be read here: the trainer reports what it meets
        if torn is None:
            return
        path, problems = torn
        self._set_aside(path, integrity.torn_text(path, problems), problems[0].file)

    def after_round(self, checkpoint: str, message: str) -> str:
        """Set aside `checkpoint` (a folder name of the job's, as the failure record names it),
        which the trainer failed to load for a reason in its files (`message`, the record's);
        its name for the marker, '' when there is none of that name left to set aside."""
        path = self.dir / checkpoint
        if not self.name or parse_step(checkpoint, self.name) is None or not path.is_dir():
            return ""
        self._set_aside(path, message, "")
        return checkpoint

    def _set_aside(self, path: Path, reason: str, file: str) -> None:
        """`reason`: one line that names the checkpoint and what is wrong with it."""
        try:
            aside = integrity.set_aside(self.dir, self.name, path, reason, file=file, job=self.job)
        except OSError as error:
            self.say(f"hyperlaunch: {reason}, and it could not be set aside: {error.strerror or error}")
            return
        try:
            now = read_pointer(self.dir, self.name)
        except Exception:  # noqa: BLE001 - what the pointer names is only said here
            now = None
        then = f"{self.name}-latest now names {now}" if now else f"no complete checkpoint is left: {self.name}-latest removed, the training starts over"
        self.say(f"hyperlaunch: {reason}: set aside as {aside.path.name}; {then}")
