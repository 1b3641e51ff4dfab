"""How a job setting declares its command-line option, once, on its field: its names, help and
placeholder (`flag`). The option's type is the field's (an `auto`/`on`/`off` field is an on/off
switch, a tuple a repeatable option); its group in `--help` is its section's (PANELS); its
config key and HYPERLAUNCH_* variable are its long name's (`--job-name`: job_name)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

FLAG = "flag"
"""The key of a field's metadata that holds its command-line flag (cli/_job_flags.py reads it)."""

JOB_PANEL = "Job"
CLUSTER_PANEL = "Cluster"
CONTAINER_PANEL = "Container"
RECOVERY_PANEL = "Recovery"
OUTPUT_PANEL = "Output"
PANELS = (JOB_PANEL, CLUSTER_PANEL, CONTAINER_PANEL, RECOVERY_PANEL, OUTPUT_PANEL)
"""The groups `--help` shows the job options in, in this order (after the command's own): one
per section of a job (hyperlaunch.job.sections)."""


@dataclass(frozen=True)
class Flag:
    """A job setting's command-line option: its names, help and placeholder."""

    names: tuple[str, ...]
    help: str
    metavar: str | None = None

    @property
    def key(self) -> str:
        """The setting's name in configs, records and HYPERLAUNCH_* variables: the long name's
        (`--exclusive/--no-exclusive`: exclusive)."""
        return self.names[0].split("/")[0].removeprefix("--").replace("-", "_")


def flag(*names: str, help: str, metavar: str | None = None) -> dict[str, Flag]:
    """Field metadata declaring the field's flag, e.g. `field(default=1, metadata=flag("--nodes", "-N", help=...))`."""
    return {FLAG: Flag(names, help, metavar)}


def key_of(field: dataclasses.Field[object]) -> str:
    """A section field's setting name: its flag's key, else the field's own name."""
    declared = field.metadata.get(FLAG)
    return declared.key if isinstance(declared, Flag) else field.name
