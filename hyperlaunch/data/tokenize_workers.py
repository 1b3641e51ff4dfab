"""The processes that tokenize a preparation's units (hyperlaunch.data.prepare_work): each
unit becomes one shard, written with the fast tokenizer's batch API, then its marker file. One
unit, or one worker, runs in the calling process; more run in a spawned pool.

numpy and tokenizers (the `data` extra) are imported by the workers, when there is work to do.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from hyperlaunch.core.atomic_file import write_atomically
from hyperlaunch.core.errors import DataError, HyperlaunchError
from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.data.sources import Source, Unit, read_unit

_ENCODE_BATCH = 512
"""Documents per call of the tokenizer's batch API (bounds a worker's memory)."""


@dataclass
class WorkerState:
    """What every worker needs: sent once, when it starts."""

    tokenizer_json: str
    eos_id: int
    dtype: str
    text_field: str
    sources: list[Source]
    units: list[list[int]]
    output: str


_WORKER: dict[str, Any] = {}


def _start_worker(state: WorkerState) -> None:
    # One thread per worker: the workers are the parallelism (the library's own threads
    # would multiply it by the number of cores).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer

    _WORKER.update(state=state, tokenizer=Tokenizer.from_str(state.tokenizer_json))


def tokenize_units(state: WorkerState, pending: list[int], workers: int) -> Iterator[tuple[int, dict[str, Any]]]:
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

    state: WorkerState = _WORKER["state"]
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
