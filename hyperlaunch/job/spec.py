"""The one description of a training job: its sections (hyperlaunch.job.sections), built once
per invocation by the plan (hyperlaunch.job.plan, its defaults by hyperlaunch.job.defaults),
checked here across sections before anything is rendered or submitted, then passed down
unchanged.

A job's settings also have one flat name each (`nodes`, `container_image`, `checkpoint_name`):
configs, HYPERLAUNCH_* variables, flags and job records use those names (SETTINGS, from_flat,
to_flat), so a record written before the sections existed reads as any other."""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field

from hyperlaunch.core.paths import WORK_FOLDER
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.flags import FLAG, Flag, key_of
from hyperlaunch.job.sections import Cluster, Container, Derived, Job, Output, Recovery
from hyperlaunch.job.text_checks import fail, shown

SECTIONS: dict[str, type] = {"job": Job, "cluster": Cluster, "container": Container, "recovery": Recovery, "output": Output, "derived": Derived}
"""JobSpec's sections by attribute, in the order `--help` shows their options (Derived has none)."""
CONTAINER_KEY = "container_image"
"""The setting that makes a job a container job: without it the Container section is None."""
_SIGNAL_SLACK_SECONDS = 60


@dataclass(frozen=True)
class SettingField:
    """One setting of a job: its flat name, where it lives, its type and its flag (None: not an
    option; `trainer_args` is given after `--`, Derived's fields by hyperlaunch itself)."""

    key: str
    section: str
    name: str
    kind: object
    flag: Flag | None
    panel: str | None


@functools.cache
def setting_fields() -> tuple[SettingField, ...]:
    """Every field of every section, in the sections' order."""
    found = []
    for section, kind in SECTIONS.items():
        hints = typing.get_type_hints(kind)
        for item in dataclasses.fields(kind):
            declared = item.metadata.get(FLAG)
            found.append(SettingField(key_of(item), section, item.name, hints[item.name], declared, getattr(kind, "PANEL", None)))
    return tuple(found)


