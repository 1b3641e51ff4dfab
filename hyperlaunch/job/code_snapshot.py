"""The copy of a user's code a job runs from: taken at plan time (its digest names the folder the
script cds into), written at submit to storage every node sees. Editing the code while the job
waits, or between requeues, then changes nothing: the job runs what was submitted.

Inside git the copy is what git would commit now (tracked files as they are, untracked ones not
ignored), so .gitignore keeps data and checkpoints out; elsewhere it is the folder's files. Either
way the job's own output folders (its checkpoints, logs and run folder, ./checkpoints, ./logs and
./runs/<job> by default) are left out where they lie inside the project, and so are the run
folders of other jobs submitted from it (any folder holding a job's `.hyperlaunch`): what a job
wrote there is not code, and would make each submit's snapshot bigger than the last. A Python
environment inside the project (a venv, a conda env) is left out too: the job runs on the
nodes' Python, and its packages would make the snapshot gigabytes."""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from hyperlaunch.core.bounded_read import read_regular
from hyperlaunch.core.errors import CodeSnapshotTooLarge, InvalidInput
from hyperlaunch.core.paths import JOB_FILES_FOLDER, job_files_dir

if TYPE_CHECKING:
    from hyperlaunch.job.spec import JobSpec

DEFAULT_LIMIT_MB = 100
INFO_FILE = ".hyperlaunch-snapshot.json"
"""Written last into a snapshot folder: a folder without it is not a (complete) snapshot."""
_INFO_MAX_BYTES = 1_000_000
_GIT_TIMEOUT_S = 60
_CHUNK = 1 << 20
_SKIPPED_DIRS = frozenset({"__pycache__", ".git", JOB_FILES_FOLDER})
"""Never code. JOB_FILES_FOLDER is where a job keeps its own files (its supervisor, its code
snapshots, a sweep's elements): a run folder inside the project (./runs, the default) gets them
between planning and submitting, and the snapshot taken again at submit must not change."""
MAX_FILES = 100_000
"""More files than any training project holds: a script outside git in a home folder would
otherwise have all of it listed (and its size summed) before the size limit says no."""


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a snapshot, as take() found it."""

    path: str
    """Relative to the snapshot's root, '/'-separated."""
    size: int
    executable: bool


@dataclass(frozen=True)
class Snapshot:
    """The code a job will run from, named by its content: take() lists and hashes it, write() copies it."""

    root: Path
    """The folder copied: the git work tree's top level when the code is inside one."""
    files: tuple[SnapshotFile, ...]
    """Sorted by path."""
    commit: str | None
    """HEAD's sha; None outside git or before the first commit."""
    dirty: bool | None
    """Whether the work tree differs from HEAD; None outside git."""
    digest: str
    """sha256 over each file's path, executable bit and content: the same code, the same digest."""

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def name(self) -> str:
        return f"code-{self.digest[:16]}"

    def describe(self) -> str:
        """One line for `status`: where the code came from, how much of it."""
        return _describe(str(self.root), len(self.files), self.total_bytes, self.commit, self.dirty, self.digest)


def _describe(root: str, files: int, total: int, commit: str | None, dirty: bool | None, digest: str) -> str:
    count = f"{files} file{'s' if files != 1 else ''}, {_size(total)}"
    if dirty is None:
        return f"folder {root}, {count}, sha256 {digest[:8]}"
    head = f"git {commit[:8]}" if commit else "git (no commit)"
    return f"{head}{' (dirty)' if dirty else ''}, {count}"


def describe_dir(snapshot_dir: Path) -> str:
    """A written snapshot as `status` shows it: where its code came from, and where it is."""
    info = read_info(snapshot_dir)
    if info is None:
        return f"{snapshot_dir} (not there)"
    files, total = info.get("files"), info.get("total_bytes")
    commit, dirty = info.get("commit"), info.get("dirty")
    text = _describe(
        str(info.get("root", "?")),
        files if isinstance(files, int) else 0,
        total if isinstance(total, int) else 0,
        commit if isinstance(commit, str) else None,
        dirty if isinstance(dirty, bool) else None,
        str(info.get("digest", "")),
    )
    return f"{text} in {snapshot_dir}"


