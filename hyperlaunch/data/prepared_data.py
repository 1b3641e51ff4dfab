"""The prepared-data folder: what `hyperlaunch prepare-data` (hyperlaunch.data.prepare) writes and
the trainer reads (train/data.py), both sides here.

    <folder>/manifest.json        written last, atomically: the folder is complete once it exists
    <folder>/tokens-00000.bin     token ids, raw little-endian uint16 (vocabulary <= 65536) or
                                  uint32: one document after another, each followed by EOS
    <folder>/docs-00000.bin       uint64 end offset (in tokens, within the shard) of each document
    <folder>/prepare.json         while preparing: the sources, the tokenizer and the units of work
    <folder>/shard-00000.json     while preparing: shard 0 is complete (its counts and hashes)
    <folder>/.lock                taken by the process that prepares (fcntl, on the shared fs)

The token stream is the shards in order; a reader memory-maps them and cuts sequences of any
length out of it, so one folder serves any --seq-len.

Torch- and numpy-free: the CLI reads manifests on a login node.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core.errors import DataError

FORMAT = "hyperlaunch-prepared-data"
VERSION = 1
MANIFEST_FILE = "manifest.json"
PLAN_FILE = "prepare.json"
LOCK_FILE = ".lock"
DTYPES = {"uint16": 2, "uint32": 4}
"""Token dtypes and their sizes in bytes."""
NUMPY_DTYPES = {"uint16": "<u2", "uint32": "<u4"}
"""The same as numpy spells them: little-endian on every machine."""


def tokens_file(index: int) -> str:
    return f"tokens-{index:05d}.bin"


def documents_file(index: int) -> str:
    return f"docs-{index:05d}.bin"


def shard_marker(index: int) -> str:
    return f"shard-{index:05d}.json"


def is_own_file(name: str) -> bool:
    """Whether a file in a prepared folder is one this format writes (anything else there
    means the folder is not ours to overwrite)."""
    if name in (MANIFEST_FILE, PLAN_FILE, LOCK_FILE) or name.startswith("."):
        return True
    stem, _, suffix = name.partition(".")
    kind, _, number = stem.partition("-")
    return number.isdigit() and (kind, suffix) in (("tokens", "bin"), ("docs", "bin"), ("shard", "json"))


def dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


@dataclass(frozen=True, kw_only=True)
class Shard:
    """One shard of a finished folder."""

    tokens_file: str
    documents_file: str
    tokens: int
    """Token ids in the shard (each document's EOS included)."""
    documents: int
    max_token_id: int
    sha256: str
    """Of the tokens file."""
    documents_sha256: str


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a finished folder holds and where it came from."""

    tokens: int
    documents: int
    dtype: str
    max_token_id: int
    """The largest token id in the folder: every id is below a model's vocabulary when this is."""
    eos_id: int
    tokenizer: dict[str, Any]
    """name, sha256 (of what decides the ids, hyperlaunch.data.tokenizer.content_sha256), vocab_size, eos_id."""
    text_field: str
    sources: list[dict[str, Any]]
    """path, kind, size, mtime_ns of each input (hyperlaunch.data.sources.Source)."""
    shards: list[Shard]
    created: float
    seconds: float
    """Wall time of the preparation, all attempts together."""

    def identity(self) -> dict[str, Any]:
        return identity(self.sources, self.tokenizer, self.text_field)

    def to_json(self) -> str:
        document = {"format": FORMAT, "version": VERSION, **asdict(self)}
        return json.dumps(document, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: Path) -> Manifest:
        try:
            raw = json.loads(text)
            if raw.get("format") != FORMAT:
                raise ValueError("not a prepare-data manifest")
            if raw.get("version") != VERSION:
                raise DataError(
                    f"{where} is prepared-data format version {raw.get('version')}, this hyperlaunch reads version {VERSION}",
                    hint="prepare the data again with this version (hyperlaunch prepare-data --overwrite)",
                )
            shards = [Shard(**shard) for shard in raw["shards"]]
            fields = {name: raw[name] for name in cls.__dataclass_fields__ if name != "shards"}
            manifest = cls(**fields, shards=shards)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise DataError(f"{where} is not a readable prepare-data manifest ({err})") from None
        if manifest.dtype not in DTYPES:
            raise DataError(f"{where}: unknown token dtype {manifest.dtype!r}")
        return manifest


def identity(sources: list[dict[str, Any]], tokenizer: dict[str, Any], text_field: str) -> dict[str, Any]:
    """What makes two preparations the same: the same source files (path, size, mtime), the
    same tokenizer contents and the same text field."""
    return {"sources": sources, "tokenizer_sha256": tokenizer["sha256"], "text_field": text_field}


def describe_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Which part of two identities differs, in words."""
    if old["tokenizer_sha256"] != new["tokenizer_sha256"]:
        return "another tokenizer"
    if old["text_field"] != new["text_field"]:
        return f"text field {old['text_field']!r}"
    return "other sources (or the same files, changed since)"


def cache_name(sources: list[dict[str, Any]], tokenizer: dict[str, Any], text_field: str) -> str:
    """The trainer's cache folder name for raw data: the first input's name and a hash of
    the identity, so a changed file or another tokenizer gets its own folder."""
    digest = hashlib.sha256(
        json.dumps({"version": VERSION, **identity(sources, tokenizer, text_field)}, sort_keys=True).encode()
    ).hexdigest()
    first = Path(sources[0]["path"]).name if sources else "data"
    return f"{first[:60]}-{digest[:16]}"


def read_manifest(folder: Path) -> Manifest | None:
    """The folder's manifest; None when it has none (not prepared, or not finished)."""
    path = Path(folder) / MANIFEST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read {path}: {err}") from None
    return Manifest.from_json(text, path)


def manifest_tokenizer(data: str | Path | None) -> str | None:
    """The tokenizer a prepared --data folder (hyperlaunch prepare-data) was made with; None for
    no --data, raw data, a folder not prepared (yet), or a manifest that cannot be read (the
    trainer says why)."""
    if data is None:
        return None
    try:
        manifest = read_manifest(Path(data))
    except (DataError, OSError, ValueError):
        return None
    name = manifest.tokenizer.get("name") if manifest is not None else None
    return name if isinstance(name, str) and name else None


def is_prepared(folder: Path) -> bool:
    return (Path(folder) / MANIFEST_FILE).is_file()


def is_unfinished(folder: Path) -> bool:
    return (Path(folder) / PLAN_FILE).is_file() and not is_prepared(folder)


def check_tokenizer(manifest: Manifest, job: dict[str, Any], folder: Path) -> None:
    """Training on `folder` with the job's tokenizer: the ids must be that tokenizer's."""
    if manifest.tokenizer["sha256"] == job["sha256"]:
        return
    raise DataError(
        f"--data {folder} was prepared with tokenizer {manifest.tokenizer['name']} "
        f"(sha256 {manifest.tokenizer['sha256'][:12]}), this job uses {job['name']} (sha256 {job['sha256'][:12]})",
        hint=f"train with --tokenizer {manifest.tokenizer['name']}, or prepare the data with --tokenizer {job['name']}",
    )


def check_vocabulary(manifest: Manifest, vocab_size: int, model: str, folder: Path) -> None:
    """Every token id must have an embedding row."""
    if manifest.max_token_id < vocab_size:
        return
    raise DataError(
        f"--data {folder} holds token id {manifest.max_token_id}, but {model} has only {vocab_size} embeddings",
        hint="prepare the data with the model's tokenizer",
    )


class Busy(Exception):
    """Another process holds the folder's lock."""


@contextmanager
def locked(folder: Path, *, wait: bool, shared: bool = False) -> Iterator[None]:
    """The folder's lock (POSIX fcntl, which NFS and Lustre pass to the server): held by the
    one process that prepares; released by the kernel or the server if that process dies.
    `shared`: held by each node of a preparation across nodes at once, and by no other."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        try:
            fcntl.lockf(fd, kind if wait else kind | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EACCES, errno.EAGAIN):
                raise Busy(str(folder)) from None
            raise
        try:
            yield
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
