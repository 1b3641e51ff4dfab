"""The trainer's data order and packing (train/data.py): pure units, no process group."""

from __future__ import annotations

import torch

from hyperlaunch.train.data import Batcher, GlobalSampler, pack


class _CharTokenizer:
    eos_id = 0
    vocab_size = 128

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[ord(c) for c in text] for text in texts]


def test_the_sampler_visits_every_sample_once_per_epoch_in_a_seeded_order() -> None:
    sampler = GlobalSampler(10, seed=3)
    first, second = [sampler.index(i) for i in range(10)], [sampler.index(i) for i in range(10, 20)]
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second, "each epoch has its own order"
    assert [GlobalSampler(10, seed=3).index(i) for i in range(10)] == first
    assert [GlobalSampler(10, seed=4).index(i) for i in range(10)] != first
    fresh = GlobalSampler(10, seed=3)  # a restarted process asks from the middle
    assert [fresh.index(i) for i in range(13, 20)] == second[3:]


def _batcher(rank: int, world: int, micro: int, accum: int = 1, overfit: bool = False) -> Batcher:
    data = torch.arange(40).view(40, 1)
    return Batcher(data, GlobalSampler(40, seed=1), micro, rank, world, accum, overfit)


def _rows(batcher: Batcher, consumed: int) -> list[int]:
    return [int(x) for batch in batcher.step_batches(consumed) for x in batch.flatten()]


def test_ranks_split_each_step_and_the_global_order_does_not_depend_on_the_world_size() -> None:
    two = [_rows(_batcher(rank, 2, 2, accum=2), 0) for rank in range(2)]
    four = [_rows(_batcher(rank, 4, 2), 0) for rank in range(4)]
    assert _batcher(0, 2, 2, accum=2).global_batch == _batcher(0, 4, 2).global_batch == 8
    assert sorted(two[0] + two[1]) == sorted(x for rows in four for x in rows)
    assert not set(two[0]) & set(two[1])
    one = _rows(_batcher(0, 1, 8), 8)  # the next step, on one rank
    assert one == [GlobalSampler(40, seed=1).index(i) for i in range(8, 16)]


def test_overfit_repeats_the_first_batch() -> None:
    batcher = _batcher(0, 1, 4, overfit=True)
    assert _rows(batcher, 0) == _rows(batcher, 100)


def test_pack_joins_documents_with_eos_and_drops_the_tail() -> None:
    packed = pack(["ab", "cde", "fg"], _CharTokenizer(), seq_len=3)
    assert packed.tolist() == [[97, 98, 0], [99, 100, 101], [0, 102, 103]]  # the last EOS is the dropped tail
    assert packed.dtype == torch.long