def snapshot_dir(run_dir: str, snapshot: Snapshot) -> str:
    """Where a job of `run_dir` keeps this snapshot: `<run_dir>/.hyperlaunch/code-<hash>`."""
    return os.path.join(job_files_dir(run_dir), snapshot.name)


def take_for(spec: JobSpec, folder: Path) -> Snapshot:
    """The snapshot a script job runs from `folder` (its code_root, once planned): less the
    job's own output folders, within its --code-limit-mb. Planning, submit and
    `resume --refresh-code` all take it so, and come to the same digest for the same code."""
    return take(folder, limit_mb=spec.job.code_limit_mb, outputs=spec.output_dirs)


def take(folder: Path, *, limit_mb: int = DEFAULT_LIMIT_MB, outputs: Iterable[str] = ()) -> Snapshot:
    """What a job submitted from `folder` would run: the files listed, sized and hashed (it
    reads them all), less those in `outputs` (the job's output folders, JobSpec.output_dirs),
    which do not make a work tree dirty either. InvalidInput when there are none or they
    cannot be read, CodeSnapshotTooLarge over `limit_mb` (checked on sizes before anything is
    read)."""
    if limit_mb < 1:
        raise InvalidInput(f"--code-limit-mb must be at least 1, not {limit_mb}")
    if not folder.is_dir():
        raise InvalidInput(f"code snapshot: {folder} is not a folder")
    top = _git_toplevel(folder)
    root = Path(os.path.realpath(top or folder))
    left_out = _inside(root, outputs)
    try:
        if top:
            listed, left_out = _git_files(root, left_out)
        else:
            listed = list(itertools.islice(_walk(root, left_out), MAX_FILES + 1))
        listed = [rel for rel in listed if JOB_FILES_FOLDER not in rel.split("/")[:-1]]  # git lists untracked ones too
        if len(listed) > MAX_FILES:
            raise CodeSnapshotTooLarge(
                f"code snapshot of {root} would hold over {MAX_FILES} files: is it your home folder? "
                "put the script in its project's folder (or a git work tree) and submit it from there"
            )
        files = _regular_files(root, listed)
        if not files:
            raise InvalidInput(f"code snapshot of {root}: no files to copy")
        _check_size(root, files, limit_mb, in_git=top is not None)
        digest = _digest((f, _hash_file(root / f.path)) for f in files)
    except OSError as err:
        raise InvalidInput(f"code snapshot of {root}: cannot read {err.filename or root}: {err.strerror or err}") from None
    commit, dirty = _git_state(root, left_out) if top else (None, None)
    return Snapshot(root, files, commit, dirty, digest)


def write(snapshot: Snapshot, store: Path) -> tuple[Path, bool]:
    """The snapshot's copy at `store`/`snapshot.name`, and whether this call made it (identical
    code is stored once). Written whole or not at all: into a hidden temp folder, INFO_FILE last,
    then renamed. InvalidInput when the code changed since take() or the store cannot be written."""
    final = store / snapshot.name
    if _holds(final, snapshot):
        return final, False
    tmp = None
    try:
        store.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".code-", suffix=".tmp", dir=store)
        _fill(snapshot, Path(tmp))
        os.rename(tmp, final)
    except OSError as err:
        if not _holds(final, snapshot):  # else another submit of the same code won the race
            raise InvalidInput(f"cannot write the code snapshot {final}: {err.strerror or err}") from None
        return final, False
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # nothing there once renamed
    return final, True


def read_info(snapshot_dir: Path) -> dict[str, object] | None:
    """The snapshot's INFO_FILE, or None when there is none that reads as a JSON object."""
    try:
        data = read_regular(snapshot_dir / INFO_FILE, _INFO_MAX_BYTES)
        info = json.loads(data) if len(data) <= _INFO_MAX_BYTES else None
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _holds(folder: Path, snapshot: Snapshot) -> bool:
    info = read_info(folder)
    return info is not None and info.get("digest") == snapshot.digest


