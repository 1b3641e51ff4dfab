"""The job flags shared by `render` and `submit` (and anything else that builds a JobSpec):
defined once here and added to a Typer command by `@with_job_flags`, which hands the command
one `job: JobFlags` instead of two dozen parameters."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hyperlaunch.core.script_env import RESERVED_ENV_RULE

if TYPE_CHECKING:
    from hyperlaunch.job.plan import Plan
    from hyperlaunch.job.detect import Decision
    from hyperlaunch.core.recommend import Setting

_PANEL = "Job (override hyperlaunch.toml and HYPERLAUNCH_* settings)"


def _option(field: str, kind: Any, *decls: str, help: str, metavar: str | None = None) -> inspect.Parameter:
    option = typer.Option(*decls, help=help, metavar=metavar, show_default=False, rich_help_panel=_PANEL)
    return inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind, option])


_ENV_HELP = (
    "KEY=VALUE exported on every node, written into the job script (private to you); KEY alone "
    "forwards KEY from this environment without writing its value (repeatable). "
    f"PATH and LD_* are allowed; {RESERVED_ENV_RULE}."
)

_HYPERPOD_CLUSTER_HELP = (
    "SageMaker HyperPod cluster (name or ARN) to ask for the instance type when --instance-type and "
    "the configs name none: first this node's /opt/ml/config/resource_config.json (often root-only; "
    "SAGEMAKER_RESOURCE_CONFIG_PATH moves it), else this cluster's SageMaker API (describe_cluster, "
    "with your AWS credentials and region), mapping the partition's Slurm nodes (ip-10-1-38-128) to "
    "their instance group; else cpu. Also lets resume --exclude-failed keep nodes HyperPod replaced. "
    "Not Slurm's --cluster."
)

# (JobSpec field, type, option names, help). The hyperpod flag maps to the field's on/off.
JOB_FLAG_PARAMETERS: list[inspect.Parameter] = [
    _option("model", str | None, "--model", "-m", help="Model preset (see `hyperlaunch models`) or a local HF model directory."),
    _option("nodes", int | None, "--nodes", "-N", help="Number of nodes [default: the preset's recommendation]."),
    _option("gpus_per_node", int | None, "--gpus-per-node", help="GPUs (torchrun processes) per node [default: the preset's, at most the instance's]."),
    _option("instance_type", str | None, "--instance-type", help="Instance type whose EFA/NCCL preset is used (e.g. p5.48xlarge or ml.p5.48xlarge) [default: the HyperPod cluster's (see --hyperpod-cluster), else cpu]."),
    _option("partition", str | None, "--partition", "-p", help="Slurm partition."),
    _option("account", str | None, "--account", "-A", help="Slurm account."),
    _option("qos", str | None, "--qos", help="Slurm QOS."),
    _option("time", str | None, "--time", "-t", help="Time limit, e.g. 4:00:00 or 2-00:00:00."),
    _option("exclusive", bool | None, "--exclusive/--no-exclusive", help="Whole nodes only [default: on for GPU instance types]."),
    _option("gres_gpus", bool | None, "--gres-gpus/--no-gres-gpus", help="Request the GPUs as Slurm GRES (--gpus-per-node) or not [default: where the partition's nodes have GPU GRES; none when no cluster answers]."),
    _option("exclude", list[str] | None, "--exclude", metavar="NODE", help="A node Slurm must not use (repeatable)."),
    _option("container_image", str | None, "--container-image", help=(
        "Run the trainer in a Pyxis/enroot container: a .sqsh file on storage every node reads (see setup-pyxis.sh), "
        "or a registry image such as 123456789012.dkr.ecr.us-west-2.amazonaws.com/repo:tag (sent to Pyxis as REGISTRY#repo:tag; "
        "for ECR run `hyperlaunch ecr-login` first)."
    )),
    _option("container_mounts", list[str] | None, "--container-mounts", metavar="MOUNT", help=(
        "Extra container mount SRC[:DST[:FLAGS]], FLAGS joined by '+' such as ro (repeatable). Already mounted at the same path: "
        "checkpoint, log and run dirs (read-write); a local --model dir, a --tokenizer dir after `--` and the --data folder (read-only)."
    )),
    _option("container_workdir", str | None, "--container-workdir", help="Working directory in the container [default: the run dir]."),
    _option("container_name", str | None, "--container-name", metavar="NAME", help=(
        "Pyxis container name: a node that unpacked the image under this name before (a requeued attempt, a later job) "
        "reuses it instead of importing it again. [default: hl-<image>-<hash> of the image's identity: a .sqsh file's path, "
        "size and mtime, so a rebuilt file gets a new name; a registry image's reference, so a tag pushed again is NOT "
        "re-pulled where the old one is unpacked: use a digest (@sha256:...) or a new tag]. Letters, digits, _ . -"
    )),
    _option("checkpoint_dir", str | None, "--checkpoint-dir", help="Checkpoint folder shared by all nodes [default: ./checkpoints]."),
    _option("data", str | None, "--data", help="Training data path or dataset name, passed to the trainer."),
    _option("max_steps", int | None, "--max-steps", help="Train to this many optimizer steps."),
    _option("env", list[str] | None, "--env", "-e", metavar="KEY[=VALUE]", help=_ENV_HELP),
    _option("nccl_debug", str | None, "--nccl-debug", metavar="LEVEL", help="Export NCCL_DEBUG=LEVEL (VERSION, WARN, INFO, ABORT, TRACE): INFO says whether NCCL uses EFA (NET/OFI) or TCP (NET/Socket)."),
    _option("hyperpod", bool | None, "--hyperpod/--no-hyperpod", help="Force HyperPod auto-resume on or off [default: on where /opt/sagemaker_cluster exists]."),
    _option("hyperpod_cluster", str | None, "--hyperpod-cluster", metavar="NAME", help=_HYPERPOD_CLUSTER_HELP),
    _option("max_restarts", int | None, "--max-restarts", help="Restart budget: how many attempts in a row may end without a new checkpoint (a crash, a lost node) and still be requeued; an attempt that saved resets it, so time-limit and preemption requeues after a save never use it (at most 1000 requeues in all) [default: 3]."),
    _option("job_name", str | None, "--job-name", "-J", help="Slurm job name [default: the model name]."),
    _option("log_dir", str | None, "--log-dir", help="Folder for %x_%j.out/.err logs [default: ./logs]."),
    _option("run_dir", str | None, "--run-dir", help="Folder for the run's metrics [default: ./runs/<job name>]."),
    _option("spare_nodes", int | None, "--spare-nodes", help="Allocate this many extra nodes that wait idle: when a node dies, the trainers restart on a spare inside the same allocation from the latest checkpoint, without waiting in the queue [default: 0]."),
    _option("restarts_in_allocation", int | None, "--restarts-in-allocation", help="After a crash or hang on nodes that are still healthy (a transient NCCL error), restart the trainers in the same allocation up to this many times in a row without a new checkpoint, before the job is requeued (--max-restarts); bad input, an unloadable model or data end the job at once [default: 2]."),
    _option("signal_seconds", int | None, "--signal-seconds", help="Send the save signal this many seconds before the time limit [default: 120]."),
    _option("torchrun", str | None, "--torchrun", help="torchrun command on the nodes [default: the one next to this Python, else torchrun]."),
]
_PROFILE_PARAMETER = _option("profile", str | None, "--profile", help="Profile from hyperlaunch.toml ([profile.NAME]); also HYPERLAUNCH_PROFILE.")
_TRAINER_ARGS_PARAMETER = inspect.Parameter(
    "trainer_args",
    inspect.Parameter.KEYWORD_ONLY,
    default=None,
    annotation=Annotated[
        list[str] | None,
        typer.Argument(help="Extra trainer arguments, after `--` (e.g. -- --lr 3e-4).", metavar="TRAINER_ARGS", show_default=False),
    ],
)
_ADDED = [*JOB_FLAG_PARAMETERS, _PROFILE_PARAMETER, _TRAINER_ARGS_PARAMETER]


@dataclass(frozen=True)
class JobFlags:
    """What the user typed, by JobSpec field (None: not given), plus the chosen profile."""

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


def show_settings(plan: Plan) -> None:
    """The training settings the job runs with and where each came from, on stderr."""
    from hyperlaunch.cli._output import out

    spec = plan.spec
    if plan.settings:
        out.note_block(f"training {spec.checkpoint_name} on {spec.nodes} x {spec.instance_type} with:", _rows(plan.settings))
    if plan.decided:
        out.note_block(f"the job on {spec.instance_type} nodes:", _rows(plan.decided))
    for decision in plan.decided:
        if decision.warning:
            out.warn(decision.warning)


def _rows(items: Sequence[Setting | Decision]) -> list[str]:
    """`--flag  value  source`, aligned (values up to an instance type's length)."""
    width = max(len(item.flag) for item in items)
    values = min(max(8, *(len(_shown(item.value)) for item in items)), 16)
    return [f"{item.flag:<{width}}  {_shown(item.value):<{values}}  {item.source}" for item in items]


def _shown(value: object) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def _job_flags(values: dict[str, Any]) -> JobFlags:
    overrides: dict[str, object] = {p.name: values.pop(p.name) for p in JOB_FLAG_PARAMETERS}
    for switch in ("hyperpod", "gres_gpus"):  # stored as auto/on/off; the flag says on or off
        given = overrides[switch]
        overrides[switch] = None if given is None else ("on" if given else "off")
    overrides["trainer_args"] = values.pop("trainer_args")
    return JobFlags(overrides=overrides, profile=values.pop("profile"))


def with_job_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the job flags, --profile and trailing trainer arguments to a Typer command whose
    first parameter is `job: JobFlags`; its own parameters keep their places after them."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "job"]

    @functools.wraps(command)
    def wrapper(**values: Any) -> Any:
        job = _job_flags(values)
        return command(job, **values)

    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + _ADDED
    wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    # Typer also reads type hints; give it the real annotations rather than the wrapped strings.
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    del wrapper.__wrapped__  # so inspect and Typer see the new signature, not the original
    return wrapper
