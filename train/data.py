"""Prepared token shards -> fixed-length sequences, and a global sample order.

Every run reads a prepared folder (hyperlaunch.data.prepared_data): `--data DIR` from
`hyperlaunch prepare-data`, or raw files (and the built-in corpus) prepared once into the
checkpoint folder's cache before the process group exists (hyperlaunch.data.prepare). The shards
are memory-mapped: a start costs the same whatever the corpus size, and a rank reads only the
sequences it trains on. Sequences are cut from the token stream at read time (sequence i is
tokens [i * seq_len, (i + 1) * seq_len)), so one folder serves any sequence length.

The position in the data is kept in global terms (samples consumed by the whole job), and the
order of samples depends only on the seed, never on the world size: a seeded permutation of
sequence numbers, computed for each sample rather than stored. Each data-parallel rank takes
its own slice of every global batch, so a job resumed on a different number of ranks neither
skips nor repeats a sample.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from hyperlaunch.core.errors import DataError
from hyperlaunch.data import prepared_data as fmt


class TokenStream:
    """A prepared folder's shards as one stream of token ids, each shard memory-mapped on
    first use."""

    def __init__(self, folder: Path, manifest: fmt.Manifest) -> None:
        self.folder = Path(folder)
        self.dtype = np.dtype(fmt.NUMPY_DTYPES[manifest.dtype])
        self._shards = manifest.shards
        self._starts = np.cumsum([0] + [shard.tokens for shard in manifest.shards], dtype=np.int64)
        self._maps: dict[int, np.ndarray] = {}
        for shard in manifest.shards:  # a stat per shard, not a read: a truncated copy fails here
            path = self.folder / shard.tokens_file
            try:
                size = path.stat().st_size
            except OSError as err:
                raise DataError(f"{path}: {err.strerror or err}") from None
            if size != shard.tokens * self.dtype.itemsize:
                raise DataError(f"{path} has {size} bytes, the manifest says {shard.tokens * self.dtype.itemsize}")

    def __len__(self) -> int:
        return int(self._starts[-1])

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the stream."""
        index = int(np.searchsorted(self._starts, start, side="right")) - 1
        pieces = []
        while start < stop:
            end = min(stop, int(self._starts[index + 1]))
            if end > start:
                first = start - int(self._starts[index])
                pieces.append(self._map(index)[first : first + end - start])
            start, index = max(start, end), index + 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def _map(self, index: int) -> np.ndarray:
        if index not in self._maps:
            shard = self._shards[index]
            self._maps[index] = np.memmap(self.folder / shard.tokens_file, dtype=self.dtype, mode="r", shape=(shard.tokens,))
        return self._maps[index]


@dataclass(frozen=True)
class Sequences:
    """`count` sequences of `seq_len` tokens cut from the stream from token `offset` on."""

    stream: TokenStream
    offset: int
    count: int
    seq_len: int

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, rows: Sequence[int]) -> torch.Tensor:
        """The rows as a [len(rows), seq_len] LongTensor, read from the memory map."""
        out = np.empty((len(rows), self.seq_len), dtype=np.int64)
        for i, row in enumerate(rows):
            if not 0 <= row < self.count:
                raise IndexError(f"sequence {row} of {self.count}")
            start = self.offset + row * self.seq_len
            out[i] = self.stream.read(start, start + self.seq_len)
        return torch.from_numpy(out)


@dataclass(frozen=True)
class Splits:
    train: Sequences
    val: Sequences


