"""A script job's working folder: the run's own (`<run_dir>/work`), where its relative writes
(`./checkpoints`, `out/`, `lightning_logs/`) land and stay across requeues, `resume` and
`resume --refresh-code`, never in the code snapshot every attempt shares. Its relative reads of the
project still work: before each round the snapshot is mirrored in, each folder a folder, each file
a link to the snapshot's copy. A link whose file left the snapshot (the code was refreshed) goes;
what the script wrote itself stays, and a file it wrote where the code has one wins over the code.

A script that writes over one of its own project files in place writes through the link into the
snapshot: the next round runs what it wrote (documented in docs/your-script.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator

SKIPPED = (".hyperlaunch-snapshot.json", "__pycache__", ".git")
"""The snapshot's own record, and what is never code."""


def _links(code_dir: str) -> Iterator[tuple[str, bool]]:
    """Each path of the snapshot, relative, and whether it is a folder, parents first."""
    for folder, folders, files in os.walk(code_dir):
        folders[:] = sorted(name for name in folders if name not in SKIPPED)
        relative = os.path.relpath(folder, code_dir)
        for name in folders:
            yield os.path.normpath(os.path.join(relative, name)), True
        for name in sorted(files):
            if name not in SKIPPED:
                yield os.path.normpath(os.path.join(relative, name)), False


def mirror(code_dir: str, work_dir: str) -> int:
    """The snapshot mirrored into the working folder (made if needed): the links made or changed."""
    os.makedirs(work_dir, exist_ok=True)
    code_dir = os.path.abspath(code_dir)
    wanted: set[str] = set()
    changed = 0
    for relative, is_folder in _links(code_dir):
        here = os.path.join(work_dir, relative)
        if is_folder:
            if os.path.islink(here):
                os.unlink(here)
            os.makedirs(here, exist_ok=True)
            continue
        target = os.path.join(code_dir, relative)
        wanted.add(here)
        if os.path.islink(here):
            if os.readlink(here) == target:
                continue
            os.unlink(here)
        elif os.path.lexists(here):
            continue  # the script's own file
        os.symlink(target, here)
        changed += 1
    _drop_stale_links(work_dir, code_dir, wanted)
    return changed


def _drop_stale_links(work_dir: str, code_dir: str, wanted: set[str]) -> None:
    """Links into a snapshot (this one or an older one) that this snapshot no longer has."""
    snapshots = os.path.dirname(code_dir) + os.sep
    for folder, _, files in os.walk(work_dir):
        for name in files:
            path = os.path.join(folder, name)
            if path in wanted or not os.path.islink(path):
                continue
            if os.readlink(path).startswith(snapshots):
                os.unlink(path)
