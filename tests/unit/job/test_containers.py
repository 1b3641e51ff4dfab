"""Container jobs (hyperlaunch.job.containers through JobSpec): registry references reach Pyxis in
its `REGISTRY#IMAGE` form, the container name follows the image's identity, and every path
the job reads or writes is mounted once, with the access it needs, parents first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.job import containers
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.script.render import srun_flags


def default_container_mounts(spec: JobSpec) -> list[str]:
    """The mounts the rendered script passes Pyxis for `spec`."""
    assert spec.container is not None
    return containers.container_mounts(spec.container, spec.mounted_paths)


PATHS = {"checkpoint_dir": "/fsx/ck", "log_dir": "/fsx/logs", "run_dir": "/fsx/runs/a"}
ECR = "123456789012.dkr.ecr.us-west-2.amazonaws.com"


def make(**changes: object) -> JobSpec:
    return job_spec(**{"model": "qwen3_tiny", "container_image": f"{ECR}/repo:tag", **PATHS, **changes}).settled()  # type: ignore[arg-type]


# -- image references ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "pyxis"),
    [
        (f"{ECR}/repo:tag", f"{ECR}#repo:tag"),
        (f"{ECR}/team/repo:v1", f"{ECR}#team/repo:v1"),
        (f"{ECR}/repo@sha256:{'a' * 64}", f"{ECR}#repo@sha256:{'a' * 64}"),
        (f"AWS@{ECR}/repo:tag", f"AWS@{ECR}#repo:tag"),
        ("nvcr.io/nvidia/pytorch:25.04-py3", "nvcr.io#nvidia/pytorch:25.04-py3"),
        ("localhost:5000/train:dev", "localhost:5000#train:dev"),
    ],
)
def test_a_registry_reference_reaches_pyxis_with_a_hash(given: str, pyxis: str) -> None:
    spec = make(container_image=given)
    assert spec.container.image == pyxis
    assert f"--container-image={pyxis}" in srun_flags(spec)


@pytest.mark.parametrize(
    "image",
    [
        "/fsx/images/train.sqsh",
        "./train.sqsh",
        "images/train.sqsh",
        f"docker://{ECR}/repo:tag",
        f"{ECR}#repo:tag",
        "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
        "ubuntu:22.04",
        "ubuntu",
    ],
)
def test_files_uris_hub_names_and_hash_forms_are_left_alone(image: str) -> None:
    assert make(container_image=image).container.image == image


def test_normalizing_twice_changes_nothing() -> None:
    once = make()
    assert once.replace(nodes=2).container.image == once.container.image == f"{ECR}#repo:tag"


# -- container names -------------------------------------------------------------------------


def test_a_registry_image_is_named_after_its_reference() -> None:
    spec = make()
    name = spec.container.name
    assert name is not None and name.startswith("hl-repo_tag-") and containers.CONTAINER_NAME.fullmatch(name)
    assert f"--container-name={name}" in srun_flags(spec)
    assert make(container_image=f"{ECR}#repo:tag").container.name == name  # the same image, either spelling
    assert make(container_image=f"{ECR}/repo:other").container.name != name
    pinned = make(container_image=f"{ECR}/repo@sha256:{'b' * 64}").container.name
    assert pinned is not None and pinned.startswith("hl-repo-") and pinned != name


def test_a_rebuilt_sqsh_file_gets_a_new_name(tmp_path: Path) -> None:
    image = tmp_path / "train.sqsh"
    image.write_bytes(b"x" * 10)
    os.utime(image, ns=(1_000_000_000, 1_000_000_000))
    first = make(container_image=str(image))
    assert first.container.name is not None and first.container.name.startswith("hl-train-")
    assert make(container_image=str(image)).container.name == first.container.name  # same file: same name

    image.write_bytes(b"y" * 10)  # same size, new mtime
    os.utime(image, ns=(2_000_000_000, 2_000_000_000))
    rebuilt = make(container_image=str(image))
    assert rebuilt.container.name != first.container.name
    # A recorded spec (resume) carries the old derived name: it is derived again.
    assert first.replace(nodes=2).container.name == rebuilt.container.name
    image.write_bytes(b"y" * 11)  # same mtime, new size
    os.utime(image, ns=(2_000_000_000, 2_000_000_000))
    assert make(container_image=str(image)).container.name != rebuilt.container.name


def test_an_unreadable_sqsh_file_gets_no_name(tmp_path: Path) -> None:
    spec = make(container_image=str(tmp_path / "absent.sqsh"))
    assert spec.container.name is None
    assert not any(flag.startswith("--container-name") for flag in srun_flags(spec))


def test_the_users_name_wins_and_a_job_without_a_container_has_none() -> None:
    assert make(container_name="qwen-v3").container.name == "qwen-v3"
    assert "--container-name=qwen-v3" in srun_flags(make(container_name="qwen-v3"))
    assert make(container_image=None).container is None
    assert make().replace(container_image=None).container is None  # a derived name goes with its image


@pytest.mark.parametrize("name", ["a:b", "with space", "-x", "a/b", "x" * 129, "ü"])
def test_a_name_pyxis_cannot_take_is_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match="--container-name"):
        make(container_name=name)


def test_a_name_without_an_image_is_refused() -> None:
    with pytest.raises(InvalidInput, match="needs --container-image"):
        make(container_image=None, container_name="mine")


# -- mounts ----------------------------------------------------------------------------------


def test_every_path_the_job_reads_is_mounted_read_only() -> None:
    spec = make(
        model="/models/Qwen3-0.6B",
        data="/datasets/corpus/train.jsonl",
        trainer_args=("--tokenizer", "/tokenizers/qwen"),
    )
    assert default_container_mounts(spec) == [
        "/fsx/ck:/fsx/ck",
        "/fsx/logs:/fsx/logs",
        "/models/Qwen3-0.6B:/models/Qwen3-0.6B:ro",
        "/tokenizers/qwen:/tokenizers/qwen:ro",
        "/datasets/corpus:/datasets/corpus:ro",  # a file mounts its folder
        "/fsx/runs/a:/fsx/runs/a",
    ]


@pytest.mark.parametrize(
    ("data", "mounted"),
    [
        ("/datasets/wikitext", "/datasets/wikitext:/datasets/wikitext:ro"),  # a folder mounts itself
        ("/datasets/corpus.txt", "/datasets:/datasets:ro"),
        ("/corpus.txt", "/corpus.txt:/corpus.txt:ro"),  # never the whole root
    ],
)
def test_the_data_folder_is_mounted(data: str, mounted: str) -> None:
    assert mounted in default_container_mounts(make(data=data))


def test_hub_names_and_relative_tokenizers_mount_nothing() -> None:
    plain = default_container_mounts(make())
    assert default_container_mounts(make(data="wikitext", trainer_args=("--tokenizer=Qwen/Qwen3-0.6B",))) == plain
    assert default_container_mounts(make(trainer_args=("--tokenizer", "offline"))) == plain


def test_paths_inside_a_mount_that_gives_enough_access_are_dropped() -> None:
    spec = make(
        model="/fsx/models/m",
        data="/fsx/ck/extra/data.jsonl",  # inside the read-write checkpoint folder: covered
        trainer_args=("--tokenizer", "/fsx/models/m/tok"),  # inside the model folder: covered
    )
    assert default_container_mounts(spec) == [
        "/fsx/ck:/fsx/ck",
        "/fsx/logs:/fsx/logs",
        "/fsx/runs/a:/fsx/runs/a",
        "/fsx/models/m:/fsx/models/m:ro",
    ]


def test_a_writable_folder_inside_a_read_only_one_is_mounted_after_it() -> None:
    spec = make(data="/fsx/corpus.jsonl")  # mounts /fsx read-only; the job's folders are under it
    assert default_container_mounts(spec) == [
        "/fsx:/fsx:ro",
        "/fsx/ck:/fsx/ck",
        "/fsx/logs:/fsx/logs",
        "/fsx/runs/a:/fsx/runs/a",
    ]


def test_a_users_same_path_mount_covers_the_jobs_paths_it_can_serve() -> None:
    writable = make(model="/fsx/models/m", container_mounts=("/fsx:/fsx",))
    assert default_container_mounts(writable) == ["/fsx:/fsx"]
    read_only = make(model="/fsx/models/m", container_mounts=("/fsx:/fsx:ro+rprivate",))
    assert default_container_mounts(read_only) == [
        "/fsx:/fsx:ro+rprivate",
        "/fsx/ck:/fsx/ck",
        "/fsx/logs:/fsx/logs",
        "/fsx/runs/a:/fsx/runs/a",
    ]
    elsewhere = make(container_mounts=("/fsx:/data",))  # another place inside: covers nothing
    assert default_container_mounts(elsewhere) == ["/fsx:/data", "/fsx/ck:/fsx/ck", "/fsx/logs:/fsx/logs", "/fsx/runs/a:/fsx/runs/a"]


def test_a_path_used_for_reading_and_writing_is_mounted_read_write_once() -> None:
    spec = make(data="/fsx/ck", trainer_args=("--tokenizer", "/fsx/ck/"))
    mounts = default_container_mounts(spec)
    assert mounts.count("/fsx/ck:/fsx/ck") == 1 and not any(m.startswith("/fsx/ck:") and m.endswith(":ro") for m in mounts)


@pytest.mark.parametrize(
    "changes",
    [
        {"model": "/models/a:b"},
        {"trainer_args": ("--tokenizer", "/tok,x")},
        {"data": "/d/a:b/x.jsonl"},
    ],
)
def test_a_mounted_path_pyxis_would_split_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidInput, match="',' or ':'"):
        make(**changes)


def test_a_relative_sqsh_path_becomes_absolute(tmp_path: Path) -> None:
    from hyperlaunch.job.plan import build_spec

    for given in ("images/train.sqsh", "./images/train.sqsh"):
        spec = build_spec({"model": "qwen3_tiny", "container_image": given}, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml")
        assert spec.container.image == str(tmp_path / "images" / "train.sqsh")
    uri = build_spec({"model": "qwen3_tiny", "container_image": f"{ECR}/repo:tag"}, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml")
    assert uri.container.image == f"{ECR}#repo:tag"
