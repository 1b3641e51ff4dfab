"""The work of one preparation in its output folder: the plan (prepare.json, cut into units by
hyperlaunch.data.sources), each unit tokenized into its shard (hyperlaunch.data.tokenize_workers)
unless its marker says it is whole already, and the manifest, written last, atomically. The ways
to start it, and the folder's checks and lock, are hyperlaunch.data.prepare's.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.errors import DataError
from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.data.sources import Source, plan_units
from hyperlaunch.data.tokenize_workers import WorkerState, tokenize_units
from hyperlaunch.data.tokenizer import LoadedTokenizer

_MIN_UNIT_BYTES = 1 << 20
"""Smaller inputs are still cut in units of at least this, so a small corpus is one unit,
tokenized in the calling process (no worker start-up)."""
_UNITS_PER_WORKER = 4
"""Units per worker when the input is small enough to cut finer than the shard size: keeps
every worker busy to the end."""


class Progress(Protocol):
    """What a caller shows while shards are written."""

    def start(self, total_units: int, done_units: int) -> None: ...

    def advance(self, tokens: int) -> None: ...

    def finish(self) -> None: ...


@dataclass
class PrepareResult:
    folder: Path
    manifest: fmt.Manifest
    status: str
    """'prepared', 'continued' (a killed preparation was finished) or 'already prepared'."""
    shards_reused: int = 0
    """Shards an earlier, interrupted attempt had finished."""
    seconds: float = 0.0
    """This call's wall time."""

    def document(self) -> dict[str, Any]:
        """The --json document of `prepare-data`."""
        m = self.manifest
        return {
            "output": str(self.folder), "status": self.status, "tokens": m.tokens, "documents": m.documents,
            "dtype": m.dtype, "shards": len(m.shards), "shards_reused": self.shards_reused,
            "max_token_id": m.max_token_id, "eos_id": m.eos_id, "tokenizer": m.tokenizer,
            "sources": len(m.sources), "seconds": round(self.seconds, 3),
            "tokens_per_s": round(m.tokens / self.seconds) if self.status != "already prepared" and self.seconds > 0 else None,
        }


@dataclass
class Plan:
    """prepare.json: what is being prepared and how it is cut; a killed attempt's successor
    reads it back and does the units that have no marker yet."""

    identity: dict[str, Any]
    tokenizer: dict[str, Any]
    sources: list[dict[str, Any]]
    text_field: str
    dtype: str
    units: list[list[int]]
    seconds: float = 0.0
    """Time spent by earlier attempts."""
    started_at: float = 0.0
    """When the current run across nodes planned (prepare-data --slurm --nodes N): its
    finishing step counts the wall time from here."""

    def write(self, folder: Path) -> None:
        write_atomically(folder / fmt.PLAN_FILE, json.dumps({"format": fmt.FORMAT, **asdict(self)}).encode())

    @classmethod
    def read(cls, folder: Path) -> Plan | None:
        try:
            raw = json.loads((folder / fmt.PLAN_FILE).read_text())
            raw.pop("format", None)
            return cls(**raw)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as err:
            raise DataError(f"{folder / fmt.PLAN_FILE} is unreadable ({err})", hint="use --overwrite to start again") from None


def prepare_locked(
    sources: list[Source],
    output: Path,
    tokenizer: LoadedTokenizer,
    *,
    text_field: str,
    workers: int,
    shard_bytes: int,
    overwrite: bool,
    progress: Progress | None,
    started: float,
) -> PrepareResult:
    begun = begin(sources, output, tokenizer, text_field=text_field, workers=workers, shard_bytes=shard_bytes, overwrite=overwrite, started=started)
    if isinstance(begun, PrepareResult):
        return begun
    plan = begun
    done = done_units(output, plan)
    pending = [index for index in range(len(plan.units)) if index not in done]
    if progress is not None:
        progress.start(len(plan.units), len(done))
    try:
        for index, marker in tokenize_units(worker_state(plan, tokenizer, output), pending, workers):
            done[index] = marker
            if progress is not None:
                progress.advance(int(marker["tokens"]))
    finally:
        if progress is not None:
            progress.finish()
        plan.seconds += time.time() - started
        plan.write(output)
    return complete(plan, output, tokenizer, done, reused=len(plan.units) - len(pending), started=started)


