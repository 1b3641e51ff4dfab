"""Text -> tokens -> fixed-length packed sequences, and a global sample order.

The position in the data is kept in global terms (samples consumed by the whole job), and the
order of samples depends only on the seed, never on the world size. Each data-parallel rank
takes its own slice of every global batch, so a job resumed on a different number of ranks
neither skips nor repeats a sample.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol
from urllib.parse import urlparse

import torch

from hyperlaunch.errors import DataError, ModelUnavailable

from .offline_assets import CORPUS_FILE, EOS_TOKEN, TOKENIZER_FILE


class TextTokenizer(Protocol):
    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_id(self) -> int: ...

    def save(self, directory: Path) -> None: ...


@dataclass
class OfflineTokenizer:
    """The byte-level BPE tokenizer shipped in train/assets (no download)."""

    path: Path = TOKENIZER_FILE

    def __post_init__(self) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(self.path))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [enc.ids for enc in self._tok.encode_batch(texts)]

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size())

    @property
    def eos_id(self) -> int:
        return int(self._tok.token_to_id(EOS_TOKEN))

    def save(self, directory: Path) -> None:
        from transformers import PreTrainedTokenizerFast

        wrapped = PreTrainedTokenizerFast(tokenizer_object=self._tok, eos_token=EOS_TOKEN, pad_token="<|pad|>")
        wrapped.save_pretrained(str(directory))


@dataclass
class HFTokenizer:
    """A transformers tokenizer from a local directory or the hub."""

    tok: object

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return list(self.tok(texts, add_special_tokens=False)["input_ids"])  # type: ignore[operator,index]

    @property
    def vocab_size(self) -> int:
        return len(self.tok)  # type: ignore[arg-type]

    @property
    def eos_id(self) -> int:
        eos = getattr(self.tok, "eos_token_id", None)
        if eos is None:
            raise ModelUnavailable("the tokenizer has no end-of-sequence token")
        return int(eos)

    def save(self, directory: Path) -> None:
        self.tok.save_pretrained(str(directory))  # type: ignore[attr-defined]


def load_tokenizer(choice: str, warn: bool) -> TextTokenizer:
    """`offline`, a local directory, or a hub name (offline fallback with a warning when the
    hub cannot be reached: these clusters often have no internet)."""
    if choice == "offline":
        return OfflineTokenizer()
    from transformers import AutoTokenizer

    path = Path(choice)
    if path.exists() or choice.startswith((".", "/")):
        if not path.is_dir():
            raise ModelUnavailable(f"--tokenizer {choice}: no such directory")
        try:
            return HFTokenizer(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
        except (OSError, ValueError) as err:
            raise ModelUnavailable(f"--tokenizer {choice}: cannot load a tokenizer there ({err})") from None
    # A copy in the local Hugging Face cache needs no network; without one, ask the hub only
    # when it answers at all: its client retries for half a minute on a cluster with no
    # internet, on every rank and every restart.
    attempts = [{"local_files_only": True}] + ([{}] if _hub_reachable() else [])
    error: Exception | None = None
    for kwargs in attempts:
        try:
            return HFTokenizer(AutoTokenizer.from_pretrained(choice, **kwargs))
        except Exception as err:  # noqa: BLE001 - any hub failure means: use the offline one
            error = err
    if warn:
        print(
            f"hyperlaunch.train: warning: tokenizer {choice!r} not reachable "
            f"({type(error).__name__ if error else 'hub unreachable'}); using the offline tokenizer",
            file=sys.stderr,
        )
    return OfflineTokenizer()


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def read_documents(data: Path | None, text_field: str) -> list[str]:
    """Documents from a file, a directory of files, a `save_to_disk` dataset or the built-in corpus."""
    if data is None:
        return _split_txt(CORPUS_FILE.read_text())
    if not data.exists():
        raise DataError(f"--data {data}: no such file or directory")
    if data.is_dir():
        if (data / "dataset_info.json").exists() or (data / "dataset_dict.json").exists() or (data / "state.json").exists():
            return _read_saved_dataset(data, text_field)
        files = sorted(p for p in data.rglob("*") if p.suffix in (".txt", ".jsonl") and p.is_file())
        if not files:
            raise DataError(f"--data {data}: no .txt or .jsonl files and not a save_to_disk dataset")
        return [doc for file in files for doc in _read_file(file, text_field)]
    return _read_file(data, text_field)


def _split_txt(text: str) -> list[str]:
    # Blank lines separate documents; a file without them is one document per line.
    docs = [d.strip() for d in text.split("\n\n") if d.strip()]
    return docs if len(docs) > 1 else [line for line in text.splitlines() if line.strip()]


def _read_file(path: Path, text_field: str) -> list[str]:
    if path.suffix == ".jsonl":
        docs = []
        with path.open() as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise DataError(f"--data {path}:{number}: not valid JSON") from None
                if not isinstance(row, dict) or not isinstance(row.get(text_field), str):
                    raise DataError(f"--data {path}:{number}: no string field {text_field!r} (see --text-field)")
                docs.append(row[text_field])
        return docs
    if path.suffix == ".txt":
        return _split_txt(path.read_text(errors="replace"))
    raise DataError(f"--data {path}: expected a .txt or .jsonl file")


def _read_saved_dataset(path: Path, text_field: str) -> list[str]:
    try:
        import datasets  # optional: only this input format needs it
    except ImportError:
        raise DataError(
            f"--data {path} is a Hugging Face save_to_disk dataset, but the `datasets` package is not installed",
            hint="pip install datasets",
        ) from None
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        loaded = loaded["train"] if "train" in loaded else next(iter(loaded.values()))
    if text_field not in loaded.column_names:
        raise DataError(f"--data {path}: no column {text_field!r}; columns: {', '.join(loaded.column_names)}")
    return [str(t) for t in loaded[text_field]]


def pack(documents: list[str], tokenizer: TextTokenizer, seq_len: int) -> torch.Tensor:
    """Tokenize, join documents with EOS and cut into [num_sequences, seq_len] (tail dropped)."""
    stream: list[int] = []
    eos = tokenizer.eos_id
    for start in range(0, len(documents), 1024):
        for ids in tokenizer.encode_batch(documents[start : start + 1024]):
            stream.extend(ids)
            stream.append(eos)
    count = len(stream) // seq_len
    return torch.tensor(stream[: count * seq_len], dtype=torch.long).view(count, seq_len)


@dataclass
class Splits:
    train: torch.Tensor
    val: torch.Tensor


def split_validation(sequences: torch.Tensor, fraction: float, min_train: int) -> Splits:
    """The last `fraction` of sequences is held out (at least one)."""
    total = sequences.shape[0]
    n_val = max(1, int(total * fraction))
    if total - n_val < min_train:
        raise DataError(
            f"the data gives {total} sequences, too few for one global batch of {min_train} plus validation "
            "(use more data, a shorter --seq-len or a smaller --micro-batch-size)"
        )
    return Splits(train=sequences[: total - n_val], val=sequences[total - n_val :])


class GlobalSampler:
    """Maps global sample numbers to sequences: epoch e visits a seed-determined permutation."""

    def __init__(self, num_samples: int, seed: int) -> None:
        self.num_samples = num_samples
        self.seed = seed
        self._epoch = -1
        self._order = torch.empty(0, dtype=torch.long)

    def index(self, global_sample: int) -> int:
        epoch, offset = divmod(global_sample, self.num_samples)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._order = torch.randperm(self.num_samples, generator=generator)
            self._epoch = epoch
        return int(self._order[offset])


@dataclass
class Batcher:
    """This rank's micro-batches for one optimizer step."""

    data: torch.Tensor
    sampler: GlobalSampler
    micro_batch_size: int
    rank: int
    world_size: int
    grad_accum: int
    overfit: bool

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.world_size * self.grad_accum

    def step_batches(self, samples_consumed: int) -> Iterator[torch.Tensor]:
        start = 0 if self.overfit else samples_consumed
        per_micro = self.micro_batch_size * self.world_size
        for micro in range(self.grad_accum):
            first = start + micro * per_micro + self.rank * self.micro_batch_size
            rows = [self.sampler.index(first + i) for i in range(self.micro_batch_size)]
            yield self.data[rows]


def validation_batches(val: torch.Tensor, micro_batch_size: int, rank: int, world_size: int, limit: int) -> list[torch.Tensor]:
    """This rank's share of the held-out split. Every rank gets the same number of batches
    (sharded forwards are collective), wrapping around when the split is small."""
    batches = [val[i : i + micro_batch_size] for i in range(0, val.shape[0], micro_batch_size)]
    count = max(1, len(batches) // world_size)
    if limit > 0:
        count = min(count, limit)
    return [batches[(rank + k * world_size) % len(batches)] for k in range(count)]