def split_validation(stream: TokenStream, seq_len: int, fraction: float, min_train: int) -> Splits:
    """The last `fraction` of the tokens is held out (at least one sequence): a fixed range
    of the text whatever the sequence length, so runs with different --seq-len never train on
    each other's validation text. Training sequences are cut from the start."""
    total = len(stream)
    val_tokens = max(seq_len, int(total * fraction))
    train_count = max(0, total - val_tokens) // seq_len
    if train_count < min_train:
        raise DataError(
            f"the data gives {total // seq_len} sequences, too few for one global batch of {min_train} plus validation "
            "(use more data, a shorter --seq-len or a smaller --micro-batch-size)"
        )
    return Splits(
        train=Sequences(stream, 0, train_count, seq_len),
        val=Sequences(stream, total - val_tokens, val_tokens // seq_len, seq_len),
    )


_MASK64 = (1 << 64) - 1
_ROUNDS = 6


def _mix(x: int) -> int:
    """splitmix64's finalizer: a fast 64-bit mixing function."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class _Permutation:
    """A seeded permutation of range(n), computed per element in O(1) memory: a balanced
    Feistel network on the smallest even number of bits that holds n, walking the cycle
    until the result falls below n (fewer than 4 steps on average)."""

    def __init__(self, n: int, key: str) -> None:
        self.n = n
        self.half = max(1, ((n - 1).bit_length() + 1) // 2)
        self.mask = (1 << self.half) - 1
        digest = hashlib.blake2b(key.encode(), digest_size=8 * _ROUNDS).digest()
        self.keys = [int.from_bytes(digest[8 * r : 8 * r + 8], "little") for r in range(_ROUNDS)]

    def __call__(self, i: int) -> int:
        x = i
        while True:
            left, right = x >> self.half, x & self.mask
            for key in self.keys:
                left, right = right, left ^ (_mix(right ^ key) & self.mask)
            x = (left << self.half) | right
            if x < self.n:
                return x


class GlobalSampler:
    """Maps global sample numbers to sequences: epoch e visits a seed-determined permutation."""

    def __init__(self, num_samples: int, seed: int) -> None:
        self.num_samples = num_samples
        self.seed = seed
        self._epoch = -1
        self._order: Callable[[int], int] = int

    def index(self, global_sample: int) -> int:
        epoch, offset = divmod(global_sample, self.num_samples)
        if epoch != self._epoch:
            self._order = _Permutation(self.num_samples, f"{self.seed}:{epoch}")
            self._epoch = epoch
        return self._order(offset)


class Rows(Protocol):
    """Sequences by number (Sequences; a tensor in the unit tests)."""

    def __getitem__(self, rows: Any) -> torch.Tensor: ...


@dataclass
class Batcher:
    """This rank's micro-batches for one optimizer step."""

    data: Rows
    sampler: GlobalSampler
    micro_batch_size: int
    rank: int
    world_size: int
    grad_accum: int
    overfit: bool

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.world_size * self.grad_accum

    def step_rows(self, samples_consumed: int) -> list[list[int]]:
        """The sequence numbers of this rank's micro-batches in the step that starts after
        `samples_consumed` samples."""
        start = 0 if self.overfit else samples_consumed
        per_micro = self.micro_batch_size * self.world_size
        firsts = [start + micro * per_micro + self.rank * self.micro_batch_size for micro in range(self.grad_accum)]
        return [[self.sampler.index(first + i) for i in range(self.micro_batch_size)] for first in firsts]

    def step_batches(self, samples_consumed: int) -> Iterator[torch.Tensor]:
        for rows in self.step_rows(samples_consumed):
            yield self.data[rows]


class ValidationBatches:
    """This rank's share of the held-out split, read when iterated. Every rank gets the same
    number of batches (sharded forwards are collective), wrapping around when the split is
    small."""

    def __init__(self, val: Sequences, micro_batch_size: int, rank: int, world_size: int, limit: int) -> None:
        self.val, self.micro = val, micro_batch_size
        self.total = math.ceil(len(val) / micro_batch_size)
        count = max(1, self.total // world_size)
        self.count = min(count, limit) if limit > 0 else count
        self.rank, self.world_size = rank, world_size

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[torch.Tensor]:
        for k in range(self.count):
            first = ((self.rank + k * self.world_size) % self.total) * self.micro
            yield self.val[list(range(first, min(first + self.micro, len(self.val))))]