def begin(
    sources: list[Source], output: Path, tokenizer: LoadedTokenizer, *, text_field: str, workers: int, shard_bytes: int, overwrite: bool, started: float,
) -> PrepareResult | Plan:
    """A folder that already holds this data as a result; else the plan of the work, read back
    from an interrupted preparation of the same data or written anew (cut for `workers`)."""
    listed = [source.as_dict() for source in sources]
    identity = fmt.identity(listed, tokenizer.identity, text_field)
    existing = fmt.read_manifest(output)
    if existing is not None:
        if existing.identity() == identity and not overwrite:
            return PrepareResult(output, existing, "already prepared", seconds=time.time() - started)
        if not overwrite:
            raise DataError(
                f"{output} already holds data prepared from {fmt.describe_difference(existing.identity(), identity)}",
                hint="use --overwrite to replace it, or another --output",
            )
        _clear(output)
    plan = Plan.read(output)
    if plan is not None and (plan.identity != identity or overwrite):
        # A preparation that finished no shard (it failed on a bad line, say) holds nothing to
        # keep: the corrected input starts over without --overwrite.
        if not overwrite and done_units(output, plan):
            raise DataError(
                f"{output} holds an unfinished preparation of {fmt.describe_difference(plan.identity, identity)}",
                hint="use --overwrite to start again, or another --output",
            )
        _clear(output)
        plan = None
    if plan is None:
        total = sum(source.size for source in sources)
        target = min(shard_bytes, max(_MIN_UNIT_BYTES, total // (workers * _UNITS_PER_WORKER)))
        units = plan_units(sources, text_field, target)
        plan = Plan(
            identity=identity, tokenizer=tokenizer.identity, sources=listed, text_field=text_field,
            dtype=fmt.dtype_for(tokenizer.vocab_size), units=[unit.as_list() for unit in units],
        )
        plan.write(output)
    return plan


def done_units(output: Path, plan: Plan) -> dict[int, dict[str, Any]]:
    """The marker of each unit whose shard is whole, by index."""
    return {index: marker for index in range(len(plan.units)) if (marker := _read_marker(output, index)) is not None}


def worker_state(plan: Plan, tokenizer: LoadedTokenizer, output: Path) -> WorkerState:
    sources = [Source(**source) for source in plan.sources]
    return WorkerState(tokenizer.backend.to_str(), tokenizer.eos_id, plan.dtype, plan.text_field, sources, plan.units, str(output))


def complete(
    plan: Plan, output: Path, tokenizer: LoadedTokenizer, done: dict[int, dict[str, Any]], *, reused: int, started: float,
) -> PrepareResult:
    """Every unit done: the manifest, written last; the markers and the plan removed."""
    manifest = _manifest(plan, tokenizer, [done[index] for index in range(len(plan.units))])
    write_atomically(output / fmt.MANIFEST_FILE, manifest.to_json().encode())
    for index in range(len(plan.units)):
        (output / fmt.shard_marker(index)).unlink(missing_ok=True)
    (output / fmt.PLAN_FILE).unlink(missing_ok=True)
    status = "continued" if reused else "prepared"
    return PrepareResult(output, manifest, status, shards_reused=reused, seconds=time.time() - started)


def _clear(output: Path) -> None:
    for entry in output.iterdir():
        if fmt.is_own_file(entry.name) and entry.name != fmt.LOCK_FILE:
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def _read_marker(output: Path, index: int) -> dict[str, Any] | None:
    """A shard's marker, when it and the files it describes are whole."""
    try:
        marker = json.loads((output / fmt.shard_marker(index)).read_text())
        itemsize = fmt.DTYPES[marker["dtype"]]
        if (output / fmt.tokens_file(index)).stat().st_size != marker["tokens"] * itemsize:
            return None
        if (output / fmt.documents_file(index)).stat().st_size != marker["documents"] * 8:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return dict(marker)


def _manifest(plan: Plan, tokenizer: LoadedTokenizer, markers: list[dict[str, Any]]) -> fmt.Manifest:
    shards = [
        fmt.Shard(
            tokens_file=fmt.tokens_file(index), documents_file=fmt.documents_file(index), tokens=m["tokens"],
            documents=m["documents"], max_token_id=m["max_token_id"], sha256=m["sha256"], documents_sha256=m["documents_sha256"],
        )
        for index, m in enumerate(markers)
    ]
    return fmt.Manifest(
        tokens=sum(s.tokens for s in shards), documents=sum(s.documents for s in shards), dtype=plan.dtype,
        max_token_id=max((s.max_token_id for s in shards if s.tokens), default=0), eos_id=tokenizer.eos_id,
        tokenizer=plan.tokenizer, text_field=plan.text_field, sources=plan.sources, shards=shards,
        created=time.time(), seconds=round(plan.seconds, 3),
    )