def user_settings() -> tuple[SettingField, ...]:
    """The settings a user gives (flags, configs, HYPERLAUNCH_* variables): all but Derived's."""
    return tuple(s for s in setting_fields() if s.section != "derived")


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """Everything needed to render and submit one training job, in sections as `--help` groups
    their options, plus what hyperlaunch derived for it. Each section checks its own fields; the
    checks that span sections are here."""

    job: Job
    cluster: Cluster
    container: Container | None = None
    """None for a job on the host."""
    recovery: Recovery = field(default_factory=Recovery)
    output: Output
    derived: Derived

    def __post_init__(self) -> None:
        from hyperlaunch.core.trackers import NAMES_CHOSEN
        from hyperlaunch.slurm.time_limit import limit_seconds

        if self.container is not None:
            self.container.check_mounts(self.mounted_paths)
        for key, _ in self.job.env:
            for name in self.output.tracker:
                if key in NAMES_CHOSEN.get(name, ()):
                    fail(f"--env {key} is refused with --tracker {name}: hyperlaunch sets it to the training's one run")
        time, signal_seconds = self.cluster.time, self.recovery.signal_seconds
        limit = None if time is None else limit_seconds(time)
        # slurmctld checks warning signals every 30 s and sends them up to that much early, so a
        # signal time within a minute of the limit can arrive as the job starts, every attempt.
        if limit is not None and signal_seconds > limit - _SIGNAL_SLACK_SECONDS:
            fail(
                f"--signal-seconds {signal_seconds} leaves no time to train within --time {time} "
                f"({limit} s): Slurm may send the signal up to 30 s early, so use at most "
                f"{max(limit - _SIGNAL_SLACK_SECONDS, 0)} s, or a longer --time"
            )

    @classmethod
    def from_flat(cls, values: Mapping[str, object]) -> JobSpec:
        """The job of settings by flat name, complete (hyperlaunch.job.defaults fills what a user
        left out); InvalidInput for what no section holds."""
        given: dict[str, dict[str, object]] = {section: {} for section in SECTIONS}
        places = {s.key: s for s in setting_fields()}
        for key, value in values.items():
            place = places.get(key)
            if place is None:
                fail(f"internal: no job setting is named {shown(key)}")
            else:
                given[place.section][place.name] = value
        container = given.pop("container")
        if container.get("image") is None:
            name = container.get("name")
            if name is not None and not _is_derived_container_name(name):
                fail(f"--container-name {shown(name)} needs --container-image (it names the unpacked image)")
            container = {}  # the other container settings mean nothing on the host
        # Built in this order: a section's error comes before any that a later one would raise.
        sections = {section: SECTIONS[section](**kwargs) for section, kwargs in given.items()}
        return cls(container=Container(**container) if container else None, **sections)  # type: ignore[arg-type]

    def to_flat(self) -> dict[str, object]:
        """Every setting by flat name (a job record's `spec`); a job on the host has its
        container settings empty."""
        flat: dict[str, object] = {}
        for place in setting_fields():
            section = getattr(self, place.section)
            if section is not None:
                flat[place.key] = getattr(section, place.name)
            else:
                flat[place.key] = () if typing.get_origin(place.kind) is tuple else None
        return flat

    def replace(self, **changes: object) -> JobSpec:
        """A copy with some settings (by flat name) changed, checked again, its container name
        settled again. Nothing else is decided again: a change that needs a default decided
        anew goes through hyperlaunch.job.defaults.job_spec, as the plan does."""
        return JobSpec.from_flat({**self.to_flat(), **changes}).settled()

    def settled(self) -> JobSpec:
        """This job with its container name derived from the image as it is now
        (containers.settled_name reads a .sqsh file's size and mtime): done where a job is
        planned, so that building a JobSpec, from a record say, reads no file."""
        from hyperlaunch.job import containers

        if self.container is None:
            return self
        name = containers.settled_name(self.container.image, self.container.name)
        return self if name == self.container.name else dataclasses.replace(self, container=dataclasses.replace(self.container, name=name))

    @property
    def is_script_job(self) -> bool:
        """The user's own script or module runs instead of the bundled trainer."""
        return self.job.is_script_job

    @property
    def saves_checkpoints(self) -> bool:
        """False for a bundled-trainer run with --no-checkpoints (a script's arguments are its own)."""
        return self.is_script_job or targs.NO_CHECKPOINTS not in self.job.trainer_args

    @property
    def what(self) -> str:
        """What the job trains, as people read it: `qwen3_0_6b`, `script train.py`, `module pkg.train`."""
        if self.job.script is not None:
            return f"script {os.path.basename(self.job.script)}"
        if self.job.module is not None:
            return f"module {self.job.module}"
        return self.job.model

    @property
    def script_in_snapshot(self) -> str | None:
        """The copy of --script the job runs: its place under code_root, under code_dir."""
        script, code_dir, code_root = self.job.script, self.derived.code_dir, self.derived.code_root
        if script is None or code_dir is None or code_root is None:
            return None
        return os.path.join(code_dir, os.path.relpath(script, code_root))

    @property
    def work_dir(self) -> str | None:
        """The folder a script job runs in, `<run_dir>/work` (None for the bundled trainer)."""
        return os.path.join(self.output.run_dir, WORK_FOLDER) if self.derived.code_dir is not None else None

    @property
    def procs_per_node(self) -> int:
        """torchrun processes per node: one per GPU, or one on CPU-only nodes."""
        return self.cluster.gpus_per_node or 1

    @property
    def nodes_text(self) -> str:
        """The job's size as people read it: `2 node(s)`, `2 node(s) + 1 spare`."""
        spares = self.recovery.spare_nodes
        return f"{self.job.nodes} node(s)" + (f" + {spares} spare" if spares else "")

    @property
    def output_dirs(self) -> tuple[str, ...]:
        """The folders the job writes: checkpoints, logs, its run folder, TensorBoard's."""
        out = self.output
        return tuple(p for p in (out.checkpoint_dir, out.log_dir, out.run_dir, out.tensorboard_dir) if p is not None)

    @property
    def mounted_paths(self) -> list[tuple[str, bool]]:
        """(path, read only) for what the trainer reads or writes outside a container image."""
        from hyperlaunch.job import containers

        return containers.job_paths(
            writable=self.output_dirs,
            model=self.job.model,
            tokenizer=targs.value_of(self.job.trainer_args, targs.TOKENIZER),
            data=self.job.data,
        )


def dependencies(spec: JobSpec) -> tuple[tuple[str, str], ...]:
    """(job id, `ok`|`any`) of every job this one waits for: --after's (ok unless said), and
    `resume --after-end`'s (any)."""
    from hyperlaunch.slurm.dependencies import waited_for

    return waited_for(spec.cluster.after, after_any=spec.derived.after_job)


def _is_derived_container_name(name: object) -> bool:
    from hyperlaunch.job.containers import is_derived_name

    return isinstance(name, str) and is_derived_name(name)
