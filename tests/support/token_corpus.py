"""Text to prepare and the token stream a prepared folder holds (hyperlaunch.data.prepared_data),
for the tests of prepare-data alone, across nodes, and as a Slurm job."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hyperlaunch.data import prepared_data as fmt


def _docs(count: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    words = "amber river stone quiet market tower swift garden bridge lantern meadow".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))) for _ in range(count)]


def _write_jsonl(path: Path, docs: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": doc, "id": i}) + "\n" for i, doc in enumerate(docs)))
    return path


def _stream(folder: Path) -> tuple[list[int], list[int]]:
    """(tokens, document end offsets in the whole stream) of a prepared folder."""
    manifest = fmt.read_manifest(folder)
    assert manifest is not None
    tokens, ends = [], []
    for shard in manifest.shards:
        base = len(tokens)
        tokens += np.fromfile(folder / shard.tokens_file, dtype=fmt.NUMPY_DTYPES[manifest.dtype]).tolist()
        ends += [base + int(e) for e in np.fromfile(folder / shard.documents_file, dtype="<u8")]
    return tokens, ends
