"""A bytecode cache for the sbatch templates, so a `render` or `submit` does not compile them
again on every run (compiling the four templates took 35 ms of a 0.3 s `render`).

Jinja keys each entry by template name and checks the source's checksum on load, so an edited
template is recompiled. The cache is an optimisation only: a directory that cannot be created,
read or written (read-only home, full disk) means compiling as before, never an error.

Loading an entry runs code (Jinja unpickles its checksum and unmarshals Python bytecode), so
only a folder that no one else can write is used: owned by this user and private (0700). A
folder anyone else could have written to, or an entry not owned by this user or writable by
others, is ignored and the templates are compiled instead."""

from __future__ import annotations

import os
import stat

import jinja2

from hyperlaunch.core.paths import hyperlaunch_home


class _PrivateCache(jinja2.FileSystemBytecodeCache):
    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            fd = os.open(self._get_cache_filename(bucket), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return
        with os.fdopen(fd, "rb") as handle:
            if not _ours_alone(os.fstat(fd), regular=True):
                return
            try:
                bucket.load_bytecode(handle)
            except Exception:  # a truncated or foreign entry: compile instead
                bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)  # a 0600 temporary file renamed into place
        except OSError:
            pass


def _ours_alone(info: os.stat_result, *, regular: bool) -> bool:
    """Owned by this user, and no one else can write it."""
    kind_ok = stat.S_ISREG(info.st_mode) if regular else stat.S_ISDIR(info.st_mode)
    return kind_ok and info.st_uid == os.geteuid() and not stat.S_IMODE(info.st_mode) & 0o022


def _private_folder(path: str) -> bool:
    """Create the cache folder 0700, or accept an existing one that is ours and that no one
    else can write (made 0700: an older hyperlaunch created it with the umask). A symlink,
    another user's folder or one others can write is refused."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
        if not _ours_alone(info, regular=False):
            return False
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, 0o700)
    except OSError:
        return False
    return True


def template_cache() -> jinja2.BytecodeCache | None:
    """The per-user cache in $HYPERLAUNCH_HOME/cache/templates; None (compile every time) when
    HYPERLAUNCH_NO_TEMPLATE_CACHE is set or the folder is not this user's private one."""
    if os.environ.get("HYPERLAUNCH_NO_TEMPLATE_CACHE"):
        return None
    folder = str(hyperlaunch_home() / "cache" / "templates")
    return _PrivateCache(folder) if _private_folder(folder) else None
