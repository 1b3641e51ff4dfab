"""The run's data, found or prepared before the process group exists, checked against the
job's tokenizer and model, and then checked to be the same on every rank.

Preparing raw data can take hours on a real corpus: it happens before init_process_group, so
no collective timeout and no hang watchdog can fire while one process prepares and the others
wait for its file lock (hyperlaunch.data.prepare.prepare_for_training)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core.errors import DataError
from hyperlaunch.core.models import ModelSpec
from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.data.offline_assets import CORPUS_FILE
from hyperlaunch.data.prepare import prepare_for_training
from hyperlaunch.data.tokenizer import LoadedTokenizer

from .config import TrainConfig
from .data import TokenStream
from .distributed import Dist


@dataclass(frozen=True)
class Corpus:
    folder: Path
    manifest: fmt.Manifest
    stream: TokenStream
    prepared_here: bool
    """This process tokenized it in this start (at most one process does)."""
    seconds: float


def open_corpus(cfg: TrainConfig, tokenizer: LoadedTokenizer, spec: ModelSpec, *, is_main: bool) -> Corpus:
    """The prepared folder this run trains on (raw data and the built-in corpus prepared
    into the checkpoint folder's cache first), memory-mapped."""
    started = time.time()

    def note(message: str) -> None:
        print(f"hyperlaunch.train: {message}", file=sys.stderr, flush=True)

    try:
        found = prepare_for_training(
            cfg.data, tokenizer, cache_root=rules.data_cache_dir(cfg.checkpoint_dir), text_field=cfg.text_field,
            default_corpus=CORPUS_FILE, say=note, say_waiting=note if is_main else lambda _message: None,
        )
        fmt.check_tokenizer(found.manifest, tokenizer.identity, found.folder)
        fmt.check_vocabulary(found.manifest, spec.vocab_size, spec.name, found.folder)
        stream = TokenStream(found.folder, found.manifest)
    except DataError as err:
        if str(err).startswith("--data"):
            raise
        raise DataError(f"--data {err}", hint=err.hint) from None
    return Corpus(found.folder, found.manifest, stream, found.prepared_here, time.time() - started)


def agree_everywhere(d: Dist, corpus: Corpus, tokenizer: LoadedTokenizer) -> dict[str, Any]:
    """Every rank must train on the same folder with the same tokenizer as rank 0 (two nodes
    can see different Hugging Face caches). What the start event records about the data."""
    mine = (tokenizer.sha256, str(corpus.folder), corpus.prepared_here)
    everyone: list[Any] = [None] * d.world_size
    dist.all_gather_object(everyone, mine)
    for rank, (sha, folder, _) in enumerate(everyone):
        if sha != everyone[0][0]:
            raise DataError(
                f"rank {rank} loaded tokenizer {tokenizer.name} with other contents than rank 0 "
                f"(sha256 {sha[:12]} against {everyone[0][0][:12]})",
                hint="every node must load the same files: a shared folder, or the same HF_HOME",
            )
        if folder != everyone[0][1]:
            raise DataError(f"rank {rank} reads data from {folder}, rank 0 from {everyone[0][1]}")
    return {
        "folder": str(corpus.folder), "tokens": corpus.manifest.tokens, "documents": corpus.manifest.documents,
        "tokenizer": corpus.manifest.tokenizer["name"], "prepared": any(entry[2] for entry in everyone),
        "seconds": round(corpus.seconds, 3),
    }
