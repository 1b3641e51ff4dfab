"""A bytecode cache for the sbatch templates, so a `render` or `submit` does not compile them
again on every run (compiling the four templates took 35 ms of a 0.3 s `render`).

Jinja keys each entry by template name and checks the source's checksum on load, so an edited
template is recompiled. The cache is an optimisation only: a directory that cannot be created,
read or written (read-only home, full disk) means compiling as before, never an error."""

from __future__ import annotations

import os

import jinja2

from hyperlaunch.paths import hyperlaunch_home


class _QuietCache(jinja2.FileSystemBytecodeCache):
    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, ValueError, EOFError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
            super().dump_bytecode(bucket)
        except OSError:
            pass


def template_cache() -> jinja2.BytecodeCache | None:
    """The per-user cache in $HYPERLAUNCH_HOME/cache/templates; None when
    HYPERLAUNCH_NO_TEMPLATE_CACHE is set."""
    if os.environ.get("HYPERLAUNCH_NO_TEMPLATE_CACHE"):
        return None
    return _QuietCache(str(hyperlaunch_home() / "cache" / "templates"))