def _fill(snapshot: Snapshot, tmp: Path) -> None:
    """Copy the files into `tmp`, hashing the bytes copied: a file edited since take() would
    make the copy differ from what the digest names."""
    changed = InvalidInput(f"the code in {snapshot.root} changed while it was copied; submit again")
    hashes = []
    for f in snapshot.files:
        dest, source = tmp / f.path, snapshot.root / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o755 if f.executable else 0o644
        with os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
            os.fchmod(out.fileno(), mode)  # whatever the umask
            try:
                hashes.append((f, _hash_file(source, into=out)))
            except OSError as err:
                if err.filename == str(source):  # gone, or no longer a regular file
                    raise changed from None
                raise
    if _digest(hashes) != snapshot.digest:
        raise changed
    for folder, _, _ in os.walk(tmp):
        os.chmod(folder, 0o755)
    info = {"digest": snapshot.digest, "commit": snapshot.commit, "dirty": snapshot.dirty, "root": str(snapshot.root),
            "files": len(snapshot.files), "total_bytes": snapshot.total_bytes, "time": time.time()}
    (tmp / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
    os.chmod(tmp / INFO_FILE, 0o644)


def _regular_files(root: Path, rels: Iterable[str]) -> tuple[SnapshotFile, ...]:
    """Each listed regular file, links followed only to files inside `root` (a link out is
    someone else's file); FIFOs, devices, folders (submodules) and deleted files left out."""
    found = []
    for rel in sorted(set(rels) - {INFO_FILE}):  # the name is the snapshot's own
        real = os.path.realpath(root / rel)
        if not Path(real).is_relative_to(root):
            continue
        try:
            st = os.stat(real)
        except OSError as err:
            if isinstance(err, (FileNotFoundError, NotADirectoryError)) or err.errno == errno.ELOOP:
                continue
            raise
        if stat.S_ISREG(st.st_mode):
            found.append(SnapshotFile(rel, st.st_size, bool(st.st_mode & stat.S_IXUSR)))
    return tuple(found)


def _inside(root: Path, folders: Iterable[str]) -> frozenset[str]:
    """Those of `folders` that lie inside `root` (but are not root itself: then nothing would
    be left), '/'-separated relative to it; links resolved, as root's are."""
    found = set()
    for folder in folders:
        real = Path(os.path.realpath(folder))
        if real != root and real.is_relative_to(root):
            found.add(real.relative_to(root).as_posix())
    return frozenset(found)


def _walk(root: Path, left_out: frozenset[str]) -> Iterator[str]:
    for folder, dirs, names in os.walk(root):  # never follows a linked folder: no loops
        base = Path(folder).relative_to(root)
        if base != Path(".") and (JOB_FILES_FOLDER in dirs or _VENV_MARKER in names or _CONDA_MARKER in dirs):
            dirs[:] = []  # another job's run folder, or a Python environment (_not_code_folders)
            continue
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS and (base / d).as_posix() not in left_out]
        yield from ((base / n).as_posix() for n in names if not n.endswith(".pyc"))


def _check_size(root: Path, files: tuple[SnapshotFile, ...], limit_mb: int, *, in_git: bool) -> None:
    total = sum(f.size for f in files)
    if total <= limit_mb * 1_000_000:
        return
    names = ", ".join(f"{f.path} ({_size(f.size)})" for f in sorted(files, key=lambda f: -f.size)[:5])
    fix = "add them to .gitignore (or move them out of the folder)" if in_git else "move them out of the folder (or make it a git work tree and .gitignore them)"
    raise CodeSnapshotTooLarge(
        f"code snapshot of {root} is {_size(total)}, over the {limit_mb} MB limit: largest {names}; {fix} or raise --code-limit-mb"
    )


def _hash_file(path: Path, into: BinaryIO | None = None) -> str:
    """sha256 of the file's bytes, copied `into` as they are read. Opened without blocking and
    read only when it is a regular file: a FIFO put there since cannot hang the submit."""
    sha, fd = hashlib.sha256(), os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        while chunk := os.read(fd, _CHUNK):
            sha.update(chunk)
            if into is not None:
                into.write(chunk)
    finally:
        os.close(fd)
    return sha.hexdigest()


