"""What a job's settings are when the user left them out, decided once: the plan builds every
job through `job_spec` (hyperlaunch.job.plan), and so does a record written by an older
version that lacks a setting it now carries. Values are normalized here too (Slurm's form of a
time, the instance preset's name, the image as Pyxis reads it), so sections hold them as given.

A value of the wrong type is left as it is: its section refuses it with the type it must have."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.spec import SECTIONS, JobSpec, setting_fields

TENSORBOARD_FOLDER = "tensorboard"
"""--tracker tensorboard's folder in the run folder, unless --tensorboard-dir names another."""


def job_spec(**settings: object) -> JobSpec:
    """The JobSpec of settings by flat name (a plan's, a record's), its values normalized and
    what they leave out decided. Paths must be absolute already (the plan makes them so)."""
    from hyperlaunch.core.instances import get_instance
    from hyperlaunch.core.trackers import TENSORBOARD
    from hyperlaunch.job import containers
    from hyperlaunch.slurm.time_limit import slurm_time

    values = dict(settings)
    gpus = values.get("gpus_per_node")
    instance = get_instance(_text(values, "instance_type") or "cpu", gpus_per_node=gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else None)
    if isinstance(values.get("instance_type"), str):
        values["instance_type"] = instance.name  # one name for the type, whether typed with SageMaker's `ml.` or not
    if isinstance(values.get("time"), str):
        values["time"] = slurm_time(str(values["time"]))
    if isinstance(values.get("nccl_debug"), str):
        values["nccl_debug"] = str(values["nccl_debug"]).upper()
    image = values.get("container_image")
    if isinstance(image, str):
        values["container_image"] = containers.pyxis_image(image)
    elif image is None and containers.is_derived_name(_text(values, "container_name")):
        values["container_name"] = None  # a derived name goes with its image
    if gpus is None:
        values["gpus_per_node"] = instance.gpus_per_node
    if _is_script_job(values) and values.get("name") is None:
        values["name"] = default_run_name(_text(values, "script"), _text(values, "module"))
    if values.get("job_name") is None:
        values["job_name"] = default_job_name(values)
    tracker, run_dir = values.get("tracker"), values.get("run_dir")
    if isinstance(tracker, tuple) and TENSORBOARD in tracker and values.get("tensorboard_dir") is None and isinstance(run_dir, str):
        values["tensorboard_dir"] = tensorboard_dir(run_dir)
    if not values.get("checkpoint_name"):
        values["checkpoint_name"] = _checkpoint_name(values)
    return JobSpec.from_flat(values)


def default_run_name(script: str | None, module: str | None) -> str:
    """A script job's name when --name is not given: the script's stem, the module's last part,
    with what a file name should not hold replaced by '_'."""
    base = os.path.splitext(os.path.basename(script))[0] if script else (module or "").rpartition(".")[2]
    return re.sub(r"^\.|[^A-Za-z0-9_.-]", "_", base) or "script"


def default_job_name(settings: Mapping[str, object]) -> str:
    """The Slurm job name when --job-name is not given: a script job's run name, else the
    model's (a preset's, or a model directory's last part)."""
    if _is_script_job(settings):
        base = _text(settings, "name") or default_run_name(_text(settings, "script"), _text(settings, "module"))
    else:
        base = os.path.basename((_text(settings, "model") or "").rstrip("/"))
    return base or "hyperlaunch"


def tensorboard_dir(run_dir: str) -> str:
    """--tracker tensorboard's folder when --tensorboard-dir is not given."""
    return os.path.join(run_dir, TENSORBOARD_FOLDER)


def _checkpoint_name(values: dict[str, object]) -> str:
    """The name the job's checkpoints go by (hyperlaunch.core.checkpoints.checkpoint_name),
    once its Job section holds: an unknown model is refused with the presets named first."""
    from hyperlaunch.core import checkpoints

    job_fields = {s.key: s.name for s in setting_fields() if s.section == "job"}
    job = SECTIONS["job"](**{name: values[key] for key, name in job_fields.items() if key in values})
    if job.is_script_job:
        return job.name or ""
    return checkpoints.checkpoint_name(job.model, targs.value_of(job.trainer_args, targs.MODEL_NAME))


def _is_script_job(settings: Mapping[str, object]) -> bool:
    return settings.get("script") is not None or settings.get("module") is not None


def _text(settings: Mapping[str, object], key: str) -> str | None:
    value = settings.get(key)
    return value if isinstance(value, str) else None

