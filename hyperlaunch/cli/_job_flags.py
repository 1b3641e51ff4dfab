"""The job flags shared by `render` and `submit` (and anything else that builds a JobSpec):
derived from the job settings that declare a flag (hyperlaunch.job.flags.flag), and added to a
Typer command by `@with_job_flags`, which hands the command one `job: JobFlags` instead of
two dozen parameters."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

if TYPE_CHECKING:
    from hyperlaunch.core.recommend import Setting
    from hyperlaunch.job.detect import Decision
    from hyperlaunch.job.plan import Plan

def _option(field: str, kind: Any, *decls: str, help: str, metavar: str | None = None, panel: str = "Job") -> inspect.Parameter:
    option = typer.Option(*decls, help=help, metavar=metavar, show_default=False, rich_help_panel=panel)
    return inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind, option])


def _option_type(kind: object) -> Any:
    """The option's type for a JobSpec field's type: an `auto`/`on`/`off` choice is an on/off
    switch, a tuple a repeatable option, anything else the field's type; None means not given."""
    if typing.get_origin(kind) is Literal:
        return bool | None
    if typing.get_origin(kind) is tuple:
        return list[str] | None
    args = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    base: Any = args[0] if args else kind
    return base | None


@functools.cache
def job_flag_parameters() -> tuple[inspect.Parameter, ...]:
    """One option for each job setting that declares a flag, in the sections' order: built when
    a job command is, so that importing one (for `hyperlaunch --help`'s list) loads no job rules."""
    from hyperlaunch.job.spec import user_settings

    return tuple(
        _option(s.key, _option_type(s.kind), *s.flag.names, help=s.flag.help, metavar=s.flag.metavar, panel=s.panel or "Job")
        for s in user_settings()
        if s.flag is not None
    )


@functools.cache
def _switches() -> tuple[str, ...]:
    """Flags that say on or off for a setting stored as auto/on/off."""
    from hyperlaunch.job.spec import user_settings

    return tuple(s.key for s in user_settings() if s.flag is not None and typing.get_origin(s.kind) is Literal)


_PROFILE_PARAMETER = _option(
    "profile", str | None, "--profile", metavar="NAME",
    help="Profile from hyperlaunch.toml ([profile.NAME]); also HYPERLAUNCH_PROFILE. Flags override hyperlaunch.toml and HYPERLAUNCH_* settings.",
)
_TRAINER_ARGS_PARAMETER = inspect.Parameter(
    "trainer_args",
    inspect.Parameter.KEYWORD_ONLY,
    default=None,
    annotation=Annotated[
        list[str] | None,
        typer.Argument(help="Extra trainer arguments (or your --script's own), after `--` (e.g. -- --lr 3e-4).", metavar="TRAINER_ARGS", show_default=False),
    ],
)
@dataclass(frozen=True)
class JobFlags:
    """What the user typed, by job setting (None: not given), plus the chosen profile."""

    overrides: dict[str, object]
    profile: str | None

    def build(self, slurm_env: Callable[[], Mapping[str, str]] | None = None) -> Plan:
        """The invocation's JobSpec and training settings: preset < config files <
        HYPERLAUNCH_* < these flags; what is left to the cluster is asked of the one
        `slurm_env()` names (the CLI's usual cluster when None), only when needed."""
        from hyperlaunch.job.plan import plan_job

        if slurm_env is None:
            from hyperlaunch.cli._cluster import slurm_env as cluster_env

            slurm_env = cluster_env
        return plan_job(self.overrides, profile=self.profile, slurm_env=slurm_env)


def show_settings(plan: Plan, trainings: int = 1) -> None:
    """The training settings the job runs with and where each came from, on stderr (a sweep:
    `trainings` of them, for what their checkpoints need)."""
    from hyperlaunch.cli._output import out
    from hyperlaunch.job.plan import checkpoint_room_warning, snapshot_memory_note

    spec = plan.spec
    if plan.settings:
        out.note_block(f"training {spec.derived.checkpoint_name} on {spec.job.nodes} x {spec.cluster.instance_type} with:", _rows(plan.settings))
    if plan.decided:
        out.note_block(f"the job on {spec.cluster.instance_type} nodes:", _rows(plan.decided))
    if plan.configured:
        out.note_block("from your configuration:", _rows(plan.configured))
    for decision in plan.decided:
        if decision.warning:
            out.warn(decision.warning)
    room = checkpoint_room_warning(spec, trainings)
    if room:
        out.warn(room)
    snapshots = snapshot_memory_note(spec)
    if snapshots:
        out.note(snapshots)


def _rows(items: Sequence[Setting | Decision]) -> list[str]:
    """`--flag  value  source`, aligned (values up to an instance type's length)."""
    width = max(len(_label(item)) for item in items)
    values = min(max(8, *(len(_shown(item.value)) for item in items)), 16)
    return [f"{_label(item):<{width}}  {_shown(item.value):<{values}}  {item.source}" for item in items]


def _label(item: Setting | Decision) -> str:
    return "after --" if item.name == "trainer_args" else item.flag


def _shown(value: object) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def _job_flags(values: dict[str, Any]) -> JobFlags:
    overrides: dict[str, object] = {p.name: values.pop(p.name) for p in job_flag_parameters()}
    for switch in _switches():
        given = overrides[switch]
        overrides[switch] = None if given is None else ("on" if given else "off")
    overrides["trainer_args"] = values.pop("trainer_args")
    return JobFlags(overrides=overrides, profile=values.pop("profile"))


_NEEDS_JOB_FLAGS = "__hyperlaunch_job_flags__"


def with_job_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a Typer command whose first parameter is `job: JobFlags`: the CLI gives it the job
    flags, --profile and trailing trainer arguments (`job_command`) when it builds the command."""
    setattr(command, _NEEDS_JOB_FLAGS, True)
    return command


def needs_job_flags(command: Callable[..., Any]) -> bool:
    return bool(getattr(command, _NEEDS_JOB_FLAGS, False))


def job_command(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` (marked by with_job_flags) with the job flags, --profile and trailing trainer
    arguments added; its own parameters keep their places before them."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "job"]

    @functools.wraps(command)
    def wrapper(**values: Any) -> Any:
        job = _job_flags(values)
        return command(job, **values)

    added = [*job_flag_parameters(), _PROFILE_PARAMETER, _TRAINER_ARGS_PARAMETER]
    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + added
    wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    # Typer also reads type hints; give it the real annotations rather than the wrapped strings.
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    del wrapper.__wrapped__  # so inspect and Typer see the new signature, not the original
    return wrapper