def _digest(hashes: Iterable[tuple[SnapshotFile, str]]) -> str:
    sha = hashlib.sha256()
    for f, content in hashes:
        sha.update(os.fsencode(f.path) + (b"\0x\0" if f.executable else b"\0-\0") + content.encode() + b"\n")
    return sha.hexdigest()


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    """git's answer, None when there is no git. The user's GIT_DIR and the like cannot point it
    elsewhere; it takes no optional locks (a user's own git may be running)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {"LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"}
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, stdin=subprocess.DEVNULL,
                              env=env, timeout=_GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        raise InvalidInput(f"code snapshot: git {args[0]} in {cwd} took over {_GIT_TIMEOUT_S} s") from None


def _git_toplevel(folder: Path) -> Path | None:
    done = _git(folder, "rev-parse", "--show-toplevel")
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return None
    return Path(os.fsdecode(done.stdout.removesuffix(b"\n")))


def _left_out(rel: str, left_out: frozenset[str]) -> bool:
    """Whether work-tree path `rel` ('/'-separated; a folder may end in '/') lies in `left_out`."""
    rel = rel.rstrip("/")
    return any(rel == folder or rel.startswith(folder + "/") for folder in left_out)


_VENV_MARKER = "pyvenv.cfg"
_CONDA_MARKER = "conda-meta"


def _not_code_folders(rels: Iterable[str]) -> frozenset[str]:
    """The folders of `rels` that hold a job's files (JOB_FILES_FOLDER: the run folders of jobs
    submitted from this project, `./runs/<job>` by default, whatever job this one is), or a
    Python environment (a venv's pyvenv.cfg, conda's conda-meta/): those jobs' output, installed
    packages, never code for this job, which runs on the nodes' own Python."""
    found = set()
    for rel in rels:
        parts = rel.split("/")
        if JOB_FILES_FOLDER in parts[1:-1]:
            found.add("/".join(parts[: parts.index(JOB_FILES_FOLDER, 1)]))
        elif len(parts) > 1 and parts[-1] == _VENV_MARKER:
            found.add("/".join(parts[:-1]))
        elif _CONDA_MARKER in parts[1:-1]:
            found.add("/".join(parts[: parts.index(_CONDA_MARKER, 1)]))
    return frozenset(found)


def _git_files(top: Path, left_out: frozenset[str]) -> tuple[list[str], frozenset[str]]:
    """Every tracked file, and the untracked ones git would not ignore but for those in the
    job's output folders `left_out` and in other jobs' run folders: a tracked file there is
    code (`logs/parse_logs.py`). And the folders so left out."""
    done = _git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    untracked = _git(top, "ls-files", "-z", "--others", "--exclude-standard")
    for answer in (done, untracked):
        if answer is None or answer.returncode != 0:
            why = answer.stderr.decode(errors="replace").strip() if answer else "git not found"
            raise InvalidInput(f"code snapshot of {top}: git ls-files failed: {why}")
    assert done is not None and untracked is not None
    others = [os.fsdecode(p) for p in untracked.stdout.split(b"\0") if p]
    left_out = left_out | _not_code_folders(others)
    outputs = {rel for rel in others if _left_out(rel, left_out)}
    return [rel for rel in (os.fsdecode(p) for p in done.stdout.split(b"\0") if p) if rel not in outputs], left_out


def _git_state(top: Path, left_out: frozenset[str]) -> tuple[str | None, bool]:
    """HEAD's sha (None before the first commit) and whether anything is uncommitted, untracked
    files included but those in the job's output folders `left_out`; a status that fails
    counts as dirty."""
    head = _git(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    status = _git(top, "status", "--porcelain", "-z", "--untracked-files=all")  # each file: a parent folder may hold code too
    commit = head.stdout.decode().strip() if head and head.returncode == 0 else None
    if status is None or status.returncode != 0:
        return commit, True
    entries = [os.fsdecode(entry) for entry in status.stdout.split(b"\0") if entry]
    return commit, any(not (entry.startswith("?? ") and _left_out(entry[3:], left_out)) for entry in entries)


