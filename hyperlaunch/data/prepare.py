"""Tokenize text once into memory-mappable shards (the format is hyperlaunch.data.prepared_data's):
`hyperlaunch prepare-data` calls `prepare`, the trainer `prepare_for_training` (raw --data is
prepared once into a cache in the checkpoint folder, by one process under a file lock).

The work (hyperlaunch.data.prepare_work) is cut into units (hyperlaunch.data.sources); each
becomes one shard, written by a worker process (hyperlaunch.data.tokenize_workers), complete once
its marker file exists. A killed preparation continues where it stopped; the manifest is written
last, atomically; a finished folder is never written again unless asked to (--overwrite).

Torch-free; numpy and tokenizers (the `data` extra) are imported when there is work to do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.errors import DataError, InvalidInput
from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.data.prepare_work import (
    Plan,
    PrepareResult,
    Progress,
    begin,
    complete,
    done_units,
    prepare_locked,
    worker_state,
)
from hyperlaunch.data.sources import Source, find_sources
from hyperlaunch.data.tokenize_workers import tokenize_units
from hyperlaunch.data.tokenizer import DATA_EXTRA_HINT, LoadedTokenizer

DEFAULT_SHARD_MB = 32.0
"""Largest unit of work (and shard), in MB of input: what one worker holds in memory at once."""


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
        return prepare_locked(
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
        begun = begin(
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
        done = done_units(output, plan)
        mine = [index for index in range(share, len(plan.units), shares) if index not in done]
        tokens = sum(int(marker["tokens"]) for _, marker in tokenize_units(worker_state(plan, tokenizer, output), mine, workers or default_workers()))
    return ShareResult(share, shares, len(mine), tokens, time.time() - started)


def finish_shares(output: Path, tokenizer: LoadedTokenizer) -> PrepareResult:
    """The last step: the manifest, once every unit has its marker; DataError naming the
    units without one (a node's share that did not finish)."""
    require_libraries()
    output = Path(output).expanduser().resolve()
    with _lock(output, shared=False):
        plan = Plan.read(output)
        existing = fmt.read_manifest(output)
        if plan is None and existing is not None:
            return PrepareResult(output, existing, "already prepared")
        plan = _planned(output, tokenizer)
        done = done_units(output, plan)
        missing = [index for index in range(len(plan.units)) if index not in done]
        if missing:
            shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
            raise DataError(
                f"{len(missing)} of {len(plan.units)} units in {output} have no finished shard (units {shown})",
                hint="a node's share did not finish: submit the same prepare-data --slurm again, it continues where it stopped",
            )
        started = plan.started_at or time.time()
        plan.seconds += time.time() - started
        return complete(plan, output, tokenizer, done, reused=0, started=started)


def _planned(output: Path, tokenizer: LoadedTokenizer) -> Plan:
    """The folder's plan, made with this tokenizer."""
    plan = Plan.read(output)
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
    result = prepare_locked(
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


def require_libraries() -> None:
    """InvalidInput naming the extra when numpy or tokenizers is missing here."""
    try:
        import numpy  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as err:
        raise InvalidInput(f"preparing data needs {err.name}, which is not installed", hint=DATA_EXTRA_HINT) from None
