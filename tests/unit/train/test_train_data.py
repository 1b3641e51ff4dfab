"""The trainer's data order and reading (train/data.py): pure units, no process group."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hyperlaunch.core.errors import DataError
from hyperlaunch.data.prepare import prepare
from hyperlaunch.data.prepared_data import read_manifest
from hyperlaunch.data.tokenizer import load_tokenizer
from hyperlaunch.train.data import Batcher, GlobalSampler, TokenStream, ValidationBatches, split_validation


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


def test_the_order_is_a_permutation_computed_per_sample_not_stored() -> None:
    for n in (1, 2, 3, 7, 64, 1000):
        assert sorted(GlobalSampler(n, seed=5).index(i) for i in range(n)) == list(range(n)), n
    huge = GlobalSampler(10**12, seed=5)  # a trillion sequences: nothing to materialise
    picks = [huge.index(i) for i in range(1000)]
    assert len(set(picks)) == 1000 and all(0 <= p < 10**12 for p in picks)
    assert max(picks) > 10**11, "spread over the whole range"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """A folder of several shards, and the token stream it must hold."""
    work = tmp_path_factory.mktemp("stream")
    docs = [f"Document {i}: " + " ".join(["river", "stone", "light"][(i + j) % 3] for j in range(i % 17 + 3)) for i in range(400)]
    (work / "docs.txt").write_text("\n\n".join(docs) + "\n")
    tokenizer = load_tokenizer("offline")
    prepare([work / "docs.txt"], work / "out", tokenizer, workers=1, shard_mb=0.004)
    expected = [t for ids in tokenizer.encode_batch(docs) for t in [*ids, tokenizer.eos_id]]
    return work / "out", expected


def test_sequences_of_any_length_are_cut_from_the_stream_across_shards(prepared: tuple[Path, list[int]]) -> None:
    folder, expected = prepared
    manifest = read_manifest(folder)
    assert manifest is not None and len(manifest.shards) > 3
    stream = TokenStream(folder, manifest)
    assert len(stream) == len(expected) == manifest.tokens
    assert stream.read(0, len(expected)).tolist() == expected
    for seq_len in (7, 32):
        splits = split_validation(stream, seq_len, 0.1, min_train=4)
        rows = [0, 5, len(splits.train) - 1]
        got = splits.train[rows]
        assert got.dtype == torch.long and got.shape == (3, seq_len)
        assert got.tolist() == [expected[r * seq_len : (r + 1) * seq_len] for r in rows]


def test_validation_is_a_fixed_range_of_tokens_after_the_training_ones(prepared: tuple[Path, list[int]]) -> None:
    folder, expected = prepared
    manifest = read_manifest(folder)
    assert manifest is not None
    stream = TokenStream(folder, manifest)
    starts = set()
    for seq_len in (7, 32):
        splits = split_validation(stream, seq_len, 0.1, min_train=4)
        starts.add(splits.val.offset)
        assert len(splits.train) * seq_len <= splits.val.offset == len(expected) - int(len(expected) * 0.1)
    assert len(starts) == 1, "the same held-out text whatever the sequence length"
    with pytest.raises(DataError, match="too few for one global batch"):
        split_validation(stream, 32, 0.1, min_train=10**6)


def test_validation_batches_are_read_when_used_and_shared_out_evenly(prepared: tuple[Path, list[int]]) -> None:
    folder, expected = prepared
    manifest = read_manifest(folder)
    assert manifest is not None
    val = split_validation(TokenStream(folder, manifest), 8, 0.1, min_train=4).val
    ranks = [ValidationBatches(val, 4, rank, 2, limit=0) for rank in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == (len(val) + 3) // 4 // 2
    first = next(iter(ranks[1]))
    assert first.tolist() == [expected[val.offset + (4 + i) * 8 : val.offset + (5 + i) * 8] for i in range(4)]
    assert len(ValidationBatches(val, 4, 0, 2, limit=3)) == 3


def test_a_truncated_shard_fails_at_start_in_one_line(prepared: tuple[Path, list[int]], tmp_path: Path) -> None:
    import shutil

    folder, _ = prepared
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    manifest = read_manifest(copy)
    assert manifest is not None
    shard = copy / manifest.shards[1].tokens_file
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(DataError, match="tokens-00001.bin has .* bytes, the manifest says"):
        TokenStream(copy, manifest)
    assert np.fromfile(copy / manifest.shards[0].tokens_file, dtype="<u2").size == manifest.shards[0].tokens
