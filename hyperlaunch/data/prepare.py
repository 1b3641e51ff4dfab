"""Tokenize text once into memory-mappable shards (the format is hyperlaunch.data.prepared_data's):
`hyperlaunch prepare-data` calls `prepare`, the trainer `prepare_for_training` (raw --data is
prepared once into a cache in the checkpoint folder, by one process under a file lock).

The work is cut into units (hyperlaunch.data.sources); each becomes one shard, written by a
worker process with the fast tokenizer's batch API, complete once its marker file exists. A
killed preparation continues where it stopped; the manifest is written last, atomically; a
finished folder is never written again unless asked to (--overwrite).

Torch-free; numpy and tokenizers (the `data` extra) are imported when there is work to do.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.errors import DataError, HyperlaunchError, InvalidInput
from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.data.sources import Source, Unit, find_sources, plan_units, read_unit
from hyperlaunch.data.tokenizer import DATA_EXTRA_HINT, LoadedTokenizer

DEFAULT_SHARD_MB = 32.0
"""Largest unit of work (and shard), in MB of input: what one worker holds in memory at once."""
_MIN_UNIT_BYTES = 1 << 20
"""Smaller inputs are still cut in units of at least this, so a small corpus is one unit,
tokenized in the calling process (no worker start-up)."""
_UNITS_PER_WORKER = 4
"""Units per worker when the input is small enough to cut finer than DEFAULT_SHARD_MB: keeps
every worker busy to the end."""
_ENCODE_BATCH = 512
"""Documents per call of the tokenizer's batch API (bounds a worker's memory)."""


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


def default_workers() -> int:
    """The CPUs this process may use (a Slurm or container CPU set counts, not the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def check_shard_mb(shard_mb: float) -> None:
    if shard_mb <= 0:
        raise InvalidInput(f"--shard-mb must be > 0, got {shard_mb}")


def _checked(inputs: Sequence[Path], output: Path, shard_mb: float, overwrite: bool) -> tuple[list[Source], Path]:
    """What every way of preparing checks first, in one line each: the shard size, the
    libraries, the inputs, and an output folder that may be written; (sources, output folder)."""
    check_shard_mb(shard_mb)
    require_libraries()
    sources = find_sources(inputs)
    output = Path(output).expanduser().resolve()
    check_output(output, overwrite)
    return sources, output

def prepare(
    inputs: Sequence[Path],
    output: Path,
    tokenizer: LoadedTokenizer,
    *,
    text_field: str = "text",
    workers: int | None = None,
    shard_mb: float = DEFAULT_SHARD_MB,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> PrepareResult:
    """Tokenize `inputs` into `output` (created if needed). Refuses a folder another
    prepare-data is writing, or one that holds something else, in one line."""
    started = time.time()
    sources, output = _checked(inputs, output, shard_mb, overwrite)
    with _lock(output, shared=False, planned=False):
        return _prepare_locked(
            sources, output, tokenizer, text_field=text_field, workers=workers or default_workers(),
            shard_bytes=int(shard_mb * 1e6), overwrite=overwrite, progress=progress, started=started,
        )


# -- across nodes: `prepare-data --slurm --nodes N` ---------------------------------------------
# Three steps of one batch job: the batch host plans (prepare.json, under the folder's lock), every
# node tokenizes its share of the units (index % nodes == its rank) with all its cores, holding
# the lock shared, and the batch host writes the one manifest once every unit has its marker. A
# step that fails fails the job; running the same job again continues where it stopped, as a
# killed prepare-data does.


@dataclass(frozen=True)
class ShareResult:
    """What one node's share of the work came to."""

    share: int
    shares: int
    units: int
    """Units this node tokenized now (its share less the ones an earlier run finished)."""
    tokens: int
    seconds: float


def plan_shares(
    inputs: Sequence[Path],
    output: Path,
    tokenizer: LoadedTokenizer,
    *,
    text_field: str = "text",
    workers: int,
    shard_mb: float = DEFAULT_SHARD_MB,
    overwrite: bool = False,
) -> PrepareResult | None:
    """The first step: the plan, cut for `workers` processes over all the nodes, written (or
    read back from an interrupted run of the same data). A result when the folder already
    holds this data (the other steps then have nothing to do)."""
    started = time.time()
    sources, output = _checked(inputs, output, shard_mb, overwrite)
    with _lock(output, shared=False, planned=False):
        begun = _begin(
            sources, output, tokenizer, text_field=text_field, workers=workers, shard_bytes=int(shard_mb * 1e6), overwrite=overwrite, started=started,
        )
        if isinstance(begun, PrepareResult):
            return begun
        begun.started_at = started
        begun.write(output)
    return None


def prepare_share(output: Path, tokenizer: LoadedTokenizer, *, share: int, shares: int, workers: int | None = None) -> ShareResult:
    """The second step, on each node: the plan's units `share`, `share + shares`, ... that have
    no marker yet, tokenized by `workers` processes (default: every CPU this node gives)."""
    if not 0 <= share < shares:
        raise InvalidInput(f"share {share} of {shares}: expected 0 <= share < shares")
    started = time.time()
    require_libraries()
    output = Path(output).expanduser().resolve()
    with _lock(output, shared=True):
        if fmt.is_prepared(output):
            return ShareResult(share, shares, 0, 0, time.time() - started)
        plan = _planned(output, tokenizer)
        done = _done_units(output, plan)
        mine = [index for index in range(share, len(plan.units), shares) if index not in done]
        tokens = sum(int(marker["tokens"]) for _, marker in _run(_worker_state(plan, tokenizer, output), mine, workers or default_workers()))
    return ShareResult(share, shares, len(mine), tokens, time.time() - started)


def finish_shares(output: Path, tokenizer: LoadedTokenizer) -> PrepareResult:
    """The last step: the manifest, once every unit has its marker; DataError naming the
    units without one (a node's share that did not finish)."""
    require_libraries()
    output = Path(output).expanduser().resolve()
    with _lock(output, shared=False):
        plan = _Plan.read(output)
        existing = fmt.read_manifest(output)
        if plan is None and existing is not None:
            return PrepareResult(output, existing, "already prepared")
        plan = _planned(output, tokenizer)
        done = _done_units(output, plan)
        missing = [index for index in range(len(plan.units)) if index not in done]
        if missing:
            shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
            raise DataError(
                f"{len(missing)} of {len(plan.units)} units in {output} have no finished shard (units {shown})",
                hint="a node's share did not finish: submit the same prepare-data --slurm again, it continues where it stopped",
            )
        started = plan.started_at or time.time()
        plan.seconds += time.time() - started
        return _complete(plan, output, tokenizer, done, reused=0, started=started)


def _planned(output: Path, tokenizer: LoadedTokenizer) -> _Plan:
    """The folder's plan, made with this tokenizer."""
    plan = _Plan.read(output)
    if plan is None:
        raise DataError(f"{output} has no plan ({fmt.PLAN_FILE}): its planning step did not run or failed", hint="see the job's log above this line")
    if plan.tokenizer.get("sha256") != tokenizer.identity["sha256"]:
        raise DataError(f"{output} is being prepared with tokenizer {plan.tokenizer.get('name')}, not {tokenizer.name}")
    return plan


@contextmanager
def _lock(output: Path, *, shared: bool, planned: bool = True) -> Iterator[None]:
    """The folder's lock, or a DataError; a step after the plan never creates the folder."""
    if planned and not output.is_dir():
        raise DataError(f"{output} has no plan ({fmt.PLAN_FILE}): its planning step did not run or failed", hint="see the job's log above this line")
    try:
        with fmt.locked(output, wait=False, shared=shared):
            yield
    except fmt.Busy:
        raise DataError(f"another process is preparing data into {output}", hint="wait for it, or choose another --output") from None


@dataclass(frozen=True)
class TrainingData:
    """The prepared folder a training run reads, and whether this process prepared it."""

    folder: Path
    manifest: fmt.Manifest
    prepared_here: bool
    seconds: float


def prepare_for_training(
    data: Path | None,
    tokenizer: LoadedTokenizer,
    *,
    cache_root: Path,
    text_field: str,
    default_corpus: Path,
    say: Callable[[str], None] = lambda _message: None,
    say_waiting: Callable[[str], None] = lambda _message: None,
) -> TrainingData:
    """The trainer's data, before its process group exists: a prepared folder as it is; raw
    files (or the built-in `default_corpus` when `data` is None) prepared once into
    `cache_root/<name>-<hash of sources and tokenizer>/` by whichever process takes the lock
    first, while the others wait; every later start finds the manifest and reads it. `say`
    tells what the preparing process does, `say_waiting` that one waits for another."""
    started = time.time()
    if data is not None and fmt.is_prepared(data):
        return TrainingData(Path(data), _read(Path(data)), False, 0.0)
    if data is not None and fmt.is_unfinished(data):
        raise DataError(f"{data} is an unfinished prepare-data folder", hint="run the same hyperlaunch prepare-data again to finish it")
    sources = find_sources([data if data is not None else default_corpus])
    listed = [source.as_dict() for source in sources]
    folder = cache_root / fmt.cache_name(listed, tokenizer.identity, text_field)
    if fmt.is_prepared(folder):
        return TrainingData(folder, _read(folder), False, 0.0)
    try:
        with fmt.locked(folder, wait=False):
            return _prepare_cache(sources, folder, tokenizer, text_field, say, started)
    except fmt.Busy:
        say_waiting(f"waiting for another process to prepare {folder}")
    with fmt.locked(folder, wait=True):
        if fmt.is_prepared(folder):  # the usual case: the other process finished it
            return TrainingData(folder, _read(folder), False, time.time() - started)
        return _prepare_cache(sources, folder, tokenizer, text_field, say, started)  # it died: go on where it stopped


def _prepare_cache(
    sources: list[Source], folder: Path, tokenizer: LoadedTokenizer, text_field: str, say: Callable[[str], None], started: float
) -> TrainingData:
    if fmt.is_prepared(folder):
        return TrainingData(folder, _read(folder), False, time.time() - started)
    size = sum(source.size for source in sources)
    say(f"preparing {len(sources)} file(s), {size / 1e6:.1f} MB, into {folder} (once: later starts reuse it)")
    result = _prepare_locked(
        sources, folder, tokenizer, text_field=text_field, workers=default_workers(),
        shard_bytes=int(DEFAULT_SHARD_MB * 1e6), overwrite=False, progress=None, started=started,
    )
    rate = result.manifest.tokens / max(result.seconds, 1e-9)
    say(f"prepared {result.manifest.tokens:,} tokens in {result.seconds:.1f} s ({rate:,.0f} tokens/s)")
    return TrainingData(folder, result.manifest, True, result.seconds)


def _read(folder: Path) -> fmt.Manifest:
    manifest = fmt.read_manifest(folder)
    assert manifest is not None
    return manifest


def check_output(output: Path, overwrite: bool) -> None:
    """A folder prepare-data may write: none yet, or one holding only its own files."""
    if output.exists() and not output.is_dir():
        raise DataError(f"--output {output} is a file, not a folder")
    foreign = sorted(p.name for p in output.iterdir() if not fmt.is_own_file(p.name)) if output.is_dir() else []
    if foreign:
        raise DataError(
            f"--output {output} holds other files ({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''})",
            hint="choose an empty or new folder",
        )


# -- the work -----------------------------------------------------------------------------------


@dataclass
class _Plan:
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
    def read(cls, folder: Path) -> _Plan | None:
        try:
            raw = json.loads((folder / fmt.PLAN_FILE).read_text())
            raw.pop("format", None)
            return cls(**raw)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as err:
            raise DataError(f"{folder / fmt.PLAN_FILE} is unreadable ({err})", hint="use --overwrite to start again") from None


def _prepare_locked(
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
    begun = _begin(sources, output, tokenizer, text_field=text_field, workers=workers, shard_bytes=shard_bytes, overwrite=overwrite, started=started)
    if isinstance(begun, PrepareResult):
        return begun
    plan = begun
    done = _done_units(output, plan)
    pending = [index for index in range(len(plan.units)) if index not in done]
    if progress is not None:
        progress.start(len(plan.units), len(done))
    try:
        for index, marker in _run(_worker_state(plan, tokenizer, output), pending, workers):
            done[index] = marker
            if progress is not None:
                progress.advance(int(marker["tokens"]))
    finally:
        if progress is not None:
            progress.finish()
        plan.seconds += time.time() - started
        plan.write(output)
    return _complete(plan, output, tokenizer, done, reused=len(plan.units) - len(pending), started=started)


def _begin(
    sources: list[Source], output: Path, tokenizer: LoadedTokenizer, *, text_field: str, workers: int, shard_bytes: int, overwrite: bool, started: float,
) -> PrepareResult | _Plan:
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
    plan = _Plan.read(output)
    if plan is not None and (plan.identity != identity or overwrite):
        # A preparation that finished no shard (it failed on a bad line, say) holds nothing to
        # keep: the corrected input starts over without --overwrite.
        if not overwrite and _done_units(output, plan):
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
        plan = _Plan(
            identity=identity, tokenizer=tokenizer.identity, sources=listed, text_field=text_field,
            dtype=fmt.dtype_for(tokenizer.vocab_size), units=[unit.as_list() for unit in units],
        )
        plan.write(output)
    return plan


def _done_units(output: Path, plan: _Plan) -> dict[int, dict[str, Any]]:
    """The marker of each unit whose shard is whole, by index."""
    return {index: marker for index in range(len(plan.units)) if (marker := _read_marker(output, index)) is not None}


def _worker_state(plan: _Plan, tokenizer: LoadedTokenizer, output: Path) -> _WorkerState:
    sources = [Source(**source) for source in plan.sources]
    return _WorkerState(tokenizer.backend.to_str(), tokenizer.eos_id, plan.dtype, plan.text_field, sources, plan.units, str(output))


def _complete(
    plan: _Plan, output: Path, tokenizer: LoadedTokenizer, done: dict[int, dict[str, Any]], *, reused: int, started: float,
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


def _manifest(plan: _Plan, tokenizer: LoadedTokenizer, markers: list[dict[str, Any]]) -> fmt.Manifest:
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


@dataclass
class _WorkerState:
    """What every worker needs: sent once, when it starts."""

    tokenizer_json: str
    eos_id: int
    dtype: str
    text_field: str
    sources: list[Source]
    units: list[list[int]]
    output: str


_WORKER: dict[str, Any] = {}


def _start_worker(state: _WorkerState) -> None:
    # One thread per worker: the workers are the parallelism (the library's own threads
    # would multiply it by the number of cores).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer

    _WORKER.update(state=state, tokenizer=Tokenizer.from_str(state.tokenizer_json))


def require_libraries() -> None:
    """InvalidInput naming the extra when numpy or tokenizers is missing here."""
    try:
        import numpy  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as err:
        raise InvalidInput(f"preparing data needs {err.name}, which is not installed", hint=DATA_EXTRA_HINT) from None


def _run(state: _WorkerState, pending: list[int], workers: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, marker) of each pending unit as it is finished, in any order."""
    workers = min(workers, len(pending))
    if workers <= 1:
        _start_worker(state)
        for index in pending:
            yield index, _raise_failure(_tokenize_unit(index))
        return
    # spawn, not fork: the trainer has torch (and its threads) loaded when it prepares.
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_start_worker, initargs=(state,)) as pool:
        for result in pool.imap_unordered(_tokenize_unit, pending):
            yield int(result["index"]), _raise_failure(result)


def _raise_failure(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        raise DataError(result["error"], hint=result.get("hint"))
    return result


def _tokenize_unit(index: int) -> dict[str, Any]:
    """Tokenize one unit into its shard; the marker (or the error, as a value: a typed error
    loses its hint when pickled back from a worker)."""
    try:
        return _write_shard(index)
    except HyperlaunchError as err:
        return {"index": index, "error": str(err), "hint": err.hint}


def _write_shard(index: int) -> dict[str, Any]:
    import numpy as np

    state: _WorkerState = _WORKER["state"]
    unit = Unit.from_list(state.units[index])
    documents = read_unit(state.sources[unit.source], unit, state.text_field)
    eos, encode = state.eos_id, _WORKER["tokenizer"].encode_batch_fast
    parts, ends, total = [], [], 0
    for first in range(0, len(documents), _ENCODE_BATCH):
        ids = [enc.ids for enc in encode(documents[first : first + _ENCODE_BATCH], add_special_tokens=False)]
        lengths = [len(doc) + 1 for doc in ids]
        flat = np.fromiter(chain.from_iterable(chain(doc, (eos,)) for doc in ids), dtype=np.int64, count=sum(lengths))
        parts.append(flat)
        ends.append(total + np.cumsum(lengths, dtype=np.uint64))
        total += int(flat.size)
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate(ends) if ends else np.zeros(0, dtype=np.uint64)
    token_bytes = tokens.astype(fmt.NUMPY_DTYPES[state.dtype]).tobytes()
    offset_bytes = offsets.astype("<u8").tobytes()
    output = Path(state.output)
    write_atomically(output / fmt.tokens_file(index), token_bytes)
    write_atomically(output / fmt.documents_file(index), offset_bytes)
    marker = {
        "index": index, "dtype": state.dtype, "tokens": int(tokens.size), "documents": len(documents),
        "max_token_id": int(tokens.max()) if tokens.size else 0,
        "sha256": hashlib.sha256(token_bytes).hexdigest(), "documents_sha256": hashlib.sha256(offset_bytes).hexdigest(),
    }
    write_atomically(output / fmt.shard_marker(index), json.dumps(marker).encode())
    return marker
