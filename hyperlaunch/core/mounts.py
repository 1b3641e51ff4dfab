"""What a path is stored on, from the mount table: one reader and one list of file system
types that the nodes of a cluster share, for doctor's checks and ecr-login's warning."""

from __future__ import annotations

import re

SHARED_FS_TYPES = frozenset(
    {
        "nfs", "nfs4", "lustre", "beegfs", "gpfs", "cephfs", "ceph", "glusterfs", "fuse.glusterfs",
        "wekafs", "panfs", "efs", "cifs", "smb3", "fuse",
    }
)
"""File system types every node of a cluster usually sees (plus every `fuse.*`)."""
LOCAL_FS_TYPES = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "ramfs", "overlay", "vfat", "exfat", "squashfs"}
)
"""File system types local to one machine."""


def is_shared(fs_type: str) -> bool:
    return fs_type in SHARED_FS_TYPES or fs_type.startswith("fuse.")


def mount_of(path: str, mounts_text: str) -> tuple[str, str] | None:
    """(mount point, type) of the mount holding the real path `path`: the longest mount point
    of the table (/proc/mounts' text) that contains it; None when none does."""
    best: tuple[str, str] | None = None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = _unescape(parts[1])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, parts[2])
    return best


def _unescape(field: str) -> str:
    """The mount table writes space, tab, newline and backslash in octal (`\\040`)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
