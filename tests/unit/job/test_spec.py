"""JobSpec validation: every refusal is an InvalidInput that says what is valid."""

from __future__ import annotations

import dataclasses

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.core.instances import get_instance, known_instance_types
from hyperlaunch.job import containers
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec


def default_container_mounts(spec: JobSpec) -> list[str]:
    """The mounts the rendered script passes Pyxis for `spec`."""
    assert spec.container is not None
    return containers.container_mounts(spec.container, spec.mounted_paths)


PATHS = {"checkpoint_dir": "/shared/ckpt", "log_dir": "/shared/logs", "run_dir": "/shared/runs/a"}


def make(**changes: object) -> JobSpec:
    return job_spec(**{"model": "qwen3_tiny", **PATHS, **changes})  # type: ignore[arg-type]


def test_defaults_are_filled_once_and_frozen() -> None:
    spec = make(instance_type="p5.48xlarge")
    assert spec.cluster.gpus_per_node == 8 and spec.procs_per_node == 8
    assert spec.job.job_name == "qwen3_tiny"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.nodes = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        JobSpec("qwen3_tiny", **PATHS)  # type: ignore[misc]  # keyword-only


def test_cpu_runs_one_process_per_node() -> None:
    spec = make()
    assert spec.cluster.gpus_per_node == 0 and spec.procs_per_node == 1


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": "gpt5"}, "presets: qwen3_0_6b"),
        ({"nodes": 0}, "--nodes must be between 1 and 2147483647"),
        ({"instance_type": "p9.huge"}, "known: cpu"),
        ({"instance_type": "cpu", "gpus_per_node": 2}, "has no GPUs"),
        ({"instance_type": "p5.48xlarge", "gpus_per_node": 9}, "between 1 and 8"),
        ({"time": "four hours"}, "not a Slurm time"),
        ({"time": "1:00", "signal_seconds": 120}, "leaves no time to train"),
        ({"time": "2", "signal_seconds": 61}, "use at most 60 s"),
        ({"signal_seconds": 0}, "between 1 and 65535"),
        ({"hyperpod": "maybe"}, "auto, on, off"),
        ({"max_restarts": -1}, "--max-restarts must be between 0 and 2147483647"),
        ({"max_steps": 0}, "--max-steps must be between 1 and 2147483647"),
        ({"env": (("1BAD", "x"),)}, "not a valid variable name"),
        ({"job_name": "a\nb"}, "control characters"),
        ({"job_name": "a/b"}, "must not contain '/'"),
        ({"log_dir": "logs"}, "absolute path"),
        ({"log_dir": "/x/a\\b"}, "backslash"),
        ({"partition": "a b"}, "spaces"),
        ({"container_image": "/i.sqsh", "checkpoint_dir": "/a,b"}, "',' or ':'"),
        ({"container_image": "/i.sqsh", "container_mounts": ("/a:/a,/b:/b",)}, "one --container-mounts per mount"),
        ({"trainer_args": ("a\x00b",)}, "NUL"),
    ],
)
def test_invalid_values_are_refused_with_the_valid_ones(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(")):
        make(**changes)


def test_slurm_time_forms_are_accepted() -> None:
    for value in ("30", "30:00", "4:00:00", "2-00", "2-12:00", "2-12:00:00", "UNLIMITED"):
        assert make(time=value).cluster.time == value


def test_local_model_directories_are_accepted_when_absolute() -> None:
    spec = make(model="/models/my-llama/")
    assert spec.job.job_name == "my-llama"


def test_container_mounts_cover_the_shared_folders_once() -> None:
    spec = make(
        container_image="/img.sqsh",
        data="/shared/data",
        run_dir="/shared/ckpt",
        container_mounts=("/fsx:/fsx", "/fsx:/fsx"),
    )
    # Parents first (a later mount hides what an earlier one put under it); data read-only.
    assert default_container_mounts(spec) == [
        "/fsx:/fsx",
        "/shared/ckpt:/shared/ckpt",
        "/shared/logs:/shared/logs",
        "/shared/data:/shared/data:ro",
    ]


def test_every_instance_preset_is_complete() -> None:
    names = known_instance_types()
    for required in (
        "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge",
        "g5.48xlarge", "g6.12xlarge", "g6e.48xlarge", "cpu",
    ):
        assert required in names
    for name in names:
        preset = get_instance(name)
        exports = dict(preset.env)
        if preset.gpus_per_node:
            assert exports["NCCL_SOCKET_IFNAME"].startswith("^docker"), name
    p5 = dict(get_instance("p5.48xlarge").env)
    assert p5["FI_EFA_USE_HUGE_PAGE"] == "0"
    # Not the HyperPod scripts' TORCH_NCCL_BLOCKING_WAIT=1: it blocks the CPU on every collective
    # (no overlap), and the trainer's hang watchdog and torch's NCCL watchdog catch a hung one.
    assert not any("TORCH_NCCL_BLOCKING_WAIT" in dict(get_instance(name).env) for name in names)
    for name in names:
        # aws-ofi-nccl's current guide (REFERENCE.md §5): settings for old plugins and
        # installers only, or never to be set
        stale = {"FI_PROVIDER", "NCCL_PROTO", "FI_EFA_SET_CUDA_SYNC_MEMOPS", "NCCL_BUFFSIZE", "NCCL_MIN_CHANNELS", "RDMAV_FORK_SAFE"}
        assert not stale & set(dict(get_instance(name).env)), name
    assert get_instance("cpu").gpu is None and get_instance("p5.48xlarge").peak_bf16_tflops_per_gpu == 989.0


@pytest.mark.parametrize(
    ("name", "gpus", "efa"),
    [
        ("g5.xlarge", 1, False), ("g5.4xlarge", 1, False), ("g5.8xlarge", 1, True), ("g5.12xlarge", 4, True),
        ("g6.2xlarge", 1, False), ("g6.16xlarge", 1, True), ("g6.48xlarge", 8, True),
        ("g6e.xlarge", 1, False), ("g6e.24xlarge", 4, True), ("p4de.24xlarge", 8, True), ("p5e.48xlarge", 8, True),
        ("cpu", 0, False),
    ],
)
def test_sizes_of_a_family_have_their_own_gpus_and_efa(name: str, gpus: int, efa: bool) -> None:
    preset = get_instance(name)
    assert (preset.gpus_per_node, preset.efa) == (gpus, efa)
    assert ("FI_EFA_USE_HUGE_PAGE" in dict(preset.env)) == efa, "EFA settings only where there is EFA"
    if name.startswith("g"):
        assert dict(preset.env)["NCCL_SHM_USE_CUDA_MEMCPY"] == "1"


def test_sagemaker_names_find_the_same_preset() -> None:
    assert get_instance("ml.p5.48xlarge") == get_instance("p5.48xlarge")
    with pytest.raises(InvalidInput, match="unknown instance type 'ml.p9.48xlarge'"):
        get_instance("ml.p9.48xlarge")


def test_the_trainer_finds_a_gpus_peak_in_the_instance_presets() -> None:
    from hyperlaunch.core.instances import peak_bf16_flops

    assert peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_bf16_flops("NVIDIA B200") == 2250e12
    assert peak_bf16_flops("NVIDIA L4") == 121e12
    assert peak_bf16_flops("NVIDIA A10G") is None, "env/g5.toml: no published dense bf16 figure"
    assert peak_bf16_flops("NVIDIA L40S") == 362e12, "an L40S is not an L4"
    assert peak_bf16_flops("NVIDIA GeForce RTX 4090") is None


def test_the_size_people_read_names_the_spares() -> None:
    spec = make(nodes=2)
    assert spec.nodes_text == "2 node(s)"
    assert spec.replace(spare_nodes=1).nodes_text == "2 node(s) + 1 spare"
