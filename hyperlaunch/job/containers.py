"""What a Pyxis/enroot container job needs decided before rendering: the image reference as
Pyxis reads it, a container name that carries the image's identity, and mounts that cover
every path the job reads or writes (the settings themselves: hyperlaunch.job.sections.Container).
The plan normalizes the image and derives the name (hyperlaunch.job.defaults), since only that
reads the file system (a .sqsh file's size and mtime); render.srun_flags lays out the mounts,
so rendering stays pure."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperlaunch.job.sections import Container


DERIVED_NAME_PREFIX = "hl-"
"""Names hyperlaunch derives from the image start with this; a name of that form is derived
again whenever a job is planned or resumed, so it never outlives the image it was made for."""
CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""Pyxis's --container-name: no ':' (it separates the name from its mode), and a name enroot
turns into a folder name, so letters, digits and `_ . -` only."""
CONTAINER_NAME_MAX = 128
_HASH_CHARS = 16
_LABEL_MAX = 40


def is_image_file(image: str) -> bool:
    """A squashfs file (what Pyxis takes as a path: it starts with `/` or `.`; or a `.sqsh`
    name) rather than a registry reference."""
    return image.startswith(("/", ".")) or image.endswith(".sqsh")


def pyxis_image(image: str) -> str:
    """`image` as Pyxis and enroot read it: `[USER@][REGISTRY#]IMAGE[:TAG]`. A reference copied
    from a registry's console (`123456789012.dkr.ecr.us-west-2.amazonaws.com/repo:tag`) names
    its registry before the first `/`; enroot would look for that on Docker Hub, so the `/`
    becomes `#`. Files, `scheme://` URIs and references that already hold `#` are left alone,
    as are Docker Hub names (`pytorch/pytorch:tag`): the first part is a registry only when it
    holds a `.` or a `:` or is `localhost`, Docker's own rule."""
    if is_image_file(image) or "://" in image or "#" in image:
        return image
    head, slash, tail = image.partition("/")
    if not slash or not tail:
        return image
    user, at, host = head.rpartition("@")
    if not _is_registry_host(host):
        return image
    return f"{user}{at}{host}#{tail}"


def _is_registry_host(host: str) -> bool:
    return host == "localhost" or "." in host or ":" in host


def is_derived_name(name: str | None) -> bool:
    return name is not None and name.startswith(DERIVED_NAME_PREFIX)


def derived_name(image: str) -> str | None:
    """The container name for `image`: `hl-<label>-<hash>`, the hash over the image's identity.
    A .sqsh file is its path, size and modification time, read now: a rebuilt file gets a new
    name, so a node never reuses the container unpacked from the old one. A registry reference
    is its text, digest included: a tag pushed again keeps its name, and a node that already
    unpacked the old image under it reuses that (pin a digest, or push a new tag). None when
    the file cannot be read here: no name, so Pyxis unpacks the image afresh every time."""
    import hashlib  # here, not above: OpenSSL's load is most of `hyperlaunch --help`'s import of this module

    if is_image_file(image):
        try:
            info = os.stat(image)
        except (OSError, ValueError):
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        identity = f"file\0{os.path.abspath(image)}\0{info.st_size}\0{info.st_mtime_ns}"
        label = os.path.basename(image).removesuffix(".sqsh")
    else:
        identity = f"uri\0{image}"
        label = image.split("#", 1)[-1].rsplit("/", 1)[-1].split("@", 1)[0]
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_.-")[:_LABEL_MAX].rstrip("_.-")
    return f"{DERIVED_NAME_PREFIX}{label}-{digest}" if label else f"{DERIVED_NAME_PREFIX}{digest}"


def settled_name(image: str | None, name: str | None) -> str | None:
    """The container name a job runs with: the user's own, else one derived from the image as
    it is now (derived_name; a derived name is derived again, so it never outlives its image)."""
    if image is None:
        return None if is_derived_name(name) else name
    return derived_name(image) if name is None or is_derived_name(name) else name


@dataclass(frozen=True)
class _Mount:
    path: str
    """Where it is inside the container (the same as on the host, for the job's own paths)."""
    read_only: bool
    text: str
    """As Pyxis takes it: `SRC:DST[:FLAGS]`."""
    same_path: bool = True
    """SRC == DST: the mount shows the host's tree at the same place, so it covers what lies under it."""


def job_paths(
    *, writable: Sequence[str], model: str, tokenizer: str | None = None, data: str | None = None
) -> list[tuple[str, bool]]:
    """(path, read only) for everything the trainer touches outside the image: the `writable`
    folders (checkpoint, log and run) read-write; a local model directory, a `--tokenizer`
    directory and the data read-only. A --data path whose last part has a file extension is
    taken as a file and mounts its folder; anything else mounts itself (a folder, or a file
    Pyxis binds alone). Deciding by the name keeps rendering pure, and is never wrong about
    reach: a folder named like a file mounts its parent, which holds it."""
    paths = [(path, False) for path in writable]
    if os.path.isabs(model):
        paths.append((model, True))
    if tokenizer is not None and os.path.isabs(tokenizer):
        paths.append((tokenizer, True))
    if data is not None and os.path.isabs(data):
        paths.append((_data_mount_path(data), True))
    return [(os.path.normpath(path), read_only) for path, read_only in paths]


def _data_mount_path(data: str) -> str:
    path = os.path.normpath(data)
    folder, name = os.path.split(path)
    looks_like_file = bool(os.path.splitext(name)[1]) and not name.startswith(".")
    return folder if looks_like_file and folder != "/" else path


def container_mounts(settings: Container, paths: Iterable[tuple[str, bool]]) -> list[str]:
    """--container-mounts: the job's `paths` (job_paths), each at the same place and only once,
    dropped when a mount above it already gives the access it needs (a read-write one, or a
    read-only one for a read-only path), then the user's `--container-mounts` as given.
    Ordered parents first, since a later mount hides what an earlier one put under it: a
    read-write checkpoint folder inside a read-only data folder must come after it."""
    own = [_Mount(path, read_only, f"{path}:{path}:ro" if read_only else f"{path}:{path}") for path, read_only in _merged(paths)]
    users = [_user_mount(text) for text in dict.fromkeys(settings.mounts)]
    kept = [mount for mount in own if not any(_covers(other, mount) for other in [*own, *users] if other is not mount)]
    ordered = sorted([*kept, *users], key=lambda mount: _depth(mount.path))
    return [mount.text for mount in ordered]


def _merged(paths: Iterable[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """One entry per path, read-write when any use of it writes."""
    read_only: dict[str, bool] = {}
    for path, ro in paths:
        read_only[path] = read_only.get(path, True) and ro
    return list(read_only.items())


def _user_mount(text: str) -> _Mount:
    source, _, rest = text.partition(":")
    target, _, flags = rest.partition(":")
    target = target or source
    same = bool(source) and os.path.isabs(source) and os.path.normpath(source) == os.path.normpath(target)
    return _Mount(os.path.normpath(target) if target else target, "ro" in flags.split("+"), text, same)


def _covers(outer: _Mount, inner: _Mount) -> bool:
    if not outer.same_path or (outer.read_only and not inner.read_only):
        return False
    return inner.path == outer.path or inner.path.startswith(outer.path.rstrip("/") + "/")


def _depth(path: str) -> int:
    return len([part for part in path.split("/") if part])
